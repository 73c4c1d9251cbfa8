"""`python -m kernelbook capture`: the whole capture of one run directory.

Writes into a hidden temporary directory beside the target and renames it at the end, so an existing
run is never touched. A capture that fails half-way still lands, with `status: partial` and the
reason in its manifest, keeping every artifact written before the failure.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import pandas as pd

from .. import env as envmod
from ..clocks import clock_lock
from ..i18n import N_
from ..devices import UnknownDeviceError, lookup
from .phases import EnoughSteps, PhaseTracker, require_vision_work

PARQUET = dict(compression="zstd", index=False)


class CaptureError(RuntimeError):
    """A capture that cannot start (exit code 2): the message says what to fix."""


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
        (tmp / "capture-error.txt").write_text(traceback.format_exc())
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
    tmp = run_dir / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(tmp, run_dir / "manifest.json")


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


def capture(params: dict, out_dir: str | Path, params_source: str | None = None,
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
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "raw").mkdir(parents=True)
    from ..params import CAPTURE, for_consumer

    # the manifest records this capture's own parameters only: book parameters (run_dir, top_n, ...)
    # describe a later render, and a run_dir there would name some other run
    manifest: dict = {"kernelbook_run": 1, "run_id": out_dir.name, "status": "partial",
                      "reason": "capture in progress", "params": for_consumer(params, CAPTURE),
                      "params_source": params_source,
                      "git_revision": envmod.git_revision(Path(__file__).parent), "timings_s": {},
                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def body(stage):
        with clock_lock(params["lock_clocks"]) as clock_state:
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
            tp = params.get("tensor_parallel", 1) > 1
            steps = (["measure_peaks"] if params["measure_peaks"] else []) + ["timeline"] + (
                ["ncu"] if params["ncu_top_n"] > 0 else [])
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
                    timeline_stage(params, tmp, manifest, progress)
                else:
                    from .ncu_stage import ncu_stage

                    ncu_stage(params, tmp, manifest)
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


def pick_backend(choice: str) -> tuple[str, str]:
    """(backend, why) for timeline_backend auto | torch | nsys."""
    from .nsys import nsys_works

    ok, why = nsys_works()
    if choice == "nsys":
        if not ok:
            raise CaptureError(f"timeline_backend: nsys was asked for but {why}")
        return "nsys", "asked for in params"
    if choice == "torch":
        return "torch", "asked for in params"
    return ("nsys", f"auto: {why}") if ok else ("torch", f"auto: nsys unusable ({why})")


def prepare(params: dict, nvtx: bool = True, ncu_target=None, op_targets=None, warmup_tokens: int | None = None,
            cudnn_free_prefix: bool = False):
    """Model + workload + phase hooks, warmed up (`params["warmup"]` generate calls, of `warmup_tokens` new
    tokens each when given). Returns (workload, tracker, load_s)."""
    import torch

    from .models import load_model
    from .workload import build_workload

    if params.get("tensor_parallel", 1) > 1:
        init_rank()
    t = time.perf_counter()
    loaded = load_model(params["model"], params["weights"], "cuda", params["dtype"], params["trust_remote_code"],
                        params.get("attn_implementation"), params.get("tensor_parallel", 1))
    wl = build_workload(loaded, params, "cuda")
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t
    tracker = PhaseTracker(loaded.model, nvtx=nvtx, record=ncu_target is None and op_targets is None,
                           ncu_target=ncu_target, op_targets=op_targets, cudnn_free_prefix=cudnn_free_prefix).install()
    warm = wl if warmup_tokens is None else replace(
        wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": warmup_tokens, "min_new_tokens": warmup_tokens})
    for _ in range(params["warmup"]):
        warm.generate()
    torch.cuda.synchronize()
    return wl, tracker, load_s


def _timed_generate(wl, tracker=None) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t = time.perf_counter()
    if tracker:
        tracker.start()
    wl.generate()
    sync()
    if tracker:
        tracker.stop()
    return time.perf_counter() - t


def _plain_trials(wl, tracker, trials: int) -> tuple[list[float], dict, pd.DataFrame]:
    """Plain generate calls (no profiler): the whole call's seconds, per phase the wall ms per step
    (median over the calls) from host clocks at the phase hooks, the GPU synchronized at each phase end
    (no profiler ranges, no NVTX), and every step's own wall ms (`steps.parquet`: trial, phase, step,
    wall_ms; exclusive of ranges opened inside it)."""
    import numpy as np

    from .phases import plain_phase_times, plain_step_times

    keep = tracker.record, tracker.nvtx
    tracker.record = tracker.nvtx = False
    totals, per, steps = [], [], []
    try:
        for trial in range(trials):
            tracker.clock = []
            totals.append(_timed_generate(wl, tracker))
            per.append(plain_phase_times(tracker.clock))
            steps.append(plain_step_times(tracker.clock).assign(trial=trial))
    finally:
        tracker.clock = None
        tracker.record, tracker.nvtx = keep
    phases = {}
    for ph in per[0]:
        ms = [1e3 * p[ph]["s"] / p[ph]["steps"] for p in per if ph in p]
        phases[ph] = {"steps": per[0][ph]["steps"], "ms_per_step": float(np.median(ms)), "samples_ms_per_step": ms,
                      "method": "host clock at the phase hooks, GPU synchronized at each phase end"}
    return totals, phases, pd.concat(steps, ignore_index=True)


def timeline_stage(params: dict, run_dir: Path, manifest: dict, progress=None, quiet=None, timed=None) -> None:
    """`quiet()`: called before the first timed pass, returns once nothing else of the book runs beside the
    capture on this host; `timed()`: called once the timed passes are over (see capture.chapters `PIPELINE`)."""
    quiet, timed = quiet or (lambda: None), timed or (lambda: None)
    backend, why = pick_backend(params["timeline_backend"])
    manifest["timeline_backend"] = {"backend": backend, "why": why}
    if backend == "nsys":
        from .nsys import nsys_timeline

        quiet()
        timeline, phases, info = nsys_timeline(params, run_dir)
        manifest["timeline_info"] = info
    elif params.get("tensor_parallel", 1) > 1:
        quiet()
        timeline, phases, info = tp_timeline(params, run_dir, progress or (lambda msg: None))
        manifest["timeline_info"] = info
    else:
        timeline, phases, info = torch_timeline(params, run_dir, progress or (lambda msg: None), quiet, timed)
        manifest["timeline_info"] = info
    _write_timeline(run_dir, timeline, phases)


def _write_timeline(run_dir: Path, timeline: pd.DataFrame, phases: pd.DataFrame) -> None:
    from ..analyze.kernels import annotate

    (annotate(timeline) if len(timeline) else timeline).to_parquet(run_dir / "timeline.parquet", **PARQUET)
    phases.to_parquet(run_dir / "phases.parquet", **PARQUET)


def torch_timeline(params: dict, run_dir: Path, progress=lambda msg: None, quiet=lambda: None, timed=lambda: None):
    import torch

    from ..load.trace import join_shapes
    from ..measure import summarize
    from .sampling import plan

    sampling = plan(params["max_new_tokens"], params.get("sample_window", 0), params.get("sample_every", 1))
    two_pass = params.get("shapes_pass", True)
    # A long eager generation is warmed up by its shapes pass, run first: the first generate pays cuDNN's
    # attention graph for every KV length (~0.08 s each on the H100, 157-196 s for 2048 tokens), a warmup
    # generate would pay it and the shapes pass would then run a whole generate more. Under CUDA graphs
    # (static cache) the warmup compiles the step, which the shapes pass's dispatch mode would keep out.
    shapes_first = (sampling is not None and two_pass and params["warmup"] > 0
                    and params.get("cache_implementation") != "static")
    progress("  model build, inputs" + ("" if shapes_first else ", warmup"))
    wl, tracker, load_s = prepare({**params, "warmup": 0} if shapes_first else params)
    shaped = shapes = None

    def shapes_pass():
        tracker.op_record = True
        progress("  shapes pass (record_shapes, op numbering, module ranges)"
                 + (": also the warmup" if shapes_first else ""))
        out = _profiled_pass(wl, tracker, True, run_dir / "raw" / "trace-shapes", sampling, progress)
        tracker.op_record = False
        return out

    if shapes_first:
        shaped, _, shapes_s, _, _ = shapes_pass()
    quiet()  # the plain generates are the book's times: nothing else of the book runs beside them
    progress(f"  model ready in {load_s:.1f} s; {params['timing_trials']} plain generates")
    plain, plain_phases, plain_steps = _plain_trials(wl, tracker, params["timing_trials"])
    plain_steps.to_parquet(run_dir / "steps.parquet", **PARQUET)
    what = (f"{len(sampling.windows)} windows, {len(sampling.steps) - 1} of {sampling.decode_steps} decode steps"
            if sampling else "every step")
    progress(f"  profiled generate (timeline pass, {what})")
    tracker.op_record = not two_pass  # op calls are numbered in the pass that records shapes
    timeline, phases, profiled_s, export_s, ingest_s = _profiled_pass(
        wl, tracker, not two_pass, run_dir / "raw" / "trace", sampling, progress)
    require_vision_work(wl.loaded.kind, tracker, type(wl.loaded.model).__name__)
    timed()  # the timed passes are over: an ncu worker started early may build its model beside the shapes pass
    if two_pass:  # aten shapes, op numbering and modules from a second generate, joined launch by launch
        if shaped is None:
            try:
                shaped, _, shapes_s, _, _ = shapes_pass()
            except BaseException:  # stopped in the shapes pass: the run keeps the timeline, without shapes
                _write_timeline(run_dir, timeline, phases)
                raise
        t = time.perf_counter()
        timeline, shapes = join_shapes(timeline, shaped)
        shapes.update(pass_generate_s=shapes_s, join_s=time.perf_counter() - t,
                      order="first, as the warmup" if shapes_first else "after the profiled pass")
        del shaped
    tracker.remove()
    info = {
        "model_load_s": load_s, "warmup": (N_("the shapes pass (a whole generate, run first)") if shapes_first else
                                             f"{params['warmup']} generate(s)"), "weights": wl.loaded.weights, "n_params": wl.loaded.n_params,
        "model_class": type(wl.loaded.model).__name__, "model_kind": wl.loaded.kind,
        "vision_forwards_marked": tracker.vision_calls, "inputs": wl.describe,
        "generate_kwargs": wl.gen_kwargs,
        "plain_generate": summarize(plain).as_dict(), "plain_phases": plain_phases, "profiled_generate_s": profiled_s,
        "overhead_ratio": profiled_s / summarize(plain).median_s,
        "trace_export_s": export_s, "ingest_s": ingest_s, "kernels": int((timeline.kind == "kernel").sum()),
        "sampling": ({**sampling.describe(), "method": "torch.profiler schedule over the windows; every step of "
                      "the plain generates timed (steps.parquet)"} if sampling else None),
        "shapes": ({"method": N_("second pass with record_shapes, joined by (phase, step, kernel, n-th launch)"), **shapes}
                   if shapes is not None else {"method": N_("same pass (record_shapes on the timed generate)")}),
        "routing_note": ("random weights: MoE routing balance differs from a trained model; kernel shapes, "
                         "counts and dense-layer times do not" if wl.loaded.weights == "random" else None),
    }
    del wl, tracker
    gc.collect()
    torch.cuda.empty_cache()
    return timeline, phases, info


def _profiled_pass(wl, tracker, record_shapes: bool, trace_base: Path, sampling, progress=lambda msg: None):
    """One generate under torch.profiler: (timeline, phases, generate s, export s, ingest s). Without
    `sampling` every step is recorded into one trace (`<trace_base>.json.gz`); with it the profiler records
    the sampled windows only, each window's trace exported and read as soon as it ends (then deleted), so
    the host holds one window's events at a time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if sampling is None:
        with profile(activities=acts, record_shapes=record_shapes) as prof:
            gen_s = _timed_generate(wl, tracker)
        timeline, phases, export_s, ingest_s = _export_ingest(prof, trace_base.with_suffix(".json"))
        return timeline, phases, gen_s, export_s, ingest_s
    parts, cost = [], [0.0, 0.0]

    def ready(prof):
        trace = trace_base.with_name(f"{trace_base.name}-w{len(parts)}.json")
        tl, ph, e, i = _export_ingest(prof, trace, keep=False)
        parts.append((tl, ph))
        cost[0] += e
        cost[1] += i
        progress(f"    window {len(parts)} of {len(sampling.windows)} read ({len(tl)} GPU events)")

    prof = profile(activities=acts, record_shapes=record_shapes, schedule=sampling.action, on_trace_ready=ready)
    tracker.prof, tracker.sample_steps = prof, sampling.steps
    try:
        with prof:
            gen_s = _timed_generate(wl, tracker)
    except BaseException:  # stopped during a long generate: the windows already read land with the run
        if parts and not record_shapes:
            _write_timeline(trace_base.parent.parent, pd.concat([p[0] for p in parts], ignore_index=True),
                            pd.concat([p[1] for p in parts], ignore_index=True))
        raise
    finally:
        tracker.prof, tracker.sample_steps = None, None
    timeline = pd.concat([p[0] for p in parts], ignore_index=True).sort_values("start_ns", kind="stable")
    phases = pd.concat([p[1] for p in parts], ignore_index=True)
    return timeline.reset_index(drop=True), phases, gen_s, cost[0], cost[1]


