"""Seconds to load the committed .ncu-rep fixture into the kernelbook tables (CPU machine).

Times NVIDIA's reader alone (`read_ncu_report`: .ncu-rep → long metric table + result table) and the
whole path to one row per kernel (`derive`), best and median of 5.
Usage: python bench/ncu_reader.py [report.ncu-rep]  → prints the figures, writes bench/out/ncu_reader.json
"""
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, save_json

from kernelbook.capture.ncu_tables import derive  # noqa: E402
from kernelbook.load.ncu import read_ncu_report  # noqa: E402

rep = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/h200-decode-3kernels.ncu-rep"
read, total = [], []
for _ in range(5):
    t0 = time.perf_counter()
    metrics, results = read_ncu_report(rep)
    t1 = time.perf_counter()
    table = derive(metrics, "hopper").merge(results, on="result_id")
    t2 = time.perf_counter()
    read.append(t1 - t0)
    total.append(t2 - t0)
# cold: a fresh interpreter importing the reader and loading once (what a chapter pays)
t0 = time.perf_counter()
subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[2]); from kernelbook.load.ncu import "
                "read_ncu_report; read_ncu_report(sys.argv[1])", str(rep), str(ROOT / "lib")], check=True)
cold = time.perf_counter() - t0
out = {"cold_process_s": cold, "report": rep.name, "mib": rep.stat().st_size / 2**20, "results": len(results), "metric_rows": len(metrics),
       "read_s": {"best": min(read), "median": statistics.median(read)},
       "to_kernel_table_s": {"best": min(total), "median": statistics.median(total)}}
print(f"{rep.name}: {out['mib']:.1f} MiB, {len(results)} results, {len(metrics)} metric rows")
print(f"read_ncu_report   best {min(read):.2f} s  median {statistics.median(read):.2f} s")
print(f"cold (new process, imports + one read) {cold:.2f} s")
print(f"→ kernel table    best {min(total):.2f} s  median {statistics.median(total):.2f} s")
save_json("ncu_reader", out)
