"""Damaged runs (issue 31): each damage to a copy of the bundled run stops the book before any chapter with
one message naming the file and what is wrong, exit code 2, no traceback, and an earlier report kept as it
was. Paths given on the command line resolve against the caller's folder, outside the repository too."""
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO, RUN

STATIC = REPO / "data" / "runs" / "h200-deepseek-decoder-tp1-b1"  # timeline-only: no ncu counters


def _truncate(f):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _manifest(run, change):
    m = json.loads((run / "manifest.json").read_text())
    change(m)
    (run / "manifest.json").write_text(json.dumps(m))


def _table(f, change):
    df = pd.read_parquet(f)
    change(df).to_parquet(f, index=False)


# case → (damage done to the copy, what the message must say besides the file's name)
CASES = {
    "timeline truncated": (lambda r: _truncate(r / "timeline.parquet"), ("timeline.parquet", "not a readable Parquet")),
    "timeline is CSV": (lambda r: (r / "timeline.parquet").write_text("name,phase\nk,decode\n"),
                        ("timeline.parquet", "not a readable Parquet")),
    "timeline empty file": (lambda r: (r / "timeline.parquet").write_bytes(b""), ("timeline.parquet", "empty file")),
    "timeline is a folder": (lambda r: ((r / "timeline.parquet").unlink(), (r / "timeline.parquet").mkdir()),
                             ("timeline.parquet", "not a file")),
    "ncu kernels truncated": (lambda r: _truncate(r / "ncu" / "kernels.parquet"),
                              ("ncu/kernels.parquet", "not a readable Parquet")),
    "ncu metrics not parquet": (lambda r: (r / "ncu" / "metrics.parquet").write_text('{"a": 1}'),
                                ("ncu/metrics.parquet", "not a readable Parquet")),
    "manifest bad JSON": (lambda r: _truncate(r / "manifest.json"), ("manifest.json", "not valid JSON", "line")),
    "manifest not UTF-8": (lambda r: (r / "manifest.json").write_bytes(b'{"status": "\xff\xfe"}'),
                           ("manifest.json", "not UTF-8")),
    "manifest is a list": (lambda r: (r / "manifest.json").write_text("[1, 2]"),
                           ("manifest.json", "expected a JSON object")),
    "manifest without status": (lambda r: _manifest(r, lambda m: m.pop("status")),
                                ("manifest.json", "missing key(s) status")),
    "manifest without params": (lambda r: _manifest(r, lambda m: m.pop("params")),
                                ("manifest.json", "missing key(s) params")),
    "manifest unknown status": (lambda r: _manifest(r, lambda m: m.update(status="done")),
                                ("manifest.json", "status is 'done'")),
    "complete without ncu kernels": (lambda r: (r / "ncu" / "kernels.parquet").unlink(),
                                     ("manifest.json", "says the run is complete", "ncu/kernels.parquet is missing")),
    "complete without phases": (lambda r: (r / "phases.parquet").unlink(),
                                ("manifest.json", "says the run is complete", "phases.parquet is missing")),
    "ncu kernel not in timeline": (lambda r: _table(r / "ncu" / "kernels.parquet", lambda d: d.assign(
        name=d.name.where(d.kernel_id != "d003", "kernel_from_another_run"))),
        ("ncu/kernels.parquet", "kernel d003", "is not in timeline.parquet")),
    "ncu launch of an unknown kernel": (lambda r: _table(r / "ncu" / "launches.parquet", lambda d: d.assign(
        kernel_id=d.kernel_id.where(d.index != 0, "x999"))), ("ncu/launches.parquet", "x999", "not in kernels.parquet")),
    "timeline without a column": (lambda r: _table(r / "timeline.parquet", lambda d: d.drop(columns="duration_ns")),
                                  ("timeline.parquet", "lacks column(s) duration_ns")),
    "timeline durations as text": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.astype(str))), ("timeline.parquet", "column duration_ns", "expected numbers")),
    "timeline unknown phase": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        phase=d.phase.where(d.index != 5, "<b>warp</b>"))), ("timeline.parquet", "unknown phase(s)")),
    "timeline without rows": (lambda r: _table(r / "timeline.parquet", lambda d: d.iloc[:0]),
                              ("timeline.parquet", "has no rows")),
}


