"""Chapter 03's analysis: the reference report's 13 metric histograms, by kernel count and by time.

Each profiled kernel is one sample; its time weight is its share of the phase's kernel time (all
launches of that kernel), so "by time" answers "where does the time go" and "by count" answers
"what is a typical kernel like".
"""
from __future__ import annotations

import numpy as np
import pandas as pd


# column, title, unit, threshold for the caption's "time share above" (None: no threshold). Titles and
# units are in English and catalog keys (declared in `narrate.histograms`, which shows them in the narrative
# language; a translated percentage unit still starts with '%', which is how the display layer recognises one).
HISTOGRAMS = [
    ("sm_pct", "SM throughput", "% of peak", 60),
    ("dram_pct", "DRAM throughput", "% of peak", 70),
    ("memory_pct", "Memory throughput", "% of peak", 60),
    ("dram_gbps", "Memory throughput (DRAM)", "GB/s", None),
    ("l1_hit_pct", "L1 hit rate", "%", 50),
    ("l1_pct", "L1 throughput", "% of peak", 60),
    ("l2_hit_pct", "L2 hit rate", "%", 80),
    ("l2_pct", "L2 throughput", "% of peak", 60),
    ("achieved_occupancy_pct", "Achieved occupancy", "% of max warps", 25),
    ("theoretical_occupancy_pct", "Theoretical occupancy", "% of max warps", 25),
    ("duration_us", "Duration (one launch)", "µs", None),
    ("mem_busy_pct", "Memory busy", "% of peak", 60),
    ("max_bandwidth_pct", "Max bandwidth utilization", "% of peak", 60),
]


def samples(kernels: pd.DataFrame):
    """(column, title, unit, threshold, values, time weights) per histogram metric that has values,
    over the profiled kernels (rows of `roofline.profiled_kernels`); title and unit in English (`HISTOGRAMS`)."""
    k = kernels[kernels.status == "profiled"]
    for col, title, unit, thr in HISTOGRAMS:
        v = k[col].astype(float)
        ok = v.notna()
        if ok.any():
            yield col, title, unit, thr, v[ok], k.loc[ok, "share"]


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
    threshold (the project's rule-of-thumb "healthy" level where there is one: narrate.classify.THRESHOLD_SOURCES);
    metric and unit in English (`narrate.histograms.captions` adds the caption and shows them in the reader's language)."""
    rows = []
    for col, title, unit, thr, v, w in samples(kernels):
        row = {"metric": title, "column": col, "unit": unit, "kernels": len(v), "median": float(v.median()),
               "time_weighted_median": weighted_median(v, w), "threshold": thr,
               "time_pct_at_or_above": 100 * float(w[v >= thr].sum() / w.sum()) if thr is not None else np.nan}
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
