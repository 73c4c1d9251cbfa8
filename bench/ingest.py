"""Trace ingest speed and memory: kernelbook's torch-trace ingest vs Meta's HolisticTraceAnalysis 0.5.0.

Each tool reads the same torch.profiler (Kineto) trace in a process of its own, so neither's imports, caches or
freed-but-kept memory touch the other: kernelbook with this repo's lib/ (`load.trace.ingest_torch_trace`), HTA
with the Python given by `--hta-python` or $KB_HTA_PYTHON (a venv with `pip install holistictraceanalysis==0.5.0`;
default: this Python). The two alternate, `--runs` times each (3), and the figures are medians.

Time: the call alone (`ingest_torch_trace(path)`, `TraceAnalysis(trace_dir=...).t`), imports excluded, as
before; and CPU time (the process and its children, user + system), which the machine's other load disturbs
less. Memory: the peak resident set of the tool's processes together (HTA parses in a forked worker), sampled
every 10 ms from here, and the largest single process's own peak (getrusage: ru_maxrss of the process and of its
children); both include the interpreter and its imports, so `rss_before_mib` (after imports, before the call)
is given too.

Usage: python bench/ingest.py [trace.json.gz ...] [--hta-python PATH] [--runs N] [--out FILE]
                             [--kernelbook-lib OTHER/lib] [--tools kernelbook,hta]
→ prints a table per trace, writes bench/measured/ingest_cpu.json (or --out). Default trace: the bundled run's
raw/trace.json.gz; bench/make_big_trace.py makes a 10× one from it. Target (issue 30): ≥ 10× faster than HTA on
both, moonshot 20×.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT

KERNELBOOK = """
import json, resource, sys, time
from kernelbook.load.trace import ingest_torch_trace
before = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
t, c = time.perf_counter(), cpu()
timeline, phases = ingest_torch_trace(sys.argv[1])
s, c = time.perf_counter() - t, cpu() - c
print(json.dumps({"seconds": s, "cpu_s": c, "rows": len(timeline), "rss_before_mib": before,
                  "maxrss_self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "maxrss_children_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

HTA = """
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
import hta
from hta.trace_analysis import TraceAnalysis
before = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
cpu = lambda: sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
t, c = time.perf_counter(), cpu()
tr = TraceAnalysis(trace_dir=sys.argv[1]).t
s, c = time.perf_counter() - t, cpu() - c
print(json.dumps({"seconds": s, "cpu_s": c, "rows": len(tr.get_trace(0)), "rss_before_mib": before,
                  "version": getattr(hta, "__version__", "0.5.0"),
                  "maxrss_self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "maxrss_children_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def tree_rss_mib(pid: int) -> float:
    """Resident set of a process and its descendants now (MiB)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(status.split("VmRSS:")[1].split()[0])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return total / 1024


def run_child(python: str, code: str, arg: str, env: dict) -> dict:
    """One tool in a process of its own: its report, with the peak resident set of its process tree."""
    proc = subprocess.Popen([python, "-c", code, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)
    peak, done = [0.0], threading.Event()

    def sample():
        while not done.wait(0.01):
            peak[0] = max(peak[0], tree_rss_mib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode:
        raise RuntimeError(f"{python} failed ({proc.returncode}):\n{err[-3000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    report["peak_tree_rss_mib"] = peak[0]
    return report


def count_events(path: Path) -> int:
    """Events in a Kineto trace: one `  {` line each after "traceEvents" (the layout torch.profiler writes)."""
    with open(path, "rb") as f:
        opener = gzip.open if f.read(2) == b"\x1f\x8b" else open
    n, tail, started = 0, b"", False
    with opener(path, "rb") as f:
        while chunk := f.read(32 << 20):
            text = tail + chunk
            if not started and b'"traceEvents": [' in text:
                text, started = text[text.index(b'"traceEvents": ['):], True
            if started:
                n += text.count(b"\n  {\n")  # one split by the chunk's end is whole in the next text only
            tail = text[-4:]
    return n


def summary(runs: list[dict]) -> dict:
    secs = [r["seconds"] for r in runs]
    med = statistics.median(secs)
    return {"median_s": med, "min_s": min(secs), "max_s": max(secs),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "spread": (max(secs) - min(secs)) / med if med else 0.0, "runs_s": secs, "rows": runs[0]["rows"],
            "peak_tree_rss_mib": max(r["peak_tree_rss_mib"] for r in runs),
            "peak_process_rss_mib": max(max(r["maxrss_self_mib"], r["maxrss_children_mib"]) for r in runs),
            "rss_before_mib": statistics.median(r["rss_before_mib"] for r in runs)}


def bench(path: Path, hta_python: str, runs: int, lib: Path, tools: list[str]) -> dict:
    path = path.resolve()
    n_events = count_events(path)
    env_kb = {**os.environ, "PYTHONPATH": str(lib)}
    env_hta = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads a folder of per-rank traces
        suffix = ".json.gz" if path.name.endswith(".gz") else ".json"
        os.symlink(path.resolve(), Path(tmp) / f"rank0.pt.trace{suffix}")
        for _ in range(runs):
            if "kernelbook" in tools:
                ours.append(run_child(sys.executable, KERNELBOOK, str(path), env_kb))
            if "hta" in tools:
                theirs.append(run_child(hta_python, HTA, tmp, env_hta))
    out = {"trace": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
           "gz_mib": path.stat().st_size / 2**20, "events": n_events, "kernelbook_lib": str(lib)}
    if ours:
        k = summary(ours)
        out["kernelbook"] = {**k, "events_per_s": n_events / k["median_s"]}
    if theirs:
        h = summary(theirs)
        out["hta"] = {**h, "events_per_s": n_events / h["median_s"], "version": theirs[0]["version"]}
    if ours and theirs:
        out["speedup"] = h["median_s"] / k["median_s"]
        out["cpu_speedup"] = h["median_cpu_s"] / k["median_cpu_s"]
        out["memory_ratio"] = h["peak_tree_rss_mib"] / k["peak_tree_rss_mib"]
    return out


def table(r: dict) -> str:
    rows = [f"{r['trace']}: {r['gz_mib']:.1f} MiB gzipped, {r['events']:,} trace events",
            f"{'':12s} {'median s':>9s} {'min-max s':>13s} {'CPU s':>7s} {'events/s':>11s} {'rows':>9s} "
            f"{'peak RSS MiB':>13s} {'largest proc':>13s} {'after import':>13s}"]
    for tool in ("kernelbook", "hta"):
        if tool not in r:
            continue
        t = r[tool]
        rows.append(f"{tool:12s} {t['median_s']:9.2f} {t['min_s']:6.2f}-{t['max_s']:<6.2f} {t['median_cpu_s']:7.2f} "
                    f"{t['events_per_s']:11,.0f} {t['rows']:9,d} {t['peak_tree_rss_mib']:13,.0f} "
                    f"{t['peak_process_rss_mib']:13,.0f} "
                    f"{t['rss_before_mib']:13,.0f}")
    if "speedup" in r:
        rows.append(f"kernelbook is {r['speedup']:.1f}× faster than HTA {r['hta']['version']} (target ≥ 10×; "
                    f"{r['cpu_speedup']:.1f}× in CPU time), peak memory {r['memory_ratio']:.1f}× less")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", type=Path,
                    default=[ROOT / "data/runs/h100-deepseek-ocr-2/raw/trace.json.gz"])
    ap.add_argument("--hta-python", default=os.environ.get("KB_HTA_PYTHON", sys.executable),
                    help="Python of a venv with holistictraceanalysis==0.5.0 (default: $KB_HTA_PYTHON or this one)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/measured/ingest_cpu.json")
    ap.add_argument("--kernelbook-lib", type=Path, default=ROOT / "lib",
                    help="kernelbook's lib/ to time (another checkout's, for a before/after)")
    ap.add_argument("--tools", default="kernelbook,hta", help="which to run (comma-separated)")
    args = ap.parse_args()
    load_at_start = os.getloadavg()
    results = []
    for path in args.traces:
        results.append(bench(path, shutil.which(args.hta_python) or args.hta_python, args.runs,
                             args.kernelbook_lib.resolve(), args.tools.split(",")))
        print(table(results[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()},
        "method": "each tool in its own process, alternating, median of the runs; time of the call alone",
        "results": results}, indent=1))
    out = args.out.resolve()
    print(f"→ {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
