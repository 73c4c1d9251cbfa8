"""Per-kernel columns derived from the long ncu metric table, one metric map per architecture family.

FLOPs are split into CUDA-core work (fp64/fp32/fp16: 2·FMA + ADD + MUL thread instructions) and
tensor-core work by op path and dtype. Tensor `ops` counters of Nsight Compute already count FLOPs
(an FMA is two), which the chapter checks against 2·M·N·K from each GEMM's aten shapes. The ncu stage builds the
run's `ncu/kernels.parquet` with these functions (the chapters read that table, never this module).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract.shapes import dim3
from ..contract.kernels import name_key

# column -> candidate metric names, first present wins (names differ little across families; the
# tensor op paths are what differ and are matched by pattern below).
COMMON = {
    "duration_ns": ["gpu__time_duration.sum"],
    "sm_pct": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "dram_pct": ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"],
    "memory_pct": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
    "l1_hit_pct": ["l1tex__t_sector_hit_rate.pct"],
    "l2_hit_pct": ["lts__t_sector_hit_rate.pct"],
    "l1_pct": ["l1tex__throughput.avg.pct_of_peak_sustained_active"],
    "l2_pct": ["lts__throughput.avg.pct_of_peak_sustained_elapsed"],
    "achieved_occupancy_pct": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "theoretical_occupancy_pct": ["sm__maximum_warps_per_active_cycle_pct"],
    "registers": ["launch__registers_per_thread"],
    "shared_bytes_per_block": ["launch__shared_mem_per_block"],
    "block_size": ["launch__block_size"],
    "grid_size": ["launch__grid_size"],
    "waves_per_sm": ["launch__waves_per_multiprocessor"],
    "mem_busy_pct": ["gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed"],
    "max_bandwidth_pct": ["gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed"],
    "dram_bytes": ["dram__bytes.sum"],
    "dram_read_bytes": ["dram__bytes_read.sum"],
    "dram_write_bytes": ["dram__bytes_write.sum"],
    "l2_bytes": ["lts__t_bytes.sum"],
    "l1_bytes": ["l1tex__t_bytes.sum"],
    "local_ld_bytes": ["l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"],
    "local_st_bytes": ["l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"],
    "dram_gbps": ["dram__bytes.sum.per_second"],
    "sm_clock_hz": ["smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second"],
}
# Unit scale to the column's unit (ns, bytes, Hz, GB/s).
UNIT_SCALE = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
              "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
              "hz": 1.0, "Khz": 1e3, "Mhz": 1e6, "Ghz": 1e9, "cycle/second": 1.0, "cycle/nsecond": 1e9,
              "byte/second": 1e-9, "byte/s": 1e-9, "Kbyte/s": 1e-6, "Mbyte/s": 1e-3, "Gbyte/s": 1.0,
              "Tbyte/s": 1e3, "Kbyte/second": 1e-6, "Mbyte/second": 1e-3, "Gbyte/second": 1.0,
              "Tbyte/second": 1e3}

CUDA_CORE = {  # precision -> (fma, add, mul) thread-instruction counters
    "fp64": ("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum"),
    "fp32": ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"),
    "fp16": ("smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum"),
}
# Tensor op paths per family: Hopper warpgroup (hgmma/qgmma) + warp (hmma) MMA; Ampere/Ada hmma;
# Blackwell datacenter tcgen05 (utc*mma) + hmma. Counters end in `.sum` (no rate suffix).
TENSOR_PATHS = {
    "hopper": r"^sm__ops_path_tensor_op_(hgmma|hmma|qgmma|igmma|imma)_src_(?P<src>[a-z0-9]+).*\.sum$",
    "ampere": r"^sm__ops_path_tensor_op_(hmma|imma)_src_(?P<src>[a-z0-9]+).*\.sum$",
    "ada": r"^sm__ops_path_tensor_op_(hmma|imma|qmma)_src_(?P<src>[a-z0-9]+).*\.sum$",
    "blackwell": r"^sm__ops_path_tensor_op_(utc\w*|hmma|qmma|imma|omma)_src_(?P<src>[a-z0-9]+).*\.sum$",
}
SRC_DTYPE = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8": "fp8", "e4m3": "fp8", "e5m2": "fp8",
             "fp64": "fp64", "int8": "int8", "int4": "int4", "int1": "int1"}


def wide(metrics: pd.DataFrame) -> pd.DataFrame:
    """result_id × metric value table (scaled to the column units where a unit is known)."""
    return metrics.pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")


def derive(metrics: pd.DataFrame, family: str = "hopper") -> pd.DataFrame:
    """One row per result_id with the chapter's columns (units in names) and FLOP breakdowns."""
    w = wide(metrics)
    units = metrics.drop_duplicates("metric").set_index("metric")["unit"]
    out = pd.DataFrame(index=w.index)
    for col, cands in COMMON.items():
        out[col] = np.nan
        for m in cands:
            if m in w.columns:
                out[col] = w[m] * UNIT_SCALE.get(units.get(m, ""), 1.0)
                break
    for prec, (fma, add, mul) in CUDA_CORE.items():
        cols = [c for c in (fma, add, mul) if c in w.columns]
        if not cols:
            out[f"flops_cuda_{prec}"] = np.nan
            continue
        f = 2 * w.get(fma, 0) + w.get(add, 0) + w.get(mul, 0)
        out[f"flops_cuda_{prec}"] = f
    pat = re.compile(TENSOR_PATHS[family])
    tensor = {}
    for m in w.columns:
        hit = pat.match(m)
        if hit and "pct" not in m and "per_" not in m:
            dt = SRC_DTYPE.get(hit.group("src"), hit.group("src"))
            tensor.setdefault(dt, []).append(m)
    for dt, cols in tensor.items():
        out[f"flops_tensor_{dt}"] = w[cols].fillna(0).sum(axis=1)
    tcols = [c for c in out.columns if c.startswith("flops_tensor_")]
    ccols = [c for c in out.columns if c.startswith("flops_cuda_")]
    out["flops_tensor"] = out[tcols].sum(axis=1, min_count=1) if tcols else 0.0
    out["flops_cuda"] = out[ccols].sum(axis=1, min_count=1) if ccols else np.nan
    out["flops"] = out[["flops_tensor", "flops_cuda"]].fillna(0).sum(axis=1)
    dur_s = out["duration_ns"] * 1e-9
    out["flops_per_s"] = out["flops"] / dur_s
    for lvl in ("dram", "l2", "l1"):
        out[f"intensity_{lvl}"] = out["flops"] / out[f"{lvl}_bytes"].replace(0, np.nan)
        out[f"{lvl}_bytes_per_s"] = out[f"{lvl}_bytes"] / dur_s
    out["spill_bytes"] = out[["local_ld_bytes", "local_st_bytes"]].fillna(0).sum(axis=1)
    return out.reset_index()


