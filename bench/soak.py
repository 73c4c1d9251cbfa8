"""Soak (issue 29): the whole book rendered N times in a row on this machine, the bundled run and the TP run
alternating, each render a fresh `python -m kernelbook book` process. Records per render the exit code, the
wall time and each chapter's time (timings.json), and prints renders, failures and the slowest chapter.

    python bench/soak.py [N] [--out bench/measured/soak_cpu.json]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = ["data/runs/h100-deepseek-ocr-2", "data/runs/h200-deepseek-decoder-tp2-b1"]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 20
    dest = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else None
    renders = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            run = RUNS[i % len(RUNS)]
            out = Path(tmp) / f"r{i}"
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--run", run, "--out", str(out)],
                               cwd=REPO, capture_output=True, text=True)
            wall = time.perf_counter() - t
            tj = out / "timings.json"
            chapters = {e["stem"]: e.get("seconds", e.get("s")) for e in json.loads(tj.read_text())} if tj.exists() else {}
            renders.append({"i": i, "run": run, "rc": p.returncode, "wall_s": wall, "chapters_s": chapters,
                            "tail": p.stderr.strip().splitlines()[-1:] if p.returncode else []})
            print(f"[{i + 1}/{n}] {run}: rc {p.returncode}, {wall:.1f} s", flush=True)
    slow = max(((c, s, r["i"]) for r in renders for c, s in r["chapters_s"].items() if s), key=lambda x: x[1],
               default=None)
    summary = {"renders": n, "failures": sum(r["rc"] != 0 for r in renders),
               "slowest_chapter": {"chapter": slow[0], "s": slow[1], "render": slow[2]} if slow else None,
               "wall_s": {"min": min(r["wall_s"] for r in renders), "max": max(r["wall_s"] for r in renders)},
               "machine": "this 2-core CPU machine", "renders_detail": renders}
    print(json.dumps({k: v for k, v in summary.items() if k != "renders_detail"}, indent=1))
    if dest:
        dest.write_text(json.dumps(summary, indent=1))
    return 0 if summary["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
