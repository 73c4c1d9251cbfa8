"""Chapter 05's sentences and its tables in the reader's language, from `analyze.classify`'s numbers and English
phrases: the headline, the classes, the metric health, waves and tiles, the kernel explorer's cards and `report.md`
(the profiler output contract)."""
from __future__ import annotations

import re

import pandas as pd

from ..analyze import classify as C
from ..analyze.classify import CONTRACT_HEADER, Rules
from ..contract.manifest import Manifest
from ..contract.phrase import Phrase
from ..display import phase_label
from ..escape import md
from ..i18n import N_, text, tr
from . import said, say


def class_label(cls: str) -> str:
    """A bottleneck class as the reader reads it, in the narrative language."""
    return text(str(cls))


def _named(v):
    """A cell the analysis named as a phrase, in the reader's language; any other as the analysis wrote it."""
    return say(v) if isinstance(v, Phrase) else v


# Where the healthy levels come from, shown under the health table and chapter 03's captions.
THRESHOLD_SOURCES = N_(
    "The healthy levels are the project's own rules of thumb, carried over from the reference report's profiling "
    "notes (not a published source), each with its reason: tensor pipe active > 60 % and DRAM throughput > 70 % — a "
    "kernel below them leaves most of that unit's peak unused (60 % is also where Nsight Compute's own "
    "SOLBottleneck rule starts calling a unit busy); achieved occupancy > 25 % — on Hopper 16 of 64 warp slots, "
    "about what a memory-bound kernel needs to keep loads in flight; L2 hit > 80 % — for kernels that reuse "
    "operands, lower means they are re-read from DRAM; no spilling; more than one wave, and a grid of at least 4× "
    "the SM count — NVIDIA's CUDA optimization training gives the direction (more blocks than SMs, several per "
    "SM), the factor 4 is ours: with 4 waves a part-empty last wave costs at most a quarter of the time. They are "
    "guides for reading the table, not pass/fail limits.")


def reasons(c: pd.DataFrame) -> pd.DataFrame:
    """`analyze.classify.classify`'s kernels with their reason and counters in the reader's language."""
    return said(c, ["reason", "counters"])


def class_table(c: pd.DataFrame, weighted: bool) -> pd.DataFrame:
    """`analyze.classify.class_table` with its metrics and classes in the reader's language."""
    t = C.class_table(c, weighted)
    return t.rename(columns=lambda x: class_label(say(x) if x == C.OVERALL else x), index=say)


def health_styled(h: pd.DataFrame):
    """Health values (`analyze.classify.health`) with unhealthy cells highlighted (a pandas Styler, rendered in the
    HTML); the health headers in the narrative language."""
    labels = list(C.HEALTH)
    shown = {lab: text(lab) for lab in labels}
    show = h[["kernel_id", "friendly_name"] + labels].rename(columns=shown)
    back = {v: k for k, v in shown.items()}

    def colour(col):
        key = back.get(col.name, col.name)
        okc = h[f"{key} ok"] if f"{key} ok" in h else None
        if okc is None:
            return [""] * len(col)
        return ["background-color: #f8d0cc" if o is False else ("color: #999" if o is None else "") for o in okc]

    return show.style.apply(colour, subset=list(shown.values())).format(precision=1, na_rep="n/a")


def opportunities(o: pd.DataFrame | None) -> pd.DataFrame | None:
    """A phase's ranked opportunities (`analyze.classify.opportunities`) with their words in the reader's language."""
    return None if o is None else said(o, ["opportunity", "trigger"])


# one line per class, wherever report.md or chapter 07 names one (the Bottleneck column, the sections)
CLASS_DEFINITIONS = {
    "memory-bound": N_("memory throughput ≥ {high:.0f} % and SM throughput < {high:.0f} %: the kernel waits on bytes."),
    "compute-bound": N_("SM throughput ≥ {high:.0f} % and memory throughput < {high:.0f} %: the kernel waits on its "
                        "pipes."),
    "latency-bound": N_("SM and memory throughput both < {low:.0f} %: too little work in flight to load either; "
                        "launch and dependency latency set the time."),
    "balanced": N_("neither memory-, compute- nor latency-bound: SM and memory throughput both ≥ {high:.0f} %, or "
                   "both < {high:.0f} % with at least one ≥ {low:.0f} %: no single unit is saturated alone (one of "
                   "them may be nearly idle, as in a GEMV just under the memory threshold)."),
    "unknown": N_("ncu recorded no SM or memory throughput for the kernel."),
    "not profiled": N_("no kernel of the stage was profiled by ncu."),
}