TP_RANK_KEYS = ("model_load_s", "plain_generate", "plain_phases", "profiled_generate_s", "overhead_ratio", "kernels",
                "shapes", "vision_forwards_marked")


def tp_timeline(params: dict, run_dir: Path, progress=lambda msg: None):
    """Tensor parallelism: torchrun starts `tensor_parallel` ranks, each the timeline pass of
    `torch_timeline` on its own GPU with its shard of the model (`python -m kernelbook _worker --mode
    tp-timeline`); their tables are merged here with a `rank` column. The ranks' profiler clocks are the
    one host's, so launch times compare across ranks."""
    import torch

    n = params["tensor_parallel"]
    if torch.cuda.device_count() < n:
        raise CaptureError(f"tensor_parallel: {n} needs {n} GPUs and torch sees {torch.cuda.device_count()}. "
                           "Run on a machine with that many, or lower tensor_parallel.")
    raw = run_dir / "raw"
    pfile = raw / "tp-params.json"
    pfile.write_text(json.dumps(params))
    cmd = torchrun_worker(n, "--params", str(pfile), "--mode", "tp-timeline", "--out", str(raw))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "4")}
    progress(f"  torchrun: {n} ranks, one GPU each (rank 0's steps below)")
    t = time.perf_counter()
    from ..proc import run_limited

    proc = run_limited(cmd, params["capture_timeout_s"], f"torchrun with {n} ranks (capture_timeout_s)", env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun with {n} ranks exited with code {proc.returncode} after "
                           f"{time.perf_counter() - t:.0f} s (its output is above)")
    tls, phs, ranks = [], [], {}
    if (raw / "rank0" / "steps.parquet").exists():  # rank 0's plain step times stand for the run
        shutil.copy(raw / "rank0" / "steps.parquet", run_dir / "steps.parquet")
    for r in range(n):
        d = raw / f"rank{r}"
        tls.append(pd.read_parquet(d / "timeline.parquet").assign(rank=r))
        phs.append(pd.read_parquet(d / "phases.parquet").assign(rank=r))
        ranks[r] = json.loads((d / "info.json").read_text())
    info = dict(ranks[0])
    info.update(tensor_parallel=n, torchrun_s=time.perf_counter() - t,
                ranks={str(r): {k: v.get(k) for k in TP_RANK_KEYS} for r, v in ranks.items()},
                kernels=int(sum(v["kernels"] for v in ranks.values())))
    return pd.concat(tls, ignore_index=True), pd.concat(phs, ignore_index=True), info


