"""Chapter 02's analysis: coverage, explained time, the per-kernel metric table and fidelity checks."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract.shapes import FLOPS_TOLERANCE, dim3, expected_gemm_flops, implied_bytes, is_matvec
from ..display import phase_label
from ..i18n import N_, tr

from ..contract.kernels import with_identity
from ..contract.manifest import Manifest, read_manifest
from ..escape import md, md_code

# How far an ncu duration may stray from the timeline median before the prose counts it (the FLOP target,
# tensor FLOPs ÷ 2·M·N·K within ±5 %, is contract.shapes.FLOPS_TOLERANCE).
DURATION_TOLERANCE = 0.25

TABLE_COLUMNS = ["kernel_id", "friendly_name", "category", "share_pct", "duration_us", "sm_pct", "dram_pct",
                 "memory_pct", "l1_hit_pct", "l2_hit_pct", "achieved_occupancy_pct",
                 "theoretical_occupancy_pct", "registers", "grid", "block", "waves_per_sm", "spill_bytes",
                 "dram_bytes", "flops_tensor", "flops_cuda", "intensity_dram"]

# Why a cell of the per-kernel and fidelity tables is empty, for the note under each table.
METRIC_MISSING = {
    "intensity_dram": N_("no FLOPs, or no DRAM bytes counted under replay: no intensity"),
    "l1_hit_pct": N_("ncu reports no L1 hit rate for a kernel without L1 traffic"),
    "l2_hit_pct": N_("ncu reports no L2 hit rate for a kernel without L2 traffic"),
    "spill_bytes": N_("not counted by the sections this capture ran"),
    "waves_per_sm": N_("not counted by the sections this capture ran"),
}
FIDELITY_MISSING = {
    "op_shapes": N_("the launch has no aten op shapes in the timeline"),
    "expected_flops": N_("not a matrix product, or its aten shapes do not give M, N and K"),
    "flops_ratio": N_("no 2·M·N·K to compare with"),
    "tensor_flops": N_("no tensor-core instructions counted"),
}


# What the ncu stage writes in a kernel's `status` and `identity` (capture data, English in the run), as
# catalog templates: the chapter shows them in the narrative language (`say`).
_STATUS_TEXT = [
    (re.compile(r"^profiled$"), N_("profiled")),
    (re.compile(r"^position; names agree$"), N_("position; names agree")),
    (re.compile(r"^position; ncu names it otherwise$"), N_("position; ncu names it otherwise")),
    (re.compile(r"^name \(more results than expected launches\)$"), N_("name (more results than expected launches)")),
    (re.compile(r"^no launch of it inside a numbered op call of the phase \(launched outside the model's forward\), "
                r"so ncu was not pointed at it$"),
     N_("no launch of it inside a numbered op call of the phase (launched outside the model's forward), so ncu was "
        "not pointed at it")),
    (re.compile(r"^ncu wrote (?P<n>\d+) results for (?P<expected>\d+) expected launches; this kernel's launch was not "
                r"among them$"),
     N_("ncu wrote {n} results for {expected} expected launches; this kernel's launch was not among them")),
    (re.compile(r"^same kernel profiled in (?P<phase>\S+) \(grid (?P<grid>.*?), block (?P<block>.*?)\): its "
                r"(?P<own>\S+) launch had no op call in the shapes pass$"),
     N_("same kernel profiled in {phase} (grid {grid}, block {block}): its {own} launch had no op call in the shapes "
        "pass")),
    (re.compile(r"^the CUDA driver's kernel for a graph's copy node: ncu profiles a graph's kernel nodes, not its copy "
                r"nodes, so it is left out of the selection and the next kernel taken$"),
     N_("the CUDA driver's kernel for a graph's copy node: ncu profiles a graph's kernel nodes, not its copy nodes, so "
        "it is left out of the selection and the next kernel taken")),
    (re.compile(r"^ncu: (?P<error>.*)$", re.S), N_("ncu: {error}")),
]


def say(value) -> str:
    """A kernel's `status` or `identity` as the ncu stage wrote it (English data), in the narrative language;
    a text no template matches is shown as written. Phase names inside are shown as the book names phases."""
    if not isinstance(value, str):
        return value
    for pattern, template in _STATUS_TEXT:
        m = pattern.match(value)
        if m:
            v = m.groupdict()
            for key in ("phase", "own"):
                if key in v:
                    v[key] = phase_label(v[key])
            return tr(template, **v)
    return value


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
    k = with_identity(kernels, timeline, ["friendly_name", "category"])
    k["share_pct"] = 100 * k["share"]
    k["duration_us"] = k["duration_ns"] / 1e3
    k["status"] = k["status"].map(say)  # capture data in English: shown in the narrative language
    return k[[c for c in TABLE_COLUMNS if c in k.columns] + ["status"]]


def profiled_launch(k, timeline: pd.DataFrame) -> tuple[pd.DataFrame, str | None, str | None]:
    """For one profiled kernel row: the timeline launches of its launch configuration (all of its
    launches in the phase when none match), and the aten op and shapes of the launch ncu profiled
    (`profiled_step` and `op_index`, when the run has them: a decode attention's KV length grows with the
    step), else the configuration's most common shapes. Every check against the shapes uses this launch."""
    tl = timeline[(timeline.name == k["name"]) & (timeline.phase == k["phase"])]
    same = tl[(tl.grid.map(dim3) == dim3(k.get("grid"))) & (tl.block.map(dim3) == dim3(k.get("block")))]
    ref = same if len(same) else tl
    step, op_index = k.get("profiled_step"), k.get("op_index")
    at = ref[ref.step == step] if pd.notna(step) and "step" in ref else ref.iloc[:0]
    if pd.notna(op_index) and "op_index" in at:
        at = at[at.op_index == op_index]
    shapes = at.op_shapes.dropna() if at.op_shapes.notna().any() else ref.op_shapes.dropna().mode()
    shp = shapes.iloc[0] if len(shapes) else None
    op = ref.loc[ref.op_shapes == shp, "op"].iloc[0] if shp is not None else None
    return ref, op, shp


def fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per profiled kernel: ncu duration ÷ timeline median of the same launch configuration, and for
    GEMM/GEMV kernels tensor FLOPs ÷ 2·M·N·K from the aten shapes of the profiled launch (kernels'
    `profiled_step` and `op_index`, when the run has them), else the configuration's most common."""
    kernels = with_identity(kernels, timeline, ["friendly_name", "category"])
    rows = []
    for _, k in kernels[kernels.status == "profiled"].iterrows():
        ref, op, shp = profiled_launch(k, timeline)
        expect = expected_gemm_flops(shp) if k.get("category") in ("GEMM", "GEMV") or (
            isinstance(k.get("name"), str) and "nvjet" in k["name"]) else np.nan
        counted = k.get("flops_tensor") if (k.get("flops_tensor") or 0) > 0 else k.get("flops_cuda")
        rows.append({"kernel_id": k.kernel_id, "phase": k["phase"], "friendly_name": k.get("friendly_name"),
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
    parts = [tr("{phase}: {profiled}/{selected} kernels profiled ({coverage:.0f} %), explaining {explained:.0f} % of "
                "its kernel time", phase=phase_label(c.phase), profiled=c.profiled, selected=c.selected,
                coverage=c.coverage_pct, explained=c.explained_time_pct) for c in cov.itertuples()]
    if len(fid):
        parts.append(tr("median ncu/timeline duration ratio {ratio:.2f}", ratio=fid.duration_ratio.median()))
    return tr("; ").join(parts)


def id_ranges(ids: list[str]) -> str:
    """Kernel ids with runs of three or more consecutive ones as ranges: ['d000', 'd001', 'd002', 'd005'] →
    'd000–d002, d005'."""
    runs: list[list[str]] = []
    for k in ids:
        last = runs[-1][-1] if runs else ""
        follows = (last and k[0] == last[0] and k[1:].isdigit() and last[1:].isdigit()
                   and int(k[1:]) == int(last[1:]) + 1)
        if follows:
            runs[-1].append(k)
        else:
            runs.append([k])
    return tr(", ").join(f"{r[0]}–{r[-1]}" if len(r) > 2 else tr(", ").join(r) for r in runs)


def coverage_prose(cov: pd.DataFrame, kernels: pd.DataFrame, manifest: Manifest | dict) -> str:
    info = read_manifest(manifest).ncu
    lines = []
    phases = info.phases if info else {}
    eager = {p: v for p, v in phases.items() if not v.graph_replay}
    by_position = info is not None and info.expected_launches is not None and bool(eager)
    if by_position:  # one ncu process for every eager phase; a graph phase has a process of its own (below)
        results, selected = sum(v.results for v in eager.values()), sum(v.selected for v in eager.values())
        lines.append(tr("- One ncu process for {phases}: {results} profiled launches for {selected} selected kernels "
                        "({per_kernel:.2f} per kernel) in {seconds:.0f} s; each kernel is identified by its position "
                        "(the op call that launched it in the timeline), so no name filter can miss one (clock "
                        "control `{clock}`, cache control `{cache}`).",
                        phases=tr(", ").join(phase_label(p) for p in eager), results=results,
                        selected=selected, per_kernel=results / max(1, selected), seconds=info.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
        check = info.op_check
        if check.get("checked"):
            pairs = sorted({tr("`{seen}` around `{op}`", seen=md_code(d["op_seen"]), op=md_code(d["op"]))
                            for d in check.get("differ", [])})
            others = tr("; the others the op that calls it at the dispatcher ({pairs})",
                        pairs=tr(", ").join(pairs)) if pairs else ""
            lines.append(tr("- The worker marked {checked} op calls; {agree} run the aten op the timeline names for "
                            "that kernel{others}.", checked=check["checked"], agree=check["agree"], others=others))
    for ph, v in phases.items():
        if by_position and ph in eager:
            continue
        lines.append(tr("- **{phase}**: one ncu process profiled step {step} of the phase, {results} launch "
                        "configurations in {seconds:.0f} s (clock control `{clock}`, cache control `{cache}`).",
                        phase=phase_label(ph), step=v.step, results=v.results, seconds=v.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
    if "identity" in kernels:
        other = kernels[kernels.identity.fillna("").str.len() > 0]
        other = other[~other.identity.eq("position; names agree")]
        for identity, ids in other.groupby("identity", sort=False)["kernel_id"]:
            lines.append(f"- {md(id_ranges(list(ids)))}: {md(say(identity))}.")
    for ph, v in phases.items():
        for d in v.left_out:
            lines.append(tr("- Left out of the {phase} selection: `{name}`, {share:.1f} % of the phase's GPU time: "
                            "{reason}.", phase=phase_label(ph), name=md_code(d.name), share=100 * d.share,
                            reason=say(d.reason)))
    bad = kernels[kernels.status != "profiled"]
    for r in bad.itertuples():
        lines.append(tr("- {kernel} not profiled: {status}", kernel=md(r.kernel_id), status=md(say(r.status))))
    if bad.empty:
        lines.append(tr("- Every selected kernel was profiled."))
    return "\n".join(lines)


def fidelity_prose(fid: pd.DataFrame) -> str:
    if fid.empty:
        return tr("No profiled kernels.")
    out_dur = fid[(fid.duration_ratio - 1).abs() > DURATION_TOLERANCE]
    g = fid.dropna(subset=["flops_ratio"])
    lines = [tr("ncu duration ÷ timeline median: median {median:.2f}, range {low:.2f}–{high:.2f}; {n_off} of {n} "
                "kernels differ by more than {tol:.0f} % (short kernels under replay lose the overlap with their "
                "neighbours and gain cold-cache misses).", median=fid.duration_ratio.median(),
                low=fid.duration_ratio.min(), high=fid.duration_ratio.max(), n_off=len(out_dur), n=len(fid),
                tol=DURATION_TOLERANCE * 100)]
    if len(g):
        off = (g.flops_ratio - 1).abs() > FLOPS_TOLERANCE
        lines.append(tr("Counted FLOPs ÷ 2·M·N·K: {n_ok} of {n} GEMM kernels within ±{tol:.0f} %.",
                        n_ok=(~off).sum(), n=len(g), tol=FLOPS_TOLERANCE * 100))
        for r in g[off].itertuples():
            if r.matvec and r.flops_ratio > 1:
                why = tr("a matrix-vector product ({shapes}) run on tensor cores: the MMA tile pads the vector "
                         "dimension, so the tensor pipe does {ratio:.1f}× the useful work", shapes=md(r.op_shapes),
                         ratio=r.flops_ratio)
            elif r.grouped and r.flops_ratio > 1:
                why = tr("a grouped (MoE) GEMM, checked against 2·M·N·K summed over its groups (every routed row "
                         "through one expert): each expert's rows are padded up to the MMA tile, so the tensor pipe "
                         "does {ratio:.2f}× the useful work; the group sizes are not in the op's shapes, so the "
                         "padding itself cannot be checked from them", ratio=r.flops_ratio)
            elif r.cuda_core:
                why = tr("an FP32 GEMM on CUDA cores, counted from its FMA/ADD/MUL instructions, which include work "
                         "beyond 2·M·N·K (tile edges, the epilogue)")
            else:
                why = tr("shapes from the aten op do not match this launch")
            lines.append(tr("- {kernel} {name}: ratio {ratio:.2f} — {why}.", kernel=md(r.kernel_id),
                            name=md(r.friendly_name), ratio=r.flops_ratio, why=why))
    return "\n".join(lines)


# Byte fidelity: ncu's DRAM bytes against the compulsory traffic the op's shapes imply.
BYTES_TOLERANCE = 0.15
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


def element_bytes(kernel_name: str, default: int) -> int:
    """Operand element size of a matrix kernel: 4 for cuBLAS's FP32 SGEMM-family kernels (the MoE router
    runs in float32), else the run's dtype."""
    n = kernel_name or ""
    return 4 if ("f32f32_f32f32" in n or "sgemm" in n.lower()) else default


def byte_fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame, manifest: Manifest | dict) -> pd.DataFrame:
    """Per profiled matrix/attention kernel with shapes: the bytes its operands imply vs ncu's DRAM bytes
    (read + write), ratio and verdict: agrees (within ±BYTES_TOLERANCE of reads + writes); agrees with the
    reads (the output is still in L2 when the kernel ends: L2 is write-back, so those bytes reach DRAM
    later); below (under `--cache-control none`: the replay's warm L2; else operands served from L2); or
    over-fetching (operands read more than once, with the factor)."""
    info = read_manifest(manifest)
    cache = info.cache_control
    elem = DTYPE_BYTES.get(info.workload.dtype, 2)
    k = with_identity(kernels, timeline, ["friendly_name", "category"])
    rows = []
    for _, r in k[k.status == "profiled"].iterrows():
        _, op, shp = profiled_launch(r, timeline)
        if shp is None:
            continue
        cat = "GEMV" if r.get("category") == "GEMM" and is_matvec(shp) else r.get("category")
        imp = implied_bytes(op, shp, cat, element_bytes(r["name"], elem))
        if imp is None or not imp[0]:
            continue
        read, write, what = imp
        dram = r.get("dram_bytes")
        ratio, ratio_read = dram / (read + write), dram / read
        if abs(ratio - 1) <= BYTES_TOLERANCE and abs(ratio - 1) <= abs(ratio_read - 1):
            verdict = tr("agrees")
        elif abs(ratio_read - 1) <= BYTES_TOLERANCE:
            verdict = tr("agrees with the reads: the {mb:.2f} MB output is still in L2 at the kernel's end",
                         mb=write / 1e6)
        elif ratio < 1:
            verdict = (tr("cache-resident under replay (cache control none): the counters saw a warm L2")
                       if cache == "none" else
                       tr("below the operands' bytes (×{ratio:.2f}): it read less than the shapes say; for a grouped "
                          "GEMM, experts that got no routed rows are skipped (routing is not in the shapes)",
                          ratio=ratio))
        else:
            verdict = tr("over-fetching ×{ratio:.2f}: operands read from DRAM more than once", ratio=ratio)
        rows.append({"kernel_id": r["kernel_id"], "phase": r["phase"], "friendly_name": r.get("friendly_name"),
                     "category": cat, "op": op, "op_shapes": shp, "implies": what, "implied_read_bytes": read,
                     "implied_write_bytes": write, "dram_bytes": dram, "bytes_ratio": ratio,
                     "verdict": verdict})
    return pd.DataFrame(rows, columns=["kernel_id", "phase", "friendly_name", "category", "op", "op_shapes", "implies",
                                       "implied_read_bytes", "implied_write_bytes", "dram_bytes", "bytes_ratio",
                                       "verdict"])


def byte_fidelity_prose(bf: pd.DataFrame, manifest: Manifest | dict) -> str:
    ncu = read_manifest(manifest).ncu
    cache = (ncu.cache_control if ncu else None) or "unknown"
    if bf.empty:
        return tr("No profiled matrix or attention kernel has shapes that say what it must move.")
    # the verdict's two 'agrees' cases, from the numbers (the verdict is prose in the narrative language)
    ok = (((bf.bytes_ratio - 1).abs() <= BYTES_TOLERANCE)
          | ((bf.dram_bytes / bf.implied_read_bytes - 1).abs() <= BYTES_TOLERANCE))
    lines = [tr("DRAM bytes ÷ the bytes the shapes imply: {n_ok} of {n} matrix/attention kernels within ±{tol:.0f} % "
                "of their reads + writes or of their reads alone (ncu cache control `{cache}`).", n_ok=int(ok.sum()),
                n=len(bf), tol=BYTES_TOLERANCE * 100, cache=md_code(cache))]
    for ph, g in bf.groupby("phase"):
        lines.append(tr("- {phase}: {n_ok} of {n} agree; median ratio to reads + writes {median:.2f}.",
                        phase=phase_label(ph), n_ok=int(ok[g.index].sum()), n=len(g), median=g.bytes_ratio.median()))
    for r in bf[~ok].itertuples():
        lines.append(f"- {md(r.kernel_id)} {md(r.friendly_name)} ({phase_label(r.phase)}): {md(r.verdict)}.")
    if cache == "none":
        lines.append(tr("This run was captured with `--cache-control none`: replay passes after the first read a warm "
                        "L2, so DRAM bytes, DRAM throughput and DRAM intensity of these kernels are not what the real "
                        "loop moves."))
    return "\n".join(lines)


# What `--cache-control none` distorts, per chapter that reads DRAM counters.
_DISTORTED = {
    "03": N_("the DRAM throughput %, DRAM hit and L2 hit histograms"),
    "04": N_("every DRAM-level roofline point: its intensity (FLOP per DRAM byte) is inflated and it can land "
             "right of the ridge, on the compute side, when the real loop is memory-bound"),
    "05": N_("the memory-bound vs latency-bound split, the locality flags and Little's-law bytes in flight"),
}


def cache_control_note(manifest: Manifest | dict, chapter: str) -> str:
    """One sentence on the run's ncu cache control: under `none`, which of this chapter's figures it
    distorts; under `all`, that the DRAM counters are what a cold launch moves."""
    cache = read_manifest(manifest).cache_control
    if cache == "none":
        return tr("**This run was captured with ncu `--cache-control none`.** ncu replays each kernel in several "
                  "passes; after the first, its operands sit in L2, so DRAM counters read a warm cache that the real "
                  "decode loop never sees. Distorted here: {distorted}. Re-capture with `cache_control: all` (the "
                  "default) for figures to trust.", distorted=tr(_DISTORTED[chapter]))
    if cache == "all":
        return tr("DRAM counters come from ncu with `--cache-control all`: caches are flushed before each replay pass, "
                  "so each kernel reads its operands from DRAM as a launch in the decode loop does (chapter 02 checks "
                  "the bytes against the shapes).")
    return tr("This run records no ncu cache control; treat its DRAM counters with care.")
