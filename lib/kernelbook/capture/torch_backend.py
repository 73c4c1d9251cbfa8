"""The torch-profiler timeline backend: the model and workload prepared with their phase hooks, the plain
generates timed, the profiled pass (and the shapes pass) exported and ingested; the tensor-parallel timeline
under torchrun (one process per rank)."""
from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ..contract.config import CaptureConfig
from ..contract.layout import NSYS_REPORT, RunLayout, rank_run, trace_json, window_json
from ..i18n import N_
from ..contract.names import PASS_RANGE, PROFILED_PASS, SHAPES_PASS
from .nsys import await_worker, worker_done
from .phases import PhaseTracker, require_vision_work
from .common import PARQUET, CaptureError, _write_timeline


def prepare(params: CaptureConfig, nvtx: bool = True, ncu_target=None, op_targets=None, warmup_tokens: int | None = None,
            cudnn_free_prefix: bool = False):
    """Model + workload + phase hooks, warmed up (`params.warmup` generate calls, of `warmup_tokens` new
    tokens each when given). Returns (workload, tracker, load_s)."""
    import torch

    from .models import load_model
    from .workload import build_workload

    if params.tensor_parallel > 1:
        init_rank()
    t = time.perf_counter()
    loaded = load_model(params.model, params.weights, "cuda", params.dtype, params.trust_remote_code,
                        params.attn_implementation, params.tensor_parallel)
    wl = build_workload(loaded, params, "cuda")
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t
    tracker = PhaseTracker(loaded.model, nvtx=nvtx, record=ncu_target is None and op_targets is None,
                           ncu_target=ncu_target, op_targets=op_targets, cudnn_free_prefix=cudnn_free_prefix).install()
    warm = wl if warmup_tokens is None else replace(
        wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": warmup_tokens, "min_new_tokens": warmup_tokens})
    for _ in range(params.warmup):
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


def torch_timeline(params: CaptureConfig, run_dir: Path, progress=lambda msg: None, quiet=lambda: None, timed=lambda: None):
    import torch

    from ..load.trace import join_shapes
    from ..measure import summarize
    from ..contract.sampling import plan

    sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
    two_pass = params.shapes_pass
    shapes_first = _shapes_first(params, sampling)
    progress("  model build, inputs" + ("" if shapes_first else ", warmup"))
    wl, tracker, load_s = prepare(replace(params, warmup=0) if shapes_first else params)
    shaped = shapes = None
    lay = RunLayout(run_dir)

    def shapes_pass():
        return _shapes_pass(wl, tracker, lay, sampling, progress, shapes_first)

    if shapes_first:
        shaped, shapes_s = shapes_pass()
    quiet()  # the plain generates are the book's times: nothing else of the book runs beside them
    progress(f"  model ready in {load_s:.1f} s; {params.timing_trials} plain generates")
    plain, plain_phases, plain_steps = _plain_trials(wl, tracker, params.timing_trials)
    plain_steps.to_parquet(lay.steps, **PARQUET)
    what = (f"{len(sampling.windows)} windows, {len(sampling.steps) - 1} of {sampling.decode_steps} decode steps"
            if sampling else "every step")
    progress(f"  profiled generate (timeline pass, {what})")
    tracker.op_record = not two_pass  # op calls are numbered in the pass that records shapes
    timeline, phases, profiled_s, export_s, ingest_s = _profiled_pass(
        wl, tracker, not two_pass, lay.trace_base(), sampling, progress)
    require_vision_work(wl.loaded.kind, tracker, type(wl.loaded.model).__name__)
    timed()  # the timed passes are over: an ncu worker started early may build its model beside the shapes pass
    if two_pass:  # aten shapes, op numbering and modules from a second generate, joined launch by launch
        if shaped is None:
            try:
                shaped, shapes_s = shapes_pass()
            except BaseException:  # stopped in the shapes pass: the run keeps the timeline, without shapes
                _write_timeline(run_dir, timeline, phases)
                raise
        t = time.perf_counter()
        timeline, shapes = join_shapes(timeline, shaped)
        shapes.update(pass_generate_s=shapes_s, join_s=time.perf_counter() - t,
                      order="first, as the warmup" if shapes_first else "after the profiled pass")
        del shaped
    tracker.remove()
    routing = _routing(wl, params, progress)
    info = {
        "moe_routing": routing,
        **_workload_info(wl, tracker, load_s, plain, plain_phases,
                         N_("the shapes pass (a whole generate, run first)") if shapes_first else
                         f"{params.warmup} generate(s)"),
        "profiled_generate_s": profiled_s, "overhead_ratio": profiled_s / summarize(plain).median_s,
        "trace_export_s": export_s, "ingest_s": ingest_s, "kernels": int((timeline.kind == "kernel").sum()),
        "sampling": ({**sampling.describe(), "method": "torch.profiler schedule over the windows; every step of "
                      "the plain generates timed (steps.parquet)"} if sampling else None),
        "shapes": ({"method": N_("second pass with record_shapes, joined by (phase, step, kernel, n-th launch)"), **shapes}
                   if shapes is not None else {"method": N_("same pass (record_shapes on the timed generate)")}),
    }
    del wl, tracker
    gc.collect()
    torch.cuda.empty_cache()
    return timeline, phases, info


def _routing(wl, params: CaptureConfig, progress) -> dict | None:
    """The routing pass (capture.routing): the experts a MoE's routers pick per decode step; None for a dense model.
    It adds to the run, it is not the run: a pass that fails is recorded with its error and the capture goes on."""
    from .routing import routing_pass

    progress("  routing pass (an eager generate: the experts each decode step's routers pick)")
    try:
        return routing_pass(wl, params.batch_size, params.max_new_tokens)
    except Exception as e:  # noqa: BLE001 (a stop, KeyboardInterrupt or SIGTERM's CaptureStopped, still ends the capture)
        progress(f"  routing pass failed, not recorded: {type(e).__name__}: {e}"[:300])
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def _workload_info(wl, tracker, load_s: float, plain: list[float], plain_phases: dict, warmup: str) -> dict:
    """The timeline stage's record of the workload and its plain generates (either backend)."""
    from ..measure import summarize

    return {"model_load_s": load_s, "warmup": warmup, "weights": wl.loaded.weights, "n_params": wl.loaded.n_params,
            "model_class": type(wl.loaded.model).__name__, "model_kind": wl.loaded.kind,
            "vision_forwards_marked": tracker.vision_calls, "inputs": wl.describe, "generate_kwargs": wl.gen_kwargs,
            "plain_generate": summarize(plain).as_dict(), "plain_phases": plain_phases,
            "routing_note": ("random weights: MoE routing balance differs from a trained model; kernel shapes, "
                             "counts and dense-layer times do not" if wl.loaded.weights == "random" else None)}


def nsys_timeline(params: CaptureConfig, run_dir: Path, progress=lambda msg: None, quiet=lambda: None,
                  timed=lambda: None):
    """The timeline stage with the profiled pass under Nsight Systems: this process builds the model, times its
    plain generates and runs the shapes pass (`_plain_and_shapes`); a worker of its own runs the profiled generate
    under nsys (capture.nsys `start_nsys`), every step or, for a long generation, each sampled window; the nsys
    timeline then takes the shapes pass's ops, shapes, op numbering and modules (matched by kernel stem,
    `load.trace.kernel_stem`), so an nsys run holds what a torch-profiler run holds. The shapes pass cannot run in
    the nsys worker: under nsys the torch profiler gets no CUDA activity (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
    measured on the H100, also after nsys's capture range has ended). The worker starts as soon as the shapes pass's
    generate ends and builds its model beside that pass's export; its measured generate waits until this process
    has freed its model and ended its own work (`finish_nsys`), so nothing runs beside it. Tensor-parallel ranks:
    `tp_nsys_timeline`."""
    import torch

    from ..contract.sampling import plan
    from ..proc import end
    from .nsys import finish_nsys, start_nsys

    if params.tensor_parallel > 1:
        return tp_nsys_timeline(params, run_dir, progress, quiet)
    sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
    if sampling is None:
        return _nsys_one_process(params, run_dir, progress, quiet, timed)
    nsys = None

    def start():  # the worker builds and warms up its model beside this process's remaining CPU work
        nonlocal nsys
        if nsys is None:
            free, total = torch.cuda.mem_get_info()
            if free >= 2 * (total - free):  # its model fits beside this one
                nsys = start_nsys(params, run_dir, sampling)

    try:
        shaped, shapes_s, info, plain = _plain_and_shapes(params, run_dir, progress, quiet, after=start)
        what = (f"{len(sampling.windows)} windows, {len(sampling.steps) - 1} of {sampling.decode_steps} decode steps"
                if sampling else "every step")
        progress(f"  profiled generate under Nsight Systems (timeline pass, {what})")
        if nsys is None:
            nsys = start_nsys(params, run_dir, sampling)
        # the timed passes are over once the worker's generate is: an ncu worker started early builds its model
        # while nsys writes its report
        timeline, phases, nsys_info = finish_nsys(nsys, generated=timed)
    except BaseException:
        if nsys is not None:
            end(nsys.proc)
        raise
    timeline, info = _nsys_joined(params, timeline, shaped, shapes_s, info, plain, nsys_info, sampling)
    return timeline, phases, info


def _nsys_one_process(params: CaptureConfig, run_dir: Path, progress, quiet, timed):
    """The timeline stage of every step under Nsight Systems in one process (`nsys_capture_worker` under
    `nsys profile`): the model is built once, for the plain generates, the profiled generate and the shapes pass,
    whose op ranges are NVTX (`emit_nvtx`) in the same report. This process relays its progress, lets its timed
    passes start once nothing else of the book runs (`quiet`), calls `timed()` when they are over (an ncu worker
    started then builds beside the shapes pass), then, once nsys has ended, exports and reads its report. (nsys
    writes the report after the process has ended: on the H100 no report was on disk yet when the stop that ends
    the range had returned, so the export cannot overlap the process's routing pass.)"""
    from ..proc import end
    from .nsys import PRIME, capture_report, exported, nsys_info, read_capture_sqlite, relay, start_capture

    lay = RunLayout(run_dir)
    progress("  the timeline stage's process under Nsight Systems: model build, inputs, warmup")
    run = start_capture(params, run_dir)
    tick = relay(lay.nsys_log, progress)
    try:
        quiet()  # the plain generates are the book's times: nothing else of the book runs beside them
        run.go.write_text("go")
        await_worker(run.proc, worker_done(lay), run.started, run.timeout_s, timed, tick)
    except BaseException:
        end(run.proc)
        raise
    wall = time.perf_counter() - run.started
    progress(f"  Nsight Systems wrote its report ({wall:.1f} s after it started); export to sqlite, read")
    report = capture_report(lay)
    dbs, export_s = exported(lay, [report], run.timeout_s, run.proc.returncode)
    for primer in set(lay.raw.glob(f"{lay.nsys_base.name}.*{NSYS_REPORT}")) - {report}:
        primer.unlink()  # the priming range's report (KB_NSYS_PRIME=range)
    t = time.perf_counter()
    timeline, phases, shaped = read_capture_sqlite(dbs[0])
    nsys = nsys_info(lay, timeline, wall, export_s, time.perf_counter() - t, 1)
    info = json.loads(lay.nsys_capture_info.read_text())
    shapes_s, plain = info.pop("shapes_s"), info.pop("plain_s")
    timeline, info = _nsys_joined(params, timeline, shaped, shapes_s, info, plain, nsys, None,
                                  method=N_("NVTX op ranges with shapes (emit_nvtx) of a second generate in the same "
                                            "Nsight Systems report, joined by (phase, step, kernel, n-th launch)"),
                                  order="after the profiled generate, in its process", by_stem=False)
    info["nsys_process"] = N_("one: the timeline stage's own process under nsys (model built once)")
    info["nsys_prime"] = PRIME  # how nsys was primed before the profiled generate (capture.nsys `PRIME`)
    return timeline, phases, info


def nsys_capture_worker(params: CaptureConfig, run_dir: Path, go: str) -> None:
    """`_nsys_one_process`'s process, under `nsys profile --capture-range=cudaProfilerApi`: the model built and warmed
    up, then (once the go file is there) the plain generates (steps.parquet), the profiled generate with its phases as
    NVTX ranges (after a one-token generate that primes nsys, capture.nsys `PRIME`) and, in the same range, the
    shapes pass: `emit_nvtx(record_shapes=True)` makes every aten op an NVTX range with its input shapes, and the
    op calls and module forwards are NVTX ranges too (`op_nvtx`). Each
    generate is an NVTX range `kbpass#<pass>`. The profiled generate's s go to the worker file as soon as it ends
    (the capture's timed passes are over); the workload's record to raw/capture-info.json at the end."""
    import torch

    from ..proc import wait_until
    from .nsys import LAUNCHED, PRIME, PROGRESS_MARK

    lay = RunLayout(run_dir)

    def say(msg: str) -> None:
        print(f"{PROGRESS_MARK}{msg}", file=sys.stderr, flush=True)

    launched = float(os.environ.get(LAUNCHED, time.time()))
    say(f"  up {time.time() - launched:.1f} s after nsys started, torch imported; model build, inputs, warmup")
    wl, tracker, load_s = prepare(params)
    go_file, owner = go.rsplit(":", 1)
    wait_until(Path(go_file).exists, int(owner))
    say(f"  model ready in {load_s:.1f} s; {params.timing_trials} plain generates")
    plain, plain_phases, plain_steps = _plain_trials(wl, tracker, params.timing_trials)
    plain_steps.to_parquet(lay.steps, **PARQUET)
    say("  profiled generate under Nsight Systems (timeline pass, every step)")
    tracker.record, tracker.nvtx = False, False
    cudart = torch.cuda.cudart()
    torch.cuda.synchronize()
    # a one-token generate; under a static cache the whole one, whose cache length (prompt + new tokens) is the
    # compiled step's: another length would compile the step anew
    primer = wl if params.static_cache else replace(
        wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": 1, "min_new_tokens": 1})
    if PRIME == "range":  # a capture range of its own (capture.nsys `PRIME`)
        cudart.cudaProfilerStart()
        primer.generate()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
    cudart.cudaProfilerStart()
    if PRIME == "inline":  # outside the passes' ranges, so no table holds it
        primer.generate()
        torch.cuda.synchronize()
    tracker.nvtx = True
    with torch.cuda.nvtx.range(f"{PASS_RANGE}{PROFILED_PASS}"):
        gen_s = _timed_generate(wl, tracker)
    require_vision_work(wl.loaded.kind, tracker, type(wl.loaded.model).__name__)
    worker_done(lay).write_text(json.dumps({"generate_s": gen_s, "model_load_s": load_s, "capture_toggle_s": 0.0}))
    shapes_s = None
    if params.shapes_pass:
        say("  shapes pass (NVTX op ranges with shapes, op numbering, module ranges)")
        tracker.op_record = tracker.op_nvtx = True
        try:
            with torch.cuda.nvtx.range(f"{PASS_RANGE}{SHAPES_PASS}"), torch.autograd.profiler.emit_nvtx(
                    record_shapes=True):
                shapes_s = _timed_generate(wl, tracker)
        finally:
            tracker.op_record = tracker.op_nvtx = False
    torch.cuda.synchronize()
    say("  the capture range ends: Nsight Systems gathers what it traced")
    t = time.perf_counter()
    cudart.cudaProfilerStop()
    say(f"  the capture range ended after {time.perf_counter() - t:.1f} s in its stop")
    info = _workload_info(wl, tracker, load_s, plain, plain_phases, f"{params.warmup} generate(s)")
    tracker.remove()
    info["moe_routing"] = _routing(wl, params, say)
    info.update(shapes_s=shapes_s, plain_s=plain)
    lay.nsys_capture_info.write_text(json.dumps(info, default=str))


def _plain_and_shapes(params: CaptureConfig, run_dir: Path, progress, quiet=lambda: None, after=None):
    """This process's part of an nsys timeline (one GPU, or one tensor-parallel rank): model build, the plain
    generates (steps.parquet) and the shapes pass, then the model freed for the nsys worker. `after()`: called when
    the shapes pass's generate has ended (the one-GPU worker starts there). Returns (shapes pass timeline or None,
    its generate s, the workload's info, the plain generates' s)."""
    import torch

    from ..contract.sampling import plan

    sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
    shapes_first = _shapes_first(params, sampling)
    progress("  model build, inputs" + ("" if shapes_first else ", warmup"))
    wl, tracker, load_s = prepare(replace(params, warmup=0) if shapes_first else params)
    lay = RunLayout(run_dir)

    def shapes_pass(after=None):
        return _shapes_pass(wl, tracker, lay, sampling, progress, shapes_first, after)

    shaped = shapes_s = None
    if params.shapes_pass and shapes_first:
        shaped, shapes_s = shapes_pass()
    quiet()  # the plain generates are the book's times: nothing else of the book runs beside them
    progress(f"  model ready in {load_s:.1f} s; {params.timing_trials} plain generates")
    plain, plain_phases, plain_steps = _plain_trials(wl, tracker, params.timing_trials)
    plain_steps.to_parquet(lay.steps, **PARQUET)
    if params.shapes_pass and not shapes_first:
        shaped, shapes_s = shapes_pass(after=after)
    info = _workload_info(wl, tracker, load_s, plain, plain_phases,
                          N_("the shapes pass (a whole generate, run first)") if shapes_first else
                          f"{params.warmup} generate(s)")
    tracker.remove()
    info["moe_routing"] = _routing(wl, params, progress)
    del wl, tracker
    gc.collect()
    torch.cuda.empty_cache()
    return shaped, shapes_s, info, plain


def _nsys_joined(params: CaptureConfig, timeline, shaped, shapes_s, info: dict, plain: list[float], nsys_info: dict,
                 sampling, method: str = N_("torch profiler pass with record_shapes, joined to the nsys timeline by "
                                            "(phase, step, kernel stem, n-th launch)"), order: str | None = None,
                 by_stem: bool = True):
    """The nsys timeline with the shapes pass's ops, shapes and modules joined on, and the run's timeline info.
    `method`, `order`: how the shapes pass ran (the torch profiler's, before the nsys pass, by default); `by_stem`:
    whether its kernel names come from another demangler (the torch profiler's), so launches match by stem."""
    from ..load.trace import join_shapes
    from ..measure import summarize

    shapes = None
    info = dict(info)
    if shaped is not None:
        t = time.perf_counter()
        timeline, shapes = join_shapes(timeline, shaped, by_stem=by_stem)
        shapes.update(pass_generate_s=shapes_s, join_s=time.perf_counter() - t,
                      order=order or ("first, as the warmup" if _shapes_first(params, sampling) else
                                      "before the nsys pass"))
    # a sampled generation's generate also holds the calls that end and start each window's capture range, where nsys
    # writes the window's report: the profiled generate is the rest
    profiled_s = nsys_info["generate_s"] - nsys_info["capture_toggle_s"]
    info.update(nsys_info, profiled_generate_s=profiled_s, overhead_ratio=profiled_s / summarize(plain).median_s,
                kernels=int((timeline.kind == "kernel").sum()),
                sampling=({**sampling.describe(), "method": "nsys capture ranges (cudaProfilerStart/Stop) over the "
                           "windows, one report each; every step of the plain generates timed (steps.parquet)"}
                          if sampling else None),
                shapes=({"method": method, **shapes} if shapes is not None
                        else {"method": N_("none (shapes_pass: false)")}))
    return timeline, info


def _shapes_first(params: CaptureConfig, sampling) -> bool:
    """Whether a long eager generation is warmed up by its shapes pass, run first: the first generate pays cuDNN's
    attention graph for every KV length (~0.08 s each on the H100, 157-196 s for 2048 tokens), a warmup generate would
    pay it and the shapes pass would then run a whole generate more. Under CUDA graphs (static cache) the warmup
    compiles the step, which the shapes pass's dispatch mode would keep out."""
    return sampling is not None and params.shapes_pass and params.warmup > 0 and not params.static_cache


def _shapes_pass(wl, tracker, lay: RunLayout, sampling, progress, first: bool, after=None):
    """The shapes pass (record_shapes, op numbering, module ranges), either backend's: (its timeline, generate s)."""
    tracker.op_record = True
    progress("  shapes pass (record_shapes, op numbering, module ranges)" + (": also the warmup" if first else ""))
    try:
        shaped, _, shapes_s, _, _ = _profiled_pass(wl, tracker, True, lay.trace_base(shapes=True), sampling, progress,
                                                   after_generate=after)
    finally:
        tracker.op_record = False
    return shaped, shapes_s


def _profiled_pass(wl, tracker, record_shapes: bool, trace_base: Path, sampling, progress=lambda msg: None,
                   after_generate=None):
    """One generate under torch.profiler: (timeline, phases, generate s, export s, ingest s). Without
    `sampling` every step is recorded into one trace (`<trace_base>.json.gz`); with it the profiler records
    the sampled windows only, each window's trace exported and read as soon as it ends (then deleted), so
    the host holds one window's events at a time. `after_generate()` runs when the generate has ended, before the
    trace's export (the nsys worker starts there)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if sampling is None:
        with profile(activities=acts, record_shapes=record_shapes) as prof:
            gen_s = _timed_generate(wl, tracker)
        if after_generate:
            after_generate()
        timeline, phases, export_s, ingest_s = _export_ingest(prof, trace_json(trace_base))
        return timeline, phases, gen_s, export_s, ingest_s
    parts, cost = [], [0.0, 0.0]

    def ready(prof):
        trace = window_json(trace_base, len(parts))
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
            _write_timeline(RunLayout.holding(trace_base).root, pd.concat([p[0] for p in parts], ignore_index=True),
                            pd.concat([p[1] for p in parts], ignore_index=True))
        raise
    finally:
        tracker.prof, tracker.sample_steps = None, None
    if after_generate:
        after_generate()
    timeline = pd.concat([p[0] for p in parts], ignore_index=True).sort_values("start_ns", kind="stable")
    phases = pd.concat([p[1] for p in parts], ignore_index=True)
    return timeline.reset_index(drop=True), phases, gen_s, cost[0], cost[1]


TP_RANK_KEYS = ("model_load_s", "plain_generate", "plain_phases", "profiled_generate_s", "overhead_ratio", "kernels",
                "shapes", "vision_forwards_marked")


def tp_timeline(params: CaptureConfig, run_dir: Path, progress=lambda msg: None):
    """Tensor parallelism: torchrun starts `tensor_parallel` ranks, each the timeline pass of
    `torch_timeline` on its own GPU with its shard of the model (`python -m kernelbook _worker --mode
    tp-timeline`); their tables are merged here with a `rank` column. The ranks' profiler clocks are the
    one host's, so launch times compare across ranks."""
    n = _tp_gpus(params)
    lay = RunLayout(run_dir)
    t = time.perf_counter()
    _torchrun(params, lay, "tp-timeline", progress, f"  torchrun: {n} ranks, one GPU each (rank 0's steps below)")
    tls, phs, ranks = [], [], {}
    for r in range(n):
        d = lay.tp_rank(r)
        tls.append(pd.read_parquet(d.timeline))
        phs.append(pd.read_parquet(d.phases))
        ranks[r] = json.loads(d.info.read_text())
    return _merged_ranks(lay, tls, phs, ranks, torchrun_s=time.perf_counter() - t)


def tp_nsys_timeline(params: CaptureConfig, run_dir: Path, progress=lambda msg: None, quiet=lambda: None):
    """Tensor parallelism under Nsight Systems, in two torchruns of `tensor_parallel` ranks: first each rank builds its
    shard, times its plain generates and runs the shapes pass (`_plain_and_shapes`, `--mode tp-shapes`); then each
    rank runs again as its own `nsys profile` around the profiled generate (`--mode tp-nsys`: one report per rank,
    in the rank's raw/). Each rank's nsys timeline takes its shapes pass's ops and shapes (as `nsys_timeline` does
    on one GPU); the ranks are merged with a `rank` column. nsys's clocks are the one host's, so launch times compare
    across ranks."""
    from ..contract.sampling import plan
    from .nsys import read_reports, window_starts

    n = _tp_gpus(params)
    lay = RunLayout(run_dir)
    sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
    quiet()
    t = time.perf_counter()
    _torchrun(params, lay, "tp-shapes", progress,
              f"  torchrun: {n} ranks, one GPU each: plain generates and the shapes pass (rank 0's steps below)")
    shapes_s = time.perf_counter() - t
    t = time.perf_counter()
    _torchrun(params, lay, "tp-nsys", progress, f"  torchrun: {n} ranks, each under its own Nsight Systems "
              "(the profiled generate)")
    wall = time.perf_counter() - t
    tls, phs, ranks = [], [], {}
    for r in range(n):
        d = lay.tp_rank(r)
        tl, ph, nsys_info = read_reports(d, window_starts(sampling.steps) if sampling else None,
                                         params.capture_timeout_s, 0, wall)
        info = json.loads(d.info.read_text())
        pass_s, plain = info.pop("shapes_s"), info.pop("plain_s")
        shaped = pd.read_parquet(d.shaped) if d.shaped.exists() else None
        tl, info = _nsys_joined(params, tl, shaped, pass_s, info, plain, nsys_info, sampling)
        tls.append(tl)
        phs.append(ph)
        ranks[r] = info
    return _merged_ranks(lay, tls, phs, ranks, torchrun_s=shapes_s + wall, shapes_torchrun_s=shapes_s,
                         nsys_torchrun_s=wall)


def _tp_gpus(params: CaptureConfig) -> int:
    """The ranks of a tensor-parallel capture, once this machine is seen to have a GPU for each."""
    import torch

    n = params.tensor_parallel
    if torch.cuda.device_count() < n:
        raise CaptureError(f"tensor_parallel: {n} needs {n} GPUs and torch sees {torch.cuda.device_count()}. "
                           "Run on a machine with that many, or lower tensor_parallel.")
    return n


def _torchrun(params: CaptureConfig, lay: RunLayout, mode: str, progress, says: str) -> None:
    """Every rank of the capture through `_worker --mode <mode>` under torchrun, each writing into its rank folder of
    raw/; stopped at capture_timeout_s (its process group ended)."""
    from ..proc import run_limited

    n = params.tensor_parallel
    lay.tp_params.write_text(json.dumps(params.as_dict()))
    cmd = torchrun_worker(n, "--params", str(lay.tp_params), "--mode", mode, "--out", str(lay.raw))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "4")}
    progress(says)
    t = time.perf_counter()
    proc = run_limited(cmd, params.capture_timeout_s, f"torchrun with {n} ranks (capture_timeout_s)", env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun with {n} ranks ({mode}) exited with code {proc.returncode} after "
                           f"{time.perf_counter() - t:.0f} s (its output is above; nsys's, per rank, in "
                           f"raw/rank<N>/raw/nsys.log)")


