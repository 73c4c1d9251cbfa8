"""What one profiled launch costs under ncu in a torch process, and what makes it grow (GPU machine).

Each variant is one ncu process (kernelbook's own command line, `capture.ncu.ncu_command`) around a
small worker: it takes `gib` GiB of device memory in `pieces` tensors and writes it, optionally builds the
bundled run's model (and generates with it), warms a bf16 matmul up, then launches it `n` times inside the
NVTX target range, so ncu profiles exactly those `n` launches. The seconds between consecutive `==PROF==`
lines are the cost of one profiled launch; each variant changes one thing against `full`.
Measured on an H100 (bench/measured/ncu_floor_h100.json): the cost follows the modules the process has
loaded, not its memory; cuDNN's SDPA loads kernels for every KV length.
Usage: python bench/ncu_floor.py [variant ...]   → bench/out/ncu_floor.json
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json

FULL = {"sections": "full", "extra": None, "gib": 0, "pieces": 1, "size": 1024, "n": 10, "cache": "all",
        "libs": False, "env": {}, "model": "none", "args": ()}
# each variant changes one thing against `full`
VARIANTS = {
    "none": {"n": 0},  # ncu start + worker, nothing profiled
    "one-pass": {"sections": (), "extra": ("gpu__time_duration.sum",)},
    "sol": {"sections": ("SpeedOfLight",), "extra": ()},
    "full": {},
    "full-6gib": {"gib": 6},
    "full-8192": {"size": 8192},
    "full-cache-none": {"cache": "none"},
    # the footprint in 600 tensors of ~10 MiB: each its own cudaMalloc segment, as a model's weights are
    "full-6gib-600": {"gib": 6, "pieces": 600},
    "full-6gib-600-expandable": {"gib": 6, "pieces": 600,
                                 "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
    # cuDNN attention, sort, topk and cuBLASLt run once before: more libraries and modules loaded
    "full-libs": {"libs": True},
    # the bundled run's model and inputs built first (kernelbook's `prepare`), then with one generate too
    "full-model": {"model": "built"},
    "full-model-generate": {"model": "generate"},
    # what after a generate makes a launch cost more: 4 launches each
    "gen-emptied": {"model": "generate-emptied", "n": 4},    # then the device and pinned-host caches emptied
    "gen-no-cudnn": {"model": "generate-no-cudnn", "n": 4},  # attention without cuDNN (its compiled kernels)
    "gen-2-tokens": {"model": "generate-2-tokens", "n": 4},  # 2 tokens: does the cost grow with launches made?
    "eager-modules": {"env": {"CUDA_MODULE_LOADING": "EAGER"}},  # every module of every library loaded at start
    # after a 2-token generate (about the ncu worker's state when it profiles): is the extra cost per pass,
    # per launch, or NVIDIA's rules? (6 launches each)
    "gen2-full": {"model": "generate-2-tokens", "n": 6},
    "gen2-one-pass": {"model": "generate-2-tokens", "n": 6, "sections": (), "extra": ("gpu__time_duration.sum",)},
    "gen2-sol": {"model": "generate-2-tokens", "n": 6, "sections": ("SpeedOfLight",), "extra": ()},
    "gen2-no-rules": {"model": "generate-2-tokens", "n": 6, "args": ("--apply-rules", "no")},
    "gen2-cache-none": {"model": "generate-2-tokens", "n": 6, "cache": "none"},
}
RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h100-deepseek-ocr-2"


def worker(gib: str, pieces: str, size: str, n: str, libs: str, model: str) -> None:
    import torch

    from kernelbook.contract.names import NCU_TARGET

    t = time.perf_counter()
    each = int(float(gib) * 2**30) // int(pieces)
    ballast = [torch.ones(each, dtype=torch.uint8, device="cuda") for _ in range(int(pieces))] if each else []
    a = torch.randn(int(size), int(size), device="cuda", dtype=torch.bfloat16)
    if libs == "1":
        q = torch.randn(1, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.sort(torch.randn(10000, device="cuda"))
        torch.topk(torch.randn(64, 1000, device="cuda"), 6)
        torch.nn.functional.linear(a[:1], a)
    if model != "none":
        from dataclasses import replace

        from kernelbook import params as P
        from kernelbook.capture.torch_backend import prepare
        from kernelbook.contract.config import CaptureConfig

        params = CaptureConfig.of(P.validate(json.loads((RUN / "manifest.json").read_text())["params"],
                                             consumer="capture"))
        if model == "generate-no-cudnn":
            torch.backends.cuda.enable_cudnn_sdp(False)
        short = {"max_new_tokens": 2} if model == "generate-2-tokens" else {}
        wl, _, _ = prepare(replace(params, warmup=0, **short), nvtx=False)
        if model != "built":
            wl.generate()
        if model == "generate-emptied":
            torch.cuda.empty_cache()
            for f in ("_host_emptyCache", "_accelerator_emptyHostCache"):
                if hasattr(torch._C, f):
                    getattr(torch._C, f)()
    for _ in range(3):
        c = a @ a
    torch.cuda.synchronize()
    ready = time.perf_counter() - t
    t = time.perf_counter()
    torch.cuda.nvtx.range_push(NCU_TARGET)
    for _ in range(int(n)):
        c = a @ a
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"floor worker: ready {ready:.1f} s, {n} launches {time.perf_counter() - t:.1f} s, "
          f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated in "
          f"{torch.cuda.memory_stats().get('segment.all.current', 0)} segments; pinned host "
          f"{ {k: v for k, v in torch.cuda.host_memory_stats().items() if 'current' in k} }", c.shape, len(ballast),
          flush=True)


def _rules(rep: Path) -> dict:
    """Rule results per profiled launch in `rep`, and (when it holds none) whether `ncu --import ...
    --apply-rules yes --export` adds them afterwards, and in how many seconds."""
    import shutil
    import subprocess

    from kernelbook.load.ncu import read_ncu_report

    def count(p):
        try:
            _, r = read_ncu_report(p)
        except Exception as e:  # noqa: BLE001 - a probe reports what it saw
            return str(e)[:200]
        return [len(json.loads(x)) for x in r.rules]

    out = {"per_launch": count(rep)}
    if isinstance(out["per_launch"], list) and not any(out["per_launch"]):
        again = rep.with_name(rep.stem + "-rules.ncu-rep")
        t = time.perf_counter()
        p = subprocess.run([shutil.which("ncu"), "--import", str(rep), "--apply-rules", "yes", "--export", str(again),
                            "--force-overwrite"], capture_output=True, text=True)
        out["reapplied"] = {"rc": p.returncode, "s": time.perf_counter() - t, "tail": (p.stdout + p.stderr)[-300:],
                            "per_launch": count(again) if again.exists() else None}
    return out


def main(*names: str) -> None:
    from kernelbook.capture.ncu import EXTRA_METRICS, SECTIONS, ncu_command, run_ncu

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or VARIANTS:
            v = {**FULL, **VARIANTS[name]}
            kw = {"sections": SECTIONS if v["sections"] == "full" else v["sections"],
                  "extra_metrics": EXTRA_METRICS if v["extra"] is None else v["extra"]}
            args = [str(v[x]) for x in ("gib", "pieces", "size", "n")] + ["1" if v["libs"] else "0", str(v["model"])]
            cmd = ncu_command(Path(tmp) / name, None, [sys.executable, __file__, "--worker", *args],
                              cache_control=v["cache"], **kw)
            cmd[1:1] = list(v["args"])
            stamps: list[float] = []
            saved = {k: os.environ.get(k) for k in v["env"]}
            os.environ.update(v["env"])
            t = time.perf_counter()
            try:
                proc = run_ncu(cmd, Path(tmp) / f"{name}.log", 600, progress=lambda d, e, s: stamps.append(s))
            finally:
                wall = time.perf_counter() - t
                for k, old in saved.items():
                    os.environ.pop(k) if old is None else os.environ.__setitem__(k, old)
            gaps = [b - a for a, b in zip(stamps, stamps[1:])]
            row = {"variant": name,
                   **{k: v[k] for k in ("gib", "pieces", "size", "n", "cache", "libs", "env", "model", "args")},
                   "sections": list(kw["sections"]), "wall_s": wall, "results": len(stamps),
                   "passes": [int(x) for x in re.findall(r"- (\d+) pass", proc.stdout)][:1],
                   "first_result_s": stamps[0] if stamps else None,
                   "s_per_launch_median": statistics.median(gaps) if gaps else None,
                   "worker": [ln for ln in proc.stdout.splitlines() if "floor worker" in ln],
                   "rules": _rules(Path(tmp) / f"{name}.ncu-rep")}
            rows.append(row)
            print(row, flush=True)
            save_json("ncu_floor", rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
