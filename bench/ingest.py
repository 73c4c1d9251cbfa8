"""Trace ingest speed: kernelbook's torch-trace ingest vs Meta's HolisticTraceAnalysis on the same trace.

Both parse the bundled run's raw/trace.json.gz (torch.profiler/Kineto, gzipped) on this machine, one after
the other, 3 times each, alternating; the figure is the ratio of medians. kernelbook's time includes
writing nothing (tables in memory), like HTA's.
Usage: pip install holistictraceanalysis==0.5.0 && python bench/ingest.py [trace.json.gz]
→ prints the table, writes bench/out/ingest.json. Targets: ≥ 3× faster than HTA, ≥ 300 000 events/s.
"""
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, save_json

from kernelbook.load.trace import ingest_torch_trace  # noqa: E402


def hta_load(trace_dir: str):
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=trace_dir).t


def main(trace: str | None = None) -> None:
    import hta

    path = Path(trace or ROOT / "data/runs/h100-deepseek-ocr-2/raw/trace.json.gz")
    with gzip.open(path) as f:
        n_events = len(json.load(f)["traceEvents"])
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads a folder of per-rank traces
        shutil.copy(path, Path(tmp) / "rank0.pt.trace.json.gz")
        for _ in range(3):
            t = time.perf_counter()
            timeline, phases = ingest_torch_trace(path)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            tr = hta_load(tmp)
            theirs.append(time.perf_counter() - t)
    df = tr.get_trace(0)
    k, h = statistics.median(ours), statistics.median(theirs)
    out = {"trace": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
           "gz_mib": path.stat().st_size / 2**20, "events": n_events, "cpus": os.cpu_count(),
           "kernelbook_s": ours, "hta_s": theirs, "hta_version": getattr(hta, "__version__", "0.5.0"),
           "kernelbook_rows": len(timeline), "hta_rows": len(df),
           "speedup": h / k, "kernelbook_events_per_s": n_events / k}
    print(f"{path.name}: {out['gz_mib']:.1f} MiB gzipped, {n_events} trace events, {os.cpu_count()} CPUs")
    print(f"kernelbook ingest  median {k:6.2f} s  ({n_events / k:,.0f} events/s) → {len(timeline)} GPU rows")
    print(f"HTA 0.5.0 load     median {h:6.2f} s  → {len(df)} rows")
    print(f"kernelbook is {h / k:.1f}× faster (target ≥ 3×)")
    save_json("ingest", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
