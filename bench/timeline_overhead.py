"""Timeline overhead of the two backends on one workload, back to back in one lease (issue 46 point 3):
plain generate against the same generate under Nsight Systems and under the torch profiler, per phase and per
decode step.

Two processes, one after the other, each building the model once and alternating plain and profiled generates
(`pairs` times), so drift in clocks or host load hits both sides of each ratio:
- `torch`: the profiled generate under torch.profiler (CPU + CUDA activities, no shapes: kernelbook's timed pass);
- `nsys`: this script under `nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=repeat`,
  the profiled generate between cudaProfilerStart and Stop (kernelbook's nsys pass), the plain one outside.
Per phase the wall ms per step come from host clocks at the phase hooks (GPU synchronized at each phase end), as
the capture's plain timing. The figure per backend is the median over pairs of profiled ÷ the plain run just
before it.

    python bench/timeline_overhead.py [params] [pairs] [backend ...]   (GPU machine; nsys found as the capture finds
    it; backends: torch, nsys, nsys:kb, nsys:nograph, nsys:plain; torch and nsys by default)
    → bench/out/timeline_overhead.json (or $OUT/timeline_overhead.json)
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from _common import ROOT, save_json


def one(backend: str, params_path: str, pairs: int, out: Path) -> None:
    """In this process: the model once, then `pairs` × (plain, profiled) generates with per-phase clocks."""
    up = time.time() - float(os.environ["KB_LAUNCHED"])
    import torch

    from kernelbook import params as P
    from kernelbook.capture.phases import plain_phase_times
    from kernelbook.capture.torch_backend import _timed_generate, prepare
    from kernelbook.contract.config import CaptureConfig

    params = CaptureConfig.of(P.load(params_path, consumer="capture"))
    imported = time.time() - float(os.environ["KB_LAUNCHED"])
    wl, tracker, load_s = prepare(params)
    ready = time.time() - float(os.environ["KB_LAUNCHED"])
    prime = backend.split("+", 1)[1] if "+" in backend else None
    one_token = replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": 1, "min_new_tokens": 1})
    def timed(profiled: bool) -> tuple[float, dict]:
        tracker.clock = []
        # the plain generate marks no ranges (as the capture's plain trials); the profiled one marks what its
        # profiler reads: record_function ranges for the torch profiler, NVTX ranges for nsys
        tracker.record = profiled and backend == "torch"
        tracker.nvtx = profiled and backend.startswith("nsys")
        if not profiled:
            s = _timed_generate(wl, tracker)
        elif backend == "torch":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                s = _timed_generate(wl, tracker)
        else:
            torch.cuda.cudart().cudaProfilerStart()
            if prime:  # inside the capture range, before the measured generate: a one-token generate or a whole one
                tracker.nvtx = False
                (one_token if prime == "prime1" else wl).generate()
                torch.cuda.synchronize()
                tracker.nvtx = True
            s = _timed_generate(wl, tracker)
            torch.cuda.cudart().cudaProfilerStop()
        phases = plain_phase_times(tracker.clock)
        tracker.clock = None
        return s, {ph: 1e3 * v["s"] / v["steps"] for ph, v in phases.items()}

    rows = []
    for i in range(pairs):
        p, pp = timed(False)
        q, qp = timed(True)
        rows.append({"pair": i, "plain_s": p, "profiled_s": q, "plain_ms_per_step": pp, "profiled_ms_per_step": qp})
        print(f"  {backend} pair {i + 1}/{pairs}: plain {p:.3f} s, profiled {q:.3f} s ({q / p:.2f}x)", flush=True)
    out.write_text(json.dumps({"backend": backend, "device": torch.cuda.get_device_name(0), "rows": rows,
                               "startup_s": {"python_up": up, "imported": imported, "model_load": load_s,
                                             "ready": ready}}))


def summary(result: dict) -> dict:
    rows = result["rows"]
    phases = sorted({ph for r in rows for ph in r["plain_ms_per_step"]})
    return {"whole_ratio": statistics.median(r["profiled_s"] / r["plain_s"] for r in rows),
            "first_ratio": rows[0]["profiled_s"] / rows[0]["plain_s"], "startup_s": result.get("startup_s"),
            "ratios": [r["profiled_s"] / r["plain_s"] for r in rows],
            "plain_s": statistics.median(r["plain_s"] for r in rows),
            "profiled_s": statistics.median(r["profiled_s"] for r in rows),
            "phase_ratio": {ph: statistics.median(r["profiled_ms_per_step"][ph] / r["plain_ms_per_step"][ph]
                                                  for r in rows if ph in r["plain_ms_per_step"]) for ph in phases},
            "plain_ms_per_step": {ph: statistics.median(r["plain_ms_per_step"][ph] for r in rows
                                                        if ph in r["plain_ms_per_step"]) for ph in phases}}


# nsys's options per variant (besides the capture range, its end and -o): `kb` is the capture's (capture.nsys
# `nsys_command`), `nograph` the same without --cuda-graph-trace=node, `plain` nsys's defaults (CPU sampling and
# context switches on)
NSYS_FLAGS = {"kb": ["-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--cuda-graph-trace=node"],
              "nograph": ["-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none"],
              "plain": ["-t", "cuda,nvtx"]}


def main(params_path: str = "params/default.yaml", pairs: str = "3", *backends: str) -> None:
    """`backends`: torch, nsys (nsys:plain, the earlier measurement's options), nsys:<variant> (NSYS_FLAGS);
    `+prime1` / `+prime` after a variant: inside each capture range a one-token generate / a whole one runs before
    the measured generate (nsys's first capture range ran ~2x slow, the later ones ~1.1x)."""
    from kernelbook.env import find_nsys

    nsys = find_nsys()
    if nsys is None:
        raise SystemExit("nsys not found (PATH or an Nsight Compute install): see capture.nsys.nsys_works")
    tmp = Path(os.environ.get("OUT", ROOT / "bench" / "out"))
    tmp.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    result, walls = {}, {}
    for backend in backends or ("torch", "nsys"):
        variant = backend.split(":", 1)[1].split("+")[0] if ":" in backend else "plain"
        out = tmp / f"overhead-{backend.replace(':', '-')}.json"
        cmd = me + ["--one", backend, params_path, pairs, str(out)]
        if backend.startswith("nsys"):
            cmd = [str(nsys), "profile", *NSYS_FLAGS[variant], "--capture-range=cudaProfilerApi",
                   "--capture-range-end=repeat", "-o", str(tmp / f"overhead-{variant}"), "--force-overwrite", "true",
                   *cmd]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, env={**os.environ, "KB_LAUNCHED": repr(time.time())})
        walls[backend] = time.perf_counter() - t
        result[backend] = summary(json.loads(out.read_text()))
    data = {"params": params_path, "pairs": int(pairs), "process_wall_s": walls, "nsys_flags": NSYS_FLAGS, **result}
    for b, r in result.items():
        print(f"{b:12s} whole generate {r['whole_ratio']:.2f}x (first pair {r['first_ratio']:.2f}x; plain "
              f"{r['plain_s']:.3f} s); per phase " + ", ".join(f"{ph} {x:.2f}x" for ph, x in r["phase_ratio"].items())
              + f"; ready {r['startup_s']['ready']:.1f} s after launch (python {r['startup_s']['python_up']:.1f}, "
              f"imports {r['startup_s']['imported']:.1f}, model {r['startup_s']['model_load']:.1f})")
    path = save_json("timeline_overhead", data)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "timeline_overhead.json").write_text(path.read_text())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
    else:
        main(*sys.argv[1:])
