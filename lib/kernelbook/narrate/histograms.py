"""Chapter 03's words, from `analyze.histograms`: the metrics' titles and units in the reader's language, each
histogram's caption, the headline and the paragraph under the captions table."""
from __future__ import annotations

import pandas as pd

from ..analyze.histograms import HISTOGRAMS
from ..display import missing, pct, phase_label
from ..i18n import N_, text, tr

# `analyze.histograms.HISTOGRAMS`' titles and units, catalog keys: the tables and figures show them translated
TITLES = (N_("SM throughput"), N_("DRAM throughput"), N_("Memory throughput"), N_("Memory throughput (DRAM)"),
          N_("L1 hit rate"), N_("L1 throughput"), N_("L2 hit rate"), N_("L2 throughput"), N_("Achieved occupancy"),
          N_("Theoretical occupancy"), N_("Duration (one launch)"), N_("Memory busy"),
          N_("Max bandwidth utilization"))
UNITS = (N_("% of peak"), N_("% of max warps"))
assert TITLES == tuple(t for _, t, _, _ in HISTOGRAMS)
assert {u for _, _, u, _ in HISTOGRAMS if u.startswith("% ")} == set(UNITS)


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """`analyze.histograms.histogram_table` (or `captions`) with its metric and unit in the reader's language."""
    if table.empty:
        return table
    return table.assign(metric=table.metric.map(text), unit=table.unit.map(text))


def captions(cap: pd.DataFrame) -> pd.DataFrame:
    """`analyze.histograms.captions` as the chapter shows it: metric and unit in the reader's language, and each
    histogram's caption (its medians by count and by time; the time share at or above its healthy level)."""
    out = shown(cap)
    threshold = {c: t for c, _, _, t in HISTOGRAMS}  # as declared (60, not the column's 60.0)
    out["caption"] = [tr("median {median:.1f} {unit} by count, {weighted:.1f} by time", median=r["median"],
                         unit=r["unit"], weighted=r["time_weighted_median"])
                      + (tr("; {pct:.0f} % of profiled time at or above {threshold}", pct=r["time_pct_at_or_above"],
                            threshold=threshold[r["column"]]) if threshold[r["column"]] is not None else "")
                      for _, r in out.iterrows()] if len(out) else []
    return out


def _above(p: float, thr: float) -> str:
    """'none of the time runs at ≥ 60 %', 'only 4 % of the time ...', 'all of ...': the edges in words."""
    if missing(p):
        return tr("an unmeasured share of the time runs at ≥ {threshold:.0f} %", threshold=thr)
    if p <= 0:
        return tr("none of the time runs at ≥ {threshold:.0f} %", threshold=thr)
    if p >= 100:
        return tr("all of the time runs at ≥ {threshold:.0f} %", threshold=thr)
    if p < 1:
        return tr("only under 1 % of the time runs at ≥ {threshold:.0f} %", threshold=thr)
    if p < 50:
        return tr("only {pct:.0f} % of the time runs at ≥ {threshold:.0f} %", pct=p, threshold=thr)
    if p > 99:
        return tr("over 99 % of the time runs at ≥ {threshold:.0f} %", threshold=thr)
    return tr("{pct:.0f} % of the time runs at ≥ {threshold:.0f} %", pct=p, threshold=thr)


def headline(cap: pd.DataFrame, phase: str = "decode") -> str:
    """The chapter's headline; percentages spelled as the tables spell them (`display.pct`: '< 0.1', not
    a rounded 0.0 for a value that is not zero)."""
    sm = cap.set_index("column").loc["sm_pct"]
    n = int(sm.kernels)
    kernels = (tr("the one profiled {phase} kernel", phase=phase_label(phase)) if n == 1 else
               tr("the {n} profiled {phase} kernels", n=n, phase=phase_label(phase)))
    return tr("Across {kernels}, SM throughput has a median of {median} % ({weighted} % by time) and "
              "{above}.", kernels=kernels, median=pct(sm["median"]), weighted=pct(sm.time_weighted_median),
              above=_above(sm.time_pct_at_or_above, sm.threshold))


def prose(cap: pd.DataFrame, phase: str = "decode") -> str:
    c = cap.set_index("column")
    dram, occ, l2 = (c.loc[m] for m in ("dram_pct", "achieved_occupancy_pct", "l2_hit_pct"))
    return headline(cap, phase) + tr(
        " DRAM throughput: median {dram} %, {dram_weighted} % by time; {dram_above}. Achieved occupancy has a "
        "median of {occupancy} % and L2 hit rate {l2} % ({l2_above}). Counts and time disagree wherever a "
        "few long kernels dominate: read the time-weighted bars for where the time goes.", dram=pct(dram["median"]),
        dram_weighted=pct(dram.time_weighted_median), dram_above=_above(dram.time_pct_at_or_above, dram.threshold),
        occupancy=pct(occ["median"]), l2=pct(l2["median"]), l2_above=_above(l2.time_pct_at_or_above, l2.threshold))
