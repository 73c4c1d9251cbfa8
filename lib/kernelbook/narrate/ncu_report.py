"""Chapter 02's sentences, labels and notes, from `analyze.ncu_report`'s tables and figures: the headline, how the
counters were taken, the heavy-tailed launches, ncu against the loop, the FLOP and byte checks, and the note on ncu's
cache control that chapters 03–05 show; the tables with their text cells in the reader's language."""
from __future__ import annotations

import re

import pandas as pd

from ..analyze import ncu_report as N
from ..analyze.ncu_report import (BYTES_TOLERANCE, CONTEXT_FACTOR, FLOPS_TOLERANCE, HEAVY_HOLD, HEAVY_MEAN_MEDIAN,
                                  HEAVY_MIN_LAUNCHES, HEAVY_TOP_FRACTION, HEAVY_TOP_SHARE, INLOOP_HOW,
                                  INLOOP_NOT_MEASURED, SMALL_OPERANDS_BYTES)
from ..contract.manifest import Manifest, read_manifest
from ..display import phase_label
from ..escape import md, md_code
from ..i18n import N_, text, tr
from . import said, say

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
# catalog templates: the chapter shows them in the narrative language (`status_text`).
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


def status_text(value) -> str:
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


def metric_table(table: pd.DataFrame) -> pd.DataFrame:
    """`analyze.ncu_report.metric_table` (with or without its module columns) with its `status` column, capture data
    in English, in the narrative language."""
    out = table.copy()
    out["status"] = out["status"].map(status_text)
    return out


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


def headline(cov: pd.DataFrame, fid: pd.DataFrame, manifest: dict) -> str:
    """Chapter 02's answer in one line: each phase's profiled kernels and the share of its kernel time they hold, and
    how ncu's durations compare with the loop's."""
    parts = [tr("{phase} {profiled}/{selected} kernels, {explained:.0f} % of its time",
                phase=phase_label(c.phase), profiled=c.profiled, selected=c.selected,
                explained=c.explained_time_pct) for c in cov.itertuples()]
    if len(fid):
        parts.append(tr("ncu/timeline duration ratio {ratio:.2f} (median per launch shape)",
                        ratio=N.context_figures(fid)["median"]))
    return tr("Profiled: {parts}.", parts=tr("; ").join(parts))


