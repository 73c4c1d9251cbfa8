"""Chapter 08 (the serving study, issues 42 and 44) on the committed studies: the H100 study (one GPU), the same grid
run side by side on two H100s (the chapter shows which GPU each point ran on), a study missing a point (it renders
what it holds and names the point with its reason), and none given (the chapter says so; the book still succeeds)."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from kernelbook.analyze import serving as SV
from kernelbook.load.study import open_study

STUDIES = REPO / "data" / "studies"


def render(tmp_path, study: str, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "book"
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--chapters", "08_serving", "--study", study,
                           "--out", str(out), *extra], capture_output=True, text=True, timeout=600, cwd=REPO)
    page = (out / "08_serving.html").read_text() if (out / "08_serving.html").exists() else ""
    return proc, re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_two_gpu_study_renders_with_its_gpus(tmp_path):
    proc, text = render(tmp_path, str(STUDIES / "h100x2-serving"))
    assert proc.returncode == 0, proc.stderr
    st = open_study(STUDIES / "h100x2-serving")
    assert sorted({p.gpu for p in st.points}) == ["0", "1"]
    pts = SV.points_table(st)
    assert (pts.gpu != "").all()
    assert "4 of its 4 points captured" in text
    dt = SV.decode_table(st)
    # the headline's figures are the table's: first and last batch's plain step and tokens/s
    a, b = dt.iloc[0], dt.iloc[-1]
    assert f"{a.plain_step_ms:.2f} → {b.plain_step_ms:.2f} ms" in text
    assert f"{a.tokens_per_s:,.0f} → {b.tokens_per_s:,.0f} tokens/s" in text


def test_study_missing_a_point_renders_what_it_holds(tmp_path):
    study = tmp_path / "study"
    shutil.copytree(STUDIES / "h100-serving", study)
    doc = json.loads((study / "study.json").read_text())
    gone = doc["points"][2]
    shutil.rmtree(study / gone["run_dir"])
    gone.update(status="failed", reason="capture exited 1: CUDA out of memory")
    (study / "study.json").write_text(json.dumps(doc))
    proc, text = render(tmp_path, str(study))
    assert proc.returncode == 0, proc.stderr
    assert "3 of its 4 points captured" in text
    assert "batch_size-16 (failed: capture exited 1: CUDA out of memory)" in text
    dt = SV.decode_table(open_study(study))
    assert list(dt.batch) == [1, 8, 32]


def test_no_study_given_is_said_and_the_book_succeeds(tmp_path):
    proc, text = render(tmp_path, "", "--language", "en")
    assert proc.returncode == 0, proc.stderr
    assert "No study given" in text


def test_not_a_study_exits_2(tmp_path):
    proc, _ = render(tmp_path, str(REPO / "data" / "runs" / "h100-deepseek-ocr-2"))
    assert proc.returncode == 2
    assert "is not a study folder (no study.json)" in proc.stderr


def test_batch_one_what_if_predicts_the_other_batches():
    """Issue 42's target on the H100 study: the what-if fitted at batch 1 predicts each batch's decode step within
    25 % (the plain step: +4, +11, +17 % at batch 8, 16, 32). Since the model reads a MoE's gathered experts once per
    token's choice, as the run does, the expert GEMVs' class is right at batch 32 (5.09 against 5.00 ms); device time
    is +16, +20, +28 %: the small classes (norms, copies, elementwise) are over-predicted, which the under-predicted
    expert reads used to hide (device time within 3.5 % before, for that reason)."""
    st = open_study(STUDIES / "h100-serving")
    wt, wc = SV.whatif_table(st, SV.traces_of(st))
    other = wt[wt.batch != wt.fitted_at]
    assert len(other) >= 3
    assert (other.step_error_pct.abs() <= 25).all(), wt
    assert (other.device_error_pct.abs() <= 30).all(), wt
    gemv = wc[(wc.batch == 32) & (wc["class"] == "GEMV")].iloc[0]
    assert gemv.predicted_ms == pytest.approx(gemv.measured_ms, rel=0.05)
    # the per-class table adds up to the per-batch one
    for b, g in wc.groupby("batch"):
        assert g.measured_ms.sum() == pytest.approx(wt.set_index("batch").busy_step_ms[b], rel=0.02)
