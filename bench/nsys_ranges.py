"""What one Nsight Systems capture range costs, by what it holds (issue 46: where the nsys book's timeline stage
spends its time after the profiled generate).

One process under `nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat` (the capture's options,
capture.nsys `nsys_command`, with one report per range) builds the model once, then runs one generate per capture
range, a plain generate outside the ranges before each:
- `prime`: a one-token generate (the capture's primer);
- `profiled`, `profiled2`: the profiled generate (phase NVTX ranges only), twice: is the second range slow too?
- `primed`, `primed2`: the capture's range as it primes inline (capture.nsys `PRIME`): the one-token generate, then
  the profiled generate, in one range (session 26's capture: decode steps 24.9 ms to step 10, 36 ms from step 11);
- `shapes`: the capture's shapes pass (op numbering, `kbop#`/`kbmod#` NVTX ranges, emit_nvtx(record_shapes=True));
- `shapes_noshape`: the same with emit_nvtx(record_shapes=False): the same ranges, names that repeat;
- `kbop`: op numbering and the kernelbook ranges only, no emit_nvtx.
Per range: the generate's s, the plain one's before it, the host s inside cudaProfilerStop. After the process: its
end (from its last stop to nsys's exit), each report's size and when it appeared (mtime against the stops), each
report's `nsys export --type sqlite` s, its NVTX and kernel rows and the s to read it (capture.nsys `_read_db`).
nsys's own output is kept with the time of each line.

    [KB_RANGES=prime,shapes] [KB_NSYS_EXTRA="--cuda-flush-interval=100"] [KB_STEPS=1] python bench/nsys_ranges.py
    [params]   (GPU machine) → $OUT/nsys_ranges.json (or bench/out/nsys_ranges.json)
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from _common import ROOT, save_json

RANGES = tuple(os.environ.get("KB_RANGES", "prime,profiled,profiled2,shapes,shapes_noshape,kbop").split(","))
EXTRA = os.environ.get("KB_NSYS_EXTRA", "").split()  # more nsys options, e.g. --flush-on-cudaprofilerstop=false
# KB_STEPS=1: every generate also times its decode steps one by one (the GPU synchronized at each step's end, in the
# plain and the ranged generate alike): does the step under nsys slow down as the range fills? (session 26's committed
# nsys capture: 24.9 ms a step over steps 1-10, 34-47 ms after, its plain steps 18-22 ms)
STEPS = os.environ.get("KB_STEPS") == "1"


def one(params_path: str, out: Path) -> None:
    """In this process under nsys: the model once, then per range a plain generate and the range's generate."""
    import torch

    from kernelbook import params as P
    from kernelbook.capture.phases import plain_step_times
    from kernelbook.capture.torch_backend import _timed_generate, prepare
    from kernelbook.contract.config import CaptureConfig

    params = CaptureConfig.of(P.load(params_path, consumer="capture"))
    wl, tracker, load_s = prepare(params)
    one_token = replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": 1, "min_new_tokens": 1})
    cudart = torch.cuda.cudart()
    rows = []

    def decode_ms() -> list[float]:  # the generate's decode steps (ms, GPU synchronized at each step's end)
        steps = plain_step_times(tracker.clock)
        tracker.clock = []
        return [round(x, 3) for x in steps[steps.phase == "decode"].sort_values("step").wall_ms]

    for name in RANGES:
        tracker.record, tracker.nvtx = False, False
        tracker.clock = [] if STEPS else None
        cpu = time.thread_time()
        plain = _timed_generate(wl, tracker)
        plain_cpu = time.thread_time() - cpu
        plain_steps = decode_ms() if STEPS else None
        torch.cuda.synchronize()
        t0 = time.time()
        cudart.cudaProfilerStart()
        started = time.time()
        cpu = time.thread_time()
        if name == "prime":
            one_token.generate()
            s = None
        elif name.startswith(("profiled", "primed")):
            if name.startswith("primed"):
                one_token.generate()
                torch.cuda.synchronize()
            tracker.nvtx = True
            s = _timed_generate(wl, tracker)
        else:
            tracker.nvtx = True
            tracker.op_record = tracker.op_nvtx = True
            try:
                if name == "kbop":
                    s = _timed_generate(wl, tracker)
                else:
                    with torch.autograd.profiler.emit_nvtx(record_shapes=name == "shapes"):
                        s = _timed_generate(wl, tracker)
            finally:
                tracker.op_record = tracker.op_nvtx = False
        torch.cuda.synchronize()
        cpu = time.thread_time() - cpu
        stop_at = time.time()
        cudart.cudaProfilerStop()
        stopped = time.time()
        rows.append({"range": name, "plain_s": plain, "generate_s": s, "start_call_s": started - t0,
                     "stop_call_s": stopped - stop_at, "stop_at": stop_at, "stopped_at": stopped,
                     "plain_decode_ms": plain_steps, "plain_thread_cpu_s": plain_cpu, "thread_cpu_s": cpu,
                     "decode_ms": decode_ms() if STEPS and s is not None else None})
        tracker.clock = None
        print(f"  {name}: plain {plain:.3f} s (thread CPU {plain_cpu:.3f}), generate {s or 0:.3f} s (thread CPU "
              f"{cpu:.3f}), stop {stopped - stop_at:.2f} s", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "model_load_s": load_s, "rows": rows,
                               "done_at": time.time()}))


