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
from ..display import phase_label
from ..i18n import N_, tr
from ..escape import md

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
    """Per phase: wall_ms, gpu_busy_ms, idle_pct, kernels, steps, launches_per_step, kernel time."""
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
            "kernel_time_ms": k.duration_ns.sum() / 1e6,
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
    from ..display import demangle

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


def appendix_tables(names: pd.DataFrame, timeline: pd.DataFrame, n: int = 15) -> list[tuple[str, str, pd.DataFrame]]:
    """`shown_kernels` as the appendix shows it: per phase (its order), the phase, a caption and the table, whose
    kernel column reads as every other chapter's ('d004 nvjet GEMM (...)' where ncu selected it)."""
    out = []
    for ph, g in names.groupby("phase", sort=False):
        kernel = [f"{k} {f}" if k is not None else f for k, f in zip(g.kernel_id, g.friendly_name)]
        cols = ["rank", "time_pct", "library", "name"] + (["demangled"] if "demangled" in g and
                                                          g.demangled.notna().any() else [])
        frame = g[cols].reset_index(drop=True)
        frame.insert(0, "kernel", kernel)
        out.append((ph, appendix_caption(g, timeline, ph, n), frame))
    return out


def appendix_caption(rows: pd.DataFrame, timeline: pd.DataFrame, phase: str, n: int) -> str:
    """Caption of one phase's appendix table: how many kernels, which (the top-n, and those selected for ncu), and how
    much of the phase's kernel time they hold; the top-kernel table's caption where ncu selected none beyond them."""
    extra = int((~rows.top.astype(bool)).sum())
    if not extra:
        return top_caption(timeline, phase, n)
    name = phase_label(phase)
    return tr("{label}: {count} kernels, the top {top} by total time and {extra} more selected for ncu, "
              "{pct:.1f} % of {phase} kernel time", label=name[:1].upper() + name[1:], count=len(rows),
              top=int(rows.top.astype(bool).sum()), extra=extra, pct=rows.time_pct.sum(), phase=name)


# Why a phase-summary cell is empty, for the note under the table.
PHASE_SUMMARY_MISSING = {
    "wall_ms": N_("the 'other' row is generate's own work between forwards, which has no phase range, so no "
                  "wall time or idle share of its own"),
    "launches_per_step": N_("a phase without steps has no per-step count"),
}


def top_caption(timeline: pd.DataFrame, phase: str, n: int) -> str:
    """Caption of a top-kernel table: the phase, and how much of its kernel time the rows hold."""
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]
    t = top_kernels(timeline, phase, n)
    name = phase_label(phase)
    label = name[:1].upper() + name[1:]
    if t.empty:
        return tr("{phase}: no kernels", phase=label)
    distinct = k.name.nunique()
    which = tr("top {n} of {distinct} kernels", n=len(t), distinct=distinct) if distinct > len(t) else (
        tr("its one kernel") if distinct == 1 else tr("all {distinct} kernels", distinct=distinct))
    return tr("{label}: {which} by total time, {pct:.1f} % of {phase} kernel time", label=label, which=which,
              pct=t.time_pct.sum(), phase=name)


# --- prose: every number below is computed from the run ---------------------------------------------
def _row(summary: pd.DataFrame, phase: str):
    s = summary[summary.phase == phase]
    return None if s.empty else s.iloc[0]


