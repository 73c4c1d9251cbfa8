"""What every capture module shares: its errors, its progress lines and the one writer of a run's files
(`PARQUET` options, the manifest written atomically, `land`: a capture moved into place complete or partial)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import pandas as pd

from ..contract.layout import RunLayout

PARQUET = dict(compression="zstd", index=False)


class CaptureError(RuntimeError):
    """A capture that cannot start (exit code 2): the message says what to fix."""


class InputsError(CaptureError):
    """The model's inputs cannot be built (exit code 2, before any GPU work): names the model class and
    what is missing."""


class CaptureStopped(BaseException):
    """SIGTERM arrived: raised in the capture so that it lands as partial with what it holds."""


class Progress:
    """Each capture step as it starts and ends, with the time since the capture began (stderr); `t0`
    (a `time.perf_counter()` value) lets the command's own start be that beginning."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def _sigterm(signum, frame):
    raise CaptureStopped(f"stopped by signal {signal.Signals(signum).name}")


def land(tmp: Path, out_dir: Path, manifest: dict, body, progress=None) -> Path:
    """Run `body(stage)` for a capture being written in `tmp`, then move it to `out_dir`, whatever
    happens: complete, or `status: partial` with the reason and every artifact already written (also
    when stopped by SIGINT or SIGTERM). `stage` is a one-item list naming the step in progress."""
    stage = ["setup"]
    old = signal.signal(signal.SIGTERM, _sigterm) if _main_thread() else None
    try:
        body(stage)
        manifest["status"] = "complete"
        manifest.pop("reason", None)
    except BaseException as e:
        manifest["status"] = "partial"
        manifest["reason"] = f"{stage[0]}: {type(e).__name__}: {e}"
        RunLayout(tmp).capture_error.write_text(traceback.format_exc())
        write_manifest(tmp, manifest)
        os.replace(tmp, out_dir)
        if progress:
            progress(f"capture stopped at {stage[0]}; partial run kept at {out_dir} ({manifest['reason']})")
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    write_manifest(tmp, manifest)
    os.replace(tmp, out_dir)
    return out_dir


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Atomically (write + rename): a reader never sees half a manifest."""
    lay = RunLayout(run_dir)
    lay.manifest_tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(lay.manifest_tmp, lay.manifest)


def _write_timeline(run_dir: Path, timeline: pd.DataFrame, phases: pd.DataFrame) -> None:
    from ..contract.kernels import annotate

    lay = RunLayout(run_dir)
    (annotate(timeline) if len(timeline) else timeline).to_parquet(lay.timeline, **PARQUET)
    phases.to_parquet(lay.phases, **PARQUET)
