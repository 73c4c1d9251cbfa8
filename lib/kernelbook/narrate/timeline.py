"""Chapter 01's sentences and captions, from `analyze.timeline`'s tables and figures: the headline, the phases, the
gaps, the top-kernel and appendix captions, the reference report and the other timeline backend."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyze import timeline as T
from ..contract.manifest import Manifest, read_manifest
from ..devices import measured_overhead
from ..display import phase_label
from ..escape import md
from ..i18n import N_, tr

# Why a phase-summary cell is empty, for the note under the table.
PHASE_SUMMARY_MISSING = {
    "wall_ms": N_("the 'other' row is generate's own work between forwards, which has no phase range, so no "
                  "wall time or idle share of its own"),
    "launches_per_step": N_("a phase without steps has no per-step count"),
}


def _capital(phase: str) -> tuple[str, str]:
    """The phase as a reader names it, and the same with a capital (a caption's first word)."""
    name = phase_label(phase)
    return name, name[:1].upper() + name[1:]


def appendix_tables(names: pd.DataFrame, timeline: pd.DataFrame, n: int = 15) -> list[tuple[str, str, pd.DataFrame]]:
    """`analyze.timeline.shown_kernels` as the appendix shows it: per phase (its order), the phase, a caption and the
    table (`analyze.timeline.appendix_frames`)."""
    return [(ph, appendix_caption(rows, timeline, ph, n), frame) for ph, rows, frame in T.appendix_frames(names)]


def appendix_caption(rows: pd.DataFrame, timeline: pd.DataFrame, phase: str, n: int) -> str:
    """Caption of one phase's appendix table: how many kernels, which (the top-n, and those selected for ncu), and how
    much of the phase's kernel time they hold; the top-kernel table's caption where ncu selected none beyond them."""
    extra = int((~rows.top.astype(bool)).sum())
    if not extra:
        return top_caption(timeline, phase, n)
    name, label = _capital(phase)
    return tr("{label}: {count} kernels, the top {top} by total time and {extra} more selected for ncu, "
              "{pct:.1f} % of {phase} kernel time", label=label, count=len(rows),
              top=int(rows.top.astype(bool).sum()), extra=extra, pct=rows.time_pct.sum(), phase=name)


def top_caption(timeline: pd.DataFrame, phase: str, n: int) -> str:
    """Caption of a top-kernel table: the phase, and how much of its kernel time the rows hold."""
    c = T.top_coverage(timeline, phase, n)
    name, label = _capital(phase)
    if not c["rows"]:
        return tr("{phase}: no kernels", phase=label)
    distinct = c["distinct"]
    which = tr("top {n} of {distinct} kernels", n=c["rows"], distinct=distinct) if distinct > c["rows"] else (
        tr("its one kernel") if distinct == 1 else tr("all {distinct} kernels", distinct=distinct))
    return tr("{label}: {which} by total time, {pct:.1f} % of {phase} kernel time", label=label, which=which,
              pct=c["pct"], phase=name)


def _row(summary: pd.DataFrame, phase: str):
    s = summary[summary.phase == phase]
    return None if s.empty else s.iloc[0]


def headline(summary: pd.DataFrame, shares: pd.DataFrame, manifest: Manifest | dict) -> str:
    f = T.decode_figures(summary, shares, manifest)
    if f is None:
        return tr("no decode phase in this run")
    if f["plain"] is not None:
        return tr("decode: {plain:.1f} ms per token on the wall clock without the profiler ({ms_per_token:.1f} ms under "
                  "it), GPU busy {busy_ms:.2f} ms of it ({launches:.0f} kernel launches per token); {category} holds "
                  "{pct:.0f} % of decode kernel time", plain=f["plain"], ms_per_token=f["ms_per_token"],
                  busy_ms=f["busy_ms"], launches=f["launches"], category=f["category"], pct=f["pct"])
    return tr("decode: {ms_per_token:.1f} ms per token on the wall clock under the profiler, GPU busy {busy_pct:.0f} % "
              "of it ({launches:.0f} kernel launches per token); {category} holds {pct:.0f} % of decode kernel time",
              ms_per_token=f["ms_per_token"], busy_pct=f["busy_pct"], launches=f["launches"],
              category=f["category"], pct=f["pct"])


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
    g = T.gap_stats(gaps_us)
    if g is None:
        return ""
    return tr("Median gap {p50:.1f} µs, 90th percentile {p90:.1f} µs, 99th {p99:.0f} µs (profiled pass); "
              "{total:.0f} ms of decode under the profiler is spent in gaps, {big_ms:.0f} ms of it in the {n_big} "
              "gaps longer than 100 µs.", p50=g["p50"], p90=g["p90"], p99=g["p99"], total=g["total_ms"],
              big_ms=g["big_ms"], n_big=g["n_big"])


def matvec_padding_prose(run) -> str:
    """How much the MMA tile pads the run's profiled matrix-vector products (`analyze.timeline.matvec_padding`);
    empty without profiled GEMVs."""
    p = T.matvec_padding(run)
    if p is None:
        return ""
    return tr(" Here the matrix-vector products run on tensor cores, whose MMA tile pads the vector: ncu counts "
              "{lo:.2f}–{hi:.2f}× the useful 2·M·N·K on the {n} profiled ones (chapter 02).", **p)


def expert_gather_prose(timeline: pd.DataFrame, gemv_pct: float) -> str:
    """The routed experts' weight gather beside the GEMV share (`analyze.timeline.expert_gather_pct`); empty when
    the run has none."""
    pct = T.expert_gather_pct(timeline)
    if pct is None:
        return ""
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


def backend_prose(run, other, phases: pd.DataFrame, kernels: pd.DataFrame) -> str:
    """Whether the two backends agree (`analyze.timeline.backend_agreement` per phase within
    BACKEND_TOLERANCE_PCT; `backend_kernels`' largest difference) and each one's overhead (profiled ÷ plain
    generate, in its own capture); `other` None: that there is no such run."""
    if other is None:
        return tr("No run of this workload captured with the other timeline profiler sits beside this one.")
    tol = T.BACKEND_TOLERANCE_PCT
    names = {r.info.timeline_profiler: r for r in (run, other)}
    label = {"nsys": tr("Nsight Systems"), "torch": tr("the torch profiler")}
    worst = float(phases.difference_pct.abs().max()) if len(phases) else np.nan
    kworst = float(kernels.difference_pct.abs().max()) if len(kernels) else np.nan
    same = bool(len(phases)) and (phases.kernels_this == phases.kernels_other).all()
    out = [tr("{this} ({b1}) beside {other} ({b2}), the same workload on the same GPU: {count}; kernel time per phase "
              "within {worst:.1f} % ({verdict}); the {n} decode kernels holding ≥ 1 % of decode kernel time, matched "
              "by kernel stem, within {kworst:.1f} %.", this=md(run.run_id), b1=label[run.info.timeline_profiler],
              other=md(other.run_id), b2=label[other.info.timeline_profiler],
              count=(tr("{n:,} kernels in each", n=int(phases.kernels_this.sum())) if same else
                     tr("{a:,} kernels against {b:,}", a=int(phases.kernels_this.sum()),
                        b=int(phases.kernels_other.sum()))),
              worst=worst, verdict=(tr("they agree, within {tol:.0f} %", tol=tol) if worst <= tol else
                                    tr("they differ by more than {tol:.0f} %", tol=tol)),
              n=len(kernels), kworst=kworst)]
    over = {b: r.info.timeline_info.overhead_ratio for b, r in names.items()}
    if all(isinstance(v, (int, float)) for v in over.values()) and len(over) == 2:
        out.append(tr("Profiler overhead, the profiled generate ÷ the plain one of the same capture: Nsight Systems "
                      "{nsys:.2f}×, the torch profiler {torch:.2f}× (each capture's own plain generate: the host's "
                      "speed moves between captures, so the two are compared as ratios).", nsys=over["nsys"],
                      torch=over["torch"]))
        spread = {b: (r.info.timeline_info.plain_generate.spread if r.info.timeline_info.plain_generate else None)
                  for b, r in names.items()}
        if all(isinstance(v, (int, float)) for v in spread.values()) and max(spread.values()) > 0.02:
            out.append(tr("The plain generates of each capture spread {nsys:.0f} % (Nsight Systems) and {torch:.0f} % "
                          "(the torch profiler) from fastest to slowest: each ratio is that uncertain.",
                          nsys=100 * spread["nsys"], torch=100 * spread["torch"]))
    bench = measured_overhead(run.gpu_name)
    if bench is not None:
        out.append(tr("bench/timeline_overhead.py, on the bundled workload on the {gpu} with each backend in one "
                      "process that alternates plain and profiled generates ({pairs}), gives the figures to compare "
                      "the two profilers by: Nsight Systems {nsys:.2f}×, the torch profiler {torch:.2f}× (the median "
                      "pair). A capture's own ratio rests on one profiled generate, which moves with the host's "
                      "speed.", gpu=bench.device, nsys=bench.nsys, torch=bench.torch,
                      pairs=tr("{n} pairs", n=bench.pairs) if bench.pairs else tr("several pairs")))
    return " ".join(out)
