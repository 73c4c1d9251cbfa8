"""Figures for the chapters. Every function returns a plotly Figure; none shows or prints."""
from __future__ import annotations

import html
import textwrap

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

import plotly.io as pio

from ..analyze.histograms import bin_labels
from ..analyze.roofline import PEAK_SPEC
from ..contract.kernels import Category
from ..display import eng, phase_label
from ..escape import plot
from ..i18n import text, tr

# One colour per kernel category, fixed by the Category enum's order, used by every figure that colours by
# category (chapter 01's bars and chapter 04's rooflines drew "attention" in different colours when each
# figure dealt colours out in the order its own categories sorted or appeared).
CATEGORY_COLOURS = px.colors.qualitative.Safe
CATEGORY_COLOUR = {c.value: CATEGORY_COLOURS[i % len(CATEGORY_COLOURS)] for i, c in enumerate(Category)}


def category_colour(cat) -> str:
    """The colour of a kernel category in every figure; a label no Category names gets the last one."""
    return CATEGORY_COLOUR.get(cat, CATEGORY_COLOURS[-1])


# One plotly template for the book: plotly_white with the category palette as its colourway, so every
# figure, express or graph_objects, starts from the same look.
pio.templates["kernelbook"] = go.layout.Template(pio.templates["plotly_white"]).update(
    layout=dict(colorway=CATEGORY_COLOURS))
TEMPLATE = "kernelbook"

# Where a log axis keeps plotly's own ticks (a range too narrow for `log_ticks`), powers of ten, never SI prefixes
# (plotly's default on a log axis: 1e-4 as '100µ').
NO_SI = dict(exponentformat="power")


def _esc(values) -> pd.Series:
    """A column of run strings (kernel names, ids, variant labels) as text plotly draws (`escape.plot`);
    missing values stay missing."""
    return pd.Series(values).map(lambda v: v if v is None or v != v else plot(v))


def _bandwidth_roof_name(roofs, level: str) -> str:
    """A bandwidth roof's legend entry: its level and GB/s, and which peak it is (`Roofs.peak_kind`) with the run
    whose capture measured it, so chapter 04's DRAM roof and chapter 08's (two captures) read as what they are."""
    bw, kind = roofs.bandwidth[level], roofs.peak_kind(level)
    if roofs.run_id and kind != PEAK_SPEC:  # a spec roof was not measured in any capture
        return tr("{level} {gbps:,.0f} GB/s ({kind}, {run})", level=level.upper(), gbps=bw / 1e9, kind=text(kind),
                  run=plot(roofs.run_id))
    return tr("{level} {gbps:,.0f} GB/s ({kind})", level=level.upper(), gbps=bw / 1e9, kind=text(kind))


def phase_bars(summary: pd.DataFrame) -> go.Figure:
    """Wall time vs GPU-busy time per phase (ms): totals over each phase's steps in the profiled generate, as
    chapter 01's phase table, the basis stated in the title."""
    fig = go.Figure()
    phases = summary.phase.map(phase_label)
    fig.add_bar(name=tr("wall (ms)"), x=phases, y=summary.wall_ms)
    fig.add_bar(name=tr("GPU busy (ms)"), x=phases, y=summary.gpu_busy_ms)
    fig.update_layout(template=TEMPLATE, barmode="group", yaxis_title="ms", height=360,
                      title=tr("Wall time vs GPU-busy time per phase (ms in total over the phase, profiled "
                               "generate)"))
    return fig


def step_curve(curve: pd.DataFrame) -> go.Figure:
    """Decode step time (ms) against the KV cache length (tokens): every plain step as a line, the profiled
    steps (wall under the profiler, GPU-busy) as markers."""
    fig = go.Figure()
    for series, g in curve.groupby("series", sort=False):
        plain = series == tr("plain wall")
        fig.add_scatter(x=g.kv_tokens, y=g.ms, name=series, mode="lines" if plain else "markers",
                        marker={"size": 5}, line={"width": 1},
                        customdata=g.step, hovertemplate=tr("step %{{customdata}}, KV %{{x}} tokens: %{{y:.2f}} ms")
                        + "<extra></extra>")
    fig.update_layout(template=TEMPLATE, xaxis_title=tr("KV cache length (tokens)"), yaxis_title="ms",
                      yaxis_rangemode="tozero", height=380, title=tr("Decode step time against position"))
    return fig


def gap_histogram(gaps_us: pd.Series, phase: str = "decode") -> go.Figure:
    """Histogram of idle gaps between consecutive kernels (log-spaced µs bins)."""
    g = gaps_us[gaps_us > 0]
    bins = np.logspace(np.log10(max(g.min(), 0.1)), np.log10(max(g.max(), 1.0)), 40) if len(g) else [0, 1]
    counts, edges = np.histogram(g, bins=bins)
    fig = go.Figure(go.Bar(x=np.sqrt(edges[:-1] * edges[1:]), y=counts, width=np.diff(edges),
                           hovertemplate=tr("%{{x:.1f}} µs: %{{y}} gaps") + "<extra></extra>"))
    fig.update_xaxes(**NO_SI, **log_ticks(edges, most=10))  # 5, 10, 20, 50 µs across the page: no bare digit under a tick
    fig.update_layout(template=TEMPLATE, xaxis_type="log", xaxis_title=tr("gap before kernel (µs, log)"),
                      yaxis_title=tr("kernels"), height=340,
                      title=tr("Kernel-to-kernel gaps in {phase}", phase=phase_label(phase)))
    return fig


