"""Issue 39, item 7: peak memory and wall time of a book render, on the bundled run and two grown copies of it.

Cases (each a copy of data/runs/h100-deepseek-ocr-2 without raw/, built once under $TMPDIR/kb-render-memory and
reused; the book goes there too, since an output folder inside the repository is refused):
- `bundled`: the run as it is;
- `long-name`: the decode kernel with the most time (ncu kernel d000, 5922 launches) renamed to a 100 kB C++
  template name, in the timeline and in every ncu table, so the door check still pairs them by (phase, name);
- `big`: decode steps 1-63 played again and again, back to back (each copy shifted by the decode span, steps
  renumbered, phases.parquet and steps.parquet grown alike) until the timeline holds 10⁶ rows.

The book is rendered by its own command (`python -m kernelbook book`) in a child process; its process tree (the
runner and every chapter kernel papermill starts) is sampled every 50 ms with psutil. Reported: the largest sum
of resident memory over the tree (GB), the largest single process and which chapter it ran, and the wall time.
Two chapter kernels run at once on a 2-core machine, so the sum is about two chapters' worth.

Session figures (bench/measured/render_memory_cpu.json; peak RSS summed over the tree / worst process, wall):
bundled 1.85 / 0.85 GB, 25 s → 1.16 / 0.48 GB, 20 s; long-name 8.75 / 4.13 GB, 63 s → 1.16 / 0.51 GB, 36 s;
big 7.88 / 4.23 GB, 120 s → 2.54 / 1.36 GB, 71 s. "After" needs both halves: names cut and text shared at load
(load.run.read_table) and a door check that reads names as dictionaries; with the old door check alone (one string
per row, in the runner and in every kernel) the big run still peaks at 3.3-4.1 GB.

Usage: python bench/render_memory.py bundled|long-name|big [--chapters 01_timeline,...] [--save NAME] [--root DIR]
       (--save writes bench/out/NAME.json; copy the figures worth keeping to bench/measured/)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, save_json

SRC = ROOT / "data/runs/h100-deepseek-ocr-2"
NAME_BYTES = 100_000
ROWS = 1_000_000
WORK = Path(tempfile.gettempdir()) / "kb-render-memory"


def long_name(n: int = NAME_BYTES, tag: str = "") -> str:
    """A CUTLASS-like template name of `n` characters (nested template arguments, a parameter list)."""
    head, tail = "void cutlass::device_kernel<kb::Gemm<", f">{tag}>(kb::Params)"
    parts, size, i = [], len(head) + len(tail), 0
    while size < n:
        p = f"cute::tuple<cute::C<{i}>, cute::C<{2 * i + 1}>>, "
        parts.append(p)
        size += len(p)
        i += 1
    return (head + "".join(parts))[: n - len(tail)] + tail


def _copy(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(SRC, dest, ignore=shutil.ignore_patterns("raw"))


def rename_kernel(run: Path, old: str, new: str) -> None:
    """`old` → `new` in every string column of the run's timeline and ncu tables that holds it."""
    import pandas as pd

    for f in [run / "timeline.parquet", *sorted((run / "ncu").glob("*.parquet"))]:
        df = pd.read_parquet(f)
        for c in df.columns:
            if df[c].dtype == object or pd.api.types.is_string_dtype(df[c]):
                df[c] = df[c].where(df[c] != old, new)
        df.to_parquet(f, index=False)


def build_long_name(dest: Path) -> Path:
    import pandas as pd

    _copy(dest)
    k = pd.read_parquet(dest / "ncu/kernels.parquet")
    rename_kernel(dest, k.loc[k.kernel_id == "d000", "name"].iloc[0], long_name())
    return dest


