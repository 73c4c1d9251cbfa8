"""The book's one GPU command (`python -m kernelbook book --params <yaml> --run <new run>`) on the dense model:
chapters 00-02 capture the run, and every chapter renders from it."""
import json
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.gpu


def chapters() -> list[str]:
    return [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))]


def test_the_book_captures_the_run_and_renders_every_chapter(dense_book, record_property):
    record_property("wall_s", round(dense_book.wall_s, 1))
    assert dense_book.rc == 0, dense_book.why()
    report = dense_book.report
    timings = {t["stem"]: t for t in json.loads((report / "timings.json").read_text())}
    stems = chapters()
    assert sorted(timings) == stems
    # a complete run: every chapter renders in full (none stops for want of a part of the run)
    assert [s for s, t in timings.items() if not t["ok"] or "stopped" in t] == [], timings
    for stem in stems:
        html = (report / f"{stem}.html").read_text()
        assert "Traceback" not in html and "An Exception was encountered" not in html, stem
    index = (report / "index.html").read_text()
    assert all(f'href="{s}.html"' in index for s in stems)
    assert (report / "report.md").exists()  # the profiler output contract: written when kernels were profiled


def test_the_capture_chapters_wrote_the_run_and_say_so(dense_book):
    assert dense_book.rc == 0, dense_book.why()
    m = json.loads((dense_book.run / "manifest.json").read_text())
    assert m["status"] == "complete" and "reason" not in m
    produced = m["produced_by"]
    assert {k: v["chapter"] for k, v in produced.items()} == {
        "measure_peaks": "00_setup", "timeline": "01_timeline", "ncu": "02_ncu"}
    assert all("kernelbook book" in v["command"] for v in produced.values()), produced
    assert m["timeline_info"]["model_class"] == "LlamaForCausalLM"
    # from_pretrained on the saved checkpoint
    assert Path(m["timeline_info"]["weights"]).resolve() == Path(m["params"]["model"]).resolve()