def headline(summary: pd.DataFrame, shares: pd.DataFrame, manifest: Manifest | dict) -> str:
    d = _row(summary, "decode")
    if d is None:
        return tr("no decode phase in this run")
    top = shares[shares.phase == "decode"].iloc[0]
    info = read_manifest(manifest)
    plain = info.plain_ms_per_step().get("decode")
    rid = info.run_id or ""
    if plain:
        return tr("decode: {plain:.1f} ms per token on the wall clock without the profiler ({ms_per_token:.1f} ms under "
                  "it), GPU busy {busy_ms:.2f} ms of it ({launches:.0f} kernel launches per token); {category} holds "
                  "{pct:.0f} % of decode kernel time", plain=quantity.q(rid, "decode.plain_step_ms", plain),
                  ms_per_token=quantity.q(rid, "decode.profiled_step_ms", d.wall_ms / d.steps),
                  busy_ms=quantity.q(rid, "decode.gpu_busy_step_ms", d.gpu_busy_ms / d.steps),
                  launches=d.launches_per_step, category=top.category, pct=top.pct)
    return tr("decode: {ms_per_token:.1f} ms per token on the wall clock under the profiler, GPU busy {busy_pct:.0f} % "
              "of it ({launches:.0f} kernel launches per token); {category} holds {pct:.0f} % of decode kernel time",
              ms_per_token=quantity.q(read_manifest(manifest).run_id or "", "decode.profiled_step_ms", d.wall_ms / d.steps),
              busy_pct=100 - d.idle_pct, launches=d.launches_per_step,
              category=top.category, pct=top.pct)


def phase_prose(summary: pd.DataFrame, manifest: Manifest | dict) -> str:
    info = read_manifest(manifest)
    d = _row(summary, "decode")
    lines = []
    total_wall = summary.wall_ms.sum()
    for _, s in summary.iterrows():
        if s.phase == "other":
            continue
        lines.append(tr("- **{phase}**: {wall_ms:.1f} ms wall under the profiler, {busy_ms:.1f} ms GPU busy (idle "
                        "{idle_pct:.0f} %), {kernels} kernels", phase=phase_label(s.phase), wall_ms=s.wall_ms,
                        busy_ms=s.gpu_busy_ms, idle_pct=s.idle_pct, kernels=s.kernels))
    o = _row(summary, "other")
    if o is not None:
        lines.append(tr("- **other** (generate's own work between forwards: logits processing, token selection): "
                        "{kernels} kernels, {ms:.1f} ms of kernel time under the profiler", kernels=o.kernels,
                        ms=o.kernel_time_ms))
    if d is not None:
        bound = (tr("Decode is **launch-bound**") if d.idle_pct > 50 else tr("Decode is **GPU-bound**"))
        plain = info.plain_ms_per_step().get("decode")
        if plain:  # the step a reader should take: the plain generate's; GPU-busy from the profiled pass
            lines.append("\n" + bound + tr(
                ": each token issues {launches:.0f} kernels in {ms:.2f} ms without the profiler ({profiled:.2f} ms "
                "under it), {us:.1f} µs of plain wall time per launch, while the GPU is busy "
                "{busy:.2f} ms per step (GPU-busy, profiled pass), idle {idle_pct:.0f} % of the plain step. "
                "Fewer, larger kernels (fusion, CUDA graphs) would shorten decode more than faster kernels would.",
                launches=d.launches_per_step, ms=plain, profiled=d.wall_ms / d.steps,
                us=plain * 1e3 / d.launches_per_step, busy=d.gpu_busy_ms / d.steps,
                idle_pct=100 * max(0.0, 1 - d.gpu_busy_ms / d.steps / plain)))
        else:
            lines.append("\n" + bound + tr(
                ": each token issues {launches:.0f} kernels in {ms:.2f} ms under the profiler (the run has no "
                "plain step timing), {us:.1f} µs of wall time per launch, while the GPU is idle {idle_pct:.0f} % of "
                "the time. Fewer, larger kernels (fusion, CUDA graphs) would shorten decode more than faster "
                "kernels would.", launches=d.launches_per_step, ms=d.wall_ms / d.steps,
                us=(d.wall_ms * 1e3) / (d.launches_per_step * d.steps), idle_pct=d.idle_pct))
    tl = info.timeline_info
    if tl.plain_generate:
        plain_s = tl.plain_generate.median_s
        profiled_s = tl.profiled_generate_s if tl.profiled_generate_s is not None else float("nan")
        lines.append("\n" + tr("One unprofiled generate took {seconds:.3f} s (median of {trials}); under the profiler "
                               "it took {profiled:.3f} s ({ratio:.2f}× the plain run), {phases:.3f} s of it in the "
                               "phases above and the rest in generate's own work between forwards.",
                               seconds=plain_s, trials=tl.plain_generate.trials, profiled=profiled_s,
                               ratio=profiled_s / plain_s, phases=total_wall / 1e3))
    if tl.sampling:
        sm = tl.sampling
        lines.append(tr("The profiler recorded {n} of the {total} decode steps, in {w} windows (a long generation): "
                        "the decode row and every table of the book hold those steps; the plain generate timed all "
                        "of them (the step-by-step section below).", n=sm["profiled_decode_steps"],
                        total=sm["decode_steps"], w=len(sm["windows"])))
    return "\n".join(lines)


