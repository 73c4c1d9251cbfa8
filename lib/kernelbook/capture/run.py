"""`python -m kernelbook capture`: the whole capture of one run directory.

Writes into a hidden temporary directory beside the target and renames it at the end, so an existing
run is never touched. A capture that fails half-way still lands, with `status: partial` and the
reason in its manifest, keeping every artifact written before the failure.
"""
from __future__ import annotations

import gc
import os
import shutil
import time
from pathlib import Path

from .. import env as envmod
from ..clocks import clock_lock
from ..contract.config import CaptureConfig
from ..contract.layout import RunLayout, capture_staging
from ..devices import UnknownDeviceError, lookup
from .common import CaptureError, Progress, _write_timeline, land, write_manifest
from .nsys import pick_backend
from .torch_backend import nsys_timeline, torch_timeline, tp_timeline


# in the staging folder while the capture runs: the timeline's timed passes are over (an early ncu waits for it)
TIMED_GATE = ".timeline-timed"


def require_gpu() -> None:
    try:
        import torch
    except ImportError as e:
        raise CaptureError("capture needs torch and transformers: pip install -e '.[capture]' on the GPU machine "
                           "(the book itself renders existing runs without them)") from e
    if not torch.cuda.is_available():
        raise CaptureError("capture needs an NVIDIA GPU and none is visible to torch (torch.cuda.is_available() "
                           "is False). Run capture on a GPU machine; `python -m kernelbook book` still renders "
                           "existing runs here.")


def capture(params: CaptureConfig, out_dir: str | Path, params_source: str | None = None,
            progress: Progress | None = None) -> Path:
    """The whole capture into the new run directory `out_dir`. `progress` (the CLI passes one started
    when the command started, so its times and the closing one cover the whole command) gets a line
    before any slow step: importing torch and reading a processor take seconds."""
    out_dir = Path(out_dir)
    progress = progress or Progress()
    if out_dir.exists():
        raise CaptureError(f"{out_dir} already exists; captures never overwrite a run. Choose another --out.")
    progress(f"capture into {out_dir}: checking that the model's inputs can be built (CPU, before any GPU work)")
    from .workload import check_inputs

    # the model's inputs from its config and processor alone, on the CPU: a model whose inputs cannot
    # be built stops here (InputsError, exit 2), before a GPU is asked for or a weight is loaded
    check_inputs(params)
    require_gpu()
    tmp = capture_staging(out_dir, os.getpid())
    if tmp.exists():
        shutil.rmtree(tmp)
    RunLayout(tmp).raw.mkdir(parents=True)
    # the manifest records this capture's own parameters only: book parameters (run_dir, top_n, ...)
    # describe a later render, and a run_dir there would name some other run
    manifest: dict = {"kernelbook_run": 1, "run_id": out_dir.name, "status": "partial",
                      "reason": "capture in progress", "params": params.capture_params(),
                      "params_source": params_source,
                      "git_revision": envmod.git_revision(Path(__file__).parent), "timings_s": {},
                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def body(stage):
        with clock_lock(params.lock_clocks) as clock_state:
            progress("setup: environment, device")
            manifest["clock_state"] = clock_state
            manifest["environment"] = envmod.environment()
            gpu_name = manifest["environment"]["gpu"]["name"]
            try:
                manifest["device"] = lookup(gpu_name).key
            except UnknownDeviceError as e:
                manifest["device"] = None
                manifest["device_note"] = str(e)
            write_manifest(tmp, manifest)
            tp = params.tensor_parallel > 1
            steps = (["measure_peaks"] if params.measure_peaks else []) + ["timeline"] + (
                ["ncu"] if params.ncu_top_n > 0 else [])
            early = []  # the ncu started once the timeline's timed passes are over (`early_ncu`)
            try:
                _stages(steps, stage, tp, early)
            finally:
                for proc in early:  # not handed to the ncu stage (the timeline failed): not left waiting
                    proc.kill()
                (tmp / TIMED_GATE).unlink(missing_ok=True)

    def _stages(steps, stage, tp, early):

        def timed():  # the timed passes are over: ncu's worker imports and builds its model beside the rest
            from .ncu import NcuError
            from .ncu_stage import early_ncu

            (tmp / TIMED_GATE).touch()
            try:
                proc = early_ncu(params, tmp, tmp / TIMED_GATE) if "ncu" in steps else None
            except NcuError:  # no ncu here: the ncu stage says so, once the timeline has landed
                proc = None
            early.extend([proc] if proc is not None else [])

        for name in steps:
            stage[0] = name
            progress(f"{name}: start")
            t = time.perf_counter()
            if name == "ncu" and tp:
                from .ncu_stage import tp_ncu_stage

                tp_ncu_stage(params, tmp, manifest)
            elif name == "measure_peaks":
                from ..measure import measure_peaks

                manifest["measured_peaks"] = measure_peaks()
            elif name == "timeline":
                timeline_stage(params, tmp, manifest, progress, timed=timed)
            else:
                from .ncu_stage import ncu_stage

                ncu_stage(params, tmp, manifest, early=early.pop() if early else None)
            manifest["timings_s"][name] = time.perf_counter() - t
            manifest.setdefault("peak_rss_gb", {})[name] = peak_rss_gb()
            write_manifest(tmp, manifest)
            progress(f"{name}: done in {manifest['timings_s'][name]:.1f} s")
            gc.collect()

    out = land(tmp, out_dir, manifest, body, progress)
    progress(f"capture complete: {out_dir}")  # its time is the whole command's (the CLI's Progress)
    return out


def peak_rss_gb() -> dict:
    """Peak resident host memory so far (GB): this process, and the largest of its finished children
    (the ncu worker, torchrun ranks)."""
    import resource

    kb = lambda who: resource.getrusage(who).ru_maxrss / 1e6  # noqa: E731 - Linux reports KiB
    return {"capture": kb(resource.RUSAGE_SELF), "largest_child": kb(resource.RUSAGE_CHILDREN)}


def timeline_stage(params: CaptureConfig, run_dir: Path, manifest: dict, progress=None, quiet=None, timed=None) -> None:
    """`quiet()`: called before the first timed pass, returns once nothing else of the book runs beside the
    capture on this host; `timed()`: called once the timed passes are over (see capture.chapters `PIPELINE`)."""
    quiet, timed = quiet or (lambda: None), timed or (lambda: None)
    backend, why = pick_backend(params.timeline_backend, params)
    manifest["timeline_backend"] = {"backend": backend, "why": why}
    if backend == "nsys":  # the torch stage's plain generates and shapes pass, the profiled pass under nsys
        timeline, phases, info = nsys_timeline(params, run_dir, progress or (lambda msg: None), quiet, timed)
        manifest["timeline_info"] = info
    elif params.tensor_parallel > 1:
        quiet()
        timeline, phases, info = tp_timeline(params, run_dir, progress or (lambda msg: None))
        manifest["timeline_info"] = info
    else:
        timeline, phases, info = torch_timeline(params, run_dir, progress or (lambda msg: None), quiet, timed)
        manifest["timeline_info"] = info
    _write_timeline(run_dir, timeline, phases)
