"""Chapter 01's analysis: phase wall vs GPU-busy time, launch counts, gaps, top kernels, category shares.

All durations in ns in, ms/µs out as the column names say. Kernels launched by `generate` outside
any model forward (logits processing, token selection, cache bookkeeping) have phase `other`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.manifest import Manifest, read_manifest
from ..contract.shapes import matvec_rows

PHASE_ORDER = ["vision_encode", "prefill", "decode", "other"]

# The reference report's decode table (RTX 5090, DeepSeek-OCR v1, nsys gated on decode): quoted from
# seeds/report-deepseek-ocr-kernel-profiling-v2.en.md, "Key Observations". Shares of decode GPU time.
REFERENCE_DECODE_SHARES = {"GEMV": 49.2, "elementwise": 21.7, "copy/cast": 8.7, "attention": 3.8}


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals (GPU-busy time, overlap counted once)."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    # a new busy block starts where an interval begins after everything before it has ended
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    block_id = np.cumsum(new) - 1
    block_start = s[new]
    block_end = pd.Series(run_end).groupby(block_id).max().to_numpy()
    return int((block_end - block_start).sum())


def phase_kernels(timeline: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The kernel rows of `phase` (no copies, no memsets)."""
    return timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]


def plain_ms_per_step(manifest: Manifest | dict) -> dict[str, float]:
    """Per phase, the plain (unprofiled) wall ms per step the capture timed (`timeline_info.plain_phases`:
    the median of its timing trials; per decode step, per call for the others); empty for a run captured
    before plain phases were timed."""
    return read_manifest(manifest).plain_ms_per_step()


def step_wall_ns(phases: pd.DataFrame, timeline: pd.DataFrame | None = None) -> pd.Series:
    """Wall time (ns) per (phase, step) from the CPU-side ranges. With the `timeline`, a step whose GPU work ends
    after its last range (a CUDA graph's replay: the host's range ends once the graph is launched, the GPU's work
    runs on; 1.6 ms of range against 5.3 ms of kernels at batch 8) lasts until its last kernel, copy or memset ends:
    a step is the host's and the GPU's time together, never shorter than its GPU work."""
    g = phases.groupby(["phase", "step"])
    wall = g.duration_ns.sum()
    if timeline is not None and len(timeline) and len(phases):
        k = timeline[timeline.kind.isin(["kernel", "memcpy", "memset"])] if "kind" in timeline else timeline
        over = (k.groupby(["phase", "step"]).end_ns.max() - g.end_ns.max()).reindex(wall.index)
        wall = wall + over.clip(lower=0).fillna(0)
    return wall.astype("int64")


def phase_wall_ns(phases: pd.DataFrame, timeline: pd.DataFrame | None = None) -> dict[str, int]:
    """Wall time per phase: its steps' (`step_wall_ns`); prefill excludes the vision ranges nested in it."""
    w = step_wall_ns(phases, timeline).groupby(level="phase").sum().to_dict()
    if "prefill" in w and "vision_encode" in w:
        w["prefill"] -= w["vision_encode"]
    return {k: int(v) for k, v in w.items()}