def torchrun_worker(n: int, *args: str) -> list[str]:
    """`python -m kernelbook _worker ARGS` on `n` ranks of one machine, one GPU each (torchrun)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
            "-m", "kernelbook", "_worker", *args]


def init_rank() -> int:
    """This torchrun rank's GPU (LOCAL_RANK) and the NCCL process group; returns the rank."""
    import torch
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    # NVLink multicast (NVLS) off: its buffers fail to register on shared machines
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank()


def tp_rank_worker(params: dict, out: str) -> None:
    """One rank of `tp_timeline` (under torchrun): its GPU, its timeline pass, its tables in out/rank<N>."""
    import torch.distributed as dist

    rank = init_rank()
    d = Path(out) / f"rank{rank}"
    (d / "raw").mkdir(parents=True, exist_ok=True)
    say = (lambda msg: print(f"  [rank 0] {msg}", file=sys.stderr, flush=True)) if rank == 0 else (lambda msg: None)
    timeline, phases, info = torch_timeline(params, d, say)
    timeline.to_parquet(d / "timeline.parquet", **PARQUET)
    phases.to_parquet(d / "phases.parquet", **PARQUET)
    (d / "info.json").write_text(json.dumps(info, default=str))
    dist.barrier()
    dist.destroy_process_group()


