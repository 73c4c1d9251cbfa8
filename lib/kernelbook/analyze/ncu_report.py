"""Chapter 02's analysis: coverage, explained time, the per-kernel metric table and fidelity checks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .ncu_metrics import _dim3
from .timeline import gemm_dims, is_matvec

# Fidelity targets: tensor FLOPs ÷ 2·M·N·K within ±5 % (the target), and how far an ncu
# duration may stray from the timeline median before the prose counts it.
FLOPS_TOLERANCE = 0.05
DURATION_TOLERANCE = 0.25

TABLE_COLUMNS = ["kernel_id", "friendly_name", "category", "share_pct", "duration_us", "sm_pct", "dram_pct",
                 "memory_pct", "l1_hit_pct", "l2_hit_pct", "achieved_occupancy_pct",
                 "theoretical_occupancy_pct", "registers", "grid", "block", "waves_per_sm", "spill_bytes",
                 "dram_bytes", "flops_tensor", "flops_cuda", "intensity_dram"]

# Why a cell of the per-kernel and fidelity tables is empty, for the note under each table.
METRIC_MISSING = {
    "intensity_dram": "no FLOPs, or no DRAM bytes counted under replay: no intensity",
    "l1_hit_pct": "ncu reports no L1 hit rate for a kernel without L1 traffic",
    "l2_hit_pct": "ncu reports no L2 hit rate for a kernel without L2 traffic",
    "spill_bytes": "not counted by the sections this capture ran",
    "waves_per_sm": "not counted by the sections this capture ran",
}
FIDELITY_MISSING = {
    "op_shapes": "the launch has no aten op shapes in the timeline",
    "expected_flops": "not a matrix product, or its aten shapes do not give M, N and K",
    "flops_ratio": "no 2·M·N·K to compare with",
    "tensor_flops": "no tensor-core instructions counted",
}


def coverage(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per phase: selected, profiled, coverage %, and the share of the phase's kernel time the profiled
    kernels explain (%)."""
    rows = []
    for ph, k in kernels.groupby("phase"):
        ok = k.status == "profiled"
        rows.append({"phase": ph, "selected": len(k), "profiled": int(ok.sum()),
                     "coverage_pct": 100 * ok.mean(), "explained_time_pct": 100 * k.loc[ok, "share"].sum(),
                     "selected_time_pct": 100 * k["share"].sum()})
    return pd.DataFrame(rows)


def metric_table(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    ident = timeline.drop_duplicates("name").set_index("name")[["friendly_name", "category"]]
    k = kernels.join(ident, on="name")
    k["share_pct"] = 100 * k["share"]
    k["duration_us"] = k["duration_ns"] / 1e3
    return k[[c for c in TABLE_COLUMNS if c in k.columns] + ["status"]]


def expected_gemm_flops(op_shapes: str | None) -> float:
    """2·M·N·K (× batch) from an aten matrix product's recorded input shapes (see timeline.gemm_dims)."""
    g = gemm_dims(op_shapes)
    return np.nan if g is None else 2.0 * g[0] * g[1] * g[2] * g[3]


def fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame, phase_col: str = "phase") -> pd.DataFrame:
    """Per profiled kernel: ncu duration ÷ timeline median of the same launch configuration, and for
    GEMM/GEMV kernels tensor FLOPs ÷ 2·M·N·K from the aten shapes of that configuration."""
    ident = timeline.drop_duplicates("name").set_index("name")[["friendly_name", "category"]]
    kernels = kernels.drop(columns=[c for c in ("friendly_name", "category") if c in kernels]).join(ident, on="name")
    rows = []
    for _, k in kernels[kernels.status == "profiled"].iterrows():
        tl = timeline[(timeline.name == k["name"]) & (timeline.phase == k[phase_col])]
        same = tl[(tl.grid.map(_dim3) == _dim3(k.get("grid"))) & (tl.block.map(_dim3) == _dim3(k.get("block")))]
        ref = same if len(same) else tl
        shapes = ref.op_shapes.dropna().mode()
        shp = shapes.iloc[0] if len(shapes) else None
        expect = expected_gemm_flops(shp) if k.get("category") in ("GEMM", "GEMV") or (
            isinstance(k.get("name"), str) and "nvjet" in k["name"]) else np.nan
        op = ref.loc[ref.op_shapes == shp, "op"].iloc[0] if shp is not None else None
        counted = k.get("flops_tensor") if (k.get("flops_tensor") or 0) > 0 else k.get("flops_cuda")
        rows.append({"kernel_id": k.kernel_id, "friendly_name": k.get("friendly_name"),
                     "category": k.get("category"), "ncu_us": k.duration_ns / 1e3,
                     "timeline_median_us": ref.duration_ns.median() / 1e3,
                     "duration_ratio": k.duration_ns / ref.duration_ns.median(),
                     "op_shapes": shp, "matvec": is_matvec(shp), "expected_flops": expect,
                     "tensor_flops": k.get("flops_tensor"), "grouped": op == "aten::_grouped_mm",
                     "cuda_core": not (k.get("flops_tensor") or 0) > 0,
                     # an FP32 GEMM (the MoE router) runs on CUDA cores: its counted FLOPs are those
                     "flops_ratio": counted / expect if expect and expect == expect else np.nan})
    return pd.DataFrame(rows)