def phase_steps(timeline: pd.DataFrame) -> dict[str, int]:
    """Steps per phase of a timeline's kernels (decode: one per generated token; vision encode and prefill: one
    call each), at least 1."""
    k = timeline[timeline.kind == "kernel"] if "kind" in timeline else timeline
    return {ph: max(1, int(n)) for ph, n in k.groupby("phase")["step"].nunique().items()}


def top_kernel_bars(top: pd.DataFrame, timeline: pd.DataFrame | None = None) -> go.Figure:
    """Top kernels of each phase by time, one panel per phase, coloured by category; hover names the kernel
    (friendly and short name, library) with its time, share, launches and mean/median. With the run's
    `timeline`, every bar is µs per step as the rest of the book: the kernel's time in the phase ÷ the phase's
    steps (decode: per token step; vision encode and prefill run one step: per call), stated in the title and
    on each axis. Without it the bars are the phase's total ms, and the title says so."""
    from plotly.subplots import make_subplots

    steps = phase_steps(timeline) if timeline is not None else None

    # one panel per phase, stacked: side by side, a panel's kernel labels ran over the bars of the panel before it
    phases = list(dict.fromkeys(top.phase))
    sizes = [int((top.phase == p).sum()) for p in phases]
    fig = make_subplots(rows=len(phases), cols=1, subplot_titles=[phase_label(p) for p in phases],
                        row_heights=[max(n, 3) for n in sizes], vertical_spacing=0.3 / max(1, len(phases)))
    for j, ph in enumerate(phases, 1):
        t = top[top.phase == ph].iloc[::-1]
        n = steps.get(ph, 1) if steps is not None else None
        for cat, q in t.groupby("category", sort=False):
            fig.add_bar(
                x=q.total_ms * 1e3 / n if n else q.total_ms, y=[f"{r}. {plot(f)}" for r, f in zip(q["rank"], q.friendly_name)], orientation="h",
                name=cat, legendgroup=cat, showlegend=cat not in {d.name for d in fig.data}, marker_color=category_colour(cat),
                customdata=np.c_[_esc(q.friendly_name), _esc(q.name.str.slice(0, 90)), _esc(q.library), q.time_pct, q.calls, q.mean_us,
                                 q.median_us, q.total_ms],
                hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]}, " + phase_label(ph) +
                              "<br>" + (tr("%{{x:.1f}} µs per step ({n} steps)", n=n) + ", " if n and n > 1 else
                                        tr("%{{x:.1f}} µs per call") + ", " if n else "") +
                              tr("%{{customdata[7]:.2f}} ms total, %{{customdata[3]:.1f}} % of phase kernel time") +
                              "<br>" + tr("%{{customdata[4]}} launches, mean %{{customdata[5]:.1f}} µs, median "
                                          "%{{customdata[6]:.1f}} µs") + "<extra></extra>", row=j, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=[f"{r}. {plot(f)}" for r, f in zip(t["rank"], t.friendly_name)],
                         tickfont=dict(size=10), row=j, col=1)
        fig.update_xaxes(title_text=(tr("ms in total over the phase") if steps is None else
                                     tr("µs per step ({n} steps)", n=steps.get(ph, 1)) if steps.get(ph, 1) > 1 else
                                     tr("µs per call (one step)")), row=j, col=1)
    title = (tr("Top kernels per phase, total ms over all the phase's steps (hover a bar for its numbers)")
             if steps is None else
             tr("Top kernels per phase, µs per step (decode: per token; vision encode, prefill: per call)"))
    fig.update_layout(template=TEMPLATE, height=max(380, 22 * sum(max(n, 3) for n in sizes) + 110 * len(phases) + 120),
                      title=title,
                      legend=dict(orientation="h", y=-0.12))
    return fig


def category_bars(shares: pd.DataFrame) -> go.Figure:
    """Stacked share of kernel time per category, one bar per phase."""
    fig = px.bar(shares.assign(phase=shares.phase.map(phase_label)), x="phase", y="pct", color="category",
                 color_discrete_map=CATEGORY_COLOUR, template=TEMPLATE, height=420, labels={"pct": tr("% of phase kernel time"), "phase": tr("phase")},
                 title=tr("Kernel time by category per phase"))
    return fig


def reference_bars(cmp: pd.DataFrame) -> go.Figure:
    long = cmp.melt(id_vars="category", value_vars=["this_run_pct", "reference_pct"], var_name="source",
                    value_name="pct").dropna()
    long["source"] = long.source.map({"this_run_pct": tr("this run"), "reference_pct": tr("reference report")})
    return px.bar(long, x="category", y="pct", color="source", barmode="group", template=TEMPLATE,
                  height=380, labels={"pct": tr("% of decode kernel time"), "source": tr("source")},
                  title=tr("Decode categories: this run vs the reference report"))


