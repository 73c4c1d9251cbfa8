"""A capture stopped by a signal while ncu profiles (SIGTERM, what `timeout` and batch schedulers send) lands as
`status: partial` with its reason and what it holds (the timeline, the kernels ncu profiled before the stop, a
reason for every other selected kernel), and the book renders it."""
import json
import re
import signal
import subprocess
import threading
import time

import pytest

from .conftest import DENSE_STOPPED, REPO, kernelbook_command, record, tail, write_params

pytestmark = pytest.mark.gpu

PROFILED = re.compile(r"ncu decode\+prefill: (\d+)/(\d+) launches")
STOP_AFTER = 4  # profiled launches seen before the signal (a launch may be a helper of a selected kernel's op call)


@pytest.fixture(scope="session")
def stopped(work, dense_checkpoint):
    """The capture, its output read as it comes; SIGTERM once ncu has profiled STOP_AFTER launches."""
    pfile = write_params(work / "dense-stopped.yaml", {"model": str(dense_checkpoint), **DENSE_STOPPED})
    out, log = work / "runs" / "dense-stopped", work / "dense-stopped.log"
    proc = subprocess.Popen(kernelbook_command("capture", "--params", str(pfile), "--out", str(out)), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    lines, seen = [], threading.Event()
    stop = {"signal_at": None, "done_before": None}

    def pump():
        for line in proc.stdout:
            lines.append(line)
            m = PROFILED.search(line)
            if m and int(m.group(1)) >= STOP_AFTER and not seen.is_set():
                stop["done_before"], stop["expected"] = int(m.group(1)), int(m.group(2))
                seen.set()
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    t0 = time.monotonic()
    seen.wait(timeout=300)
    if seen.is_set() and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        stop["signal_at"] = time.monotonic()
    try:
        rc = proc.wait(timeout=150)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = None
    reader.join(timeout=10)
    log.write_text("".join(lines))
    landed_s = time.monotonic() - stop["signal_at"] if stop["signal_at"] else None
    record(config="dense-stopped", command=f"python -m kernelbook capture --params {pfile.name} --out ... (SIGTERM "
           f"after {STOP_AFTER} profiled launches)", rc=rc, wall_s=round(time.monotonic() - t0, 1),
           landed_s=landed_s and round(landed_s, 1))
    print(f"dense-stopped: exit {rc}, signal after {stop['done_before']} launches, landed {landed_s} s later; "
          f"last lines:\n{''.join(lines[-25:])}")
    if stop["signal_at"] is None:
        pytest.fail(f"ncu never reported {STOP_AFTER} profiled launches (exit {rc}); last lines:\n"
                    + "".join(lines[-40:]), pytrace=False)
    return {"run": out, "rc": rc, "landed_s": landed_s, "log": log, "work": work, **stop,
            "book": render_in_background(work, out)}


def render_in_background(work, run):
    """The book of the stopped run, `capture: never` (it reads the run as it landed), started now and left to run
    on the CPU beside the next capture; its test (the suite's last) waits for it. ncu profiles the prefill's
    launches before the decode's, so a stop this early leaves counters for the prefill only: the book is then asked
    for that phase (the command refuses a phase without counters in a run that holds others, exit 2)."""
    import pandas as pd

    if not (run / "ncu" / "kernels.parquet").exists():
        return None
    k = pd.read_parquet(run / "ncu" / "kernels.parquet")
    profiled = set(k[k.status == "profiled"].phase)
    phase = "decode" if "decode" in profiled or not profiled else sorted(profiled)[0]
    pfile = write_params(work / "dense-stopped-book.yaml", {"capture": "never", "phase": phase})
    report, log = work / "reports" / "dense-stopped", work / "dense-stopped-book.log"
    args = ["book", "--params", str(pfile), "--run", str(run), "--out", str(report)]
    f = open(log, "w")
    proc = subprocess.Popen(kernelbook_command(*args), cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    return {"proc": proc, "file": f, "t0": time.time(), "report": report, "log": log, "phase": phase,
            "command": " ".join(["python -m kernelbook", *args])}


def test_a_capture_stopped_mid_ncu_lands_partial_with_its_reason(stopped, record_property):
    record_property("landed_s_after_signal", round(stopped["landed_s"], 1))
    record_property("exit_code", stopped["rc"])
    assert stopped["rc"] not in (0, None), stopped
    run = stopped["run"]
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "partial" and m["reason"].startswith("ncu: ") and "stopped" in m["reason"], m["reason"]
    assert (run / "timeline.parquet").exists() and (run / "phases.parquet").exists()
    assert not list(run.parent.glob(f".{run.name}.tmp-*"))  # landed: the staging folder renamed into place
    # landed within ncu's grace period (ncu asked to close its report, then the tables written)
    assert stopped["landed_s"] < 90


def test_the_stopped_capture_keeps_what_ncu_profiled_and_says_why_for_the_rest(stopped, record_property):
    import pandas as pd

    k = pd.read_parquet(stopped["run"] / "ncu" / "kernels.parquet")
    n = (k.status == "profiled").sum()
    record_property("profiled_before_stop", f"{n}/{len(k)}")
    assert len(k) == 2 * DENSE_STOPPED["ncu_top_n"]
    assert k.status.notna().all() and (k.status.str.len() > 0).all()
    # ncu got SIGINT from the capture and closed its report with the launches it had profiled
    assert 1 <= n < len(k), k[["kernel_id", "status"]].to_string()


def test_the_book_renders_the_stopped_capture(stopped, record_property):
    """The book's one command on the stopped run renders every chapter (started in the background when the capture
    landed; this test, the suite's last, waits for it)."""
    book = stopped["book"]
    assert book is not None, "the stopped run has no ncu/kernels.parquet"
    try:
        rc = book["proc"].wait(timeout=240)
    except subprocess.TimeoutExpired:
        book["proc"].kill()
        rc = None
    book["file"].close()
    report = book["report"]
    ended = (report / "index.html").stat().st_mtime if (report / "index.html").exists() else time.time()
    record(config="dense-stopped-book", command=book["command"], rc=rc, wall_s=round(ended - book["t0"], 1),
           note="in the background, beside the next capture (wall: until its index.html was written)")
    record_property("phase_asked", book["phase"])
    assert rc == 0, f"book exited {rc}; its last lines:\n{tail(book['log'])}"
    timings = json.loads((report / "timings.json").read_text())
    assert all(t["ok"] for t in timings) and len(timings) == len(list((REPO / "notebooks").glob("[0-9][0-9]_*.py")))
    for t in timings:
        html = (report / f"{t['stem']}.html").read_text()
        assert "Traceback" not in html and "An Exception was encountered" not in html, t["stem"]
    reason = json.loads((stopped["run"] / "manifest.json").read_text())["reason"]
    index = (report / "index.html").read_text()
    assert "<b>partial</b>" in index and "stopped" in index, reason
