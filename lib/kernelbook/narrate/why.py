"""Chapter 05's sentences on why a kernel is slow, and its why-tables in the reader's language, from `analyze.why`'s
numbers and English phrases: stalls, occupancy, the SM clock and NVIDIA's rules beside the book's classes."""
from __future__ import annotations

import pandas as pd

from ..analyze import why as W
from ..contract.phrase import Phrase
from ..escape import md
from ..i18n import N_, text, tr
from . import said, say

# the rules table's one line for a run whose ncu tables predate the rules column (`analyze.why.nvidia_rules` is None)
NO_RULES = N_("This run's ncu tables predate the rules column (NVIDIA's own rule results per kernel, kept by "
              "captures made since), so NVIDIA's verdicts cannot be set beside the book's classes here.")


def _named(v):
    """A cell the analysis named as a phrase, in the reader's language; any other as the analysis wrote it."""
    return say(v) if isinstance(v, Phrase) else v


def top_stalls_wide(top: pd.DataFrame) -> pd.DataFrame:
    """`analyze.why.top_stalls_wide` with its cells in the reader's language."""
    wide = W.top_stalls_wide(top)
    return said(wide, [c for c in wide if c.startswith("stall_")])


def occupancy(occ: pd.DataFrame) -> pd.DataFrame:
    """`analyze.why.occupancy`'s table with its limiters in the reader's language."""
    return said(occ, ["limiter"])


def nvidia_rules(nv: pd.DataFrame | None) -> pd.DataFrame | None:
    """`analyze.why.nvidia_rules`' table with the classes a verdict supports and NVIDIA's advice in the reader's
    language (None stays None: the run predates the rules column)."""
    return None if nv is None else said(nv, ["nvidia_supports", "nvidia_advice"])


def kernel_why(c: pd.DataFrame, metrics: pd.DataFrame, boost_mhz: float, results: pd.DataFrame | None = None,
               n: int = 3) -> dict[str, pd.DataFrame]:
    """`analyze.why.kernel_why`: kernel_id → the explorer card's "why" table, its metric names and words in the
    reader's language."""
    return {kid: pd.DataFrame([(say(m), _named(v), _named(u)) for m, v, u in t.itertuples(index=False)],
                              columns=["metric", "value", "unit"])
            for kid, t in W.kernel_why(c, metrics, boost_mhz, results, n).items()}


def occupancy_prose(occ: pd.DataFrame) -> str:
    """Which resource caps occupancy, by share of profiled time, and the achieved-vs-theoretical gap
    (`analyze.why.occupancy_figures`)."""
    f = W.occupancy_figures(occ)
    if f is None:
        return tr("ncu recorded no occupancy limits for these kernels.")
    parts = [tr("{n} of {total} kernels ({pct:.0f} % of profiled time) cannot reach full occupancy by their launch "
                "alone.", n=f["capped"], total=f["of"], pct=f["pct"])]
    if f["capped"]:
        parts.append(tr("What caps them: {list}.", list=tr(", ").join(
            tr("{what} ({pct:.0f} % of profiled time)", what=say(w), pct=pct) for w, pct in f["by"])))
    parts.append(tr("Achieved occupancy trails theoretical by {gap:.0f} points (time-weighted): warps the launch "
                    "allows that the SM did not keep resident, because the grid is smaller than the GPU or its last "
                    "wave runs part-empty.", gap=f["gap"]))
    return " ".join(parts)


