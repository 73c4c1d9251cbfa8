"""Does ncu's cost per profiled launch follow the device memory the process holds? (GPU machine)

Re-runs the ncu stage of an existing run (decode only, top-N) once per ballast size: the ncu worker first
takes that many GiB of device memory and writes it (bench/ballast/sitecustomize.py), then runs as usual.
If kernel replay saves and restores the process's memory, the stage grows with the ballast.
Usage: python bench/ncu_ballast.py data/runs/<run-id> [top-n] [GiB ...]   → bench/out/ncu_ballast.json
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


def main(run: str, top: str = "5", *sizes: str) -> None:
    import pandas as pd

    from kernelbook import params as P
    from kernelbook.capture.ncu_stage import ncu_stage
    from kernelbook.contract.config import CaptureConfig

    base = json.loads((Path(run) / "manifest.json").read_text())
    here = str(Path(__file__).resolve().parent / "ballast")
    os.environ["PYTHONPATH"] = here + os.pathsep + os.environ.get("PYTHONPATH", "")
    rows = []
    for gb in sizes or ("0", "16"):
        os.environ["KB_BALLAST_GB"] = gb
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "run"
            d.mkdir()
            pd.read_parquet(Path(run) / "timeline.parquet").to_parquet(d / "timeline.parquet")
            params = {**base["params"], "ncu_phases": ["decode"], "ncu_top_n": int(top)}
            manifest = {"params": params}
            t = time.perf_counter()
            ncu_stage(CaptureConfig.of(P.validate(params, consumer="capture")), d, manifest)
            wall = time.perf_counter() - t
            log = (d / "ncu" / "ncu.log").read_text().splitlines()
            row = {"ballast_gib": float(gb), "stage_wall_s": wall, "results": manifest["ncu"]["results"],
                   "profiled": manifest["ncu"]["phases"]["decode"]["profiled"],
                   "worker": [ln for ln in log if "kernelbook worker done" in ln]}
            rows.append(row)
            print(row, flush=True)
            save_json("ncu_ballast", rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
