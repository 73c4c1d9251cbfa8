"""Figures for the chapters. Every function returns a plotly Figure; none shows or prints."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

TEMPLATE = "plotly_white"


def phase_bars(summary: pd.DataFrame) -> go.Figure:
    """Wall time vs GPU-busy time per phase (ms)."""
    fig = go.Figure()
    fig.add_bar(name="wall (ms)", x=summary.phase, y=summary.wall_ms)
    fig.add_bar(name="GPU busy (ms)", x=summary.phase, y=summary.gpu_busy_ms)
    fig.update_layout(template=TEMPLATE, barmode="group", yaxis_title="ms", height=360,
                      title="Wall time vs GPU-busy time per phase")
    return fig


def gap_histogram(gaps_us: pd.Series, phase: str = "decode") -> go.Figure:
    """Histogram of idle gaps between consecutive kernels (log-spaced µs bins)."""
    g = gaps_us[gaps_us > 0]
    bins = np.logspace(np.log10(max(g.min(), 0.1)), np.log10(max(g.max(), 1.0)), 40) if len(g) else [0, 1]
    counts, edges = np.histogram(g, bins=bins)
    fig = go.Figure(go.Bar(x=np.sqrt(edges[:-1] * edges[1:]), y=counts, width=np.diff(edges),
                           hovertemplate="%{x:.1f} µs: %{y} gaps<extra></extra>"))
    fig.update_layout(template=TEMPLATE, xaxis_type="log", xaxis_title="gap before kernel (µs, log)",
                      yaxis_title="kernels", height=340, title=f"Kernel-to-kernel gaps in {phase}")
    return fig


def category_bars(shares: pd.DataFrame) -> go.Figure:
    """Stacked share of kernel time per category, one bar per phase."""
    fig = px.bar(shares, x="phase", y="pct", color="category", template=TEMPLATE, height=420,
                 labels={"pct": "% of phase kernel time"}, title="Kernel time by category per phase")
    return fig


def reference_bars(cmp: pd.DataFrame) -> go.Figure:
    long = cmp.melt(id_vars="category", value_vars=["this_run_pct", "reference_pct"], var_name="source",
                    value_name="pct").dropna()
    long["source"] = long.source.map({"this_run_pct": "this run", "reference_pct": "reference report"})
    return px.bar(long, x="category", y="pct", color="source", barmode="group", template=TEMPLATE,
                  height=380, labels={"pct": "% of decode kernel time"},
                  title="Decode categories: this run vs the reference report")


def fidelity_scatter(fid: pd.DataFrame) -> go.Figure:
    """ncu duration vs timeline median duration per profiled kernel (µs), with the y = x line."""
    fig = px.scatter(fid, x="timeline_median_us", y="ncu_us", color="category", hover_name="friendly_name",
                     log_x=True, log_y=True, template=TEMPLATE, height=420,
                     labels={"timeline_median_us": "timeline median (µs)", "ncu_us": "ncu duration (µs)"},
                     title="ncu duration vs timeline median")
    lo = float(np.nanmin([fid.timeline_median_us.min(), fid.ncu_us.min()]))
    hi = float(np.nanmax([fid.timeline_median_us.max(), fid.ncu_us.max()]))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dot")))
    return fig
