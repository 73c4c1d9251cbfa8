"""ncu stage wall time vs number of selected kernels (GPU machine).

Re-runs only the ncu stage of an existing run for each top-N, into throwaway copies of the run, so
the cost per distinct kernel is measured on one machine in one session.
Usage: python bench/ncu_stage.py data/runs/<run-id> 10 20 40   → bench/out/ncu_stage.json
KB_NCU_TIMEOUT_S=<s> cuts each stage at that time limit (checks that a cut-off capture keeps what ncu
profiled); the per-kernel statuses then go to bench/out/ncu_stage_kernels.csv.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import OUT, save_json


def main(run: str, *ns: str) -> None:
    import pandas as pd

    from kernelbook.capture.ncu import NcuError
    from kernelbook.capture.ncu_stage import ncu_stage

    base = json.loads((Path(run) / "manifest.json").read_text())
    rows, statuses = [], []
    for n in map(int, ns or ("10", "20", "40")):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "run"
            d.mkdir()
            shutil.copy(Path(run) / "timeline.parquet", d)
            params = {**base["params"], "ncu_top_n": n}
            if os.environ.get("KB_NCU_TIMEOUT_S"):
                params["ncu_timeout_s"] = int(os.environ["KB_NCU_TIMEOUT_S"])
            manifest = {"params": params}
            t = time.perf_counter()
            try:
                ncu_stage(params, d, manifest)
            except NcuError as e:  # nothing profiled at all: still report the row
                print(f"top {n}: {e}", flush=True)
            wall = time.perf_counter() - t
            ph = manifest["ncu"]["phases"]["decode"]
            log = (d / "ncu" / "decode.log").read_text() if (d / "ncu" / "decode.log").exists() else ""
            worker = [ln for ln in log.splitlines() if "kernelbook worker done" in ln]
            rows.append({"top_n": n, "wall_s": wall, "results": ph["results"], "profiled": ph["profiled"],
                         "ncu_wall_s": ph["wall_s"], "error": ph["error"],
                         "timeout_s": params["ncu_timeout_s"], "worker": worker[-1] if worker else None})
            k = pd.read_parquet(d / "ncu" / "kernels.parquet")
            statuses.append(k[["kernel_id", "name", "status"]].assign(top_n=n))
            print(rows[-1], flush=True)
            # rewritten after every top-N, so a session cut short keeps what it measured
            save_json("ncu_stage", rows)
            pd.concat(statuses).to_csv(OUT / "ncu_stage_kernels.csv", index=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
