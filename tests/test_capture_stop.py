"""A capture stopped by a signal lands as `status: partial` with what it already wrote (CPU: the landing
code alone, with a real signal sent to a real process; the stages themselves need a GPU)."""
import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import RUN

SCRIPT = """
import shutil, sys, time
from pathlib import Path
from kernelbook.capture.common import land
tmp, out, timeline = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
tmp.mkdir()
manifest = {"status": "partial", "reason": "capture in progress"}
def body(stage):
    stage[0] = "timeline"
    shutil.copy(timeline, tmp / "timeline.parquet")
    stage[0] = "ncu"
    print("in ncu", flush=True)
    time.sleep(120)
land(tmp, out, manifest, body)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_capture_lands_partial_with_what_it_holds(tmp_path, sig):
    tmp, out = tmp_path / ".run.tmp", tmp_path / "run"
    # SIGINT as a terminal delivers it: a test run started in the background (nohup ... &) has SIGINT ignored,
    # which its children inherit, and Python then raises no KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp), str(out), str(RUN / "timeline.parquet")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "in ncu"
    t = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert time.monotonic() - t < 30 and proc.returncode != 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "partial"
    assert manifest["reason"].startswith("ncu: ")
    assert ("SIGTERM" in manifest["reason"]) if sig == signal.SIGTERM else ("KeyboardInterrupt" in manifest["reason"])
    assert (out / "timeline.parquet").read_bytes() == (RUN / "timeline.parquet").read_bytes()
    assert not tmp.exists()
