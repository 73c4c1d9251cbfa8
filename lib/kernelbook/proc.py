"""Subprocesses with a time limit: a hung NCCL job, profiler or native reader must not hold a GPU lease
(or a book render) forever.

The child runs in its own session, so at its limit the whole process group is ended (SIGTERM, then
SIGKILL after a grace period): torchrun's ranks and nsys's target go with it.
"""
from __future__ import annotations

import os
import signal
import subprocess

GRACE_S = 10.0


class TimeLimitExceeded(RuntimeError):
    """A subprocess ran past its limit and was ended; the message names it and the limit."""


def run_limited(cmd: list[str], timeout_s: float, what: str, **kw) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, **kw)` ended at `timeout_s` seconds with its process group; then
    TimeLimitExceeded("{what} did not finish within {timeout_s} s; it was ended")."""
    return finish_limited(start_limited(cmd, **kw), timeout_s, what)


def start_limited(cmd: list[str], **kw) -> subprocess.Popen:
    """The child started in its own session (its process group is what `finish_limited` or `end` ends); the caller
    works on beside it and then calls `finish_limited`, or `end` where it stops before that."""
    return subprocess.Popen(cmd, start_new_session=True, **kw)


def finish_limited(proc: subprocess.Popen, timeout_s: float, what: str) -> subprocess.CompletedProcess:
    """Wait for a child of `start_limited` for at most `timeout_s` more seconds (see `run_limited`)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end(proc)
        raise TimeLimitExceeded(f"{what} did not finish within {timeout_s:g} s; it was ended (its process "
                                "group killed)") from None
    except BaseException:  # Ctrl-C or the capture's SIGTERM: the child goes too
        end(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def end(proc: subprocess.Popen) -> None:
    """End a child of `start_limited` and its process group: SIGTERM, then SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(ready, owner: int, poll_s: float = 0.2) -> None:
    """Poll `ready()` until it is true; end this process (SystemExit) when the process `owner` (the capture that
    started it) is gone, so that a worker never waits for a capture that has died."""
    import time

    while not ready():
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            raise SystemExit("kernelbook worker: the capture that started it is gone") from None
        time.sleep(poll_s)
