"""ncu stage cost and coverage, one configuration after another on one machine (GPU machine).

Re-runs only the ncu stage of an existing run (its timeline, its params) into throwaway copies, for
each configuration `<selection>:<cache control>[:<top-n>]`: selection `position` (NVTX range around
each selected kernel's op call, one ncu process for all phases) or `name` (the earlier --kernel-name
filter, one process per phase; forced by dropping the timeline's op numbering), cache control `all`
or `none`.
Each row also holds the seconds before each profiled launch's `==PROF==` line (`launch_s`; the first
includes ncu's start, the model build and the warmup).
Usage: python bench/ncu_stage.py data/runs/<run-id> position:all name:all position:none
       → bench/out/ncu_stage.json (rewritten after each configuration)
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


def main(run: str, *configs: str) -> None:
    import pandas as pd

    from kernelbook.capture.ncu import NcuError
    from kernelbook.capture.ncu_stage import ncu_stage

    base = json.loads((Path(run) / "manifest.json").read_text())
    rows = []
    for cfg in configs or ("position:all", "name:all"):
        how, cache, *top = cfg.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "run"
            d.mkdir()
            tl = pd.read_parquet(Path(run) / "timeline.parquet")
            if how == "name":
                tl = tl.drop(columns=["op_index"], errors="ignore")
            tl.to_parquet(d / "timeline.parquet")
            params = {**base["params"], "cache_control": cache}
            if top:
                params["ncu_top_n"] = int(top[0])
            manifest = {"params": params}
            t = time.perf_counter()
            stamps: list[float] = []  # when each profiled launch's ==PROF== line came (seconds into the stage)

            def say(line: str) -> None:
                if " launches, " in line:
                    stamps.append(time.perf_counter() - t)
                print(line, file=sys.stderr, flush=True)
            try:
                ncu_stage(params, d, manifest, say=say)
            except NcuError as e:
                print(f"{cfg}: {e}", flush=True)
            wall = time.perf_counter() - t
            info = manifest["ncu"]
            k = pd.read_parquet(d / "ncu" / "kernels.parquet")
            res = pd.read_parquet(d / "ncu" / "results.parquet") if (d / "ncu" / "results.parquet").exists() else None
            row = {"config": cfg, "stage_wall_s": wall, "selected": len(k),
                   "profiled": int((k.status == "profiled").sum()), "results": 0 if res is None else len(res),
                   "results_per_selected": (0 if res is None else len(res)) / max(1, len(k)),
                   "phases": {p: {x: v[x] for x in ("selected", "profiled", "results", "wall_s", "error")}
                              for p, v in info["phases"].items()},
                   "missed": k.loc[k.status != "profiled", ["phase", "kernel_id", "name", "status"]]
                   .assign(name=lambda x: x["name"].str.slice(0, 120)).to_dict("records"),
                   "op_check": info.get("op_check"), "worker_ran": info.get("worker"),
                   "worker": [ln for ln in (d / "ncu" / "ncu.log").read_text().splitlines()
                              if "kernelbook worker done" in ln] if (d / "ncu" / "ncu.log").exists() else []}
            if (d / "ncu" / "launches.parquet").exists():  # what each launch cost: the gap before its line
                la = pd.read_parquet(d / "ncu" / "launches.parquet")
                gaps = [b - a for a, b in zip([0.0, *stamps], stamps)]
                row["launch_s"] = [{"phase": r.phase, "op": r.op, "name": r.name[:80], "grid": r.grid,
                                    "s": round(g, 2)} for r, g in zip(la.itertuples(), gaps)]
            if res is not None and "dram_bytes" in k:
                row["dram_bytes"] = k[["phase", "kernel_id", "dram_bytes"]].to_dict("records")
            rows.append(row)
            print({x: row[x] for x in ("config", "stage_wall_s", "selected", "profiled", "results", "worker")}, flush=True)
            save_json("ncu_stage", rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