def _merged_ranks(lay: RunLayout, tls: list, phs: list, ranks: dict, **timings) -> tuple:
    """The ranks' timelines and phases as one, with a `rank` column; rank 0's info stands for the run (its plain step
    times too, steps.parquet), each rank's key figures under `ranks`."""
    if lay.tp_rank(0).steps.exists():  # rank 0's plain step times stand for the run
        shutil.copy(lay.tp_rank(0).steps, lay.steps)
    info = dict(ranks[0])
    info.update(tensor_parallel=len(ranks), **timings,
                ranks={str(r): {k: v.get(k) for k in TP_RANK_KEYS} for r, v in ranks.items()},
                kernels=int(sum(v["kernels"] for v in ranks.values())))
    return (pd.concat([t.assign(rank=r) for r, t in enumerate(tls)], ignore_index=True),
            pd.concat([p.assign(rank=r) for r, p in enumerate(phs)], ignore_index=True), info)


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


def rank_barrier():
    """For the ncu stage's ranks (`PhaseTracker.rank_barrier`): a call that waits until this rank's GPU has run what it
    queued, then meets every other rank on the host (a gloo group: no collective kernel on any GPU). Around each
    target op call it keeps the plain ranks' GPUs idle while ncu replays the profiled rank's kernels; without it the
    plain rank's next collective spins on its GPU, waiting for the rank under ncu (the TP ncu stall, bench/README.md).
    Every rank creates the group at the same point (`dist.new_group` is collective)."""
    import torch
    import torch.distributed as dist

    group = dist.new_group(backend="gloo")

    def wait() -> None:
        torch.cuda.synchronize()
        dist.barrier(group=group)
    return wait


