"""Timeline capture overhead on a GPU: profiled generate wall time ÷ plain generate wall time.

kernelbook's torch backend times the timeline in a pass without record_shapes and takes aten shapes
from a second pass (`shapes_pass: true`, the default); the figure that matters is that timed pass.
The single pass with record_shapes (`shapes_pass: false`, and what the first bundled run used) and a
CUDA-only profile are measured beside it. One process, one model, one set of inputs. Plain and profiled generates alternate (plain, then each
profiler configuration, repeated `pairs` times), so drift in clocks or host load hits both sides; the
figure per configuration is the median over pairs of profiled ÷ the plain run just before it.
Usage (GPU machine): python bench/capture_overhead.py [params] [pairs]  → bench/out/capture_overhead.json
"""
from __future__ import annotations

import statistics
import sys

from _common import save_json


def main(params_path: str = "params/default.yaml", pairs: str = "5") -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelbook import params as P
    from kernelbook.capture.torch_backend import _timed_generate, prepare
    from kernelbook.contract.config import CaptureConfig

    params = CaptureConfig.of(P.load(params_path, consumer="capture"))
    wl, tracker, _ = prepare(params)
    configs = {
        "timed pass: cpu+cuda, no shapes (kernelbook)": dict(activities=[ProfilerActivity.CPU,
                                                                         ProfilerActivity.CUDA]),
        "single pass: cpu+cuda, record_shapes": dict(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                                     record_shapes=True),
        "cuda only": dict(activities=[ProfilerActivity.CUDA]),
    }
    plain, ratios, prof_s = [], {c: [] for c in configs}, {c: [] for c in configs}
    for _ in range(int(pairs)):
        for label, kw in configs.items():
            p = _timed_generate(wl)
            with profile(**kw):
                s = _timed_generate(wl, tracker)
            plain.append(p)
            prof_s[label].append(s)
            ratios[label].append(s / p)
    rows = [{"config": c, "profiled_s": statistics.median(prof_s[c]), "ratio_median": statistics.median(r),
             "ratio_min": min(r), "ratio_max": max(r)} for c, r in ratios.items()]
    out = {"device": torch.cuda.get_device_name(0), "pairs": int(pairs), "plain_s_median": statistics.median(plain),
           "plain_s_min": min(plain), "plain_s_max": max(plain), "rows": rows}
    for r in rows:
        print(f"{r['config']:40s} {r['profiled_s']:.3f} s  ratio {r['ratio_median']:.2f} "
              f"(min {r['ratio_min']:.2f}, max {r['ratio_max']:.2f})")
    print(f"plain generate median {out['plain_s_median']:.3f} s (min {min(plain):.3f}, max {max(plain):.3f}) "
          f"on {out['device']}")
    save_json("capture_overhead", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
