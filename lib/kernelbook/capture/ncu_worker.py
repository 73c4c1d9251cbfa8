"""The ncu worker: the process Nsight Compute runs (`python -m kernelbook _worker --mode ncu`). It replays the
workload and marks the op calls (or the graph step) whose kernels were selected, so ncu profiles exactly those."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..contract.config import CaptureConfig
from ..contract.layout import seen_file, worker_file
from ..proc import wait_until
from .phases import EnoughSteps, require_vision_work
from .torch_backend import _timed_generate, prepare


# The early worker builds beside the timeline stage where the GPU's free memory is at least this many times what is
# in use (the stage's model, cache and passes): the worker runs the same workload without a profiler, so it needs
# about as much, and the rest is the stage's headroom. At 2 it never overlapped a study point: at batch 8 on the H100
# the stage held ~27 GB of 80 (session 23, where the worker's peak was 25.3 GiB).
MEMORY_HEADROOM = 1.3


def _await_gate(targets_file: Path, gate: Path, owner: int) -> None:
    """An ncu worker started early (capture.ncu_stage `early_ncu`): wait until the timeline's timed passes are
    over (`gate`), so that nothing of it runs beside them; when the GPU's free memory is less than
    `MEMORY_HEADROOM` times what is in use (its model would not fit beside the timeline stage), also until the
    targets are written (the timeline stage has ended)."""
    import torch

    wait_until(lambda: gate.exists() or targets_file.exists(), owner)
    free, total = torch.cuda.mem_get_info()
    if free < MEMORY_HEADROOM * (total - free):
        wait_until(targets_file.exists, owner)


def read_ranges(path: str | Path) -> dict:
    """The range pass's targets (capture.ncu_ranges `ranges_json`): {(phase, step): "step" | [(first, last), ...]}."""
    raw = json.loads(Path(path).read_text())
    return {(k.split(":")[0], int(k.split(":")[1])): (v if v == "step" else [tuple(x) for x in v])
            for k, v in raw.items()}