def end_rank() -> None:
    """End this torchrun rank with the others: wait until its GPU has run what it queued (its collectives end only
    when every rank has launched them), meet the other ranks, then close the process group, so that no rank tears
    its communicator down under collectives still queued (the ncu stage's plain rank stops past the last profiled
    step while the rank under ncu still replays that step's kernels). The TP ncu stall on 2x H100 was cured by the
    ranks meeting around each target op call instead (`rank_barrier`)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()


def tp_rank_worker(params: CaptureConfig, out: str, mode: str = "tp-timeline") -> None:
    """One rank of `tp_timeline` (under torchrun): its GPU, its timeline pass, its tables in out/rank<N>. Mode
    `tp-shapes`: its part of `tp_nsys_timeline` instead: plain generates and the shapes pass, the shapes pass's
    timeline in out/rank<N>/shaped.parquet."""
    rank = init_rank()
    d = rank_run(Path(out), rank)
    d.raw.mkdir(parents=True, exist_ok=True)
    say = (lambda msg: print(f"  [rank 0] {msg}", file=sys.stderr, flush=True)) if rank == 0 else (lambda msg: None)
    if mode == "tp-shapes":
        shaped, shapes_s, info, plain = _plain_and_shapes(params, d.root, say)
        if shaped is not None:
            shaped.to_parquet(d.shaped, **PARQUET)
        info.update(shapes_s=shapes_s, plain_s=plain)
    else:
        timeline, phases, info = torch_timeline(params, d.root, say)
        timeline.to_parquet(d.timeline, **PARQUET)
        phases.to_parquet(d.phases, **PARQUET)
    d.info.write_text(json.dumps(info, default=str))
    end_rank()


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