def class_definitions(classes, rules: Rules = Rules()) -> list[str]:
    """One Markdown bullet per class named in `classes` (machine values; in CLASS_DEFINITIONS' order): its
    rule with the thresholds of `rules` (ncu's SM and memory throughput, % of peak)."""
    out = []
    used = set(classes)
    for cls in CLASS_DEFINITIONS:
        if cls in used:
            out.append(f"- **{md(class_label(cls))}**: "
                       + tr(CLASS_DEFINITIONS[cls], high=rules.high_pct, low=rules.low_pct))
    return out


def contract_legend(manifest: Manifest | dict, summary: pd.DataFrame, rows: list[list[str]],
                    rules: Rules = Rules()) -> str:
    """What the Stages table's cells are: the Duration basis (plain run, µs, per decode step), the
    percentage columns, and each class its Bottleneck column names, defined in one line."""
    f = C.legend_figures(manifest, summary, rows)
    prof = tr(", ").join(tr("{phase} {us:.0f} µs per step", phase=md(ph), us=us) if per_step
                         else tr("{phase} {us:.0f} µs", phase=md(ph), us=us) for ph, us, per_step in f["profiled"])
    if f["plain"]:
        lines = [tr("Duration (us): each stage's wall time in µs in the plain generate call (no profiler; the median "
                    "of the capture's timing trials), per step for decode and per call for the others. Under the "
                    "profiler the same stages took {profiled}.", profiled=prof)]
    else:
        lines = [tr("Duration (us): each stage's wall time in µs under the profiler (this run has no plain per-stage "
                    "timings; the profiler stretches the host's gaps), per step for decode and per call for the "
                    "others.")]
    lines += ["", tr("TC%: tensor pipe active, % of peak (ncu's `sm__pipe_tensor_cycles_active`), every profiled "
                     "kernel of the stage counted, one without tensor work at 0 % (— where the run's counters lack the "
                     "metric); DRAM%: DRAM throughput, % of peak; Occ%: achieved occupancy, % of the SM's warp "
                     "slots. Each is a mean over the stage's profiled kernels weighted by their share of its kernel "
                     "time. Bottleneck: the class that holds the most of that time; Key Issue: the stage's first "
                     "opportunity below."),
              "", tr("Bottleneck classes, from ncu's SM and memory throughput (% of peak; high ≥ {high:.0f}, low < "
                     "{low:.0f}):", high=rules.high_pct, low=rules.low_pct), ""]
    return "\n".join(lines + class_definitions(f["classes"], rules))