def fidelity_scatter(fid: pd.DataFrame) -> go.Figure:
    """ncu duration vs timeline median duration per profiled kernel (µs), with the y = x line."""
    fig = px.scatter(fid.assign(friendly_name=_esc(fid.friendly_name).values), x="timeline_median_us", y="ncu_us",
                     color="category", color_discrete_map=CATEGORY_COLOUR, hover_name="friendly_name",
                     log_x=True, log_y=True, template=TEMPLATE, height=420,
                     labels={"timeline_median_us": tr("timeline median (µs)"), "ncu_us": tr("ncu duration (µs)")},
                     title=tr("ncu duration vs timeline median"))
    lo = float(np.nanmin([fid.timeline_median_us.min(), fid.ncu_us.min()]))
    hi = float(np.nanmax([fid.timeline_median_us.max(), fid.ncu_us.max()]))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dot")))
    fig.update_xaxes(**log_ticks(np.r_[fid.timeline_median_us, lo, hi]))  # 2, 5, 10, 20 µs: no bare digit
    fig.update_yaxes(**log_ticks(np.r_[fid.ncu_us, lo, hi]))
    return fig


def histogram_grid(hist: pd.DataFrame, captions: pd.DataFrame) -> go.Figure:
    """The 13 metric histograms, small multiples: % of kernels and % of time per bin, side by side."""
    from plotly.subplots import make_subplots

    metrics = list(dict.fromkeys(hist.metric))
    cols = 3
    rows = -(-len(metrics) // cols)
    cap = captions.set_index("metric")["caption"].to_dict()
    unit = hist.drop_duplicates("metric").set_index("metric")["unit"].to_dict()
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{m} ({unit[m]})" for m in metrics],
                        vertical_spacing=0.5 / rows, horizontal_spacing=0.06)
    for i, m in enumerate(metrics):
        h = hist[hist.metric == m]
        label = bin_labels(h.bin_lo, h.bin_hi)  # '1,130–1,410', never '1.13e+03–1.41e+03'
        r, c = i // cols + 1, i % cols + 1
        for col, name, colour in (("count_pct", tr("% of kernels"), "#7f9cc2"), ("time_pct", tr("% of time"), "#d9822b")):
            fig.add_bar(x=label, y=h[col], name=name, marker_color=colour, legendgroup=name, showlegend=i == 0,
                        hovertemplate=f"{m} %{{x}} {plot(unit[m])}: %{{y:.1f}} {name}<br>{cap.get(m, '')}<extra></extra>", row=r, col=c)
        # each bin's range under its bars: the histogram reads without hovering
        fig.update_xaxes(showticklabels=True, tickangle=-45, tickfont=dict(size=9), row=r, col=c)
    height, top = 320 * rows, 110
    # the legend sits between the figure's title and the first row's panel titles, clear of both
    fig.update_layout(template=TEMPLATE, barmode="group", height=height, bargap=0.15, margin=dict(t=top),
                      title=dict(text=tr("Metric histograms of the profiled kernels: by count and by time"),
                                 y=1 - 12 / height, yanchor="top"),
                      legend=dict(orientation="h", yanchor="bottom", y=1 + 28 / (height - top - 80), x=0))
    return fig



ARTIFACT_COLOUR = "#bbbbbb"  # a point whose bytes are ncu's floor, not the kernel's traffic


