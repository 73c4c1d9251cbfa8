"""Probe for a one-process nsys timeline (issue 46): run as
    python3 bench/nsys_one_process_probe.py bare
    nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop|repeat ... python3 <this> stop|repeat
and it prints (1) a launch-bound loop's time before any capture range (nsys's cost to a plain generate in its
process), (2) kernels in one or two capture ranges, (3) whether the torch profiler records CUDA activity after nsys's
range has ended (the shapes pass in the same process)."""
import sys
import time

import torch

mode = sys.argv[1]
a = torch.randn(64, 64, device="cuda")


def loop(n=20000):
    torch.cuda.synchronize()
    t = time.perf_counter()
    x = a
    for _ in range(n):
        x = x * 1.0001
    torch.cuda.synchronize()
    return time.perf_counter() - t


loop(2000)
best = min(loop() for _ in range(5))
print(f"{mode}: launch loop 20000 launches before any range: {best * 1e3:.1f} ms ({best / 20000 * 1e6:.2f} us/launch)")
if mode == "bare":
    sys.exit(0)
cud = torch.cuda.cudart()
for r in range(2 if mode == "repeat" else 1):  # repeat: two windows of two decode steps (a matmul, a relu each)
    cud.cudaProfilerStart()
    for _ in range(2):
        torch.cuda.nvtx.range_push("decode")
        for _ in range(r + 1):
            b = (a @ a).relu()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    cud.cudaProfilerStop()
    time.sleep(1)
best2 = min(loop() for _ in range(5))
print(f"{mode}: launch loop after the range(s): {best2 * 1e3:.1f} ms")
from torch.profiler import ProfilerActivity, profile

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(10):
        b = a @ a
    torch.cuda.synchronize()
n = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
print(f"{mode}: torch profiler after nsys's range: {n} CUDA events (10 matmuls launched)")
