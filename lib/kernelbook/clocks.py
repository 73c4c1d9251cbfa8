"""Clock protocol from the profiling skill: lock before profiling, always reset after, one at a time.

The lock file makes a second concurrent profiling fail with a message naming the holder. Clock
locking runs the repo's scripts (users' own machines only; never on shared GPU machines, where the
default `lock_clocks: false` leaves clocks alone and ncu runs with `--clock-control none`).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
LOCK_FILE = Path(os.environ.get("KERNELBOOK_LOCK", "/tmp/kernelbook-profiling.lock"))


class ProfilingBusy(RuntimeError):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def profiling_lock(lock_file: Path = LOCK_FILE):
    """Exclusive profiling: a second holder gets ProfilingBusy naming the first (a stale lock of a
    dead process is taken over)."""
    me = {"pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "cmd": " ".join(os.sys.argv)}
    while True:
        try:
            fd = os.open(lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                holder = json.loads(lock_file.read_text())
            except (OSError, ValueError):
                holder = {"pid": -1}
            if holder.get("pid", -1) > 0 and _alive(holder["pid"]):
                raise ProfilingBusy(
                    f"another profiling holds {lock_file}: pid {holder['pid']} since {holder.get('since')} "
                    f"({holder.get('cmd', '?')}). Wait for it to finish; profile one thing at a time.")
            lock_file.unlink(missing_ok=True)  # stale
    with os.fdopen(fd, "w") as f:
        json.dump(me, f)
    try:
        yield
    finally:
        lock_file.unlink(missing_ok=True)


@contextmanager
def clock_lock(lock_clocks: bool):
    """Hold the profiling lock; when `lock_clocks`, lock GPU clocks for the block and reset them in
    `finally`. Yields the clock state recorded in the manifest."""
    with profiling_lock():
        if not lock_clocks:
            yield {"locked": False, "note": "clocks left as they are (lock_clocks: false)"}
            return
        out = subprocess.run(["bash", str(SCRIPTS / "lock-gpu-clock.sh")], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"lock-gpu-clock.sh failed: {out.stderr.strip() or out.stdout.strip()}")
        try:
            yield {"locked": True, "lock_output": out.stdout.strip()}
        finally:
            subprocess.run(["bash", str(SCRIPTS / "reset-gpu-clock.sh")], capture_output=True, text=True)
