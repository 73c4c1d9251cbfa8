"""Measurement hygiene in one place: warmup, synchronize, repeated trials, median and spread.

Every timed number kernelbook reports comes through `stable_measure`; a spread (IQR / median) above
2 % is flagged so a noisy figure is never read as a clean one.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Callable

SPREAD_FLAG = 0.02


@dataclass
class Measurement:
    median_s: float
    spread: float  # inter-quartile range / median
    trials: int
    samples_s: list[float]

    @property
    def noisy(self) -> bool:
        return self.spread > SPREAD_FLAG

    def as_dict(self) -> dict:
        d = asdict(self)
        d["noisy"] = self.noisy
        return d


def summarize(samples: list[float]) -> Measurement:
    s = sorted(samples)
    med = median(s)
    q1 = s[len(s) // 4]
    q3 = s[(3 * len(s)) // 4] if len(s) > 1 else s[0]
    return Measurement(med, (q3 - q1) / med if med else 0.0, len(s), list(samples))


def stable_measure(fn: Callable[[], object], warmup: int = 3, trials: int = 10, cuda: bool = True) -> Measurement:
    """Time `fn` after `warmup` calls: CUDA events around each trial when `cuda`, else perf_counter."""
    import time

    for _ in range(warmup):
        fn()
    samples = []
    if cuda:
        import torch

        torch.cuda.synchronize()
        for _ in range(trials):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3)
    else:
        for _ in range(trials):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
    return summarize(samples)


def measure_peaks(gemm_n: int = 8192, copy_bytes: int = 2 << 30, trials: int = 10) -> dict:
    """Measured bf16 GEMM TFLOP/s and device-to-device copy GB/s (bytes read + written) on GPU 0."""
    import torch

    a = torch.randn(gemm_n, gemm_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(gemm_n, gemm_n, device="cuda", dtype=torch.bfloat16)
    g = stable_measure(lambda: a @ b, warmup=3, trials=trials)
    del a, b
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    c = stable_measure(lambda: dst.copy_(src), warmup=3, trials=trials)
    del src, dst
    torch.cuda.empty_cache()
    flops = 2.0 * gemm_n ** 3
    return {
        "bf16_gemm_tflops": flops / g.median_s / 1e12,
        "bf16_gemm": {"n": gemm_n, **g.as_dict()},
        "d2d_copy_gbps": 2 * copy_bytes / c.median_s / 1e9,
        "d2d_copy": {"bytes": copy_bytes, "counts": "read + write", **c.as_dict()},
    }