def gap_prose(gaps_us: pd.Series) -> str:
    if gaps_us.empty:
        return ""
    q = gaps_us.quantile([0.5, 0.9, 0.99])
    total = gaps_us.sum() / 1e3
    big = gaps_us[gaps_us > 100]
    return tr("Median gap {p50:.1f} µs, 90th percentile {p90:.1f} µs, 99th {p99:.0f} µs (profiled pass); "
              "{total:.0f} ms of decode under the profiler is spent in gaps, {big_ms:.0f} ms of it in the {n_big} "
              "gaps longer than 100 µs.", p50=q[0.5],
              p90=q[0.9], p99=q[0.99], total=total, big_ms=big.sum() / 1e3, n_big=len(big))


def top_table_display(timeline: pd.DataFrame, phase: str, n: int) -> pd.DataFrame:
    t = top_kernels(timeline, phase, n)
    if t.empty:
        return t
    cols = ["rank", "time_pct", "calls", "mean_us", "median_us", "library", "friendly_name", "category",
            "description"]
    return t[cols]


def matvec_padding_prose(run) -> str:
    """How much the MMA tile pads the run's profiled matrix-vector products, measured: ncu's tensor FLOPs ÷
    2·M·N·K of the profiled launches (chapter 02's check); empty without profiled GEMVs."""
    from .ncu_report import fidelity

    k = run.ncu_kernels()
    if k is None or "status" not in k or not (k.status == "profiled").any():
        return ""
    f = fidelity(k, run.timeline, verdicts=False)
    # tensor-core kernels only: a CUDA-core GEMV (cuBLAS's fp32 dot kernel for the router) pads nothing
    f = f[f.matvec.astype(bool) & (f.flops_ratio > 1) & ~f.cuda_core.astype(bool)] if len(f) else f
    if f.empty:
        return ""
    return tr(" Here the matrix-vector products run on tensor cores, whose MMA tile pads the vector: ncu counts "
              "{lo:.2f}–{hi:.2f}× the useful 2·M·N·K on the {n} profiled ones (chapter 02).",
              lo=f.flops_ratio.min(), hi=f.flops_ratio.max(), n=len(f))


def expert_gather_prose(timeline: pd.DataFrame, gemv_pct: float) -> str:
    """The decode weight traffic that is not a GEMV: `aten::index` on a stacked 3-D weight (the routed
    experts' weights copied out of the [experts, N, K] stack before the batched product reads them again),
    its share of decode kernel time (%); empty when the run has none."""
    d = timeline[timeline.phase == "decode"]
    if d.empty:
        return ""
    first = d.op_shapes.fillna("").str.split(";").str[0]
    g = d[d.category.eq("gather/index") & d.op.eq("aten::index") & first.str.count("x").eq(2)]
    if g.empty:
        return ""
    pct = 100 * g.duration_ns.sum() / d.duration_ns.sum()
    return tr(" The routed experts' weights are first copied out of their stacked tensor by `aten::index` "
              "(gather/index, {pct:.1f} % of decode kernel time) and then read again by the GEMV: weight traffic "
              "holds {both:.1f} % here in the two together.", pct=pct, both=gemv_pct + pct)


