"""Where the ncu stage's time goes (GPU machine): the same top-N decode selection of a run, profiled
three ways in one session —
  base:       a name filter that matches nothing (ncu start + model build + generate under ncu),
  sections:   the selected kernels with all of kernelbook's sections (what a capture runs),
  sol-only:   the selected kernels with SpeedOfLight alone (how much the other sections cost).
(sections − base) ÷ results is the cost of one profiled launch.
Usage: python bench/ncu_breakdown.py data/runs/<run-id> [top_n]   → bench/out/ncu_breakdown.json
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


def main(run: str, top_n: str = "20") -> None:
    import pandas as pd

    from kernelbook.capture.ncu import ncu_command, run_ncu, select_kernels, worker_command

    base = json.loads((Path(run) / "manifest.json").read_text())
    params = {**base["params"], "ncu_top_n": int(top_n)}
    sel = select_kernels(pd.read_parquet(Path(run) / "timeline.parquet"), "decode", int(top_n))
    variants = {"base": (["kernelbook_matches_no_kernel"], None), "sections": (sel.kernels.name.tolist(), None),
                "sol-only": (sel.kernels.name.tolist(), ("SpeedOfLight",))}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "params.json"
        pf.write_text(json.dumps(params))
        for label, (names, sections) in variants.items():
            rep = Path(tmp) / label
            kw = {"sections": sections, "extra_metrics": ()} if sections else {}
            cmd = ncu_command(rep, names, worker_command(pf, "decode", sel.step), **kw)
            if label == "base":  # kernelbook's filter also takes every bare name: match nothing at all
                cmd[cmd.index("--kernel-name") + 1] = "regex:^kernelbook_matches_no_kernel$"
            t = time.perf_counter()
            proc = run_ncu(cmd, Path(tmp) / f"{label}.log", 900)
            wall = time.perf_counter() - t
            text = proc.stdout + proc.stderr
            worker = [ln for ln in text.splitlines() if "kernelbook worker done" in ln]
            passes = [int(m) for m in re.findall(r"- (\d+) pass", text)]
            rows.append({"variant": label, "wall_s": wall, "results": text.count("==PROF== Profiling"),
                         "replay_passes": sum(passes), "worker": worker[-1] if worker else None})
            print(rows[-1], flush=True)
            save_json("ncu_breakdown", {"top_n": int(top_n), "step": sel.step, "rows": rows})


if __name__ == "__main__":
    main(*sys.argv[1:])