def _book(cwd, *args):
    return subprocess.run([sys.executable, "-m", "kernelbook", "book", *args], capture_output=True, text=True,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=600)


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_run_one_message_exit_2_nothing_overwritten(tmp_path, case):
    damage, says = CASES[case]
    run = tmp_path / "runs" / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    damage(run)
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("an earlier report")
    proc = _book(tmp_path, "--run", "runs/copy", "--out", "report")  # relative, from outside the repository
    msg = proc.stderr.strip()
    print(f"| {case} | {msg.splitlines()[0]} | {proc.returncode} |")  # the table of cases (pytest -s)
    assert proc.returncode == 2, msg
    assert "Traceback" not in msg and proc.stdout == ""
    assert msg.startswith("kernelbook: damaged run: ") and all(s in msg for s in says), msg
    assert str(run) in msg  # the file is named by its path
    assert (out / "index.html").read_text() == "an earlier report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "runs"]  # no staging or .failed folder


def test_relative_paths_from_outside_the_repository_and_exit_0_for_a_stop_by_design(tmp_path):
    """A relative --run, --out and --params from a folder outside the repository: the chapters read the
    caller's run (they ran in the repository before and stopped on every chapter, exit 0); a chapter the
    timeline-only run cannot serve by design shows its note and the book still exits 0; the index shows the
    run as the caller wrote it."""
    assert not str(tmp_path).startswith(str(REPO))
    shutil.copytree(STATIC, tmp_path / "runs" / "static")
    (tmp_path / "p.yaml").write_text("phase: decode\n")
    proc = _book(tmp_path, "--params", "p.yaml", "--run", "runs/static", "--out", "out",
                 "--chapters", "00_setup,03_histograms")
    assert proc.returncode == 0, proc.stderr
    timings = {e["stem"]: e for e in json.loads((tmp_path / "out" / "timings.json").read_text())}
    assert timings["00_setup"]["ok"] and "stopped" not in timings["00_setup"]
    assert "No Nsight Compute counters in static" in timings["03_histograms"]["stopped"]
    index = (tmp_path / "out" / "index.html").read_text()
    assert "<code>runs/static</code>" in index
    assert "h200-deepseek-decoder-tp1-b1" in (tmp_path / "out" / "00_setup.html").read_text() or \
        "static" in (tmp_path / "out" / "00_setup.html").read_text()


def test_a_missing_run_is_a_non_zero_exit_with_one_line(tmp_path):
    proc = _book(tmp_path, "--run", "runs/none", "--out", "out")
    assert proc.returncode == 2 and "runs/none does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_a_captured_runs_manifest_names_the_params_file_as_given(tmp_path, monkeypatch):
    """The book passes paths to the chapters absolute; the manifest a capture chapter begins records the
    params file as the caller wrote it (the runner hands it over in KERNELBOOK_PARAMS_AS_GIVEN)."""
    from kernelbook.capture.chapters import PARAMS_AS_GIVEN, _begin
    from kernelbook.params import validate

    params = validate({"capture": "never"}, consumer="capture")
    monkeypatch.setenv(PARAMS_AS_GIVEN, "params/mine.yaml")
    m = _begin(tmp_path / "new-run", params, str(tmp_path / "abs" / "params" / "mine.yaml"))
    assert m["params_source"] == "params/mine.yaml"
    monkeypatch.delenv(PARAMS_AS_GIVEN)
    m = _begin(tmp_path / "other-run", params, "/abs/p.yaml")  # a chapter run alone: the path it was given
    assert m["params_source"] == "/abs/p.yaml"