def _median(xs: list[float]) -> float:
    return float(sorted(xs)[len(xs) // 2]) if xs else 0.0


def _rows(db: Path) -> dict:
    con = sqlite3.connect(str(db))
    try:
        n = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
             for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds")
             if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()}
    finally:
        con.close()
    return n


def main(params_path: str = "params/default.yaml") -> None:
    from kernelbook.capture.nsys import _phases_from_nvtx, _read_db
    from kernelbook.env import find_nsys

    nsys = find_nsys()
    if nsys is None:
        raise SystemExit("nsys not found (PATH or an Nsight Compute install): see capture.nsys.nsys_works")
    tmp = Path(os.environ.get("OUT", ROOT / "bench" / "out"))
    work = Path("/tmp/nsys_ranges")
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("ranges*"):
        old.unlink()
    out = work / "child.json"
    cmd = [str(nsys), "profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--capture-range=cudaProfilerApi",
           "--capture-range-end=repeat", "--cuda-graph-trace=node", *EXTRA, "-o", str(work / "ranges"),
           "--force-overwrite", "true", sys.executable, str(Path(__file__).resolve()), "--one", params_path, str(out)]
    t = time.time()
    log = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            log.append([round(time.time() - t, 2), line.rstrip()])
            print(f"[{time.time() - t:6.1f} s] {line.rstrip()}", flush=True)
    ended = time.time()
    child = json.loads(out.read_text())
    reports = []
    for i, row in enumerate(child["rows"], 1):
        rep = work / f"ranges.{i}.nsys-rep"
        if len(child["rows"]) == 1 and not rep.exists():
            rep = work / "ranges.nsys-rep"  # nsys numbers its reports only where there are several
        r = {"range": row["range"], "report": rep.name, "exists": rep.exists()}
        if rep.exists():
            r.update(bytes=rep.stat().st_size, written_after_stop_s=rep.stat().st_mtime - row["stopped_at"])
            e = time.perf_counter()
            subprocess.run([str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "-o",
                            str(rep.with_suffix(".sqlite")), str(rep)], check=True, capture_output=True)
            r["export_s"] = time.perf_counter() - e
            db = rep.with_suffix(".sqlite")
            r["sqlite_bytes"] = db.stat().st_size
            r["rows"] = _rows(db)
            e = time.perf_counter()
            _, nv = _read_db(db)
            r["read_s"] = time.perf_counter() - e
            steps = _phases_from_nvtx(nv)
            r["nvtx_decode_ms"] = [round(x / 1e6, 2) for x in steps[steps.phase == "decode"].duration_ns]
        reports.append(r)
        d, p = r.get("nvtx_decode_ms") or [0], row["plain_decode_ms"] or [0]
        ratio = (f"{row['generate_s'] / row['plain_s']:.2f}x the plain generate (thread CPU "
                 f"{row['thread_cpu_s'] / row['plain_thread_cpu_s']:.2f}x)" if row["generate_s"] else "-")
        print(f"  {r['report']} {r['range']}: {ratio}; export {r.get('export_s', 0):.2f} s; decode step median "
              f"{_median(d):.1f} ms (steps 1-10 {_median(d[:10]):.1f}, 11- {_median(d[10:]):.1f}), the plain "
              f"generate's before it {_median(p):.1f} ms", flush=True)
    help_text = subprocess.run([str(nsys), "profile", "--help"], capture_output=True, text=True).stdout
    data = {"params": params_path, "command": cmd, "process_wall_s": ended - t,
            "after_last_stop_s": ended - child["rows"][-1]["stopped_at"], "child": child, "reports": reports,
            "nsys_log": log, "nsys_profile_help": help_text}
    name = os.environ.get("KB_NAME", "nsys_ranges")
    path = save_json(name, data)
    if os.environ.get("OUT"):
        (tmp / f"{name}.json").write_text(path.read_text())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(sys.argv[2], Path(sys.argv[3]))
    else:
        main(*sys.argv[1:])
