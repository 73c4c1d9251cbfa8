"""One chapter executed by papermill under a watchdog: a time limit, a liveness check, one retry.

A render once hung for 13 minutes in a chapter whose kernel sat idle while papermill waited for a
reply that never came; nothing was printed. Here a thread beside papermill watches the chapter's kernel
through its own client of the kernel's channels:

- the chapter's time limit (`chapter_timeout_s`, seconds from the kernel's start);
- the heartbeat: a kernel that stops answering it (stopped, wedged in native code with the GIL held)
  for `dead_s` seconds;
- idle while waited on: the kernel says it is idle and stays silent for `idle_s` seconds while papermill
  still waits for a cell (papermill sends the next cell within milliseconds of a reply).

When one of them fires, the kernel's process group is killed; papermill then sees a dead kernel and
returns. The chapter is run once more; a second time it is reported failed with what it was doing (the
code of the cell the kernel last started). A chapter that fails on its own (an error in a cell) is not
retried: that is not a hang.

Progress: every line the chapter writes to stderr in the capture's progress format (`[  12.3 s] step`,
`capture.common.Progress`) reaches `on_progress` as it is written, not only the notebook.
"""
from __future__ import annotations

import functools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CHAPTER_TIMEOUT_S = 1800  # default limit of one chapter (its capture, when it captures, gets more: runner)
HEARTBEAT_DEAD_S = 30.0   # a kernel that misses its heartbeat this long has stopped answering
IDLE_WAIT_S = 120.0       # a kernel idle and silent this long while papermill waits on it is hung
PROGRESS_LINE = re.compile(r"^\[\s*\d+\.\d s\] ")


class ChapterHung(RuntimeError):
    """The watchdog ended the chapter's kernel on both tries; the message says why and what it ran."""


@dataclass
class _Watch:
    kernels: list = field(default_factory=list)  # the kernel managers papermill started (one per try)
    ended: str | None = None  # why the watchdog ended the kernel
    doing: str = ""  # code of the cell the kernel last said it started (its execute_input)
    started: str = ""  # code of the cell papermill last started (sent to the kernel)
    interrupted: bool = False  # the user stopped the book (stop_all): no retry
    stop: threading.Event = field(default_factory=threading.Event)


SAVE_EVERY_S = 5.0  # while a chapter runs, its executed notebook is written at most this often


@functools.lru_cache(maxsize=None)
def _engine() -> str:
    """papermill's nbclient engine, registered as `kernelbook`, whose execution manager writes the executed
    notebook at the chapter's start and end (success, error, or a kernel ended by the watchdog) and at most
    every SAVE_EVERY_S seconds in between, not twice per cell: papermill's per-cell writes (JSON with every
    output so far, validated) took 8 s of a 78 s CPU book. The cell a chapter last started is kept in memory
    for the watchdog's message (`_Watch.started`), so no write is needed to know it."""
    from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

    class Manager(NotebookExecutionManager):
        watch: _Watch | None = None

        def save(self, force: bool = False, **kwargs):
            if force or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY_S:
                super().save(**kwargs)

        def notebook_start(self, **kwargs):
            super().notebook_start(**kwargs)
            self.save(force=True)

        def cell_start(self, cell, cell_index=None, **kwargs):
            if self.watch is not None:
                self.watch.started = cell.source
            super().cell_start(cell, cell_index, **kwargs)

        def notebook_complete(self, **kwargs):
            super().notebook_complete(**kwargs)
            self.save(force=True)

    class Engine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False,
                             autosave_cell_every=30, **kwargs):
            nb_man = Manager(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                             autosave_cell_every=autosave_cell_every)
            nb_man.watch = _WATCHES.get(threading.get_ident())
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

    papermill_engines.register("kernelbook", Engine)
    return "kernelbook"


_WATCHES: dict = {}  # thread id -> the _Watch of the chapter that thread executes