def phase_summary(timeline: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """Per phase: wall_ms, gpu_busy_ms, idle_pct, kernels, steps, launches_per_step, kernel time (the kernels'
    durations) and copy time (the copies' and memsets' durations)."""
    wall = phase_wall_ns(phases, timeline)
    steps = phases.groupby("phase")["step"].nunique().to_dict()
    rows = []
    for ph in PHASE_ORDER:
        k = timeline[timeline.phase == ph]
        if k.empty and ph not in wall:
            continue
        busy = busy_ns(k.start_ns.to_numpy(), k.end_ns.to_numpy())
        w = wall.get(ph)
        n_steps = steps.get(ph, 0)
        rows.append({
            "phase": ph,
            "wall_ms": w / 1e6 if w else np.nan,
            "gpu_busy_ms": busy / 1e6,
            "idle_pct": 100 * (1 - busy / w) if w else np.nan,
            "kernels": int((k.kind == "kernel").sum()),
            "steps": n_steps,
            "launches_per_step": (k.kind == "kernel").sum() / n_steps if n_steps else np.nan,
            "kernel_time_ms": k.duration_ns[k.kind == "kernel"].sum() / 1e6,
            "copy_time_ms": k.duration_ns[k.kind != "kernel"].sum() / 1e6,
        })
    return pd.DataFrame(rows)


def kernel_gaps_us(timeline: pd.DataFrame, phase: str = "decode") -> pd.Series:
    """Idle gap before each kernel (µs): its start minus the latest end of the kernels before it in the same
    step. The first kernel of a step has none: the time from the step before is generate's own work between
    forwards (its kernels are phase `other`), outside the phase's wall time, so the gaps add up to at most
    the phase's wall minus its GPU-busy time."""
    k = timeline[(timeline.phase == phase)].sort_values("start_ns", kind="stable")
    by = k["step"].fillna(-1) if "step" in k else pd.Series(0, index=k.index)
    out = []
    for _, g in k.groupby(by, sort=False):
        if len(g) < 2:
            continue
        prev_end = np.maximum.accumulate(g.end_ns.to_numpy())[:-1]
        out.append((g.start_ns.to_numpy()[1:] - prev_end) / 1e3)
    if not out:
        return pd.Series(dtype=float, name="gap_us")
    return pd.Series(np.clip(np.concatenate(out), 0, None), name="gap_us")


def top_kernels(timeline: pd.DataFrame, phase: str, n: int = 15) -> pd.DataFrame:
    """Top-n kernel identities of a phase by total time, with the reference report's columns."""
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]
    total = k.duration_ns.sum()
    g = k.groupby("name").agg(total_ns=("duration_ns", "sum"), calls=("duration_ns", "size"),
                              mean_ns=("duration_ns", "mean"), median_ns=("duration_ns", "median"),
                              library=("library", "first"), friendly_name=("friendly_name", "first"),
                              category=("category", "first"), description=("description", "first"))
    g = g.sort_values("total_ns", ascending=False).head(n).reset_index()
    g.insert(0, "rank", range(1, len(g) + 1))
    g.insert(1, "time_pct", 100 * g.total_ns / total)
    g["mean_us"] = g.pop("mean_ns") / 1e3
    g["median_us"] = g.pop("median_ns") / 1e3
    g["total_ms"] = g.pop("total_ns") / 1e6
    return g


def top_kernels_by_phase(timeline: pd.DataFrame, n: int = 15) -> pd.DataFrame:
    """`top_kernels` of every phase the run has, one frame with a `phase` column (phases in run order)."""
    phases = [p for p in ("vision_encode", "prefill", "decode") if (timeline.phase == p).any()]
    return pd.concat([top_kernels(timeline, p, n).assign(phase=p) for p in phases], ignore_index=True)


def work_category(timeline: pd.DataFrame) -> pd.Series:
    """Category by the work done: a GEMM kernel running a matrix-vector product counts as GEMV."""
    cat = timeline["category"].copy()
    gemm = cat.eq("GEMM") & matvec_rows(timeline["op_shapes"])
    cat[gemm] = "GEMV"
    return cat


def category_shares(timeline: pd.DataFrame) -> pd.DataFrame:
    """Share of each phase's kernel time per work category (%), long format: phase, category, pct."""
    t = timeline.assign(work=work_category(timeline))
    tot = t.groupby("phase")["duration_ns"].transform("sum")
    t["pct"] = 100 * t.duration_ns / tot
    out = t.groupby(["phase", "work"], as_index=False)["pct"].sum().rename(columns={"work": "category"})
    return out.sort_values(["phase", "pct"], ascending=[True, False]).reset_index(drop=True)


def reference_comparison(shares: pd.DataFrame) -> pd.DataFrame:
    """Our decode category shares beside the reference report's, with the difference (points)."""
    ours = shares[shares.phase == "decode"].set_index("category")["pct"]
    cats = list(REFERENCE_DECODE_SHARES) + [c for c in ours.index if c not in REFERENCE_DECODE_SHARES]
    rows = [{"category": c, "this_run_pct": float(ours.get(c, 0.0)),
             "reference_pct": REFERENCE_DECODE_SHARES.get(c, np.nan)} for c in cats]
    df = pd.DataFrame(rows)
    df["difference_pts"] = df.this_run_pct - df.reference_pct
    return df


# The phases the appendix lists, in the order chapter 01's top-kernel tables show them (ncu selects in these alone).
APPENDIX_PHASES = ["decode", "prefill", "vision_encode"]