def headline(cov: pd.DataFrame, fid: pd.DataFrame, manifest: dict) -> str:
    parts = [f"{c.phase}: {c.profiled}/{c.selected} kernels profiled ({c.coverage_pct:.0f} %), explaining "
             f"{c.explained_time_pct:.0f} % of its kernel time" for c in cov.itertuples()]
    if len(fid):
        parts.append(f"median ncu/timeline duration ratio {fid.duration_ratio.median():.2f}")
    return "; ".join(parts)


def coverage_prose(cov: pd.DataFrame, kernels: pd.DataFrame, manifest: dict) -> str:
    info = manifest.get("ncu", {})
    lines = []
    if info.get("processes") == 1 and "expected_launches" in info:
        lines.append(f"- One ncu process for {', '.join(info['phases'])}: {info['results']} profiled launches for "
                     f"{info['selected']} selected kernels ({info['results_per_selected']:.2f} per kernel) in "
                     f"{info['wall_s']:.0f} s; each kernel is identified by its position (the op call that launched "
                     f"it in the timeline), so no name filter can miss one (clock control "
                     f"`{info.get('clock_control')}`, cache control `{info.get('cache_control')}`).")
        check = info.get("op_check") or {}
        if check.get("checked"):
            pairs = sorted({f"`{d['op_seen']}` around `{d['op']}`" for d in check.get("differ", [])})
            lines.append(f"- The worker marked {check['checked']} op calls; {check['agree']} run the aten op the "
                         "timeline names for that kernel" + (f"; the others the op that calls it at the dispatcher "
                                                             f"({', '.join(pairs)})" if pairs else "") + ".")
    else:
        for ph, v in info.get("phases", {}).items():
            lines.append(f"- **{ph}**: one ncu process profiled step {v['step']} of the phase, {v['results']} "
                         f"launch configurations in {v['wall_s']:.0f} s (clock control "
                         f"`{info.get('clock_control')}`, cache control `{info.get('cache_control')}`).")
    if "identity" in kernels:
        other = kernels[kernels.identity.fillna("").str.len() > 0]
        other = other[~other.identity.eq("position; names agree")]
        for r in other.itertuples():
            lines.append(f"- {r.kernel_id}: {r.identity}.")
    bad = kernels[kernels.status != "profiled"]
    for r in bad.itertuples():
        lines.append(f"- {r.kernel_id} not profiled: {r.status}")
    if bad.empty:
        lines.append("- Every selected kernel was profiled.")
    return "\n".join(lines)


def fidelity_prose(fid: pd.DataFrame) -> str:
    if fid.empty:
        return "No profiled kernels."
    out_dur = fid[(fid.duration_ratio - 1).abs() > DURATION_TOLERANCE]
    g = fid.dropna(subset=["flops_ratio"])
    lines = [f"ncu duration ÷ timeline median: median {fid.duration_ratio.median():.2f}, range "
             f"{fid.duration_ratio.min():.2f}–{fid.duration_ratio.max():.2f}; {len(out_dur)} of {len(fid)} "
             f"kernels differ by more than {DURATION_TOLERANCE * 100:.0f} % (short kernels under replay lose "
             "the overlap with their neighbours and gain cold-cache misses)."]
    if len(g):
        off = (g.flops_ratio - 1).abs() > FLOPS_TOLERANCE
        lines.append(f"Counted FLOPs ÷ 2·M·N·K: {(~off).sum()} of {len(g)} GEMM kernels within "
                     f"±{FLOPS_TOLERANCE * 100:.0f} %.")
        for r in g[off].itertuples():
            if r.matvec and r.flops_ratio > 1:
                why = (f"a matrix-vector product ({r.op_shapes}) run on tensor cores: the MMA tile pads the "
                       f"vector dimension, so the tensor pipe does {r.flops_ratio:.1f}× the useful work")
            elif r.grouped and r.flops_ratio > 1:
                why = ("a grouped (MoE) GEMM, checked against 2·M·N·K summed over its groups (every routed row "
                       "through one expert): each expert's rows are padded up to the MMA tile, so the tensor "
                       f"pipe does {r.flops_ratio:.2f}× the useful work; the group sizes are not in the op's "
                       "shapes, so the padding itself cannot be checked from them")
            elif r.cuda_core:
                why = ("an FP32 GEMM on CUDA cores, counted from its FMA/ADD/MUL instructions, which include work "
                       "beyond 2·M·N·K (tile edges, the epilogue)")
            else:
                why = "shapes from the aten op do not match this launch"
            lines.append(f"- {r.kernel_id} {r.friendly_name}: ratio {r.flops_ratio:.2f} — {why}.")
    return "\n".join(lines)


