"""ncu stage cost and coverage, one configuration after another on one machine (GPU machine).

Re-runs only the ncu stage of an existing run (its timeline, its params) into throwaway copies, for
each configuration `<selection>:<cache control>[:<top-n>][:ungated]`: selection `position` (NVTX range around
each selected kernel's op call, one ncu process for all phases) or `name` (the earlier --kernel-name
filter, one process per phase; forced by dropping the timeline's op numbering), cache control `all`
or `none`; `ungated`: ncu profiles from the worker's start (no cudaProfilerStart/Stop around the targets,
as before `capture.ncu.PROFILE_GATE`); `graphnames`: a graph step's nodes filtered by the selected names
(`capture.ncu.GRAPH_NAME_FILTER`).
Each row also holds the seconds before each profiled launch's `==PROF==` line (`launch_s`; the first
includes ncu's start, the model build and the warmup).
`KB_NCU_EXTRA` (e.g. "--kernel-name regex:^nvjet"): more ncu options for every configuration, to find what a
launch's cost belongs to. Each row keeps every ncu line's time (`prof_lines`, seconds into the stage).
Usage: python bench/ncu_stage.py data/runs/<run-id> position:all name:all position:none
       → bench/out/ncu_stage.json (rewritten after each configuration)
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


def main(run: str, *configs: str) -> None:
    import pandas as pd

    from kernelbook.capture import ncu as N
    from kernelbook.capture.ncu import NcuError
    from kernelbook.capture.ncu_stage import ncu_stage
    from kernelbook import params as P
    from kernelbook.contract.config import CaptureConfig

    procs: list = []  # every ncu this bench starts: when its lines came
    init = N.NcuProcess.__init__

    def keep(self, cmd):
        init(self, cmd)
        procs.append(self)
    N.NcuProcess.__init__ = keep
    extra = os.environ.get("KB_NCU_EXTRA", "").split()
    if extra:
        import kernelbook.capture.ncu_stage as S
        plain_command = S.ncu_command

        def with_extra(report_base, names, worker, *a, **kw):
            cmd = plain_command(report_base, names, worker, *a, **kw)
            return cmd[:len(cmd) - len(worker)] + extra + worker
        S.ncu_command = with_extra
    base = json.loads((Path(run) / "manifest.json").read_text())
    rows = []
    for cfg in configs or ("position:all", "name:all"):
        procs.clear()
        how, cache, *rest = cfg.split(":")
        top = [x for x in rest if x.isdigit()]
        N.PROFILE_GATE = "ungated" not in rest
        N.GRAPH_NAME_FILTER = "graphnames" in rest
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
            t, t0_mono = time.perf_counter(), time.monotonic()
            stamps: list[float] = []  # when each profiled launch's ==PROF== line came (seconds into the stage)

            def say(line: str) -> None:
                if " launches, " in line:
                    stamps.append(time.perf_counter() - t)
                print(line, file=sys.stderr, flush=True)
            try:
                ncu_stage(CaptureConfig.of(P.validate(params, consumer="capture")), d, manifest, say=say)
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
            row["after_last_launch_s"] = wall - stamps[-1] if stamps else None
            row["first_launch_s"] = stamps[0] if stamps else None  # ncu's start, the worker's build and lead-up
            row["worker_logs"] = [ln for f in sorted((d / "ncu").glob("*.log")) for ln in f.read_text().splitlines()
                                  if "kernelbook worker done" in ln]
            if procs:  # the tail: the worker's last line, ncu's last lines and the end of its output, in stage s
                p = procs[-1]
                at = lambda s: round(s - t0_mono, 2)  # noqa: E731
                row["tail_lines"] = [(at(s), ln.strip()[:90]) for s, ln in zip(p.line_s, p.lines)
                                     if not ln.startswith("==PROF== Profiling")][-6:]
                row["output_ended_s"] = None if p.ended_s is None else at(p.ended_s)
                row["prof_lines"] = [(at(s), ln.strip()[:90]) for s, ln in zip(p.line_s, p.lines)
                                     if ln.startswith("==PROF==") or "kernelbook worker" in ln]
            if res is not None and "dram_bytes" in k:
                cols = [c for c in ("dram_bytes", "flops", "duration_ns", "sm_pct", "memory_pct") if c in k]
                row["dram_bytes"] = k[["phase", "kernel_id", *cols]].to_dict("records")
            rows.append(row)
            print({x: row[x] for x in ("config", "stage_wall_s", "selected", "profiled", "results", "worker")}, flush=True)
            save_json("ncu_stage", rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