def build_big(dest: Path, rows: int = ROWS) -> Path:
    import pandas as pd

    _copy(dest)
    tl = pd.read_parquet(dest / "timeline.parquet")
    ph = pd.read_parquet(dest / "phases.parquet")
    st = pd.read_parquet(dest / "steps.parquet")
    dec, rest = tl[tl.phase == "decode"], tl[tl.phase != "decode"]
    lo, hi = int(ph.loc[ph.phase == "decode", "start_ns"].min()), int(ph.loc[ph.phase == "decode", "end_ns"].max())
    span, nsteps = hi - lo + 1_000_000, int(dec.step.max())  # copies 1 ms apart
    copies = -(-(rows - len(rest)) // len(dec))

    def grown(df, ns_cols):
        out = []
        for k in range(copies):
            c = df.copy()
            for col in ns_cols:
                if col in c:
                    c[col] = c[col] + k * span
            c["step"] = c["step"] + k * nsteps
            out.append(c)
        return out

    tl = pd.concat([rest, *grown(dec, ("start_ns", "end_ns", "launch_ns"))], ignore_index=True)
    tl = tl.sort_values("start_ns", kind="stable").reset_index(drop=True)
    ph = pd.concat([ph[ph.phase != "decode"], *grown(ph[ph.phase == "decode"], ("start_ns", "end_ns"))],
                   ignore_index=True)
    st = pd.concat([st[st.phase != "decode"], *grown(st[st.phase == "decode"], ())], ignore_index=True)
    tl.to_parquet(dest / "timeline.parquet", index=False)
    ph.to_parquet(dest / "phases.parquet", index=False)
    st.to_parquet(dest / "steps.parquet", index=False)
    mf = json.loads((dest / "manifest.json").read_text())
    mf["params"]["max_new_tokens"] = copies * nsteps + 1
    (dest / "manifest.json").write_text(json.dumps(mf, indent=1))
    return dest


def _tree(top):
    import psutil

    try:
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _label(proc) -> str:
    """The chapter a kernel process runs, from the connection file papermill names after it, else its command."""
    try:
        cmd = proc.cmdline()
    except Exception:
        return "?"
    text = " ".join(cmd)
    return "ipykernel" if "ipykernel" in text else "runner" if "kernelbook" in text else Path(cmd[0]).name


def measure(run: Path, out: Path, chapters: str | None, every_s: float = 0.05, root: Path = ROOT) -> dict:
    """Render the book of `run` into `out` with the kernelbook of the checkout `root`, sampling its process
    tree's memory until it ends."""
    import psutil

    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kernelbook", "book", "--run", str(run), "--out", str(out)]
    if chapters:
        cmd += ["--chapters", chapters]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "lib"), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    log_path = out.with_name(out.name + ".log")
    log_file = log_path.open("wb")  # a file, not a pipe: a pipe nobody reads stops the render when it fills
    p = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=root)
    top = psutil.Process(p.pid)
    peak_sum, per = 0, {}
    while p.poll() is None:
        total = 0
        for q in _tree(top):
            try:
                rss, born = q.memory_info().rss, q.create_time()
            except psutil.Error:
                continue
            total += rss
            # labelled until it shows as a kernel: a process seen between fork and exec has the runner's command
            # (and a process ending, whose command can no longer be read, keeps its label)
            old = per[q.pid][1] if q.pid in per else "?"
            new = old if old == "ipykernel" else _label(q)
            per[q.pid] = (max(rss, per.get(q.pid, (0,))[0]), old if new == "?" else new, born)
        peak_sum = max(peak_sum, total)
        time.sleep(every_s)
    wall = time.perf_counter() - t0
    log_file.close()
    log = log_path.read_text(errors="replace")
    timings = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else []
    # chapter kernels start in the runner's order (LONGEST_FIRST, two at a time): the n-th kernel started ran the
    # n-th chapter of that order, unless a chapter was tried twice (then they are only numbered). A kernel that
    # never reached 100 MB never imported kernelbook (one the runner started and stopped): no chapter's.
    from kernelbook.runner import LONGEST_FIRST

    started = sorted((v[2], pid) for pid, v in per.items() if v[1] == "ipykernel" and v[0] >= 100e6)
    stems = [c for c in LONGEST_FIRST if not chapters or c in chapters.split(",")]
    names = stems if len(stems) == len(started) else [f"kernel {i}" for i in range(len(started))]
    kernels = {name: round(per[pid][0] / 1e9, 2) for name, (_, pid) in zip(names, started)}
    for name, (_, pid) in zip(names, started):
        per[pid] = (per[pid][0], name, per[pid][2])
    worst_pid = max(per, key=lambda k: per[k][0]) if per else None
    return dict(run=str(run), code=_revision(root), chapters=chapters or "all", rc=p.returncode, wall_s=round(wall, 1),
                peak_tree_rss_gb=round(peak_sum / 1e9, 2),
                peak_process_rss_gb=round(per[worst_pid][0] / 1e9, 2) if worst_pid else None,
                peak_process=per[worst_pid][1] if worst_pid else None,
                kernels_peak_rss_gb=kernels,
                chapters_s={r["stem"]: round(r["seconds"], 1) for r in timings if "stem" in r},
                report_mb=round(sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6, 1)
                if out.exists() else None,
                tail=log.strip().splitlines()[-6:])


def _revision(root: Path) -> str:
    """The checkout's commit, '+changes' when its lib/ differs from it (an archive of a commit: 'archive')."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return f"archive at {root}"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "lib"], cwd=root).returncode
    return head + ("+changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case", choices=["bundled", "long-name", "big"])
    ap.add_argument("--chapters", default=None, help="comma-separated chapter stems (default: all)")
    ap.add_argument("--save", default=None, help="write bench/out/<SAVE>.json")
    ap.add_argument("--rebuild", action="store_true", help="build the grown run again")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout whose kernelbook renders (default this one; e.g. `git archive` of the "
                         "commit before a change, for its figures on the same runs)")
    args = ap.parse_args()
    if args.case == "bundled":
        run = SRC
    else:
        run = WORK / f"run-{args.case}"
        if args.rebuild or not (run / "manifest.json").exists():
            t = time.perf_counter()
            (build_long_name if args.case == "long-name" else build_big)(run)
            print(f"built {run} in {time.perf_counter() - t:.0f} s", flush=True)
    r = measure(run, WORK / f"book-{args.case}", args.chapters, root=args.root.resolve())
    r["case"] = args.case
    print(json.dumps(r, indent=1))
    if args.save:
        print(save_json(args.save, r))


if __name__ == "__main__":
    main()