def worker(params: CaptureConfig, mode: str, target: str | None, targets_file: str | None = None,
           early: str | None = None, profile_gate: bool = False, ranges_file: str | None = None,
           out: str | None = None) -> None:
    """The workload alone, run under an external profiler (ncu or nsys). `targets_file`: ncu by op call
    ({"phase:step": [op_index, ...]}); the op calls the worker marked are written beside it. `early`
    ("<gate file>:<owner pid>"): started before the targets exist, the worker builds and warms up its model
    once the gate file is there, then waits for the targets (see `_await_gate`). `profile_gate`: ncu runs with
    `--profile-from-start off`, and the worker starts and stops the profiler around each target op call.
    `ranges_file`: the range pass (capture.ncu_ranges): the profiler starts and stops around whole steps and spans
    of op calls, which ncu's app-range replay measures one result each; the ranges closed are written beside it.
    `out` (nsys): where the measured generate's seconds are written; `early` (nsys, "<go file>:<owner pid>"): the
    model is built and warmed up at once, the measured generate waits for the go file (the capture process finishes
    its own CPU work beside the build, and nothing of it runs beside the generate). A sampled long generation
    (`sample_window`) is recorded window by window: the profiler runs over each run of sampled steps."""
    import faulthandler

    import torch

    if mode == "ncu":  # a worker still running shortly before the stage's time limit writes where each of its
        # threads is to its log (ncu.log), so a stall says where it happened
        faulthandler.dump_traceback_later(max(10, params.ncu_timeout_s - 20), exit=False)
    ncu_target = op_targets = warmup_tokens = stop_after = None
    go, early = (early, None) if mode == "nsys" else (None, early)
    if early:
        gate, owner = early.rsplit(":", 1)
        _await_gate(Path(targets_file), Path(gate), int(owner))
        built_before_targets = not Path(targets_file).exists()
        t = time.perf_counter()
        if params.static_cache:  # a CUDA-graph step (`early_ncu`): built as the worker by step builds it, then one
            # whole generate compiles and records the step now, beside the capture's shapes and routing passes (ncu's
            # gate is closed: nothing of it is profiled), so the target generate replays the recorded graph at once;
            # the capture's own profiled generate also came after others. The step comes after.
            wl, tracker, load_s = prepare(replace(params, warmup=0), nvtx=False, ncu_target=("decode", -1))
            wl.generate()
            torch.cuda.synchronize()
            warmups = 1
        else:  # built and warmed up before the targets are known: as for any prefill target (below), one one-token
            # warmup generate and the lead-up decode steps without cuDNN attention; the targets come after
            wl, tracker, load_s = prepare(params, nvtx=False, op_targets={}, warmup_tokens=1, cudnn_free_prefix=True)
            warmups = params.warmup
        ready_early = time.perf_counter() - t
        wait_until(Path(targets_file).exists, int(owner))
    graph_target = early and params.static_cache
    if graph_target:  # the early graph worker's targets file names its step: {"step": "decode:<n>"}
        phase, step = json.loads(Path(targets_file).read_text())["step"].split(":")
        ncu_target, stop_after = (phase, int(step)), int(step)
        params = replace(params, max_new_tokens=_worker_tokens(params, int(step) + 1), warmup=0)
    elif targets_file:
        raw = json.loads(Path(targets_file).read_text())
        op_targets = {(k.split(":")[0], int(k.split(":")[1])): set(v) for k, v in raw.items()}
        decode_steps = [st for ph, st in op_targets if ph == "decode"]
        stop_after = max(decode_steps, default=0)
        # stop right after the last profiled step; warm up only when the first steps are profiled
        # (decode steps before the profiled one warm it up; bench/kernel_choice.py)
        only_decode = all(ph == "decode" for ph, _ in op_targets)
        params = replace(params, max_new_tokens=_worker_tokens(params, max(decode_steps, default=0) + 1),
                         warmup=0 if only_decode else params.warmup)
        # A prefill target is warmed up by a one-token generate (the prefill alone), not a whole one: every
        # decode length loads cuDNN attention kernels of its own, and ncu's cost per profiled launch grows
        # with the modules a process has loaded (bench/ncu_floor.py, H100: 0.5 s per launch before a
        # generate, 4.8 s after a 64-token one, 0.7 s when attention did not use cuDNN).
        warmup_tokens = 1
    elif ranges_file:
        ranges = read_ranges(ranges_file)
        stop_after = max((st for ph, st in ranges if ph == "decode"), default=0)
        # op calls are numbered where a span of them is measured; every ranged step is then a target step, so that
        # the steps before it lead up (SDPA without cuDNN) and it runs as the timeline's did
        spans = any(v != "step" for v in ranges.values())
        op_targets = {k: set() for k in ranges} if spans else {}
        only_decode = all(ph == "decode" for ph, _ in ranges)
        params = replace(params, max_new_tokens=_worker_tokens(params, stop_after + 1),
                         warmup=0 if only_decode else params.warmup)
    elif target:
        phase, step = target.split(":")
        ncu_target = (phase, int(step))
        stop_after = int(step) if phase == "decode" else 0
        if phase == "decode":  # stop right after the profiled step (its KV length is unchanged), and
            # no warmup generate: the steps before the profiled one warm it up (under CUDA graphs they
            # also compile and record the step). Measured on an H100 (bench/kernel_choice.py), the step
            # launches the timeline's kernels in the timeline's order.
            params = replace(params, max_new_tokens=_worker_tokens(params, int(step) + 1), warmup=0)
    if early:  # the model is ready: the targets set what this generate does
        tracker.op_targets, tracker.ncu_target = op_targets, ncu_target
        wl = replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": params.max_new_tokens,
                                     "min_new_tokens": params.max_new_tokens})
        ready = ready_early
    else:
        t = time.perf_counter()
        # not under CUDA graphs (static cache): a changed SDPA flag would make torch.compile build the step anew
        lead_up = op_targets is not None and not params.static_cache
        wl, tracker, load_s = prepare(params, nvtx=(mode == "nsys"), ncu_target=ncu_target, op_targets=op_targets,
                                      warmup_tokens=warmup_tokens, cudnn_free_prefix=lead_up)
    tracker.stop_after = stop_after
    if ranges_file:
        tracker.ranges = ranges
    tracker.profile_gate = profile_gate and os.environ.get("KB_NCU_PLAIN_RANK") != "1"  # a plain rank has no ncu
    if op_targets and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # the ncu stage's ranks, each with the same targets
        from .torch_backend import rank_barrier

        tracker.rank_barrier = rank_barrier()
    mem = (torch.cuda.memory_allocated() / 2**30, torch.cuda.memory_reserved() / 2**30,
           torch.cuda.memory_stats().get("segment.all.current", 0))
    ready = ready if early else time.perf_counter() - t
    if mode == "nsys":
        from ..contract.sampling import plan

        if go:
            go_file, owner = go.rsplit(":", 1)
            wait_until(Path(go_file).exists, int(owner))
        sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
        tracker.capture_steps = sampling.steps if sampling else None
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        tracker.capturing = True
    try:
        gen_s = _timed_generate(wl, tracker)
    except EnoughSteps:  # the steps after the last profiled one are not run (a static cache's generate would)
        tracker.stop()
        gen_s = float("nan")
    if mode == "nsys":
        if tracker.capturing:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
        require_vision_work(wl.loaded.kind, tracker, type(wl.loaded.model).__name__)
        if out:
            Path(out).write_text(json.dumps({"generate_s": gen_s, "model_load_s": load_s,
                                             "capture_toggle_s": tracker.capture_toggle_s}))
    if ranges_file:
        seen_file(Path(ranges_file)).write_text(json.dumps(
            [dict(zip(("phase", "step", "first_op", "last_op", "op_first", "op_last"), r)) for r in tracker.ranges_seen]))
    if targets_file and not graph_target and os.environ.get("KB_NCU_PLAIN_RANK") != "1":  # the profiled rank
        # writes what it marked
        seen = [{"phase": p, "step": st, "op_index": i, "op": op} for p, st, i, op in tracker.op_seen]
        seen_file(Path(targets_file)).write_text(json.dumps(seen))
        worker_file(Path(targets_file)).write_text(json.dumps({
            "started_early": bool(early), "warmup_generates": warmups if early else params.warmup,
            "warmup_tokens": warmup_tokens,
            "max_new_tokens": params.max_new_tokens, "cudnn_free_decode_steps": tracker.cudnn_free_steps,
            "profile_gate": tracker.profile_gate}))
    if early:
        print(f"kernelbook worker started early: built {'before' if built_before_targets else 'after'} the targets "
              "were written", file=sys.stderr)
    print(f"kernelbook worker done ({mode}): model + inputs {load_s:.1f} s, ready {ready:.1f} s, "
          f"generate {gen_s:.1f} s; GPU memory at the start of generate {mem[0]:.1f} GiB allocated, "
          f"{mem[1]:.1f} GiB reserved in {mem[2]} segments; "
          f"peak {torch.cuda.max_memory_reserved() / 2**30:.1f} GiB reserved",
          file=sys.stderr)


def _worker_tokens(params: CaptureConfig, needed: int) -> int:
    """New tokens the ncu worker generates: just enough to reach its last profiled step, except with a
    static cache, whose length (prompt + max_new_tokens) sets the shapes of every step (the attention's
    padded KV length, the mask): there the worker generates what the timeline did."""
    return params.max_new_tokens if params.static_cache else needed