def kernel_table(sel, metrics: pd.DataFrame | None, results: pd.DataFrame | None, timeline: pd.DataFrame,
                 error: str | None, family: str | None = None, graph: bool = False) -> pd.DataFrame:
    """One row per selected kernel: its representative profiled result and derived columns, or a
    `status` naming why it has none."""
    k = sel.kernels.copy()
    tl = timeline[(timeline.phase == sel.phase) & (timeline.kind == "kernel")]
    in_step = set(tl.loc[tl.step == sel.step, "name"])
    derived = None
    if metrics is not None and len(metrics):
        derived = derive(metrics, family or "hopper").merge(results, on="result_id")
        derived["key"] = derived["name"].map(name_key)
        derived = derived.rename(columns={"name": "ncu_name"})
    rows = []
    for _, r in k.iterrows():
        row = r.to_dict()
        match = None if derived is None else derived[derived["key"] == name_key(r["name"])]
        if match is not None and len(match):
            # representative: the launch configuration holding the most time for this kernel
            cfg = tl[tl.name == r["name"]].groupby(["grid", "block"])["duration_ns"].sum()
            pick = match.iloc[0]
            if len(cfg):
                g, b = cfg.idxmax()
                same = match[(match.grid.astype(str) == dim3(g)) & (match.block.astype(str) == dim3(b))]
                if len(same):
                    pick = same.iloc[0]
            row.update({c: pick[c] for c in derived.columns if c != "key"})
            row["configs_profiled"] = len(match)
            row["status"] = "profiled"
        elif r["name"] not in in_step:
            row["status"] = f"not launched inside the profiled range ({sel.phase} step {sel.step})"
        elif error:
            row["status"] = f"ncu: {error}"
        else:
            row["status"] = ("ncu wrote no result for this graph node (every launch configuration of the step was "
                             "asked for, no name filter)" if graph else
                             "ncu profiled no launch of it (name filter did not match)")
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_table_by_position(selected: pd.DataFrame, expected: pd.DataFrame, metrics: pd.DataFrame | None,
                             results: pd.DataFrame | None, error: str | None, family: str | None = None,
                             timeline: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per selected kernel (all phases), tied to its result by position.

    `expected` lists, in launch order, every launch inside the target op calls (capture.ncu
    `expected_launches`): ncu profiles exactly those, one result each, in the same order. A capture cut
    short holds a prefix of them. Each tie is checked by name: `identity` says whether ncu's name for the
    result agrees with the timeline's (`name_key`) or differs (ncu reports some launches under a mangled
    or stale name). If ncu wrote more results than launches were expected, positions no longer say
    anything and kernels are matched by name instead. Returns (kernels, expected with `result_id`)."""
    exp = expected.reset_index(drop=True).copy()
    exp["result_id"] = -1
    derived = None
    if metrics is not None and len(metrics):
        derived = derive(metrics, family or "hopper").merge(results, on="result_id")
        derived = derived.sort_values("result_id").reset_index(drop=True).rename(columns={"name": "ncu_name"})
    n = 0 if derived is None else len(derived)
    by_position = n <= len(exp)
    if derived is not None and by_position:
        exp.loc[: n - 1, "result_id"] = derived["result_id"].to_numpy()
    rows = []
    for _, r in selected.iterrows():
        row = r.to_dict()
        at = exp.index[(exp.kernel_id == r["kernel_id"]) & (exp.phase == r["phase"])]  # ids restart per phase
        pick = None
        if derived is not None and by_position and len(at) and at[0] < n:
            pick = derived.iloc[at[0]]
            agree = name_key(pick["ncu_name"]) == name_key(r["name"])
            row["identity"] = "position; names agree" if agree else "position; ncu names it otherwise"
        elif derived is not None and not by_position:
            same = derived[derived["ncu_name"].map(name_key) == name_key(r["name"])]
            if len(same):
                pick = same.iloc[0]
                row["identity"] = "name (more results than expected launches)"
        if pick is not None:
            row.update({c: pick[c] for c in derived.columns})
            row["configs_profiled"] = 1
            row["status"] = "profiled"
        elif not len(at):
            row["status"] = ("no launch of it inside a numbered op call of the phase (launched outside the "
                             "model's forward), so ncu was not pointed at it")
        elif error:
            row["status"] = f"ncu: {error}"
        else:
            row["status"] = (f"ncu wrote {n} results for {len(exp)} expected launches; "
                             "this kernel's launch was not among them")
        rows.append(row)
    out = pd.DataFrame(rows)
    if timeline is not None:
        same_launch_elsewhere(out, timeline)
    return out, exp


def same_launch_elsewhere(kernels: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """A selected kernel ncu was not pointed at in its phase (its launch had no numbered op call: the
    shapes pass launched differently there) takes the counters of the same kernel, same launch
    configuration, profiled in another phase, marked so in `identity` (in place)."""
    if "status" not in kernels or not (kernels.status == "profiled").any():
        return
    prof = kernels[kernels.status == "profiled"]
    for i, r in kernels[kernels.status.str.startswith("no launch of it")].iterrows():
        mine = timeline[(timeline.phase == r["phase"]) & (timeline.name == r["name"])]
        cfgs = set(zip(mine.grid.map(dim3), mine.block.map(dim3)))
        twin = prof[(prof["name"] == r["name"]) & (prof["phase"] != r["phase"])]
        twin = twin[[(dim3(g), dim3(b)) in cfgs for g, b in zip(twin.grid, twin.block)]]
        if twin.empty or len(cfgs) != 1:
            continue
        t = twin.iloc[0]
        for c in t.index:
            if c not in ("phase", "kernel_id", "name", "total_ns", "launches", "median_ns", "share", "rank"):
                kernels.at[i, c] = t[c]
        kernels.at[i, "identity"] = (f"same kernel profiled in {t['phase']} (grid {t.get('grid')}, block "
                                     f"{t.get('block')}): its {r['phase']} launch had no op call in the shapes pass")