def shown_kernels(timeline: pd.DataFrame, kernels: pd.DataFrame | None = None, n: int = 15) -> pd.DataFrame:
    """Appendix: every kernel the book shows by its friendly name, phase by phase, with its full name: the phase's
    top-n by total time (chapter 01's tables) and every kernel ncu selected in it (chapters 02 to 05, by kernel id;
    `kernels`: the run's `ncu_kernels()`, None for a run without counters). One row per phase and full name, the
    phase's largest time first: phase, kernel_id (None where not selected for ncu), friendly_name, rank (by total
    time among all the phase's kernels), time_pct (of the phase's kernel time), top (in the phase's top-n),
    library, name (exactly as the run recorded it, what ncu --kernel-name and source searches match, up to
    `load.run.NAME_LIMIT` characters: a longer one is cut at load to its head, '…' and a hash) and, where a name
    is mangled (`_Z...`) and c++filt reads it, demangled (the readable one beside it)."""
    from ..load.trace import demangle

    cols = ["phase", "kernel_id", "friendly_name", "rank", "time_pct", "top", "library", "name"]
    ids = {}
    if kernels is not None and len(kernels) and {"phase", "name", "kernel_id"} <= set(kernels.columns):
        ids = {(p, nm): k for p, nm, k in zip(kernels.phase, kernels.name, kernels.kernel_id)}
    parts = []
    for ph in APPENDIX_PHASES:
        every = top_kernels(timeline, ph, len(timeline))
        if every.empty:
            continue
        kid = [ids.get((ph, nm)) for nm in every.name]
        keep = (every["rank"] <= n) | pd.Series([k is not None for k in kid], index=every.index)
        parts.append(every.assign(phase=ph, kernel_id=kid, top=every["rank"] <= n)[keep])
    if not parts:
        return pd.DataFrame(columns=cols)
    t = pd.concat(parts, ignore_index=True)[cols]
    t["kernel_id"] = t.kernel_id.astype(object).where(t.kernel_id.notna(), None)
    if t.name.str.startswith("_Z").any():
        readable = [demangle(x) if x.startswith("_Z") else x for x in t.name]
        t["demangled"] = [d if d != x else None for d, x in zip(readable, t.name)]  # c++filt missing: none
    return t


def appendix_frames(names: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """`shown_kernels` as the appendix shows it: per phase (its order), the phase, its rows of `names` and the table,
    whose kernel column reads as every other chapter's ('d004 nvjet GEMM (...)' where ncu selected it); the caption
    is `narrate.timeline.appendix_tables`'."""
    out = []
    for ph, g in names.groupby("phase", sort=False):
        kernel = [f"{k} {f}" if k is not None else f for k, f in zip(g.kernel_id, g.friendly_name)]
        cols = ["rank", "time_pct", "library", "name"] + (["demangled"] if "demangled" in g and
                                                          g.demangled.notna().any() else [])
        frame = g[cols].reset_index(drop=True)
        frame.insert(0, "kernel", kernel)
        out.append((ph, g, frame))
    return out


def top_coverage(timeline: pd.DataFrame, phase: str, n: int) -> dict:
    """What a phase's top-n table holds: its rows, the phase's distinct kernels, and the rows' share of the
    phase's kernel time (%)."""
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]
    t = top_kernels(timeline, phase, n)
    return {"rows": len(t), "distinct": int(k.name.nunique()), "pct": float(t.time_pct.sum()) if len(t) else 0.0}


def decode_figures(summary: pd.DataFrame, shares: pd.DataFrame, manifest: Manifest | dict) -> dict | None:
    """The chapter's headline figures (None without a decode phase): the plain decode step (named quantity, None
    for a run without plain timings), the profiled step and its GPU-busy time (named quantities), the GPU-busy
    share of the profiled step, kernel launches per step, and the largest decode category with its share."""
    s = summary[summary.phase == "decode"]
    if s.empty:
        return None
    d = s.iloc[0]
    top = shares[shares.phase == "decode"].iloc[0]
    info = read_manifest(manifest)
    plain = info.plain_ms_per_step().get("decode")
    rid = info.run_id or ""
    return {"plain": quantity.q(rid, "decode.plain_step_ms", plain) if plain else None,
            "ms_per_token": quantity.q(rid, "decode.profiled_step_ms", d.wall_ms / d.steps),
            "busy_ms": quantity.q(rid, "decode.gpu_busy_step_ms", d.gpu_busy_ms / d.steps),
            "busy_pct": 100 - d.idle_pct, "launches": d.launches_per_step, "category": top.category,
            "pct": top.pct}