def stop_all() -> None:
    """The user stopped the book (Ctrl-C) while chapters ran in other threads: end every running chapter's
    kernel now, without the retry a hung chapter gets (each one's papermill then returns at once). The kernels'
    deaths are no news to the user who stopped them: nbclient's 'Kernel died' lines are silenced."""
    import logging

    for name in ("papermill", "traitlets", "nbclient"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for watch in list(_WATCHES.values()):
        watch.interrupted = True
        watch.stop.set()
        for km in list(watch.kernels):
            _kill(km)


def _manager_class(base, watch: _Watch):
    """`base` (the runner's kernel manager) that tells the watchdog when its kernel has started."""

    class Watched(base):
        # nbclient calls start_kernel, which AsyncKernelManager binds to its own _async_start_kernel
        async def start_kernel(self, **kw):
            await self._async_start_kernel(**kw)
            watch.kernels.append(self)

    return Watched


def _kill(km) -> None:
    """Kill the kernel's whole process group (jupyter_client starts each kernel in its own session)."""
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


def _first_line(code: str) -> str:
    lines = [ln for ln in code.strip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    line = lines[0].strip() if lines else code.strip()
    return line if len(line) <= 100 else line[:97] + "..."


def _watchdog(watch: _Watch, limit_s: float, dead_s: float, idle_s: float, main: int | None) -> None:
    from jupyter_client import BlockingKernelClient

    t0 = time.monotonic()
    while not watch.kernels and not watch.stop.wait(0.2):
        if time.monotonic() - t0 > limit_s:  # a kernel that never started is papermill's own timeout
            return
    if watch.stop.is_set():
        return
    km = watch.kernels[-1]
    kc = BlockingKernelClient()
    kc.load_connection_info(km.get_connection_info())
    kc.start_channels(shell=False, iopub=True, stdin=False, hb=True, control=False)
    try:
        last_msg, state, silent_since = time.monotonic(), "starting", None
        while not watch.stop.wait(1.0):
            now = time.monotonic()
            for msg in _ready(kc.iopub_channel):
                last_msg = now
                kind = msg["header"]["msg_type"]
                if kind == "execute_input":
                    watch.doing = msg["content"].get("code", "")
                elif kind == "status":
                    state = msg["content"].get("execution_state", state)
            beating = kc.hb_channel.is_beating()
            silent_since = None if beating else (silent_since or now)
            why = None
            if now - t0 > limit_s:
                why = f"it ran past its limit of {limit_s:.0f} s (chapter_timeout_s)"
            elif silent_since is not None and now - silent_since > dead_s:
                why = f"its kernel stopped answering (no heartbeat for {dead_s:.0f} s)"
            elif state == "idle" and now - last_msg > idle_s:
                why = f"its kernel sat idle for {idle_s:.0f} s while the runner waited for a cell to finish"
            if why:
                watch.ended = why
                _kill(km)
                # papermill notices the dead kernel within a second or two; if it does not, interrupt it
                if not watch.stop.wait(60) and main is not None:
                    import _thread

                    _thread.interrupt_main()
                return
    finally:
        kc.stop_channels()


def _ready(channel) -> list[dict]:
    """The messages waiting on `channel`, without blocking (jupyter_client's get_msgs() waits forever
    for the next one: its get_msg() has no timeout by default)."""
    from queue import Empty

    msgs = []
    while True:
        try:
            msgs.append(channel.get_msg(timeout=0))
        except Empty:
            return msgs


class _ProgressLines:
    """papermill's stderr_file: whole lines in the capture's progress format go to `on_progress`."""

    def __init__(self, on_progress):
        self.on_progress, self.buf = on_progress, ""

    def write(self, text: str) -> None:
        self.buf += text
        *lines, self.buf = self.buf.split("\n")
        for ln in lines:
            if PROGRESS_LINE.match(ln):
                self.on_progress(ln)

    def flush(self) -> None:
        pass


def execute_chapter(src: Path, executed: Path, parameters: dict, km_class, limit_s: float = CHAPTER_TIMEOUT_S,
                    dead_s: float = HEARTBEAT_DEAD_S, idle_s: float = IDLE_WAIT_S, on_progress=None,
                    on_retry=None, cwd: str | None = None) -> Exception | None:
    """Execute `src` into `executed` with papermill under the watchdog (module docstring); returns the
    error (papermill's, or `ChapterHung` after the second try), None on success. `on_retry(why)` is
    called before the second try; `on_progress(line)` with each progress line as it is written."""
    import papermill

    for attempt in (1, 2):
        watch = _Watch()
        main = threading.main_thread().ident if threading.current_thread() is threading.main_thread() else None
        dog = threading.Thread(target=_watchdog, args=(watch, limit_s, dead_s, idle_s, main), daemon=True)
        dog.start()
        error = None
        _WATCHES[threading.get_ident()] = watch
        try:
            papermill.execute_notebook(str(src), str(executed), parameters=parameters, cwd=cwd, kernel_name="python3",
                                       engine_name=_engine(), progress_bar=False, log_output=False,
                                       kernel_manager_class=_manager_class(km_class, watch),
                                       stderr_file=_ProgressLines(on_progress) if on_progress else None)
        except KeyboardInterrupt:
            if watch.ended is None:  # the user's Ctrl-C, not the watchdog's last resort
                watch.stop.set()
                raise
            error = ChapterHung(watch.ended)
        except Exception as e:  # papermill keeps the executed notebook with the error in it
            error = e
        finally:
            _WATCHES.pop(threading.get_ident(), None)
            watch.stop.set()
            dog.join(timeout=5)
        if watch.interrupted:
            return KeyboardInterrupt("stopped by the user")
        if watch.ended is None or error is None:  # finished, or failed on its own: no retry
            return error
        code = watch.started or watch.doing  # papermill started it; else what the kernel said it started
        doing = f" while running `{_first_line(code)}`" if code else " before its first cell"
        if attempt == 1:
            if on_retry:
                on_retry(f"{watch.ended}{doing}")
            continue
        return ChapterHung(f"ended twice by the watchdog: {watch.ended}{doing}")
    return None