def clock_prose(s: dict, device: str, clock_control: str) -> str:
    """What the SM clock reading means, with this run's numbers (`analyze.why.clock_summary`)."""
    parts = [tr("ncu's SM clock is `sm__cycles_elapsed.avg.per_second`: the cycles the SMs counted during the "
                "kernel divided by its duration (`gpu__time_duration`). ncu ran with `--clock-control {cc}`{how}. "
                "Over this run's {n} profiled launches it reads {lo:.0f}–{hi:.0f} MHz; {above} are above the "
                "{device}'s maximum SM clock of {boost:.0f} MHz (the devices table).", cc=clock_control,
                how=tr(", so the GPU set its own clock (boost)") if clock_control == "none" else
                tr(", so ncu fixed the clock at the base clock"), n=s["results"], lo=s["sm_min_mhz"],
                hi=s["sm_max_mhz"], above=s["above"], device=md(device), boost=s["boost_mhz"])]
    if s["above"] and s["gpc_max_mhz"] == s["gpc_max_mhz"]:
        parts.append(tr("Those readings are not the SMs running faster than their maximum: the same launches' GPC "
                        "clock (`gpc__cycles_elapsed.avg.per_second`, the clock domain the SMs run in) never reads "
                        "above {gpc:.0f} MHz, {over:.1f} % over the maximum. The SM cycle count differs from the GPC "
                        "count by a median {med:.0f} cycles ({lo:.0f} to {hi:.0f}): on the shortest launch ({short:.1f} µs, "
                        "about {short_cycles:.0f} cycles) the median alone is {short_pct:.0f} % of the reading.",
                        gpc=s["gpc_max_mhz"], over=s["gpc_over_pct"],
                        med=s["diff_median_cycles"], lo=s["diff_min_cycles"], hi=s["diff_max_cycles"],
                        short=s["shortest_us"], short_cycles=s["shortest_cycles"],
                        short_pct=s["diff_median_pct_of_shortest"]))
        if s["far"]:
            parts.append(tr("The {far} launches reading more than {slack:.1f} % above the highest GPC reading (above "
                            "{level:.0f} MHz) all last {us:.1f} µs or less.", far=s["far"], slack=s["slack_pct"],
                            level=s["far_mhz"], us=s["far_max_us"]))
        if s["near"]:
            parts.append(tr("The other {n} read within that, as the GPC clock itself did (the longest lasts {us:.1f} "
                            "µs): there the clock itself ran that little above the devices table's maximum.",
                            n=s["near"], us=s["above_max_us"]))
        parts.append(tr("Read the GPC clock as the clock the kernel ran at, and the SM reading of a kernel of a few µs "
                        "as good to a few per cent."))
    elif s["above"]:
        parts.append(tr("This run has no GPC clock reading to check them against; the launches reading above the "
                        "maximum all last {us:.1f} µs or less, where a few hundred cycles of counting error are "
                        "several per cent.", us=s["above_max_us"]))
    if s["slow"]:
        parts.append(tr("{n} launches ran below 95 % of the maximum by both counters (down to {mhz:.0f} MHz): there "
                        "the GPU did lower its clock, as it may under power or thermal limits when clocks are not "
                        "locked.", n=s["slow"], mhz=s["slow_min_mhz"]))
    return " ".join(parts)


def rules_prose(nv: pd.DataFrame | None) -> str:
    """Empty when the run predates the rules column (the table says so in its one line, `NO_RULES`); else
    how often NVIDIA's verdict and the book's class agree (`analyze.why.verdicts`), the kernels where they differ,
    and the mapping."""
    f = W.verdicts(nv)
    if f is None:
        return ""
    if not f["judged"]:
        out = tr("NVIDIA's rules gave no bottleneck verdict for these kernels.")
    else:
        differ = f["differ"]
        out = tr("NVIDIA's bottleneck verdict agrees with the book's class for {n} of {total} kernels.",
                 n=f["agree"], total=f["judged"])
        if len(differ):
            out += " " + tr("They differ on: {list}.", list=tr("; ").join(
                tr("{kernel}: NVIDIA says “{verdict}”, the book says {cls}", kernel=md(f"{k.kernel_id} {k.friendly_name}"),
                   verdict=md(k.nvidia_verdict), cls=text(k["class"])) for _, k in differ.iterrows()))
            out += " " + tr("ncu calls a kernel latency-bound (or small-grid, under one wave) when both sides are below "
                            "60 % of peak and names a side only when it leads by 10 points; the book's thresholds are "
                            "this chapter's parameters.")
    mapping = tr("; ").join(tr("{rule} “{title}” → {classes}", rule=r, title=t, classes=tr(", ").join(text(x) for x in c))
                            for (r, t), c in W.RULE_CLASSES.items())
    return out + "\n\n" + tr("Which book class each NVIDIA verdict supports: {mapping}.", mapping=mapping)