def contract_markdown(run, summary: pd.DataFrame, c: pd.DataFrame, opps: dict[str, pd.DataFrame],
                      rules: Rules = Rules()) -> str:
    """The profiler output contract (the reference report's format), one block for the run, stages = phases. The tables'
    header lines and their stage and class values are the contract a tool reads: they stay as they
    are in every language; the prose around them (what each column and class means) is in the narrative
    language."""
    m = run.info
    inputs = m.timeline_info.inputs
    p = m.params
    rows = C.contract_stage_rows(summary, c, opps, m)
    lines = [tr("Profile: {model} [{run}]", model=md(p.get("model", "?")), run=md(run.run_id)), "",
             tr("## Configuration"), "", "| b | s | t | dtype |", "|---|---|---|---|",
             "| " + " | ".join(md(v) for v in (p.get("batch_size", "?"), inputs.get("prompt_tokens", "?"),
                                               p.get("max_new_tokens", "?"), p.get("dtype", "bfloat16"))) + " |", "",
             tr("b: batch size; s: prompt tokens ({image} of them image tokens); t: new tokens generated; dtype: of "
                "the weights and activations.", image=md(inputs.get("image_tokens_per_prompt", "?"))),
             "", tr("## Stages"), "", CONTRACT_HEADER, "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(md(_named(v)) for v in row) + " |" for row in rows]
    return "\n".join(lines + ["", contract_legend(m, summary, rows, rules), "",
                              contract_sections(summary, c, opps, m)])


def stages(table: pd.DataFrame) -> pd.DataFrame:
    """The contract's Stages table as a frame (`analyze.summary.contract`: `analyze.classify.contract_stage_rows`
    under `CONTRACT_HEADER`'s columns) with its Key Issue in the reader's language; its other cells as the contract
    writes them."""
    return table.assign(**{"Key Issue": [_named(v) for v in table["Key Issue"]]}) if "Key Issue" in table else table


def contract_sections(summary: pd.DataFrame, c: pd.DataFrame, opps: dict[str, pd.DataFrame],
                      manifest: Manifest | dict | None = None) -> str:
    """The contract's per-phase sections (`analyze.classify.sections`): bottleneck, root cause, top 3 opportunities
    (narrative language). Idle shares and gains are on `analyze.classify.wall_basis`'s basis: the plain run's step
    where `manifest` timed it."""
    lines = []
    for x in C.sections(summary, c, opps, manifest):
        ph, basis = x.phase, say(x.basis)
        where = (tr("{busy:.2f} ms busy in a step of {wall:.2f} ms, {basis}; {prof:.0f} % under the profiler, which "
                    "stretches the host's gaps", busy=x.busy, wall=x.wall, basis=basis, prof=x.profiled_idle_pct)
                 if x.timed else tr("measured under the profiler"))
        lines += [f"## {md(ph)}", "", tr("Bottleneck: {cls}", cls=class_label(x.bottleneck).capitalize()), "",
                  tr("Root cause: the GPU is idle {idle:.0f} % of {phase} wall time between kernels ({where}), and "
                     "the kernels that run are mostly {cls} ({pct:.0f} % of profiled kernel time).", idle=x.idle_pct,
                     phase=phase_label(ph), where=where, cls=class_label(x.bottleneck), pct=x.pct)
                  + _issue_note(x.issue_pct, x.issue_categories), "",
                  tr("Top 3 Opportunities (ranked by estimated impact)"), "",
                  tr("Each gain is the share of {phase} wall time ({basis}) the change could remove at most, alone "
                     "and with the roof reached, and the speedup that gives: 1 ÷ (1 − share).",
                     phase=phase_label(ph), basis=basis), ""]
        for _, r in x.top.iterrows():
            lines.append(tr("- {opportunity} — est. ≤ {gain:.1f} % of {phase} wall time, up to {speedup}× faster "
                            "— trigger: {trigger}", opportunity=md(say(r.opportunity)), gain=r.gain_pct,
                            phase=phase_label(ph), speedup=C.times(r.speedup), trigger=md(say(r.trigger))))
        lines.append("")
    return "\n".join(lines)


def report_for_run(run_dir, rules: Rules = Rules()) -> str | None:
    """`report.md`: the profiler output contract for a run, or None when it has no profiled kernels."""
    inputs = C.report_inputs(run_dir, rules)
    if inputs is None:
        return None
    run, summary, c, opps = inputs
    return contract_markdown(run, summary, c, opps, rules) + "\n"


def pair_headline(deployed: tuple | None, eager: tuple | None, phase: str) -> str:
    """Chapter 05's answer for a workload captured eager and as deployed: the deployed run's classes and first
    opportunity (the book's subject; `pair_rest` gives the eager run's). Each side is (run, classes, opportunities)
    or None."""
    def side(x):
        run, c, opps = x
        return headline(c[c.phase == phase], opps.get(phase), phase)

    if deployed is None or eager is None:
        return side(deployed or eager)
    line = side(deployed)
    return tr("As deployed ({dep}): {dline}.", dep=md(deployed[0].run_id), dline=line[:1].lower() + line[1:])


def pair_rest(deployed: tuple | None, eager: tuple | None, phase: str) -> str:
    """What follows chapter 05's answer on a workload captured eager and as deployed: the eager run's classes and
    first opportunity, as what HF's eager loop adds; empty without both runs."""
    if deployed is None or eager is None:
        return ""
    run, c, opps = eager
    line = headline(c[c.phase == phase], opps.get(phase), phase)
    return tr("Eager ({eager}, what HF's eager loop adds): {eline}.", eager=md(run.run_id),
              eline=line[:1].lower() + line[1:])


def deployed_beside_eager(dep, deployed_line: str, eager, eager_line: str) -> str:
    """A chapter's line on a workload captured as deployed and eager (chapters 05 and 06): the deployed run's
    finding first, the book's subject, then the eager run's as what HF's eager loop adds."""
    return tr("As deployed ({dep}): {dline}. Eager ({eager}, what HF's eager loop adds): {eline}", dep=md(dep.run_id),
              dline=deployed_line[:1].lower() + deployed_line[1:], eager=md(eager.run_id),
              eline=eager_line[:1].lower() + eager_line[1:])


def headline(cp: pd.DataFrame, opps: pd.DataFrame | None, phase: str) -> str:
    """A phase's line: the class that holds most of its profiled kernel time (`analyze.classify.lead`) and its first
    opportunity."""
    f = C.lead(cp)
    first = "" if opps is None or not len(opps) else tr(
        "; first to try: {what} (est. ≤ {gain:.1f} % of {phase} wall time, up to {speedup}× faster)",
        # the opportunity's name, without its parenthesis (the opportunities table gives the how)
        what=md(_lower_first(re.sub(r"\s*[(（].*?[)）]", "", re.split("[:：]", say(opps.iloc[0].opportunity))[0]))),
        gain=opps.iloc[0].gain_pct,
        speedup=C.times(opps.iloc[0].speedup),
        phase=phase_label(phase))
    return tr("{phase}: {pct:.0f} % of profiled kernel time is {cls} ({n_cls} of {n} kernels{issue}){first}",
              phase=phase_label(phase), pct=f["pct"], cls=class_label(f["class"]), n_cls=f["kernels"], n=f["of"],
              issue=_issue_note(f["issue_pct"], f["issue_categories"], clause=True), first=first)


ISSUE_NOTE_PCT = 50  # a compute-bound lead is qualified where at least this share of it does no tensor-core work


def _issue_note(pct: float, categories: tuple, clause: bool = False) -> str:
    """The sentence (`clause`: the clause, for a headline that ends without a stop) that qualifies a compute-bound
    lead class held mostly by kernels without tensor-core work (`analyze.classify.issue_bound`); empty where they hold
    less than ISSUE_NOTE_PCT % of it."""
    if pct < ISSUE_NOTE_PCT:
        return ""
    if clause:
        return tr("; {issue:.0f} % of that time without tensor-core work, in {cats} kernels: instruction issue, not "
                  "tensor math", issue=pct, cats=tr(", ").join(md(c) for c in categories))
    return " " + tr("{issue:.0f} % of that is in kernels without tensor-core work ({cats}): their SM is busy issuing "
                    "CUDA-core and load/store instructions (index arithmetic, conversions, loads, stores), which more "
                    "tensor FLOP/s would not speed up.", issue=pct, cats=tr(", ").join(md(c) for c in categories))


def _lower_first(s: str) -> str:
    """A name as it reads inside a sentence: its first letter lowered, an acronym (GEMV, CUDA) kept."""
    return s if s[:2].isupper() else s[:1].lower() + s[1:]


def _pct_text(pct: float) -> str:
    """A percentage as prose prints it: whole numbers, '< 1' for a positive share that would print as 0."""
    return "< 1" if 0 < pct < 0.5 else f"{pct:.0f}"


def class_prose(cp: pd.DataFrame, rules: Rules, ridge: float, phase: str, cache_control: str) -> str:
    """What the classes say (`analyze.classify.class_figures`): each class's share, the latency-bound kernels, the
    GEMV/GEMM kernels L2 kept warm, the roofline check and the locality flags."""
    f = C.class_figures(cp, rules, cache_control)

    def share(cls, pct, n):
        return (tr("**{cls}** {pct:.0f} % of profiled time (1 kernel)", cls=class_label(cls), pct=pct) if n == 1
                else tr("**{cls}** {pct:.0f} % of profiled time ({n} kernels)", cls=class_label(cls), pct=pct, n=n))

    parts = [tr("{classes}.", classes=tr(", ").join(share(*x) for x in f["shares"]))]
    if f["latency"] is not None:
        us, blocks, wave_pct = f["latency"]
        parts.append(tr("The latency-bound kernels run a median {us:.1f} µs with {blocks:.0f} blocks on {wave_pct} % of "
                        "one wave: too little work per launch to load either the SMs or the memory system — fusing "
                        "them into their neighbours, not tuning them, is what removes their time.",
                        us=us, blocks=blocks, wave_pct=_pct_text(wave_pct)))
    if f["warm"] is not None:
        n, dram = f["warm"]
        parts.append(tr("{n} of the GEMV/GEMM kernels are not memory-bound by these counters (DRAM {dram:.1f} % at "
                        "most) even though a batch-1 decode GEMV streams its weights once: under ncu replay with cache "
                        "control `none` their weight slices stay in L2, so the counters show the L2-resident case. In "
                        "the decode loop the weights come from DRAM every token.", n=n, dram=dram))
    parts.append(tr("Roofline check: a kernel with FLOPs is on the memory side when its DRAM intensity is below the "
                    "bf16 ridge ({ridge:.0f} FLOP/B). ", ridge=ridge)
                 + (tr("{n} compute-bound kernel(s) sit on the memory side.", n=f["disagree"]) if f["disagree"]
                    else tr("No kernel's class contradicts its roofline side in a way that matters (compute-bound on "
                            "the memory side).")))
    n, pct = f["locality"]
    parts.append(tr("{n} kernels whose work reuses its operands ({pct:.0f} % of profiled time) have an L2 hit rate "
                    "below {min:.0f} %: a locality issue.", n=n, pct=pct, min=rules.l2_hit_min_pct)
                 + (tr(" {n_stream} more ({stream_pct:.0f} %) hit less but use each byte once (GEMV weights, copies, a "
                       "decode step's KV cache): streaming, which L2 cannot help.", n_stream=f["streaming"][0],
                       stream_pct=f["streaming"][1]) if f["streaming"] is not None else ""))
    return "\n\n".join(parts)


def wave_prose(w: pd.DataFrame, sm_count: int) -> str:
    """What the wave table says (`analyze.classify.wave_figures`)."""
    f = C.wave_figures(w, sm_count)
    return tr("{n_under} of {n} kernels launch less than one wave ({pct:.0f} % of profiled time): part of the {sms} SMs "
              "sits idle for the whole kernel. {n_small} launch fewer than 4 × {sms} = {blocks} blocks. Time-weighted "
              "tail efficiency is {tail:.0f} %.", n_under=f["under"], n=f["n"], pct=f["pct"], sms=f["sms"],
              n_small=f["small"], blocks=f["blocks"], tail=f["tail"])


_SAME_ENDS = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)–\1(?![\d.])")  # '1–1' reads as '1'