def _export_ingest(prof, trace: Path, keep: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, float, float]:
    """Export the profiler's trace, read it, gzip the raw file (`keep=False`: delete it): (timeline, phases,
    export s, ingest s)."""
    from ..load.trace import ingest_torch_trace

    t = time.perf_counter()
    prof.export_chrome_trace(str(trace))
    export_s = time.perf_counter() - t
    t = time.perf_counter()
    timeline, phases = ingest_torch_trace(trace)
    ingest_s = time.perf_counter() - t
    if not keep:
        trace.unlink(missing_ok=True)
        return timeline, phases, export_s, ingest_s
    from ..proc import TimeLimitExceeded, run_limited

    try:
        run_limited(["gzip", "-f", str(trace)], 600, "gzip of the rank's trace")
    except TimeLimitExceeded:
        pass  # the trace stays uncompressed
    return timeline, phases, export_s, ingest_s


def _wait_until(ready, owner: int) -> None:
    """Poll `ready()`; end the process when `owner` (the capture that started ncu) is gone."""
    import os

    while not ready():
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            raise SystemExit("kernelbook worker: the capture that started it is gone") from None
        time.sleep(0.2)


def _await_gate(targets_file: Path, gate: Path, owner: int) -> None:
    """An ncu worker started early (capture.ncu_stage `early_ncu`): wait until the timeline's timed passes are
    over (`gate`), so that nothing of it runs beside them; when the GPU's free memory is less than twice what
    the timeline stage holds (its model would not fit beside it), also until the targets are written (the
    timeline stage has ended)."""
    import torch

    _wait_until(lambda: gate.exists() or targets_file.exists(), owner)
    free, total = torch.cuda.mem_get_info()
    if free < 2 * (total - free):
        _wait_until(targets_file.exists, owner)