# Byte fidelity: ncu's DRAM bytes against the compulsory traffic the op's shapes imply.
BYTES_TOLERANCE = 0.15
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


def element_bytes(kernel_name: str, default: int) -> int:
    """Operand element size of a matrix kernel: 4 for cuBLAS's FP32 SGEMM-family kernels (the MoE router
    runs in float32), else the run's dtype."""
    n = kernel_name or ""
    return 4 if ("f32f32_f32f32" in n or "sgemm" in n.lower()) else default


def implied_bytes(op: str | None, op_shapes: str | None, category: str | None, elem_bytes: int
                  ) -> tuple[float, float, str] | None:
    """(read bytes, write bytes, what) a launch must move between DRAM and the SMs if each operand is
    read once and the output written once: a matrix product's weights + activations and its output (a
    grouped MoE GEMM reads every expert's weights), an attention kernel's q, K and V (the KV cache in
    decode) and its output. None where the shapes do not say."""
    from .whatif import _elems, shapes as arg_shapes

    if category in ("GEMM", "GEMV"):
        g = gemm_dims(op_shapes)
        if g is None:
            return None
        b, m, n, k, w = g
        if op == "aten::_grouped_mm":
            return (float(elem_bytes) * (m * k + w), float(elem_bytes) * m * n,
                    f"{m}×{k} routed rows · {w // (k * n)} experts' {k}×{n} weights")
        return (float(elem_bytes) * b * (m * k + k * n), float(elem_bytes) * b * m * n,
                f"{'%d× ' % b if b > 1 else ''}{m}×{k} · {k}×{n}")
    if category == "attention":
        args = [a[0] for a in arg_shapes(op_shapes) if a]
        if len(args) < 3 or any(len(t) != 4 for t in args[:3]):
            return None
        q, kk, v = args[:3]
        kv = _elems(kk) + _elems(v)
        return (float(elem_bytes) * (_elems(q) + kv), float(elem_bytes) * _elems(q),
                f"q {'×'.join(map(str, q))} + K, V {'×'.join(map(str, kk))} ({kv * elem_bytes / 1e6:.2f} MB)")
    return None


