"""Clock protocol from the profiling skill: lock before profiling, always reset after, one at a time.

A file lock (`flock`) makes a second concurrent profiling fail with a message naming the holder. The
clock scripts run with a time limit, and a failed reset is reported. Clock
locking runs the repo's scripts (users' own machines only; never on shared GPU machines, where the
default `lock_clocks: false` leaves clocks alone and ncu runs with `--clock-control none`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .i18n import N_

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
LOCK_FILE = Path(os.environ.get("KERNELBOOK_LOCK", "/tmp/kernelbook-profiling.lock"))


class ProfilingBusy(RuntimeError):
    pass


CLOCK_SCRIPT_TIMEOUT_S = 60  # nvidia-smi answers in seconds; a wedged driver must not hold the lock forever


def _holder(lock_file: Path) -> str:
    """Who holds `lock_file`, from what the holder wrote into it (it writes right after taking the lock,
    so a moment's wait covers a reader that comes in between)."""
    for _ in range(20):
        try:
            holder = json.loads(lock_file.read_text())
            return f"pid {holder['pid']} since {holder.get('since')} ({holder.get('cmd', '?')})"
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return "a process that has not written its name into it yet"


@contextmanager
def profiling_lock(lock_file: Path = LOCK_FILE):
    """Exclusive profiling: a second holder gets ProfilingBusy naming the first.

    The lock is the kernel's own file lock (`flock`) on `lock_file`, taken without waiting: it is
    released when its holder dies however it dies, so there is no stale-lock logic and no window where
    a reader takes a half-written lock for a dead one. The holder writes its pid and command into the
    file for the message, and removes the file when it lets go; a process that locked the file just as
    it was removed sees that its file is no longer the one at the path and tries again."""
    import fcntl

    me = {"pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "cmd": " ".join(os.sys.argv)}
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ProfilingBusy(f"another profiling holds {lock_file}: {_holder(lock_file)}. Wait for it to "
                                "finish; profile one thing at a time.") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_file).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed this file as we locked it: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())
        yield
    finally:
        try:
            lock_file.unlink()
        except FileNotFoundError:
            pass
        os.close(fd)  # closing the file releases the lock


def _script(name: str) -> subprocess.CompletedProcess:
    """Run a clock script with a time limit; a script that does not return is reported as failed."""
    try:
        return subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True,
                              timeout=CLOCK_SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([name], 124, "", f"{name} did not return within "
                                                            f"{CLOCK_SCRIPT_TIMEOUT_S} s")


@contextmanager
def clock_lock(lock_clocks: bool):
    """Hold the profiling lock; when `lock_clocks`, lock GPU clocks for the block and reset them in
    `finally`. Yields the clock state recorded in the manifest."""
    with profiling_lock():
        if not lock_clocks:
            yield {"locked": False, "note": N_("clocks left as they are (lock_clocks: false)")}
            return
        out = _script("lock-gpu-clock.sh")
        if out.returncode != 0:
            _script("reset-gpu-clock.sh")  # it may have locked before failing
            raise RuntimeError(f"lock-gpu-clock.sh failed: {out.stderr.strip() or out.stdout.strip()}")
        try:
            yield {"locked": True, "lock_output": out.stdout.strip()}
        except BaseException:
            _reset()  # said on stderr if it fails; the error in flight is the one to raise
            raise
        problem = _reset()
        if problem:
            raise RuntimeError(problem)


def _reset() -> str | None:
    """Reset the clocks; a failure (exit code, or no return within the limit) is printed and returned."""
    reset = _script("reset-gpu-clock.sh")
    if reset.returncode == 0:
        return None
    problem = (f"reset-gpu-clock.sh failed (exit {reset.returncode}): {reset.stderr.strip() or reset.stdout.strip()}; "
               "the GPU clocks may still be locked: run `sudo nvidia-smi -rgc` yourself")
    print(f"kernelbook: {problem}", file=sys.stderr, flush=True)
    return problem