def reference_prose(cmp: pd.DataFrame, run) -> str:
    c = cmp.set_index("category")
    gemv = c.loc["GEMV"] if "GEMV" in c.index else None
    lines = [tr("The reference measured DeepSeek-OCR v1 on an RTX 5090; this run is {model} on {gpu}.",
                model=md(run.info.workload.model), gpu=md(run.gpu_name))]
    if gemv is not None:
        lines.append(tr("- **GEMV**: {here:.1f} % here vs {reference:.1f} % ({difference:+.1f} points).",
                        here=gemv.this_run_pct, reference=gemv.reference_pct, difference=gemv.difference_pts)
                     + matvec_padding_prose(run) + expert_gather_prose(run.timeline, gemv.this_run_pct))
    for cat, why in (("copy/cast", tr("dtype casts (float ↔ bf16 in RMSNorm and rotary embeddings) and `torch.cat` "
                                      "of the KV cache every step")),
                     ("elementwise", tr("unfused pointwise ops")),
                     ("attention", tr("the attention kernels (cuDNN SDPA here, FlashAttention split-KV there)"))):
        if cat in c.index:
            r = c.loc[cat]
            lines.append(tr("- **{category}**: {here:.1f} % here vs {reference:.1f} % ({difference:+.1f} points); "
                            "{why}.", category=cat, here=r.this_run_pct, reference=r.reference_pct,
                            difference=r.difference_pts, why=why))
    rest = cmp[cmp.reference_pct.isna() & (cmp.this_run_pct > 1)]
    if len(rest):
        lines.append(tr("- Not broken out in the reference: {shares}.", shares=tr(", ").join(
            f"{r.category} {r.this_run_pct:.1f} %" for r in rest.itertuples())))
    return "\n".join(lines)


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


def backend_prose(run, other, phases: pd.DataFrame, kernels: pd.DataFrame) -> str:
    """Whether the two backends agree (per phase within BACKEND_TOLERANCE_PCT; the decode kernels' largest difference)
    and each one's overhead (profiled ÷ plain generate, in its own capture); `other` None: that there is no such
    run."""
    if other is None:
        return tr("No run of this workload captured with the other timeline profiler sits beside this one.")
    names = {r.info.timeline_profiler: r for r in (run, other)}
    label = {"nsys": tr("Nsight Systems"), "torch": tr("the torch profiler")}
    worst = float(phases.difference_pct.abs().max()) if len(phases) else np.nan
    kworst = float(kernels.difference_pct.abs().max()) if len(kernels) else np.nan
    same = bool(len(phases)) and (phases.kernels_this == phases.kernels_other).all()
    out = [tr("{this} ({b1}) beside {other} ({b2}), the same workload on the same GPU: {count}; GPU time per phase "
              "within {worst:.1f} % ({verdict}); the {n} decode kernels holding ≥ 1 % of decode kernel time, matched "
              "by kernel stem, within {kworst:.1f} %.", this=md(run.run_id), b1=label[run.info.timeline_profiler],
              other=md(other.run_id), b2=label[other.info.timeline_profiler],
              count=(tr("{n:,} kernels in each", n=int(phases.kernels_this.sum())) if same else
                     tr("{a:,} kernels against {b:,}", a=int(phases.kernels_this.sum()),
                        b=int(phases.kernels_other.sum()))),
              worst=worst, verdict=(tr("they agree, within {tol:.0f} %", tol=BACKEND_TOLERANCE_PCT)
                                    if worst <= BACKEND_TOLERANCE_PCT else
                                    tr("they differ by more than {tol:.0f} %", tol=BACKEND_TOLERANCE_PCT)),
              n=len(kernels), kworst=kworst)]
    over = {b: r.info.timeline_info.overhead_ratio for b, r in names.items()}
    if all(isinstance(v, (int, float)) for v in over.values()) and len(over) == 2:
        out.append(tr("Profiler overhead, the profiled generate ÷ the plain one of the same capture: Nsight Systems "
                      "{nsys:.2f}×, the torch profiler {torch:.2f}× (each capture's own plain generate: the host's "
                      "speed moves between captures, so the two are compared as ratios).", nsys=over["nsys"],
                      torch=over["torch"]))
    return " ".join(out)