def byte_fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """Per profiled matrix/attention kernel with shapes: the bytes its operands imply vs ncu's DRAM bytes
    (read + write), ratio and verdict: agrees (within ±BYTES_TOLERANCE of reads + writes); agrees with the
    reads (the output is still in L2 when the kernel ends: L2 is write-back, so those bytes reach DRAM
    later); below (under `--cache-control none`: the replay's warm L2; else operands served from L2); or
    over-fetching (operands read more than once, with the factor)."""
    cache = manifest.get("ncu", {}).get("cache_control") or manifest.get("params", {}).get("cache_control")
    elem = DTYPE_BYTES.get(manifest.get("params", {}).get("dtype", "bfloat16"), 2)
    ident = timeline.drop_duplicates("name").set_index("name")[["friendly_name", "category"]]
    k = kernels.drop(columns=[c for c in ("friendly_name", "category") if c in kernels]).join(ident, on="name")
    rows = []
    for _, r in k[k.status == "profiled"].iterrows():
        tl = timeline[(timeline.name == r["name"]) & (timeline.phase == r["phase"])]
        same = tl[(tl.grid.map(_dim3) == _dim3(r.get("grid"))) & (tl.block.map(_dim3) == _dim3(r.get("block")))]
        ref = same if len(same) else tl
        shp = ref.op_shapes.dropna().mode()
        if not len(shp):
            continue
        op = ref.loc[ref.op_shapes == shp.iloc[0], "op"].iloc[0]
        cat = "GEMV" if r.get("category") == "GEMM" and is_matvec(shp.iloc[0]) else r.get("category")
        imp = implied_bytes(op, shp.iloc[0], cat, element_bytes(r["name"], elem))
        if imp is None or not imp[0]:
            continue
        read, write, what = imp
        dram = r.get("dram_bytes")
        ratio, ratio_read = dram / (read + write), dram / read
        if abs(ratio - 1) <= BYTES_TOLERANCE and abs(ratio - 1) <= abs(ratio_read - 1):
            verdict = "agrees"
        elif abs(ratio_read - 1) <= BYTES_TOLERANCE:
            verdict = f"agrees with the reads: the {write / 1e6:.2f} MB output is still in L2 at the kernel's end"
        elif ratio < 1:
            verdict = ("cache-resident under replay (cache control none): the counters saw a warm L2"
                       if cache == "none" else f"below the operands' bytes (×{ratio:.2f}): it read less than the shapes say; for a "
                       "grouped GEMM, experts that got no routed rows are skipped (routing is not in the shapes)")
        else:
            verdict = f"over-fetching ×{ratio:.2f}: operands read from DRAM more than once"
        rows.append({"kernel_id": r["kernel_id"], "phase": r["phase"], "friendly_name": r.get("friendly_name"),
                     "category": cat, "op": op, "implies": what, "implied_read_bytes": read,
                     "implied_write_bytes": write, "dram_bytes": dram, "bytes_ratio": ratio,
                     "verdict": verdict})
    return pd.DataFrame(rows, columns=["kernel_id", "phase", "friendly_name", "category", "op", "implies",
                                       "implied_read_bytes", "implied_write_bytes", "dram_bytes", "bytes_ratio",
                                       "verdict"])


def byte_fidelity_prose(bf: pd.DataFrame, manifest: dict) -> str:
    cache = manifest.get("ncu", {}).get("cache_control", "unknown")
    if bf.empty:
        return "No profiled matrix or attention kernel has shapes that say what it must move."
    ok = bf.verdict.str.startswith("agrees")
    lines = [f"DRAM bytes ÷ the bytes the shapes imply: {int(ok.sum())} of {len(bf)} matrix/attention kernels "
             f"within ±{BYTES_TOLERANCE * 100:.0f} % of their reads + writes or of their reads alone (ncu cache "
             f"control `{cache}`)."]
    for ph, g in bf.groupby("phase"):
        lines.append(f"- {ph}: {int(g.verdict.str.startswith('agrees').sum())} of {len(g)} agree; median ratio "
                     f"to reads + writes {g.bytes_ratio.median():.2f}.")
    for r in bf[~ok].itertuples():
        lines.append(f"- {r.kernel_id} {r.friendly_name} ({r.phase}): {r.verdict}.")
    if cache == "none":
        lines.append("This run was captured with `--cache-control none`: replay passes after the first read a "
                     "warm L2, so DRAM bytes, DRAM throughput and DRAM intensity of these kernels are not what "
                     "the real loop moves.")
    return "\n".join(lines)


# What `--cache-control none` distorts, per chapter that reads DRAM counters.
_DISTORTED = {
    "03": "the DRAM throughput %, DRAM hit and L2 hit histograms",
    "04": "every DRAM-level roofline point: its intensity (FLOP per DRAM byte) is inflated and it can land right "
          "of the ridge, on the compute side, when the real loop is memory-bound",
    "05": "the memory-bound vs latency-bound split, the locality flags and Little's-law bytes in flight",
}


def cache_control_note(manifest: dict, chapter: str) -> str:
    """One sentence on the run's ncu cache control: under `none`, which of this chapter's figures it
    distorts; under `all`, that the DRAM counters are what a cold launch moves."""
    cache = (manifest.get("ncu") or {}).get("cache_control") or (manifest.get("params") or {}).get("cache_control")
    if cache == "none":
        return ("**This run was captured with ncu `--cache-control none`.** ncu replays each kernel in "
                "several passes; after the first, its operands sit in L2, so DRAM counters read a warm cache that the real "
                f"decode loop never sees. Distorted here: {_DISTORTED[chapter]}. Re-capture with "
                "`cache_control: all` (the default) for figures to trust.")
    if cache == "all":
        return ("DRAM counters come from ncu with `--cache-control all`: caches are flushed before each replay "
                "pass, so each kernel reads its operands from DRAM as a launch in the decode loop does "
                "(chapter 02 checks the bytes against the shapes).")
    return "This run records no ncu cache control; treat its DRAM counters with care."