def coverage_prose(cov: pd.DataFrame, kernels: pd.DataFrame, manifest: Manifest | dict) -> str:
    """How ncu took the counters (`analyze.ncu_report.ncu_passes`): one process for the eager phases or one per
    phase, how each kernel was identified, what was left out of a selection and which kernel was not profiled."""
    p = N.ncu_passes(kernels, manifest)
    info = p["info"]
    lines = []
    if p["eager"]:  # one ncu process for every eager phase; a graph phase has a process of its own (below)
        lines.append(tr("- One ncu process for {phases}: {results} profiled launches for {selected} selected kernels "
                        "({per_kernel:.2f} per kernel) in {seconds:.0f} s; each kernel is identified by its position "
                        "(the op call that launched it in the timeline), so no name filter can miss one (clock "
                        "control `{clock}`, cache control `{cache}`).",
                        phases=tr(", ").join(phase_label(ph) for ph in p["eager"]), results=p["results"],
                        selected=p["selected"], per_kernel=p["per_kernel"], seconds=info.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
        check = p["op_check"]
        if check.get("checked"):
            pairs = sorted({tr("`{seen}` around `{op}`", seen=md_code(d["op_seen"]), op=md_code(d["op"]))
                            for d in check.get("differ", [])})
            others = tr("; the others the op that calls it at the dispatcher ({pairs})",
                        pairs=tr(", ").join(pairs)) if pairs else ""
            lines.append(tr("- The worker marked {checked} op calls; {agree} run the aten op the timeline names for "
                            "that kernel{others}.", checked=check["checked"], agree=check["agree"], others=others))
    for ph, v in p["per_phase"]:
        lines.append(tr("- **{phase}**: one ncu process profiled step {step} of the phase, {results} launch "
                        "configurations in {seconds:.0f} s (clock control `{clock}`, cache control `{cache}`).",
                        phase=phase_label(ph), step=v.step, results=v.results, seconds=v.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
    for identity, ids in p["identities"]:
        lines.append(f"- {md(id_ranges(ids))}: {md(status_text(identity))}.")
    for ph, d in p["left_out"]:
        lines.append(tr("- Left out of the {phase} selection: `{name}`, {share:.1f} % of the phase's GPU time: "
                        "{reason}.", phase=phase_label(ph), name=md_code(d.name), share=100 * d.share,
                        reason=status_text(d.reason)))
    bad = p["not_profiled"]
    for r in bad.itertuples():
        lines.append(tr("- {kernel} not profiled: {status}", kernel=md(r.kernel_id), status=md(status_text(r.status))))
    if bad.empty:
        lines.append(tr("- Every selected kernel was profiled."))
    return "\n".join(lines)


# what the reader sees of `fidelity`: its columns under headers in the narrative language (catalog keys)
FIDELITY_HEADERS = {
    "launches": N_("launches of this shape"),
    "in_context": N_("ncu against the loop"),
    "other_shapes": N_("other shapes of this kernel and grid (not compared)"),
    "in_loop_gbps": N_("ncu's DRAM bytes ÷ loop duration (GB/s)"),
    "in_loop_l2": N_("loop reads part from L2"),
    "cold_read_bytes": N_("DRAM read bytes, caches flushed"),
    "inloop_read_bytes": N_("DRAM read bytes in the loop (measured)"),
    "expected_flops": N_("useful FLOPs (from the shapes)"),
    "flops_basis": N_("useful FLOPs from"),
    "counted_flops": N_("counted FLOPs"),
    "flops_ratio": N_("counted ÷ useful FLOPs"),
    "flops_verdict": N_("FLOP check"),
}
# the text cells of `fidelity`: phrases and catalog keys the analysis wrote
_FIDELITY_TEXT = ["in_context", "other_shapes", "flops_basis", "flops_verdict"]


def fidelity_table(fid: pd.DataFrame) -> pd.DataFrame:
    """`analyze.ncu_report.fidelity` as chapter 02 shows it: the columns a reader needs, its verdicts and headers in
    the narrative language."""
    show = said(fid.drop(columns=["matvec", "dram_bytes"], errors="ignore"), _FIDELITY_TEXT)
    return show.rename(columns={c: text(h) for c, h in FIDELITY_HEADERS.items()})


def fidelity_prose(fid: pd.DataFrame) -> str:
    """ncu against the loop per launch shape (the ratio's spread, each kernel off by more than
    `CONTEXT_FACTOR` with its reason, grouped by reason), the producer → consumer kernels, and the FLOP check
    with each difference's verdict (`analyze.ncu_report.context_figures`)."""
    if fid.empty:
        return tr("No profiled kernels.")
    f = N.context_figures(fid)
    off = f["off"]
    lines = [tr("ncu duration ÷ timeline median of the same launch shape (configuration and aten shapes; never "
                "pooled across shapes — {pooled} kernels run other shapes on the same grid, listed in the table, not "
                "compared): median {median:.2f}, range {low:.2f}–{high:.2f}; {n_off} of {n} kernels differ by more "
                "than {factor:.2f}×, each with its reason in the table.", pooled=f["pooled"],
                median=f["median"], low=f["low"], high=f["high"], n_off=len(off), n=f["n"], factor=CONTEXT_FACTOR)]
    # grouped by the reason as the reader reads it: the verdict's words before its first colon
    reasons = pd.Series([say(v) for v in off.in_context], index=off.index, dtype=object).str.split(":").str[0]
    for why, g in off.groupby(reasons, sort=False):
        lines.append(tr("- {why}: {ids}", why=md(why), ids=md(id_ranges(list(g.kernel_id)))))
    l2, measured = f["l2"], f["measured"]
    if len(measured):
        lines.append(tr("Producer → consumer: {ids} read(s) in the loop part of what the launch before them wrote, "
                        "still in L2; ncu flushed the caches and counted it from DRAM. This run measured the loop too "
                        "({how}):", ids=md(id_ranges(list(l2.kernel_id))), how=say(INLOOP_HOW)))
        for x in measured.itertuples():
            lines.append(tr("- {id} {name}: {cold:.2f} MB read from DRAM with caches flushed, {inr:.2f} MB in the loop "
                            "({pct:.0f} %)", id=md(x.kernel_id), name=md(x.friendly_name), cold=x.cold_read_bytes / 1e6,
                            inr=x.inloop_read_bytes / 1e6, pct=x.inloop_pct))
        if f["rest"]:
            lines.append(tr("- {ids}: {why}", ids=md(id_ranges(f["rest"])), why=say(INLOOP_NOT_MEASURED)))
        lines.append(tr("Their class (chapter 05) and roofline points (chapter 04) stay on the cold, flushed counters, "
                        "the same basis as every other kernel's; the in-loop bytes are what the loop moves."))
    elif len(l2):
        lines.append(tr("Producer → consumer: {ids} read(s) in the loop part of what the launch before them wrote, "
                        "still in L2; ncu flushed the caches and counted it from DRAM. Their DRAM bytes, their class "
                        "(chapter 05) and their roofline points (chapter 04) are the cold-cache figure; their in-loop "
                        "DRAM traffic is lower, and this capture does not measure by how much.",
                        ids=md(id_ranges(list(l2.kernel_id)))))
    lines.append(tr("Counted FLOPs ÷ useful FLOPs of the shapes (2·M·N·K for a matrix product, one per element for a "
                    "pointwise op or a sum): {n_ok} of {n} kernels within ±{tol:.0f} %; every other one, and every copy "
                    "that counts FLOPs, has its verdict:", n_ok=f["flops_ok"], n=f["checked"],
                    tol=FLOPS_TOLERANCE * 100))
    for r in f["verdicts"].itertuples():
        ratio = tr("ratio {ratio:.2f}", ratio=r.flops_ratio) if r.flops_ratio == r.flops_ratio else tr("no ratio")
        lines.append(tr("- {kernel} {name}: {ratio} — {why}.", kernel=md(r.kernel_id), name=md(r.friendly_name),
                        ratio=ratio, why=md(say(r.flops_verdict))))
    return "\n".join(lines)


def byte_table(bf: pd.DataFrame) -> pd.DataFrame:
    """`analyze.ncu_report.byte_fidelity` as chapter 02 shows it: its verdicts in the narrative language."""
    return said(bf, ["verdict"])


def byte_fidelity_prose(bf: pd.DataFrame, manifest: Manifest | dict) -> str:
    """How many kernels' DRAM bytes agree with their shapes', per phase; the small launches; every other kernel and
    every producer → consumer one with its verdict (`analyze.ncu_report.byte_figures`)."""
    ncu = read_manifest(manifest).ncu
    cache = (ncu.cache_control if ncu else None) or "unknown"
    if bf.empty:
        return tr("No profiled matrix or attention kernel has shapes that say what it must move.")
    f = N.byte_figures(bf)
    ok, small = f["ok"], f["small"]
    lines = [tr("DRAM bytes ÷ the bytes the shapes imply: {n_ok} of {n} kernels within ±{tol:.0f} % "
                "of their reads + writes or of their reads alone (ncu cache control `{cache}`).", n_ok=int(ok.sum()),
                n=len(bf), tol=BYTES_TOLERANCE * 100, cache=md_code(cache))]
    for ph, n_ok, n, median in f["phases"]:
        lines.append(tr("- {phase}: {n_ok} of {n} agree; median ratio to reads + writes {median:.2f}.",
                        phase=phase_label(ph), n_ok=n_ok, n=n, median=median))
    if small.any():
        (lo, hi), (olo, ohi) = f["small_dram"], f["small_operands"]
        lines.append(tr("- {n} small launches (under {kb:.0f} kB of operands: {ids}) read {lo:.1f}–{hi:.1f} kB from DRAM "
                        "against {olo:.2f}–{ohi:.1f} kB of operands: with caches flushed a launch also reads its code, "
                        "parameters and whole sectors; not operand traffic, and not what the loop moves.",
                        n=int(small.sum()), kb=SMALL_OPERANDS_BYTES / 1e3, ids=md(id_ranges(list(bf.kernel_id[small]))),
                        lo=lo / 1e3, hi=hi / 1e3, olo=olo / 1e3, ohi=ohi / 1e3))
    shown = byte_table(bf)
    for r in shown[~ok & ~small].itertuples():
        lines.append(f"- {md(r.kernel_id)} {md(r.friendly_name)} ({phase_label(r.phase)}): {md(r.verdict)}.")
    # the producer → consumer kernels, whose verdict ends with the cold-cache note
    for r in shown[ok & shown.verdict.str.contains(tr("cold-cache figure"), regex=False)].itertuples():
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


def cache_control_note(manifest: Manifest | dict, chapter: str, in_loop: set[str] | None = None,
                       fid: pd.DataFrame | None = None) -> str:
    """One sentence on the run's ncu cache control: under `none`, which of this chapter's figures it
    distorts; under `all`, that the DRAM counters are what a cold launch moves, which is what the loop moves
    except for the kernels in `in_loop` (`in_loop_l2` of chapter 02's fidelity: producer → consumer, part of
    their operands in L2 in the loop). With `fid` (chapter 02's fidelity) of a run that measured the loop (its
    in-loop columns), those kernels' measured in-loop DRAM reads stand beside the cold ones."""
    cache = read_manifest(manifest).cache_control
    if cache == "none":
        return tr("**This run was captured with ncu `--cache-control none`.** ncu replays each kernel in several "
                  "passes; after the first, its operands sit in L2, so DRAM counters read a warm cache that the real "
                  "decode loop never sees. Distorted here: {distorted}. Re-capture with `cache_control: all` (the "
                  "default) for figures to trust.", distorted=tr(_DISTORTED[chapter]))
    if cache == "all":
        out = tr("DRAM counters come from ncu with `--cache-control all`: caches are flushed before each replay pass, "
                 "so each kernel reads every operand from DRAM. In the decode loop that holds for what no launch just "
                 "before it wrote — the weights and the KV cache of a step (chapter 02 checks the bytes against the "
                 "shapes) — not for a consumer of what the launch before it has just written: that is still in L2.")
        measured, rest = N.in_loop_figures(fid, in_loop)
        if in_loop and measured is not None and len(measured):
            each = tr("; ").join(tr("{id} {cold:.2f} MB flushed, {inr:.2f} MB in the loop", id=md(x.kernel_id),
                                    cold=x.cold_read_bytes / 1e6, inr=x.inloop_read_bytes / 1e6)
                                 for x in measured.itertuples())
            out += " " + tr("Here {ids} read(s) part of their operands from L2 in the loop (chapter 02's fidelity: "
                            "producer → consumer). Their class and roofline points stay on the cold-cache figure, the "
                            "flushed counters every kernel is classed by; the loop moves less, as this run measured "
                            "(DRAM reads, {how}): {each}.", ids=md(id_ranges(sorted(in_loop))), each=each,
                            how=say(INLOOP_HOW))
            if rest:
                out += " " + tr("{ids}: {why}.", ids=md(id_ranges(rest)), why=say(INLOOP_NOT_MEASURED))
        elif in_loop:
            out += " " + tr("Here {ids} read(s) part of their operands from L2 in the loop (chapter 02's fidelity: "
                            "producer → consumer): their DRAM bytes, class and roofline points are the cold-cache "
                            "figure, and their in-loop DRAM traffic is lower (not measured by this capture).",
                            ids=md(id_ranges(sorted(in_loop))))
        return out
    return tr("This run records no ncu cache control; treat its DRAM counters with care.")


# what the reader sees of `heavy_launches`: header overrides (catalog keys)
HEAVY_HEADERS = {
    "module": N_("Module (indices gathered)"),
    "launches": N_("Launches"),
    "launches_per_call": N_("Launches per step or call"),
    "us_each": N_("µs each (mean)"),
    "min_us": N_("shortest µs"),
    "max_us": N_("longest µs"),
    "kernel_share_pct": N_("% of the kernel's time"),
    "phase_share_pct": N_("% of the phase's kernel time"),
    "cumulative_pct": N_("cumulative % of the kernel's time"),
    "implied_gbps": N_("bytes the shapes imply ÷ duration (GB/s)"),
}
HEAVY_MISSING = {
    "module": N_("the timeline records no module for these launches (a CUDA graph's replayed kernels, a run captured "
                 "without module attribution, or a launch outside any module's forward)"),
    "op_shapes": N_("the launch has no aten op shapes in the timeline"),
    "implied_gbps": N_("a matrix or attention kernel, or shapes that do not say what a pointwise launch moves"),
}


def heavy_headers() -> dict[str, str]:
    """The header of each column `analyze.ncu_report.heavy_table` shows, in the narrative language."""
    return {c: text(h) for c, h in HEAVY_HEADERS.items()}


def _ms_range(lo_us: float, hi_us: float) -> str:
    """A duration range in ms ('0.52–1.31 ms'; one value when both agree to 1 %)."""
    if hi_us <= lo_us * 1.01:
        return tr("{ms:.2f} ms", ms=hi_us / 1e3)
    return tr("{lo:.2f}–{hi:.2f} ms", lo=lo_us / 1e3, hi=hi_us / 1e3)


def heavy_prose(ht: pd.DataFrame, hl: pd.DataFrame) -> str:
    """The rule that makes a kernel heavy-tailed, then each such kernel: its mean against its median, what its
    longest tenth holds, and how many launches the table's groups take to hold HEAVY_HOLD of its time. Where no
    profiled kernel is heavy-tailed, says so (with the largest mean ÷ median seen)."""
    lines = [tr("A kernel's launches are heavy-tailed here when its mean launch is at least {ratio:.0f}× its median, or "
                "when, with at least {n} launches, its longest {top:.0f} % of launches hold at least {share:.0f} % of "
                "its time (the project's thresholds, set from the bundled runs). ncu profiled one launch of each "
                "kernel; for a heavy-tailed one that launch says little about where its time goes, so the table "
                "groups its longest launches by module (layer indices gathered in braces), aten op and shapes, "
                "longest first, until they hold {hold:.0f} % of its time.", ratio=HEAVY_MEAN_MEDIAN,
                n=HEAVY_MIN_LAUNCHES, top=100 * HEAVY_TOP_FRACTION, share=100 * HEAVY_TOP_SHARE,
                hold=100 * HEAVY_HOLD)]
    if ht.empty:
        lines.append(tr("No profiled kernel has launches in the timeline: nothing to show."))
        return "\n\n".join(lines)
    f = N.heavy_figures(ht, hl)
    if not f["heavy"]:
        worst = f["worst"]
        lines.append(tr("No profiled kernel of this run is heavy-tailed: nothing to show. The largest mean ÷ median is "
                        "{ratio:.2f}× ({kernel}, {phase}).", ratio=worst.mean_over_median, kernel=md(worst.kernel_id),
                        phase=phase_label(worst.phase)))
        return "\n\n".join(lines)
    items = []
    for h, g in f["heavy"]:
        items.append(tr("- {kernel} {name} ({phase}): {n} launches, mean {mean:.1f} µs against a median {median:.1f} µs "
                        "({ratio:.2f}×); its longest {top} hold {top_share:.0f} % of its time. In the table {shown} "
                        "launches in {groups} group(s) hold {held:.0f} % of its time, {phase_share:.1f} % of the "
                        "phase's kernel time.", kernel=md(h.kernel_id), name=md(h.friendly_name),
                        phase=phase_label(h.phase), n=h.launches, mean=h.mean_us, median=h.median_us,
                        ratio=h.mean_over_median, top=h.top_launches, top_share=h.top_share_pct,
                        shown=g["shown"], groups=g["groups"], held=g["held"], phase_share=g["phase_share"]))
    lines.append("\n".join(items))
    if f["no_module"]:
        lines.append(tr("The timeline records no module for {n} of these groups ({ids}): a CUDA graph's replayed "
                        "kernels, a run captured without module attribution, or launches outside any module's "
                        "forward carry none; they are grouped by aten op and shapes alone.", n=f["no_module"],
                        ids=md(id_ranges(f["no_module_ids"]))))
    return "\n\n".join(lines)


def vision_prose(v: dict, kernels: pd.DataFrame) -> str:
    """`analyze.ncu_report.vision_heavy` in one sentence (what is missing where the run cannot say)."""
    if v["state"] == "no phase":
        return tr("This run has no vision encode phase: no vision kernels to look at.")
    if v["state"] == "not profiled":
        phases = tr(", ").join(phase_label(p) for p in dict.fromkeys(kernels.phase)) if len(kernels) else "—"
        return tr("Vision encode ran, but this run's ncu capture did not profile it (its selection covers {phases}): "
                  "its launches are in the timeline, their counters are not, so no vision kernel is shown here.",
                  phases=phases)
    if v["state"] == "not heavy":
        return tr("No profiled vision encode kernel is heavy-tailed (the largest mean ÷ median is {ratio:.2f}×, {kernel}).",
                  ratio=v["ratio"], kernel=md(v["kernel"]))
    what = tr("the copies and pointwise ops") if v["copies"] else tr("the heavy-tailed kernels")
    where = f"`{md_code(v['module'])}`" if v["module"] else tr("launches with no module in the timeline")
    out = tr("In vision encode {what} ({kernels}: {kernel_pct:.0f} % of its {ms:.1f} ms of kernel time per call) sit "
             "in a few launches: {n} launches of {range} in {where} ({ops}) hold {pct:.1f} % of vision encode kernel "
             "time", what=what, kernels=tr(", ").join(f"{md(k)} {md(n)}" for k, n in zip(v["kernels"], v["names"])),
             kernel_pct=v["kernel_pct"], ms=v["phase_ms"], n=v["launches"], range=_ms_range(v["lo_us"], v["hi_us"]),
             where=where, ops=tr(", ").join(f"`{md_code(o)}`" for o in v["ops"]), pct=v["pct"])
    nxt = v.get("next")
    if nxt:
        out += tr("; the next, {where}: {n} launches of {range}, {pct:.1f} %",
                  where=f"`{md_code(nxt['module'])}`" if nxt["module"] else tr("launches with no module in the timeline"),
                  n=nxt["launches"], range=_ms_range(nxt["lo_us"], nxt["hi_us"]), pct=nxt["pct"])
    return tr("{sentence}.", sentence=out)
