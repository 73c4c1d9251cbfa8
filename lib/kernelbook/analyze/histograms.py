"""Chapter 03's analysis: the reference report's 13 metric histograms, by kernel count and by time.

Each profiled kernel is one sample; its time weight is its share of the phase's kernel time (all
launches of that kernel), so "by time" answers "where does the time go" and "by count" answers
"what is a typical kernel like".
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..i18n import N_, text, tr

# column, title, unit, threshold for the caption's "time share above" (None: no threshold). Titles and
# units are catalog keys: the tables and figures show them in the narrative language (a translated
# percentage unit still starts with '%', which is how the display layer and the bins recognise one).
HISTOGRAMS = [
    ("sm_pct", N_("SM throughput"), N_("% of peak"), 60),
    ("dram_pct", N_("DRAM throughput"), N_("% of peak"), 70),
    ("memory_pct", N_("Memory throughput"), N_("% of peak"), 60),
    ("dram_gbps", N_("Memory throughput (DRAM)"), "GB/s", None),
    ("l1_hit_pct", N_("L1 hit rate"), "%", 50),
    ("l1_pct", N_("L1 throughput"), N_("% of peak"), 60),
    ("l2_hit_pct", N_("L2 hit rate"), "%", 80),
    ("l2_pct", N_("L2 throughput"), N_("% of peak"), 60),
    ("achieved_occupancy_pct", N_("Achieved occupancy"), N_("% of max warps"), 25),
    ("theoretical_occupancy_pct", N_("Theoretical occupancy"), N_("% of max warps"), 25),
    ("duration_us", N_("Duration (one launch)"), "µs", None),
    ("mem_busy_pct", N_("Memory busy"), N_("% of peak"), 60),
    ("max_bandwidth_pct", N_("Max bandwidth utilization"), N_("% of peak"), 60),
]


def samples(kernels: pd.DataFrame):
    """(column, title, unit, threshold, values, time weights) per histogram metric that has values,
    over the profiled kernels (rows of `roofline.profiled_kernels`); title and unit in the narrative
    language."""
    k = kernels[kernels.status == "profiled"]
    for col, title, unit, thr in HISTOGRAMS:
        v = k[col].astype(float)
        ok = v.notna()
        if ok.any():
            yield col, text(title), text(unit), thr, v[ok], k.loc[ok, "share"]


def histogram_table(kernels: pd.DataFrame, bins: int = 10) -> pd.DataFrame:
    """Long format: metric, unit, bin_lo, bin_hi, count_pct, time_pct (each sums to 100 per metric)."""
    rows = []
    for col, title, unit, _, v, w in samples(kernels):
        if unit.startswith("%"):
            edges = np.linspace(0, 100, bins + 1)
        elif col == "duration_us":
            edges = np.logspace(np.log10(max(v.min(), 0.1)), np.log10(v.max() * 1.0001), bins + 1)
        else:
            edges = np.linspace(0, v.max() * 1.0001 if v.max() > 0 else 1, bins + 1)
        idx = np.clip(np.searchsorted(edges, v.to_numpy(), side="right") - 1, 0, bins - 1)
        cnt = np.bincount(idx, minlength=bins)
        tw = np.bincount(idx, weights=w.to_numpy(), minlength=bins)
        for b in range(bins):
            rows.append({"metric": title, "column": col, "unit": unit, "bin_lo": edges[b], "bin_hi": edges[b + 1],
                         "count_pct": 100 * cnt[b] / cnt.sum(), "time_pct": 100 * tw[b] / tw.sum() if tw.sum() else 0})
    return pd.DataFrame(rows)


def _edge(v: float, digits: int) -> str:
    """One bin edge as a reader reads it: `digits` significant digits, thousands grouped, no exponent and no
    trailing zeros (1125.2 → '1,130', 2.7183 → '2.72', 0 → '0')."""
    v = float(v)
    if v == 0 or not np.isfinite(v):
        return "0" if v == 0 else str(v)
    r = float(f"{v:.{digits}g}")  # rounded to `digits` significant digits
    decimals = max(0, digits - 1 - int(np.floor(np.log10(abs(r)))))
    out = f"{r:,.{decimals}f}"
    return out.rstrip("0").rstrip(".") if "." in out else out


def bin_labels(lo, hi) -> list[str]:
    """'lo–hi' per bin of one metric, edges as plain numbers ('1,130–1,410', never '1.13e+03–1.41e+03'), with
    the fewest significant digits (3 or more) that keep every edge of the metric distinct."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    edges = np.unique(np.r_[lo, hi])
    for digits in range(3, 8):
        if len({_edge(e, digits) for e in edges}) == len(edges):
            break
    return [f"{_edge(a, digits)}–{_edge(b, digits)}" for a, b in zip(lo, hi)]


