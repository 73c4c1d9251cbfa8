"""Do cuBLASLt and cuDNN pick the same kernels in the ncu worker as in the timeline capture? (GPU machine)

For one decode step of a run, lists the library kernels (nvjet/cuBLAS, cuDNN) the step launches, with
their grids, under the torch profiler in a fresh process for each way of running the workload:
  capture: the run's params (what the timeline saw)
  worker:  max_new_tokens cut to the profiled step + 1, as the ncu worker had it until 2026-11-22
  worker-nowarmup: the same without the warmup generate (the ncu worker now)
and compares each with the run's timeline.
Usage: python bench/kernel_choice.py data/runs/<run-id> [variant]   → bench/out/kernel_choice_<variant>.json
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import save_json

LIB = "nvjet|cudnn|gemv|gemm"


def step_kernels(timeline, step: int) -> list[str]:
    k = timeline[(timeline.phase == "decode") & (timeline.kind == "kernel") & (timeline.step == step)]
    k = k[k.name.str.contains(LIB)].sort_values("start_ns")
    return [f"{n[:60]} {g}" for n, g in zip(k.name, k.grid)]


def one(run: str, variant: str) -> None:
    import pandas as pd
    from torch.profiler import ProfilerActivity, profile

    from kernelbook.capture.ncu import select_kernels
    from dataclasses import replace

    from kernelbook import params as P
    from kernelbook.capture.torch_backend import _export_ingest, _timed_generate, prepare
    from kernelbook.contract.config import CaptureConfig

    # the run's capture parameters, the keys an older run lacks at their defaults
    params = CaptureConfig.of(P.validate(json.loads((Path(run) / "manifest.json").read_text())["params"],
                                         consumer="capture"))
    timeline = pd.read_parquet(Path(run) / "timeline.parquet")
    step = select_kernels(timeline, "decode", 20).step
    if variant.startswith("worker"):
        params = replace(params, max_new_tokens=step + 1)
    if variant == "worker-nowarmup":
        params = replace(params, warmup=0)
    wl, tracker, _ = prepare(params)
    for _ in range(params.timing_trials if variant == "capture" else 0):
        _timed_generate(wl)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _timed_generate(wl, tracker)
    with tempfile.TemporaryDirectory() as tmp:
        got, _, _, _ = _export_ingest(prof, Path(tmp) / "trace.json")
    ref, now = step_kernels(timeline, step), step_kernels(got, step)
    same = sum(a == b for a, b in zip(ref, now))
    diff = sorted({x for x in now if x not in ref} | {f"(timeline only) {x}" for x in ref if x not in now})
    row = {"variant": variant, "step": step, "timeline_launches": len(ref), "launches": len(now),
           "same_in_order": same, "differs": diff[:20]}
    print(row, flush=True)
    save_json(f"kernel_choice_{variant}", row)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        one(*sys.argv[1:3])
    else:  # each variant in its own process, as capture and worker are
        for v in ("capture", "worker", "worker-nowarmup"):
            subprocess.run([sys.executable, __file__, sys.argv[1], v], check=False)