def worker(params: dict, mode: str, target: str | None, targets_file: str | None = None,
           early: str | None = None, profile_gate: bool = False) -> None:
    """The workload alone, run under an external profiler (ncu or nsys). `targets_file`: ncu by op call
    ({"phase:step": [op_index, ...]}); the op calls the worker marked are written beside it. `early`
    ("<gate file>:<owner pid>"): started before the targets exist, the worker builds and warms up its model
    once the gate file is there, then waits for the targets (see `_await_gate`). `profile_gate`: ncu runs with
    `--profile-from-start off`, and the worker starts and stops the profiler around each target op call."""
    import torch

    ncu_target = op_targets = warmup_tokens = stop_after = None
    if early:
        gate, owner = early.rsplit(":", 1)
        _await_gate(Path(targets_file), Path(gate), int(owner))
        # built and warmed up before the targets are known: as for any prefill target (below), one one-token
        # warmup generate and the lead-up decode steps without cuDNN attention; the targets come after
        t = time.perf_counter()
        wl, tracker, load_s = prepare(params, nvtx=False, op_targets={}, warmup_tokens=1, cudnn_free_prefix=True)
        warmups = params["warmup"]
        ready_early = time.perf_counter() - t
        _wait_until(Path(targets_file).exists, int(owner))
    if targets_file:
        raw = json.loads(Path(targets_file).read_text())
        op_targets = {(k.split(":")[0], int(k.split(":")[1])): set(v) for k, v in raw.items()}
        decode_steps = [st for ph, st in op_targets if ph == "decode"]
        stop_after = max(decode_steps, default=0)
        # stop right after the last profiled step; warm up only when the first steps are profiled
        # (decode steps before the profiled one warm it up; bench/kernel_choice.py)
        only_decode = all(ph == "decode" for ph, _ in op_targets)
        params = {**params, "max_new_tokens": _worker_tokens(params, max(decode_steps, default=0) + 1),
                  "warmup": 0 if only_decode else params["warmup"]}
        # A prefill target is warmed up by a one-token generate (the prefill alone), not a whole one: every
        # decode length loads cuDNN attention kernels of its own, and ncu's cost per profiled launch grows
        # with the modules a process has loaded (bench/ncu_floor.py, H100: 0.5 s per launch before a
        # generate, 4.8 s after a 64-token one, 0.7 s when attention did not use cuDNN).
        warmup_tokens = 1
    elif target:
        phase, step = target.split(":")
        ncu_target = (phase, int(step))
        stop_after = int(step) if phase == "decode" else 0
        if phase == "decode":  # stop right after the profiled step (its KV length is unchanged), and
            # no warmup generate: the steps before the profiled one warm it up (under CUDA graphs they
            # also compile and record the step). Measured on an H100 (bench/kernel_choice.py), the step
            # launches the timeline's kernels in the timeline's order.
            params = {**params, "max_new_tokens": _worker_tokens(params, int(step) + 1), "warmup": 0}
    if early:  # the model is ready: the targets set what this generate does
        tracker.op_targets = op_targets
        wl = replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": params["max_new_tokens"],
                                     "min_new_tokens": params["max_new_tokens"]})
        ready = ready_early
    else:
        t = time.perf_counter()
        # not under CUDA graphs (static cache): a changed SDPA flag would make torch.compile build the step anew
        lead_up = op_targets is not None and params.get("cache_implementation", "dynamic") != "static"
        wl, tracker, load_s = prepare(params, nvtx=(mode == "nsys"), ncu_target=ncu_target, op_targets=op_targets,
                                      warmup_tokens=warmup_tokens, cudnn_free_prefix=lead_up)
    tracker.stop_after = stop_after
    tracker.profile_gate = profile_gate and os.environ.get("KB_NCU_PLAIN_RANK") != "1"  # a plain rank has no ncu
    mem = (torch.cuda.memory_allocated() / 2**30, torch.cuda.memory_reserved() / 2**30,
           torch.cuda.memory_stats().get("segment.all.current", 0))
    ready = ready if early else time.perf_counter() - t
    if mode == "nsys":
        torch.cuda.cudart().cudaProfilerStart()
    try:
        gen_s = _timed_generate(wl, tracker)
    except EnoughSteps:  # the steps after the last profiled one are not run (a static cache's generate would)
        tracker.stop()
        gen_s = float("nan")
    if mode == "nsys":
        torch.cuda.cudart().cudaProfilerStop()
        require_vision_work(wl.loaded.kind, tracker, type(wl.loaded.model).__name__)
    if targets_file and os.environ.get("KB_NCU_PLAIN_RANK") != "1":  # the profiled rank writes what it marked
        seen = [{"phase": p, "step": st, "op_index": i, "op": op} for p, st, i, op in tracker.op_seen]
        Path(targets_file).with_suffix(".seen.json").write_text(json.dumps(seen))
        Path(targets_file).with_suffix(".worker.json").write_text(json.dumps({
            "started_early": bool(early), "warmup_generates": warmups if early else params["warmup"],
            "warmup_tokens": warmup_tokens,
            "max_new_tokens": params["max_new_tokens"], "cudnn_free_decode_steps": tracker.cudnn_free_steps,
            "profile_gate": tracker.profile_gate}))
    print(f"kernelbook worker done ({mode}): model + inputs {load_s:.1f} s, ready {ready:.1f} s, "
          f"generate {gen_s:.1f} s; GPU memory at the start of generate {mem[0]:.1f} GiB allocated, "
          f"{mem[1]:.1f} GiB reserved in {mem[2]} segments; "
          f"peak {torch.cuda.max_memory_reserved() / 2**30:.1f} GiB reserved",
          file=sys.stderr)


def _worker_tokens(params: dict, needed: int) -> int:
    """New tokens the ncu worker generates: just enough to reach its last profiled step, except with a
    static cache, whose length (prompt + max_new_tokens) sets the shapes of every step (the attention's
    padded KV length, the mask): there the worker generates what the timeline did."""
    return params["max_new_tokens"] if params.get("cache_implementation") == "static" else needed


def load_timeline(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "timeline.parquet")
