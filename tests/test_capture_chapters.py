"""The capture chapters' decision (capture or read) and the locks' release, on a CPU machine."""
import os
import signal
import subprocess
import sys

import pytest
from conftest import RUN

from kernelbook.capture.chapters import decide, part
from kernelbook.capture.common import CaptureError
from kernelbook.clocks import LOCK_FILE, ProfilingBusy, clock_lock, profiling_lock


def test_auto_reads_what_the_run_holds_and_what_this_machine_cannot_capture(tmp_path):
    for p in ("setup", "timeline", "ncu"):
        do, why = decide(RUN, p, "auto")
        assert not do and "already holds" in why
    do, why = decide(tmp_path / "new-run", "timeline", "auto")
    assert not do and "cannot capture" in why and "no GPU" in why
    assert decide(tmp_path / "new-run", "ncu", "never") == (False, "capture: never — the chapter reads the run directory")
    assert part(RUN, "timeline", "auto")["captured"] is False


def test_always_never_writes_over_a_run_and_stops_where_it_cannot_capture(tmp_path):
    with pytest.raises(CaptureError, match="never writes over a run"):
        decide(RUN, "timeline", "always")
    with pytest.raises(CaptureError, match="cannot capture the setup part: no GPU"):
        decide(tmp_path / "new-run", "setup", "always")
    assert not (tmp_path / "new-run").exists()


def test_the_clock_lock_releases_the_profiling_lock_when_locking_fails():
    """On this CPU machine the clock script fails (no nvidia-smi): the error names it and the
    profiling lock is gone afterwards, so the next capture is not told another one is running."""
    LOCK_FILE.unlink(missing_ok=True)
    with pytest.raises(RuntimeError, match="lock-gpu-clock.sh failed"):
        with clock_lock(True):
            pass
    assert not LOCK_FILE.exists()


def test_the_profiling_lock_is_released_on_failure_and_interrupt(tmp_path):
    lock = tmp_path / "profiling.lock"
    for exc in (RuntimeError("chapter failed"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with profiling_lock(lock):
                assert lock.exists()
                with pytest.raises(ProfilingBusy, match=f"pid {os.getpid()}"):
                    with profiling_lock(lock):
                        pass
                raise exc
        assert not lock.exists()


def test_a_process_killed_by_sigterm_inside_the_lock_leaves_no_lock(tmp_path):
    """SIGTERM to a capture holding the lock (what `timeout` and job schedulers send): the capture's
    handler turns it into an exception, so the `finally` that removes the lock runs."""
    lock = tmp_path / "profiling.lock"
    code = ("import signal, sys, time\n"
            "from pathlib import Path\n"
            "from kernelbook.capture.common import _sigterm\n"
            "from kernelbook.clocks import profiling_lock\n"
            "signal.signal(signal.SIGTERM, _sigterm)\n"
            "with profiling_lock(Path(sys.argv[1])):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held" and lock.exists()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode != 0 and not lock.exists()
