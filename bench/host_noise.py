"""Why the plain generate's time swings from one generate to the next on the lent GPU machines (issue 46: session
27's nsys_ranges runs saw a plain decode step's median at 15.5 ms in one generate and 28 ms in the next, in one
process, which no single profiled generate's overhead ratio survives).

One process builds the bundled workload's model once, then runs plain generates (every step timed, the GPU
synchronized at each step's end, as the capture's plain trials) in rounds, one generate per mode in each round, so
drift hits every mode alike:
- `free`: as the capture runs now: the process may run on any core of its affinity;
- `pinned`: the calling thread pinned to one core (`os.sched_setaffinity(0, {core})`);
- `threads1`: torch's intra-op threads set to 1 (`torch.set_num_threads(1)`), the thread free.
Per generate: its s, its main thread's CPU s (`time.thread_time`), the machine's steal s (/proc/stat), its decode
steps' median and 90th percentile. With the machine's CPU description.

    python bench/host_noise.py [params] [rounds]   (GPU machine) → bench/out/host_noise.json (or $OUT/host_noise.json)
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import save_json

MODES = tuple(os.environ.get("KB_MODES", "free,pinned,threads1").split(","))


def _steal_s() -> float:
    """The machine's CPU time stolen by its hypervisor so far, all cores (s; /proc/stat's 8th column)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def main(params_path: str = "params/default.yaml", rounds: str = "5") -> None:
    import torch

    from kernelbook import params as P
    from kernelbook.capture.phases import plain_step_times
    from kernelbook.capture.torch_backend import _timed_generate, prepare
    from kernelbook.contract.config import CaptureConfig

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    allowed = sorted(os.sched_getaffinity(0))
    params = CaptureConfig.of(P.load(params_path, consumer="capture"))
    wl, tracker, load_s = prepare(params)
    tracker.record = tracker.nvtx = False
    threads = torch.get_num_threads()
    core = allowed[len(allowed) // 2]
    rows = []
    t0 = time.time()
    for r in range(int(rounds)):
        for mode in MODES:
            os.sched_setaffinity(0, {core} if mode == "pinned" else set(allowed))
            torch.set_num_threads(1 if mode == "threads1" else threads)
            tracker.clock = []
            steal, cpu = _steal_s(), time.thread_time()
            s = _timed_generate(wl, tracker)
            cpu, steal = time.thread_time() - cpu, _steal_s() - steal
            steps = plain_step_times(tracker.clock)
            d = steps[steps.phase == "decode"].sort_values("step").wall_ms.tolist()
            rows.append({"round": r, "mode": mode, "s": s, "decode_median_ms": statistics.median(d),
                         "decode_p90_ms": sorted(d)[int(0.9 * len(d))], "decode_ms": [round(x, 2) for x in d],
                         "thread_cpu_s": cpu, "steal_s": steal,
                         "at_s": time.time() - t0, "loadavg": os.getloadavg()})
            print(f"  round {r} {mode:9s} {s:.3f} s (thread CPU {cpu:.3f} s, steal {steal:.3f} s), decode step "
                  f"median {rows[-1]['decode_median_ms']:.1f} ms, p90 {rows[-1]['decode_p90_ms']:.1f} ms, load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    os.sched_setaffinity(0, set(allowed))
    summary = {}
    for mode in MODES:
        s = [x["s"] for x in rows if x["mode"] == mode]
        c = [x["thread_cpu_s"] for x in rows if x["mode"] == mode]
        summary[mode] = {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s),
                         "spread": (max(s) - min(s)) / statistics.median(s),
                         "thread_cpu_median_s": statistics.median(c),
                         "thread_cpu_spread": (max(c) - min(c)) / statistics.median(c)}
        print(f"  {mode}: median {summary[mode]['median_s']:.3f} s, spread {summary[mode]['spread']:.0%}; thread CPU "
              f"median {summary[mode]['thread_cpu_median_s']:.3f} s, spread {summary[mode]['thread_cpu_spread']:.0%}",
              flush=True)
    data = {"device": torch.cuda.get_device_name(0), "params": params_path, "model_load_s": load_s,
            "allowed_cores": allowed, "pinned_core": core, "torch_threads": threads, "lscpu": lscpu,
            "summary": summary, "rows": rows}
    path = save_json("host_noise", data)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "host_noise.json").write_text(path.read_text())


if __name__ == "__main__":
    main(*sys.argv[1:])