def roofline_physical(points: pd.DataFrame, roofs, phase: str = "decode", useful: pd.DataFrame | None = None
                      ) -> go.Figure:
    """FLOP/s vs FLOP/byte, log-log: compute roofs (tensor and CUDA core), bandwidth roofs per level,
    measured ceilings dashed; points at DRAM (circle), L2 (square), L1 (diamond); size = time share; a
    near-empty kernel's cache points (`artifact`) grey. `useful` (roofline.useful_work): each padded kernel's
    useful work at DRAM as a hollow marker, joined to its counted point."""
    p = points[points.phase == phase]
    fig = go.Figure()
    xs = np.logspace(-3, 6, 200)
    used = set(p.compute_roof)
    drawn = {label: peak for label, peak in roofs.compute.items()
             if not (label.startswith("tensor") and label != "tensor bf16" and label not in used)}  # dtypes in use
    for label, peak in drawn.items():
        fig.add_trace(go.Scatter(x=xs, y=np.full_like(xs, peak), mode="lines", name=tr("{roof} roof", roof=label),
                                 line=dict(width=1.5, color="#444" if "tensor" in label else "#999")))
    top = max(drawn.values())  # a bandwidth roof ends where it meets the highest compute roof drawn
    dashes = {"dram": "solid", "l2": "dash", "l1": "dot"}
    for lvl, bw in roofs.bandwidth.items():
        x = xs[bw * xs <= top]
        fig.add_trace(go.Scatter(x=x, y=bw * x, mode="lines", name=_bandwidth_roof_name(roofs, lvl),
                                 line=dict(width=1.5, dash=dashes[lvl], color="#2b6cb0")))
    for label, v in roofs.measured.items():  # measured ceilings, dashed: the GEMM peak and the DRAM copy
        if "TFLOP" in label:
            fig.add_trace(go.Scatter(x=xs, y=np.full_like(xs, v), mode="lines", name=text(label),
                                     line=dict(width=1, dash="dash", color="#c05621")))
        else:
            x = xs[v * xs <= top]
            fig.add_trace(go.Scatter(x=x, y=v * x, mode="lines", name=text(label),
                                     line=dict(width=1, dash="dash", color="#c05621")))
    symbols = {"DRAM": "circle", "L2": "square", "L1": "diamond"}
    cats = sorted(p.category.dropna().unique())
    for cat in cats:
        for lvl, sym in symbols.items():
            q = p[(p.category == cat) & (p.level == lvl)]
            if q.empty:
                continue
            fig.add_trace(go.Scatter(
                x=q.intensity, y=q.flops_per_s, mode="markers", name=f"{cat} @ {lvl}", legendgroup=cat,
                marker=dict(symbol=sym, size=8 + 40 * np.sqrt(q.share),
                            color=list(np.where(q.artifact, ARTIFACT_COLOUR, category_colour(cat)))
                            if "artifact" in q and q.artifact.any() else category_colour(cat),
                            line=dict(width=2, color=np.where(q.above_roof, "red", "white"))),
                customdata=np.c_[_esc(q.friendly_name), q.duration_us, q.pct_of_roof.round(1), _esc(q.kernel_id)],
                hovertemplate="%{customdata[3]} %{customdata[0]}<br>" + lvl + ": %{x:.3g} FLOP/B, %{y:.3s} FLOP/s"
                              "<br>" + tr("%{{customdata[1]:.1f}} µs, %{{customdata[2]}} % of roof")
                              + "<extra></extra>"))
    u = useful[(useful.phase == phase) & (useful.padding_ratio > 1.05)] if useful is not None and len(useful) else None
    if u is not None and len(u):
        xs_, ys_ = [], []
        for r in u.itertuples():
            xs_ += [r.intensity_dram, r.useful_intensity_dram, None]
            ys_ += [r.flops_per_s, r.useful_flops_per_s, None]
        fig.add_trace(go.Scatter(x=xs_, y=ys_, mode="lines", line=dict(width=1, dash="dot", color="#888"),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(
            x=u.useful_intensity_dram, y=u.useful_flops_per_s, mode="markers",
            name=tr("useful work (from shapes) @ DRAM"),
            marker=dict(symbol="circle-open", size=11, line=dict(width=2), color=[category_colour(c) for c in u.category]),
            customdata=np.c_[_esc(u.kernel_id), _esc(u.friendly_name), u.padding_ratio],
            hovertemplate="%{customdata[0]} %{customdata[1]}<br>" + tr("useful: %{{x:.3g}} FLOP/B, %{{y:.3s}} FLOP/s; "
                                                                      "counted ÷ useful %{{customdata[2]:.1f}}×")
                          + "<extra></extra>"))
    # the legend goes under the plot, wrapping, so every roof (L2, L1 included) shows without a scroll box
    fig.update_layout(template=TEMPLATE, height=640 + 22 * (len(fig.data) // 4),
                      title=tr("Physical roofline, {phase} (marker size = time share; red outline = above its roof)",
                               phase=phase_label(phase)),
                      xaxis=dict(type="log", title=tr("arithmetic intensity (FLOP/byte)"), **decade_ticks()),
                      yaxis=dict(type="log", title=tr("achieved FLOP/s"), range=[flops_floor(p), 15.5], **FLOPS_TICKS),
                      legend=dict(orientation="h", yanchor="top", y=-0.14, xanchor="left", x=0))
    return fig


# One spelling for FLOP/s ticks on a log axis (plotly alone mixes 10^15 with 100T): every decade
# labelled with an engineering prefix, as the tables print it.
FLOPS_TICKS = dict(tickvals=[10.0 ** e for e in range(4, 16)],
                   ticktext=[eng(10.0 ** e, "FLOP/s", digits=1) for e in range(4, 16)], **NO_SI)


def _decade_label(e: int) -> str:
    """A power of ten as a reader writes it: 0.001 … 1000 plainly, beyond that 10⁴ / 10⁻⁴ (never an SI prefix:
    '100µ' FLOP/B read as a hundred micro-somethings)."""
    if -3 <= e <= 3:
        return f"{10.0 ** e:g}"
    return f"10<sup>{'−' if e < 0 else ''}{abs(e)}</sup>"


def decade_ticks(lo: int = -6, hi: int = 8, every: int = 1) -> dict:
    """Ticks for a log axis of a unit no SI prefix suits (FLOP/byte): one per `every` decades from 10^lo to 10^hi,
    labelled 0.01, 1, 100, 10⁴ (plotly alone labels 1e-4 FLOP/B '100µ' and 1e6 '1M')."""
    es = [e for e in range(lo, hi + 1) if e % every == 0]
    return dict(tickmode="array", tickvals=[10.0 ** e for e in es], ticktext=[_decade_label(e) for e in es],
                exponentformat="power")



def _tick_label(v: float) -> str:
    """A log-axis tick as a whole value: 0.5, 2, 20, 500, 1k, 20k, 1M (no exponent, no bare digit)."""
    v = float(f"{v:.3g}")
    for scale, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{p}"
    return f"{v:g}"


def log_ticks(values, most: int = 8) -> dict:
    """Ticks for a log axis over `values` with every label a whole value ('20', '50', '100', '0.5', '2k'):
    plotly's own log ticks label the minor ticks with their leading digit alone ('2' for 20 ms, '5' for
    0.5×). The densest of 1-1.5-2-2.5-3…9, 1-1.5-2-3-4-5-6-8, 1-2-3-5-7, 1-2-5 and 1 per decade that puts at most
    `most` ticks on the data's range, none closer to the next than a tenth of the range (9 and 10 crowd a
    one-decade axis); every other decade, and so on, beyond that. An empty dict, plotly's own ticks, where the
    data span less than two ticks (plotly labels a range that narrow in whole values itself)."""
    v = pd.to_numeric(pd.Series(np.ravel(np.asarray(values, dtype=object))), errors="coerce").to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    if not len(v):
        return {}
    lo, hi = float(v.min()), float(v.max())
    e0, e1 = int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1
    inside = lambda ts: [t for t in ts if lo / 1.0001 <= t <= hi * 1.0001]  # noqa: E731
    for mantissas in ((1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9), (1, 1.5, 2, 3, 4, 5, 6, 8), (1, 2, 3, 5, 7), (1, 2, 5),
                      (1,)):
        ticks = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in mantissas]
        shown = np.log10(inside(ticks))
        if len(shown) <= most and (len(shown) < 2 or np.diff(shown).min() >= np.log10(hi / lo) / 10):
            break
    else:
        step = -(-len(inside(ticks)) // most)
        ticks = [10.0 ** e for e in range(e0, e1 + 1) if e % step == 0]
    if len(inside(ticks)) < 2:
        return {}
    return dict(tickmode="array", tickvals=ticks, ticktext=[_tick_label(t) for t in ticks])


def flops_floor(points: pd.DataFrame) -> float:
    """Bottom of a roofline's log10 FLOP/s axis: 10^8, or lower where a point sits lower, with room for its
    marker (a one-element kernel at 95 MFLOP/s was drawn below the axis)."""
    low = points.flops_per_s[points.flops_per_s > 0].min() if len(points) else np.nan
    return min(8.0, float(np.floor(np.log10(low) - 0.25))) if low == low else 8.0


def roofline_normalized(norm: pd.DataFrame, phase: str = "decode") -> go.Figure:
    """ncu speed-of-light view: fraction of peak memory throughput vs fraction of peak SM throughput."""
    n = norm[norm.phase == phase]
    n = n.assign(friendly_name=_esc(n.friendly_name).values, kernel_id=_esc(n.kernel_id).values)
    fig = px.scatter(n, x="memory_frac", y="compute_frac", color="category", size=np.sqrt(n.share) + 0.02,
                     hover_name="friendly_name", hover_data={"duration_us": ":.1f", "kernel_id": True},
                     template=TEMPLATE, height=480, range_x=[0, 1.05], range_y=[0, 1.05],
                     color_discrete_map=CATEGORY_COLOUR,
                     labels={"memory_frac": tr("memory throughput (fraction of peak)"),
                             "compute_frac": tr("SM throughput (fraction of peak)")},
                     title=tr("Normalized roofline, {phase}: every kernel sits in the unit square; the corners are the "
                              "roofs (size = time share)", phase=phase_label(phase)))
    fig.add_shape(type="line", x0=0, y0=0, x1=1, y1=1, line=dict(dash="dot", color="#aaa"))
    return fig


def panel_title(title: str, width: int = 28, lines: int = 2) -> str:
    """A small multiple's title (the reader's text, already in the narrative language) as plotly draws it: in at
    most `lines` lines of about `width` characters broken at spaces, before the parenthesis where that fits
    ('d004 nvjet GEMM<br>(mixed, 384x8 tile)'),
    each HTML-escaped for plotly; a longer one ends in '…' instead of running into the next panel."""
    title = str(title)
    head, paren, tail = title.partition(" (")
    if len(title) <= width:
        parts = [title]
    elif paren and lines >= 2 and len(head) <= width and len(tail) + 1 <= width:
        parts = [head, "(" + tail]
    else:
        parts = textwrap.wrap(title, width, break_long_words=True) or [""]
    if len(parts) > lines:
        last = " ".join(parts[lines - 1:])
        parts = parts[:lines - 1] + [last[:width - 1].rstrip() + "…"]
    return "<br>".join(html.escape(p, quote=True) for p in parts)


def roofline_small_multiples(points: pd.DataFrame, roofs, phase: str = "decode", cols: int = 4) -> go.Figure:
    """One small log-log roofline per profiled kernel with FLOPs: its DRAM, L2 and L1 points and the roofs
    that apply to it."""
    from plotly.subplots import make_subplots

    p = points[points.phase == phase]
    ids = list(dict.fromkeys(p.sort_values("share", ascending=False).kernel_id))
    rows = -(-len(ids) // cols)
    names = p.drop_duplicates("kernel_id").set_index("kernel_id").friendly_name
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[panel_title(f"{text(k)} {text(names[k])}") for k in ids],
                        vertical_spacing=0.08, horizontal_spacing=0.05)
    fig.update_annotations(font_size=12)  # the panel titles: two short lines fit a quarter of the page
    xs = np.logspace(-3, 6, 60)
    colours = {"DRAM": "#2b6cb0", "L2": "#38a169", "L1": "#805ad5"}
    for i, kid in enumerate(ids):
        q = p[p.kernel_id == kid]
        r, c = i // cols + 1, i % cols + 1
        cpeak = roofs.compute[q.compute_roof.iloc[0]]
        for lvl, bw in roofs.bandwidth.items():
            name = lvl.upper()
            fig.add_trace(go.Scatter(x=xs, y=np.minimum(cpeak, bw * xs), mode="lines", showlegend=i == 0,
                                     name=tr("{roof} roof", roof=name), legendgroup=name,
                                     line=dict(width=1, color=colours[name])),
                          row=r, col=c)
        for _, pt in q.iterrows():
            fig.add_trace(go.Scatter(x=[pt.intensity], y=[pt.flops_per_s], mode="markers", showlegend=False,
                                     marker=dict(size=9, color=ARTIFACT_COLOUR if pt.get("artifact") else
                                                 colours[pt.level],
                                                 line=dict(width=2, color="red" if pt.above_roof else "white")),
                                     hovertemplate=tr("{level}: {intensity:.3g} FLOP/B, {flops}, {pct:.1f} % of roof",
                                                      level=pt.level, intensity=pt.intensity, pct=pt.pct_of_roof,
                                                      flops=eng(pt.flops_per_s, "FLOP/s")) + "<extra></extra>"),
                          row=r, col=c)
        fig.update_xaxes(type="log", row=r, col=c, showticklabels=r == rows, **decade_ticks(every=2))
        fig.update_yaxes(type="log", row=r, col=c, range=[flops_floor(p), 15.5], showticklabels=c == 1, **FLOPS_TICKS)
    fig.update_layout(template=TEMPLATE, height=240 * rows, title=tr("Per-kernel rooflines, {phase} (x: FLOP/byte, y: FLOP/s; points at DRAM, L2, L1)",
                                                         phase=phase_label(phase)))
    return fig


def sensitivity_grid(sens: pd.DataFrame, knees: pd.DataFrame, env: dict | None = None) -> go.Figure:
    """One row of panels per swept lever (whatif.SWEEPS): decode ms/token and prefill ms vs the lever (log x),
    one line per way of dispatching decode (`dispatch`: the run's host gaps, graph-style dispatch, the run as
    deployed); knees marked; with `env` (whatif.envelope: what the cross-device check covered) the DRAM
    bandwidth panels shade the stretch of bandwidth that check covered. The legend sits under the last row of
    panels, clear of every panel and title."""
    from plotly.subplots import make_subplots

    sweeps = list(dict.fromkeys(sens.sweep))
    fig = make_subplots(rows=len(sweeps), cols=2, subplot_titles=[f"{ph}: {text(s)}" for s in sweeps
                                                                  for ph in (tr("decode ms/token"), tr("prefill ms"))],
                        vertical_spacing=0.25 / max(1, len(sweeps)))
    colours = dict(zip(list(dict.fromkeys(sens.dispatch)), ("#d9822b", "#2b6cb0", "#805ad5", "#c53030")))
    for i, sw in enumerate(sweeps):
        for j, ph in enumerate(("decode", "prefill")):
            for disp, col in colours.items():
                q = sens[(sens.sweep == sw) & (sens.phase == ph) & (sens.dispatch == disp)].sort_values("x")
                if q.empty:
                    continue
                fig.add_trace(go.Scatter(x=q.x, y=q.ms, mode="lines+markers" if len(q) < 5 else "lines",
                                         name=plot(disp), legendgroup=disp, showlegend=i == 0 and j == 0,
                                         line=dict(color=col)), row=i + 1, col=j + 1)
                kn = knees[(knees.sweep == sw) & (knees.phase == ph) & (knees.dispatch == disp)]
                if len(kn) and kn.knee_x.iloc[0] == kn.knee_x.iloc[0]:
                    y = float(np.interp(kn.knee_x.iloc[0], q.x, q.ms))
                    fig.add_trace(go.Scatter(x=[kn.knee_x.iloc[0]], y=[y], mode="markers", showlegend=False,
                                             marker=dict(size=9, color=col, symbol="circle-open", line=dict(width=2)),
                                             hovertemplate=tr("knee: %{{x:.3g}}") + f"<extra>{plot(disp)}</extra>"),
                                  row=i + 1, col=j + 1)
            if env is not None and sw == "DRAM bandwidth (GB/s)":
                lo, hi = env["dram_gbps"]  # the band in data units; the annotation's x in decades (log axis)
                fig.add_vrect(x0=lo, x1=hi, fillcolor="#2f855a", opacity=0.15, line_width=0,
                              row=i + 1, col=j + 1)
                fig.add_annotation(x=np.log10(hi), y=1, yref=f"y{2 * i + j + 1 if 2 * i + j else ''} domain",
                                   xref=f"x{2 * i + j + 1 if 2 * i + j else ''}", text=tr("checked across GPUs"),
                                   showarrow=False, xanchor="left", yanchor="top", font=dict(size=10, color="#2f855a"))
            # every tick a whole value (20, 50, 100 ms; 500, 1k, 2k GB/s), never plotly's bare digits
            panel = sens[(sens.sweep == sw) & (sens.phase == ph)]
            fig.update_xaxes(type="log", row=i + 1, col=j + 1, **NO_SI, **log_ticks(panel.x))
            fig.update_yaxes(type="log", row=i + 1, col=j + 1, **NO_SI, **log_ticks(panel.ms))
    # the legend in a band of its own under the panels, horizontal (it wraps on a narrow page instead of running
    # past the figure's edge), its top 45 px under the last row's axis (below its tick labels); the bottom margin
    # holds it even wrapped to one entry per line (22 px each)
    legend_px = 30 + 22 * len(colours)
    top, gap = 100, 45
    height = 260 * len(sweeps) + legend_px
    fig.update_layout(template=TEMPLATE, height=height,
                      title=tr("What-if sensitivity on the measured GPU (decode ms per token, prefill ms per call)"),
                      margin=dict(t=top, b=legend_px + gap + 20),
                      legend=dict(orientation="h", yanchor="top", y=-gap / (height - top - (legend_px + gap + 20)),
                                  x=0, xanchor="left"))
    return fig


def variant_gains(rows: pd.DataFrame) -> go.Figure:
    """Predicted against measured gain (baseline ÷ variant, ×) per variant and phase; a variant the
    what-if cannot price shows its measured bar alone."""
    x = [f"{plot(text(r.variant))} · {phase_label(r.phase)}" for r in rows.itertuples()]
    # the gains as plain floats (the table's cells are named quantities: object columns numpy cannot take a log of)
    pred, meas = rows.predicted_gain.astype(float), rows.measured_gain.astype(float)
    fig = go.Figure()
    # each bar drawn from 1× (no change) to its ratio: a gain rises above the 1× line, a slowdown (0.76×) hangs
    # below it; from the axis floor, every bar rose and a slowdown read as a gain. The hover gives the ratio.
    for name, g in ((tr("predicted (chapter 06 what-if)"), pred), (tr("measured"), meas)):
        fig.add_bar(name=name, x=x, y=g - 1, base=np.ones(len(g)), customdata=g,
                    hovertemplate="%{x}: %{customdata:.2f}×<extra></extra>")
    fig.add_hline(y=1, line_dash="dot", line_color="#888")
    # every tick a whole value (0.5, 1, 2, 5), never plotly's bare digits ('5' under '1' for 0.5×)
    fig.update_yaxes(**NO_SI, **log_ticks(np.r_[pred, meas, 1.0]))
    fig.update_layout(template=TEMPLATE, barmode="group", yaxis_type="log",
                      yaxis_title=tr("gain over the baseline (×, log; below 1: slower)"), height=380,
                      title=tr("Variants: predicted vs measured gain (baseline ÷ variant time: decode per token, "
                               "prefill per call)"))
    return fig


def launch_skew(coll: pd.DataFrame, phase: str = "decode") -> go.Figure:
    """Per NCCL collective of `phase`, in launch order: each rank's launch after the earliest rank's (µs)
    and its wait inside the kernel; a rank whose points sit at 0 launches first and waits for the others."""
    c = coll[coll.phase == phase].sort_values(["step", "seq"])
    fig = go.Figure()
    for r, g in c.groupby("rank"):
        x = np.arange(len(g))
        fig.add_scatter(x=x, y=g.skew_ns / 1e3, mode="markers", marker=dict(size=4),
                        name=tr("rank {r}: launched after the first rank", r=r),
                        customdata=np.stack([g.step, _esc(g.collective).values, g.wait_ns / 1e3], axis=1),
                        hovertemplate=tr("step %{{customdata[0]}} %{{customdata[1]}}: launched %{{y:.0f}} µs late, "
                                         "waited %{{customdata[2]:.0f}} µs") + "<extra></extra>")
    fig.update_layout(template=TEMPLATE, height=380, xaxis_title=tr("collective, in launch order"),
                      yaxis_title=tr("launch after the earliest rank (µs)"),
                      title=tr("Launch skew between ranks per collective ({phase})", phase=phase_label(phase)),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def _per_module_type(frame: pd.DataFrame):
    """(module type, its colour, its rows) in the reader's order of module types: one colour per type in every
    module figure."""
    from ..analyze.modules import MODULE_TYPES

    colours = px.colors.qualitative.Safe + px.colors.qualitative.Pastel
    have = frame.module_type.astype(str)
    for i, t in enumerate(MODULE_TYPES):
        if (have == t).any():
            yield t, colours[i % len(colours)], frame[have == t]


def module_share_bars(types: pd.DataFrame) -> go.Figure:
    """One horizontal bar per phase, split by module type: the share of the phase's kernel time (analyze.modules)."""
    fig = go.Figure()
    for t, colour, g in _per_module_type(types):
        fig.add_bar(y=[phase_label(p) for p in g.phase], x=g.share_pct, orientation="h", name=tr(t),
                    marker_color=colour, customdata=np.c_[g.us_per_step, g.launches_per_step],
                    hovertemplate=tr(t) + ": %{x:.1f} %, %{customdata[0]:.0f} µs, %{customdata[1]:.0f} "
                    + tr("launches per step") + "<extra></extra>")
    fig.update_layout(template=TEMPLATE, barmode="stack", height=320, xaxis_title=tr("% of the phase's kernel time"),
                      title=tr("Kernel time by module type"), legend=dict(orientation="h", y=-0.3))
    return fig


def layer_bars(layers: pd.DataFrame) -> go.Figure:
    """Decode kernel time per step (µs) by decoder layer, stacked by module type (analyze.modules.by_layer)."""
    fig = go.Figure()
    for t, colour, g in _per_module_type(layers):
        fig.add_bar(x=g.layer.astype(int), y=g.us_per_step, name=tr(t), marker_color=colour,
                    hovertemplate=tr("layer") + " %{x}, " + tr(t) + ": %{y:.1f} µs<extra></extra>")
    fig.update_layout(template=TEMPLATE, barmode="stack", height=380, xaxis_title=tr("decoder layer"),
                      yaxis_title="µs", xaxis=dict(dtick=1), title=tr("Decode kernel time per step by layer (µs)"),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def serving_steps(dt: pd.DataFrame) -> go.Figure:
    """The serving study's decode step against batch: plain step and GPU-busy time per step (ms, left) and tokens
    per second (right), one point per batch captured."""
    from plotly.subplots import make_subplots

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = dt.batch.astype(str)
    fig.add_bar(name=tr("plain step (ms)"), x=x, y=dt.plain_step_ms, secondary_y=False,
                hovertemplate="batch %{x}: %{y:.2f} ms<extra></extra>")
    fig.add_bar(name=tr("GPU busy per step (ms)"), x=x, y=dt.busy_step_ms, secondary_y=False,
                hovertemplate="batch %{x}: %{y:.2f} ms<extra></extra>")
    fig.add_scatter(name=tr("tokens/s (right axis)"), x=x, y=dt.tokens_per_s, mode="lines+markers", secondary_y=True,
                    hovertemplate="batch %{x}: %{y:,.0f} tokens/s<extra></extra>")
    fig.update_layout(template=TEMPLATE, barmode="group", height=400, xaxis_title=tr("batch (sequences decoded together)"),
                      title=tr("Decode step and throughput per batch (plain generate, CUDA graphs)"),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title_text=tr("ms per decode step"), secondary_y=False, rangemode="tozero")
    step = 10 ** np.floor(np.log10(max(1.0, dt.tokens_per_s.max()) / 4))  # whole ticks: 0, 500, 1000, ...
    step *= 5 if dt.tokens_per_s.max() / step > 20 else 2 if dt.tokens_per_s.max() / step > 8 else 1
    fig.update_yaxes(title_text=tr("tokens per second"), secondary_y=True, rangemode="tozero", showgrid=False,
                     tick0=0, dtick=step, tickformat=",.0f")
    return fig


def serving_classes(ct: pd.DataFrame) -> go.Figure:
    """Decode kernel time per step by class, stacked, one bar per batch (ms; GPU-busy basis)."""
    fig = px.bar(ct.assign(batch=ct.batch.astype(str)), x="batch", y="ms_per_step", color="class",
                 color_discrete_map=CATEGORY_COLOUR, template=TEMPLATE, height=420,
                 labels={"ms_per_step": tr("decode kernel ms per step (GPU-busy)"), "batch": tr("batch"),
                         "class": tr("class")},
                 title=tr("Where a decode step's kernel time goes, per batch"),
                 category_orders={"class": list(ct.groupby("class").ms_per_step.sum().sort_values(ascending=False).index)})
    fig.update_traces(hovertemplate="%{fullData.name}, batch %{x}: %{y:.3f} ms<extra></extra>")
    fig.update_layout(legend_traceorder="reversed", xaxis_title=tr("batch (sequences decoded together)"))
    return fig


def serving_roofline(kt: pd.DataFrame, roofs) -> go.Figure:
    """The serving study's profiled decode kernels on the DRAM roofline, one colour per batch: achieved FLOP/s
    (as counted) against FLOP per DRAM byte, log-log, with the DRAM roof and the compute roofs in use; a kernel that
    issues no FLOPs (a gather, a copy) has no point here (the table lists it). Marker size = share of the step's
    kernel time."""
    p = kt[(kt.flops > 0) & (kt.intensity > 0)]
    fig = go.Figure()
    xs = np.logspace(-2, 4, 200)
    used = set(p.roof)
    drawn = {label: peak for label, peak in roofs.compute.items() if label in used or label == "tensor bf16"}
    top = max(drawn.values())
    for label, peak in drawn.items():
        fig.add_trace(go.Scatter(x=xs, y=np.full_like(xs, peak), mode="lines", name=tr("{roof} roof", roof=label),
                                 line=dict(width=1.5, color="#444" if "tensor" in label else "#999")))
    bw = roofs.bandwidth["dram"]
    x = xs[bw * xs <= top]
    fig.add_trace(go.Scatter(x=x, y=bw * x, mode="lines", name=_bandwidth_roof_name(roofs, "dram"),
                             line=dict(width=1.5, color="#2b6cb0")))
    batches = sorted(p.batch.unique())
    colours = px.colors.sequential.Viridis
    for i, b in enumerate(batches):
        q = p[p.batch == b]
        fig.add_trace(go.Scatter(
            x=q.intensity, y=q.flops / (q.duration_us * 1e-6), mode="markers", name=tr("batch {b}", b=int(b)),
            marker=dict(size=7 + 3 * np.sqrt(q.share_pct), line=dict(width=1, color="white"),
                        color=colours[int(i * (len(colours) - 1) / max(1, len(batches) - 1))]),
            customdata=np.c_[_esc(q.kernel), q.share_pct.round(1)],
            hovertemplate="%{customdata[0]}<br>%{x:.3g} FLOP/B, %{y:.3s} FLOP/s<br>"
                          + tr("%{{customdata[1]}} % of the step's kernel time") + "<extra></extra>"))
    fig.update_layout(template=TEMPLATE, height=520,
                      title=tr("Profiled decode kernels on the roofline, per batch (marker size = time share)"),
                      xaxis=dict(type="log", title=tr("arithmetic intensity (FLOP/byte)"), **decade_ticks()),
                      yaxis=dict(type="log", title=tr("achieved FLOP/s"), range=[9, 15.5], **FLOPS_TICKS),
                      legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0))
    return fig
