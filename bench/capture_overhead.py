"""Timeline capture overhead on a GPU: profiled generate wall time ÷ plain generate wall time.

Runs the bundled workload once per profiler configuration in one process (same model, same inputs),
so the ratios compare like with like. Usage (GPU machine): python bench/capture_overhead.py [params]
Prints a table and writes bench/out/capture_overhead.json.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))


def main(params_path: str = "params/default.yaml") -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelbook import params as P
    from kernelbook.capture.run import _timed_generate, prepare
    from kernelbook.measure import summarize

    params = P.load(params_path, consumer="capture")
    wl, tracker, _ = prepare(params)
    plain = summarize([_timed_generate(wl) for _ in range(5)])
    configs = {
        "cpu+cuda, record_shapes (kernelbook default)": dict(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                                            record_shapes=True),
        "cpu+cuda, no shapes": dict(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]),
        "cuda only": dict(activities=[ProfilerActivity.CUDA]),
    }
    rows = []
    for label, kw in configs.items():
        times = []
        for _ in range(3):
            with profile(**kw):
                times.append(_timed_generate(wl, tracker))
        m = summarize(times)
        rows.append({"config": label, "profiled_s": m.median_s, "spread": m.spread,
                     "ratio": m.median_s / plain.median_s})
    out = {"device": torch.cuda.get_device_name(0), "plain_s": plain.median_s, "plain_spread": plain.spread,
           "rows": rows}
    for r in rows:
        print(f"{r['config']:45s} {r['profiled_s']:.3f} s  ratio {r['ratio']:.2f}")
    print(f"plain generate {plain.median_s:.3f} s (spread {plain.spread:.1%}) on {out['device']}")
    Path("bench/out").mkdir(parents=True, exist_ok=True)
    Path("bench/out/capture_overhead.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
