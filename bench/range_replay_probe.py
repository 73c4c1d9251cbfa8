"""Does ncu's range replay measure a consumer's DRAM reads in the loop under `--cache-control all`? (issue 41 point 7)

Range replay profiles everything between cudaProfilerStart and cudaProfilerStop as one result; with
`--cache-control all` ncu flushes the caches before each replay pass of the range, not between the kernels inside
it, so a consumer that reads what its producer just wrote (within L2 capacity) reads it from L2, as in the loop.
The consumer's in-loop reads are then range(producer, consumer) − range(producer): both ranges start cold.

Cases (each its own ncu process, GPU machine only):
  pair      producer a.copy_(x) (16 MiB out) alone, then producer + consumer (y = a * 2, reads a): eager launches
  graph     the same two ops captured in a CUDA graph, the range around one replay
  sync      the pair with a .item() (D2H copy + sync) inside the range: is it supported?

    python bench/range_replay_probe.py            # runs every case under ncu and prints MB read per range
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def app(case: str) -> None:
    import torch

    n = 4 * 2**20  # 16 MiB fp32: well inside a 50 MB L2
    x = torch.randn(n, device="cuda")
    a = torch.empty_like(x)
    y = torch.empty_like(x)
    for _ in range(3):  # warm: kernels loaded, allocator settled
        a.copy_(x)
        torch.mul(a, 2, out=y)
    torch.cuda.synchronize()
    prof = torch.cuda.profiler
    if case in ("pair", "sync"):
        prof.start()
        a.copy_(x)
        prof.stop()
        prof.start()
        a.copy_(x)
        if case == "sync":
            a[0].item()
        torch.mul(a, 2, out=y)
        prof.stop()
    elif case == "graph":
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(g):
            a.copy_(x)
            torch.mul(a, 2, out=y)
        torch.cuda.current_stream().wait_stream(s)
        g.replay()
        torch.cuda.synchronize()
        prof.start()
        g.replay()
        prof.stop()
    torch.cuda.synchronize()


def main() -> None:
    ncu = shutil.which("ncu")
    metrics = "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum"
    out = Path(tempfile.mkdtemp())
    for case in ("pair", "graph", "sync"):
        rep = out / case
        for mode in ("range", "app-range"):
            cmd = [ncu, "--replay-mode", mode, "--cache-control", "all",
                   "--clock-control", "none", "--metrics", metrics, "-o", f"{rep}-{mode}", "--force-overwrite",
                   sys.executable, __file__, "app", case]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            print(f"=== {case} / {mode}: rc {r.returncode}")
            print((r.stdout + r.stderr)[-1500:])
            f = Path(f"{rep}-{mode}.ncu-rep")
            if f.exists():
                csv = subprocess.run([ncu, "--import", str(f), "--csv", "--page", "raw", "--metrics", metrics],
                                     capture_output=True, text=True)
                print(csv.stdout[-2500:])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "app":
        app(sys.argv[2])
    else:
        main()