def gap_stats(gaps_us: pd.Series) -> dict | None:
    """The gaps' median, 90th and 99th percentiles (µs), their total (ms), and the gaps over 100 µs: their total
    (ms) and count; None without gaps."""
    if gaps_us.empty:
        return None
    q = gaps_us.quantile([0.5, 0.9, 0.99])
    big = gaps_us[gaps_us > 100]
    return {"p50": q[0.5], "p90": q[0.9], "p99": q[0.99], "total_ms": gaps_us.sum() / 1e3,
            "big_ms": big.sum() / 1e3, "n_big": len(big)}


def top_table_display(timeline: pd.DataFrame, phase: str, n: int) -> pd.DataFrame:
    t = top_kernels(timeline, phase, n)
    if t.empty:
        return t
    cols = ["rank", "time_pct", "calls", "mean_us", "median_us", "library", "friendly_name", "category",
            "description"]
    return t[cols]


def matvec_padding(run) -> dict | None:
    """How much the MMA tile pads the run's profiled matrix-vector products, measured: ncu's tensor FLOPs ÷
    2·M·N·K of the profiled launches (chapter 02's check): lo, hi and n (the launches); None without profiled
    tensor-core GEMVs."""
    from .ncu_report import fidelity

    k = run.ncu_kernels()
    if k is None or "status" not in k or not (k.status == "profiled").any():
        return None
    f = fidelity(k, run.timeline, verdicts=False)
    # tensor-core kernels only: a CUDA-core GEMV (cuBLAS's fp32 dot kernel for the router) pads nothing
    f = f[f.matvec.astype(bool) & (f.flops_ratio > 1) & ~f.cuda_core.astype(bool)] if len(f) else f
    if f.empty:
        return None
    return {"lo": f.flops_ratio.min(), "hi": f.flops_ratio.max(), "n": len(f)}


def expert_gather_pct(timeline: pd.DataFrame) -> float | None:
    """The decode weight traffic that is not a GEMV: `aten::index` on a stacked 3-D weight (the routed
    experts' weights copied out of the [experts, N, K] stack before the batched product reads them again),
    its share of decode kernel time (%); None when the run has none."""
    d = timeline[timeline.phase == "decode"]
    if d.empty:
        return None
    first = d.op_shapes.fillna("").str.split(";").str[0]
    g = d[d.category.eq("gather/index") & d.op.eq("aten::index") & first.str.count("x").eq(2)]
    if g.empty:
        return None
    return 100 * g.duration_ns.sum() / d.duration_ns.sum()


# --- Two timeline backends on one workload (issue 46) ---------------------------------------------------------------
BACKEND_TOLERANCE_PCT = 2.0  # GPU time per phase: the two backends agree within this (issue 46's target)


def backend_agreement(run, other) -> pd.DataFrame:
    """Per phase, the run and the same workload captured with the other timeline backend (`load.twins.backend_twin`):
    kernels and GPU time (the sum of kernel durations, ms) in each, and the difference in % of the other's."""
    rows = []
    ka, kb = (r.timeline[r.timeline.kind == "kernel"] for r in (run, other))
    for ph in [p for p in PHASE_ORDER if p in set(ka.phase) | set(kb.phase)]:
        a, b = ka[ka.phase == ph], kb[kb.phase == ph]
        ga, gb = a.duration_ns.sum() / 1e6, b.duration_ns.sum() / 1e6
        rows.append({"phase": ph, "kernels_this": len(a), "kernels_other": len(b), "gpu_ms_this": ga,
                     "gpu_ms_other": gb, "difference_pct": 100 * (ga / gb - 1) if gb else np.nan})
    return pd.DataFrame(rows, columns=["phase", "kernels_this", "kernels_other", "gpu_ms_this", "gpu_ms_other",
                                       "difference_pct"])


def backend_kernels(run, other, phase: str = "decode") -> pd.DataFrame:
    """The phase's kernels that hold >= 1 % of its kernel time in `other`, grouped by kernel stem (the two
    demanglers write one kernel's full name differently: `load.trace.kernel_stem`): GPU ms in each, difference %."""
    from ..load.trace import kernel_stem

    sums = []
    for r in (run, other):
        k = r.timeline[(r.timeline.kind == "kernel") & (r.timeline.phase == phase)]
        sums.append(k.groupby(k.name.map(kernel_stem)).duration_ns.sum() / 1e6)
    a, b = sums
    big = b[b >= 0.01 * b.sum()].sort_values(ascending=False)
    out = pd.DataFrame({"kernel": big.index, "gpu_ms_this": a.reindex(big.index).values, "gpu_ms_other": big.values})
    out["difference_pct"] = 100 * (out.gpu_ms_this / out.gpu_ms_other - 1)
    return out