def tile_prose(t: pd.DataFrame, rules: Rules) -> str:
    """What the decoded tiles say (`analyze.classify.tile_figures`); a range whose ends print the same ('1–1
    block(s)') prints as one value."""
    return _SAME_ENDS.sub(r"\1", _tile_prose(t, rules))


def _tile_prose(t: pd.DataFrame, rules: Rules) -> str:
    f = C.tile_figures(t, rules)
    if f is None:
        return tr("No GEMM/GEMV kernel name carries its tile shape.")
    return (tr("{n} GEMM/GEMV kernels decode to tiles; their tile intensity is {lo:.1f}–{hi:.1f} FLOP/B, {pct:.0f} % of "
               "the ridge at most", n=f["n"], lo=f["lo"], hi=f["hi"], pct=f["pct"])
            + (tr(": below the ridge, so the tile shape alone keeps them memory-side. ") if f["below"] else tr(". "))
            + tr("The decoded stages' A+B buffers fit in the launch's shared memory for {fit:.0f} % of them (a check "
                 "that the name was decoded right). A stage takes {c_lo:.0f}–{c_hi:.0f} cycles, the longer of its tile's "
                 "compute and its load at the SM's share of DRAM bandwidth, so covering {latency:.0f} cycles of "
                 "latency needs S_min = {s_lo}–{s_hi} stages in flight; the kernels use {st_lo}–{st_hi} stages, "
                 "and registers allow {r_lo}–{r_hi} block(s) per SM. ", fit=f["fit"],
                 c_lo=f["c_lo"], c_hi=f["c_hi"], latency=f["latency"],
                 s_lo=f["s_lo"], s_hi=f["s_hi"], st_lo=f["st_lo"], st_hi=f["st_hi"],
                 r_lo=f["r_lo"], r_hi=f["r_hi"])
            + (tr("{n_short} of {n} have fewer stages than S_min: latency, not bandwidth, bounds them.",
                  n_short=f["short"], n=f["n"]) if f["short"] else tr("All have at least S_min stages.")))


def kernel_cards(cp: pd.DataFrame, pts: pd.DataFrame, why: dict[str, pd.DataFrame] | None = None) -> dict[str, dict]:
    """`analyze.classify.kernel_cards` with each card's class, metric names and units in the reader's language (`why`:
    its tables as `narrate.why.kernel_why` shows them)."""
    cards = C.kernel_cards(cp, pts, why)
    for card in cards.values():
        m = card["metrics"]
        card["metrics"] = pd.DataFrame({"value": m["value"].tolist(), "unit": [_named(u) for u in m["unit"]]},
                                       index=[say(i) for i in m.index]).rename_axis("metric")
        card["class"] = say(card["class"])
    return cards