def captions(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per metric: unweighted median, time-weighted median, and the time share at or above the
    threshold (the project's rule-of-thumb "healthy" level where there is one: classify.THRESHOLD_SOURCES)."""
    rows = []
    for col, title, unit, thr, v, w in samples(kernels):
        row = {"metric": title, "column": col, "unit": unit, "kernels": len(v), "median": float(v.median()),
               "time_weighted_median": weighted_median(v, w), "threshold": thr,
               "time_pct_at_or_above": 100 * float(w[v >= thr].sum() / w.sum()) if thr is not None else np.nan}
        row["caption"] = (tr("median {median:.1f} {unit} by count, {weighted:.1f} by time", median=row["median"],
                             unit=unit, weighted=row["time_weighted_median"])
                          + (tr("; {pct:.0f} % of profiled time at or above {threshold}",
                                pct=row["time_pct_at_or_above"], threshold=thr) if thr is not None else ""))
        rows.append(row)
    return pd.DataFrame(rows)


def weighted_mean(x: pd.Series, w: pd.Series) -> float:
    """Mean of `x` weighted by `w`, over rows where both are present (NaN when no weight)."""
    ok = x.notna() & w.notna()
    return float((x[ok] * w[ok]).sum() / w[ok].sum()) if w[ok].sum() > 0 else float("nan")


def weighted_median(v: pd.Series, w: pd.Series) -> float:
    """The value below which half the weight lies (lower weighted median)."""
    order = np.argsort(v.to_numpy())
    vs, ws = v.to_numpy()[order], w.to_numpy()[order]
    cum = np.cumsum(ws)
    return float(vs[np.searchsorted(cum, cum[-1] / 2)])


def _above(p: float, thr: float) -> str:
    """'none of the time runs at ≥ 60 %', 'only 4 % of the time ...', 'all of ...': the edges in words."""
    from ..display import missing

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
    from ..display import pct, phase_label

    sm = cap.set_index("column").loc["sm_pct"]
    n = int(sm.kernels)
    kernels = (tr("the one profiled {phase} kernel", phase=phase_label(phase)) if n == 1 else
               tr("the {n} profiled {phase} kernels", n=n, phase=phase_label(phase)))
    return tr("Across {kernels}, SM throughput has a median of {median} % ({weighted} % by time) and "
              "{above}.", kernels=kernels, median=pct(sm["median"]), weighted=pct(sm.time_weighted_median),
              above=_above(sm.time_pct_at_or_above, sm.threshold))


def prose(cap: pd.DataFrame, phase: str = "decode") -> str:
    from ..display import pct

    c = cap.set_index("column")
    dram, occ, l2 = (c.loc[m] for m in ("dram_pct", "achieved_occupancy_pct", "l2_hit_pct"))
    return headline(cap, phase) + tr(
        " DRAM throughput: median {dram} %, {dram_weighted} % by time; {dram_above}. Achieved occupancy has a "
        "median of {occupancy} % and L2 hit rate {l2} % ({l2_above}). Counts and time disagree wherever a "
        "few long kernels dominate: read the time-weighted bars for where the time goes.", dram=pct(dram["median"]),
        dram_weighted=pct(dram.time_weighted_median), dram_above=_above(dram.time_pct_at_or_above, dram.threshold),
        occupancy=pct(occ["median"]), l2=pct(l2["median"]), l2_above=_above(l2.time_pct_at_or_above, l2.threshold))
