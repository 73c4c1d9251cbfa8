"""The ncu stage of a capture: select → one ncu process per phase → tables with a status per kernel."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from .ncu import NcuError, ncu_command, run_ncu, select_kernels, worker_command
from .run import PARQUET, write_manifest


def ncu_stage(params: dict, run_dir: Path, manifest: dict) -> None:
    from ..analyze.ncu_metrics import kernel_table
    from ..load.ncu import NcuReportError, read_ncu_report_isolated

    timeline = pd.read_parquet(run_dir / "timeline.parquet")
    ncu_dir = run_dir / "ncu"
    ncu_dir.mkdir(exist_ok=True)
    params_file = ncu_dir / "params.json"
    params_file.write_text(json.dumps(params))
    info = manifest.setdefault("ncu", {"clock_control": params["clock_control"],
                                       "cache_control": params["cache_control"], "phases": {}})
    all_metrics, all_kernels, all_results = [], [], []
    for phase in params["ncu_phases"]:
        sel = select_kernels(timeline, phase, params["ncu_top_n"])
        report = ncu_dir / f"{phase}"
        cmd = ncu_command(report, sel.kernels["name"].tolist(),
                          worker_command(params_file, phase, sel.step),
                          params["clock_control"], params["cache_control"])
        t = time.perf_counter()
        error = None
        try:
            run_ncu(cmd, ncu_dir / f"{phase}.log", params["ncu_timeout_s"])
        except NcuError as e:
            error = str(e)
        wall = time.perf_counter() - t
        rep = report.with_suffix(".ncu-rep")
        metrics = results = None
        if rep.exists():
            try:
                metrics, results = read_ncu_report_isolated(rep, ncu_dir)
            except NcuReportError as e:
                error = error or str(e)
        kernels = kernel_table(sel, metrics, results, timeline, error)
        kernels.insert(0, "phase", phase)
        if metrics is not None:
            metrics = metrics.merge(results[["result_id"]], on="result_id")
            metrics.insert(0, "phase", phase)
            all_metrics.append(metrics)
            all_results.append(results.assign(phase=phase))
        all_kernels.append(kernels)
        info["phases"][phase] = {
            "step": sel.step, "selected": len(sel.kernels), "wall_s": wall, "error": error,
            "profiled": int((kernels.status == "profiled").sum()), "results": 0 if results is None else len(results),
            "command": " ".join(cmd[:cmd.index("--kernel-name")]) + " --kernel-name <regex of selected names> ...",
        }
        write_manifest(run_dir, manifest)
    if all_metrics:
        pd.concat(all_metrics, ignore_index=True).to_parquet(ncu_dir / "metrics.parquet", **PARQUET)
        pd.concat(all_results, ignore_index=True).to_parquet(ncu_dir / "results.parquet", **PARQUET)
    pd.concat(all_kernels, ignore_index=True).to_parquet(ncu_dir / "kernels.parquet", **PARQUET)
    failed = [p for p, v in info["phases"].items() if v["error"]]
    if failed and all(info["phases"][p]["profiled"] == 0 for p in failed):
        raise NcuError("; ".join(f"{p}: {info['phases'][p]['error']}" for p in failed))
