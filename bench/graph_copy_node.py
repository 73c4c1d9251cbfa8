"""Is `memcpy32_post` the CUDA driver's kernel for a graph's memcpy node, and does ncu profile it?
A CUDA graph holding one device-to-device copy (15 x 256 x 4 bytes, a contiguous copy_) and one GEMM:
  python bench/graph_copy_node.py profile   -> the kernels torch.profiler (CUPTI) sees in one replay
  ncu --graph-profiling node --nvtx --nvtx-include kb/ python bench/graph_copy_node.py ncu  -> what ncu profiles"""
import sys

import torch

a = torch.randn(15 * 256, device="cuda")
b = torch.empty_like(a)
x = torch.randn(1024, 1024, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):  # warm up outside the capture (cuBLAS workspace)
    b.copy_(a)
    y = x @ x
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    b.copy_(a)
    y = x @ x
torch.cuda.synchronize()
if sys.argv[1] == "profile":
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
        g.replay()
        torch.cuda.synchronize()
    for e in p.events():
        if e.device_type.name == "CUDA":
            print("cupti:", e.name)
else:
    torch.cuda.nvtx.range_push("kb")
    g.replay()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
print("copy ok:", bool((b == a).all()))
