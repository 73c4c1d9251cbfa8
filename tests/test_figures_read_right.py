"""Issue 43, point 4: figures a reader reads right. Each figure is built from the bundled runs through the calls
its chapter makes, and checked on the plotly figure: ratio bars drawn from 1× (a slowdown below the 1× line),
no SI prefix on a FLOP/byte log axis (1e-4 FLOP/B was '100µ'), the sensitivity legend clear of every panel, and
chapter 01's top kernels in µs per step with the basis in the title."""
from __future__ import annotations

import numpy as np
import pytest

from kernelbook.analyze import roofline as R
from kernelbook.analyze import summary as S
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.load.run import load_run
from kernelbook.load.twins import twins
from kernelbook.narrate import whatif as WN
from kernelbook.plots import figures as F

RUN = "data/runs/h100-deepseek-ocr-2"
VARIANTS = ["data/runs/h100-variant-static-graphs", "data/runs/h100-variant-batch8",
            "data/runs/h100-variant-eager-attention"]  # chapter 07's variant_runs
DEPLOYED, CROSS = "data/runs/h100-variant-static-graphs", "data/runs/h200-deepseek-ocr-2"  # chapter 06's


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def _variant_figure(given):
    """Chapter 07's cells up to `F.variant_gains(rows)`."""
    tw = twins(given, open_run=load_run)
    r = tw.eager if tw.eager is not None else given
    tr, gpu, _, _ = W.for_run(r)
    asked = [load_run(p) for p in VARIANTS]
    if tw.deployed is not None and tw.deployed is not r and all(v.path != tw.deployed.path for v in asked):
        asked.insert(0, tw.deployed)
    kept, _ = S.variants_of(r, [v for v in asked if v.path != r.path])
    rows = S.variant_rows(tr, gpu, r, [(v, W.for_run(v)[0]) for v in kept])
    return rows, F.variant_gains(rows)


def _sensitivity_figure(given):
    """Chapter 06's cells up to `F.sensitivity_grid(sens, W.knees_both(sens), env)`."""
    tw = twins(given, DEPLOYED, open_run=load_run)
    r = tw.eager if tw.eager is not None else given
    tr, gpu, _, _ = W.for_run(r)
    dep = tw.deployed if tw.deployed is not None and tw.deployed is not r else None
    tr_dep = W.for_run(dep)[0] if dep is not None else None
    cross = load_run(CROSS)
    tr_x = W.for_run(cross)[0] if W.cross_run_problem(r, cross) is None else None
    xd = W.cross_device(tr, tr_x) if tr_x is not None else None
    env = W.envelope(tr, tr_x) if xd is not None else None
    sens = WN.sensitivity(W.sensitivity_both(tr, gpu, deployed=tr_dep))
    return F.sensitivity_grid(sens, W.knees_both(sens), env)


def test_variant_ratio_bars_start_at_one(run):
    rows, fig = _variant_figure(run)
    measured = rows.measured_gain.astype(float).to_numpy()
    assert (measured < 1).any() and (measured > 1).any()  # the bundled variants hold a slowdown and a gain
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 2
    for t in bars:
        ratio = np.asarray(t.customdata, dtype=float)
        assert t.base is not None and np.allclose(np.asarray(t.base, dtype=float), 1.0), t.name
        end = 1.0 + np.asarray(t.y, dtype=float)
        ok = ~np.isnan(ratio)
        assert np.allclose(end[ok], ratio[ok])  # the bar runs from 1× to its ratio
        assert "customdata" in t.hovertemplate and "%{y" not in t.hovertemplate  # the hover shows the ratio
    meas = next(t for t in bars if t.name == "measured")
    slow = measured < 1
    # a slowdown extends below the 1× line (the eager-attention variant: 0.76× decode)
    assert (np.asarray(meas.y, dtype=float)[slow] < 0).all() and (np.asarray(meas.y, dtype=float)[~slow] > 0).all()
    assert fig.layout.yaxis.type == "log"
    assert "per token" in fig.layout.title.text and "per call" in fig.layout.title.text


def _log_axes(fig):
    return [a for a in fig.layout if a.startswith(("xaxis", "yaxis")) and fig.layout[a].type == "log"]


def test_flop_per_byte_axes_carry_no_si_prefix(run):
    k = R.profiled_kernels(run)
    _, _, roofs = R.for_run(run, k)
    pts = R.points(k, roofs)
    figs = [F.roofline_physical(pts, roofs, "decode", R.useful_work(k, run.timeline)),
            F.roofline_small_multiples(pts, roofs, "decode")]
    seen = 0
    for fig in figs:
        for a in _log_axes(fig):
            ax = fig.layout[a]
            assert ax.exponentformat not in (None, "B", "SI"), (a, ax.exponentformat)  # plotly's default is SI
            if a.startswith("xaxis"):  # FLOP/byte
                seen += 1
                assert ax.tickmode == "array" and len(ax.tickvals) == len(ax.ticktext)
                for v, t in zip(ax.tickvals, ax.ticktext):
                    assert not any(c in t for c in "µmkMGT"), (a, v, t)
                    e = round(np.log10(v))
                    assert t == (f"{v:g}" if -3 <= e <= 3 else f"10<sup>{'−' if e < 0 else ''}{abs(e)}</sup>")
                labels = dict(zip(ax.tickvals, ax.ticktext))
                if 1e-4 in labels:
                    assert labels[1e-4] == "10<sup>−4</sup>"
    assert seen >= 2
    # the book's other log axes: none left to plotly's SI default either
    for fig in (_sensitivity_figure(run), _variant_figure(run)[1]):
        for a in _log_axes(fig):
            assert fig.layout[a].exponentformat not in (None, "B", "SI"), a


def test_sensitivity_legend_lies_outside_every_panel(run):
    fig = _sensitivity_figure(run)
    lay = fig.layout
    lowest = min(lay[a].domain[0] for a in lay if a.startswith("yaxis"))
    leg = lay.legend
    assert leg.orientation == "h" and leg.yanchor == "top"  # wraps on a narrow page instead of running wide
    # its top lies under the lowest panel (and its tick labels: 40 px at least), in the bottom margin
    plot_px = lay.height - lay.margin.t - lay.margin.b
    assert leg.y < lowest and (lowest - leg.y) * plot_px >= 40
    entries = sum(bool(t.showlegend) for t in fig.data)
    assert lay.margin.b >= (lowest - leg.y) * plot_px + 22 * entries  # room for one entry per line, wrapped
    for a in lay:
        if a.startswith("xaxis"):  # every panel spans the full paper height above the legend
            assert lay[a].domain[0] >= 0
    assert "ms per token" in lay.title.text and "ms per call" in lay.title.text


def test_top_kernels_in_us_per_step(run):
    tl = run.timeline
    fig = F.top_kernel_bars(T.top_kernels_by_phase(tl, 15), tl)
    title = fig.layout.title.text
    assert "µs per step" in title and "per token" in title and "per call" in title
    k = tl[(tl.kind == "kernel") & (tl.phase == "decode")]
    steps = k.step.nunique()
    assert steps > 1
    want = (k.groupby("name").duration_ns.sum() / 1e3 / steps).sort_values(ascending=False).head(15)
    # the decode panel is the last of vision encode, prefill, decode
    got = {int(str(label).split(".")[0]): float(x) for t in fig.data if t.yaxis == "y3" for label, x in zip(t.y, t.x)}
    assert sorted(got) == list(range(1, 16))  # the bars by rank ('3. Direct Copy (float)')
    assert [got[rank] for rank in range(1, 16)] == pytest.approx(list(want), rel=1e-9)
    assert fig.layout.xaxis3.title.text == f"µs per step ({steps} steps)"
    # vision encode and prefill ran one step each: per call, the phase's own time
    for ax, ph in (("xaxis", "vision_encode"), ("xaxis2", "prefill")):
        assert tl[(tl.kind == "kernel") & (tl.phase == ph)].step.nunique() == 1
        assert fig.layout[ax].title.text == "µs per call (one step)"
    pre = tl[(tl.kind == "kernel") & (tl.phase == "prefill")].duration_ns.groupby(tl.name).sum().max() / 1e3
    assert max(max(t.x) for t in fig.data if t.yaxis == "y2") == pytest.approx(pre, rel=1e-9)


def test_bandwidth_roofs_name_which_peak_and_whose_capture(run):
    """The DRAM roof read 3,343 GB/s in chapter 04 and 3,325 GB/s in chapter 08 with nothing to tell them apart: both
    are ncu's DRAM peak (`dram__bytes.sum.peak_sustained` × the DRAM clock ncu read, median over results), each read
    in its own capture. Each legend now says which peak it is and whose capture measured it; a roof from
    devices.yaml says spec."""
    from dataclasses import replace

    from kernelbook.analyze import serving as SV
    from kernelbook.load.study import open_study

    k = R.profiled_kernels(run)
    dev, _, roofs = R.for_run(run, k)
    med = run.ncu_metrics().groupby("metric").value.median()
    gbps = med["dram__bytes.sum.peak_sustained"] * med["dram__cycles_elapsed.avg.per_second"] / 1e9
    assert dev.dram_gbps == pytest.approx(gbps) and round(gbps) == 3343  # not the spec sheet's 3,350
    names = [t.name for t in F.roofline_physical(R.points(k, roofs), roofs, "decode").data]
    assert "DRAM 3,343 GB/s (ncu peak, h100-deepseek-ocr-2)" in names
    assert "L2 13,054 GB/s (ncu peak, h100-deepseek-ocr-2)" in names
    st = open_study("data/studies/h100-serving")
    sroofs = SV.roofs_of(st)
    served = [t.name for t in F.serving_roofline(SV.kernel_table(st), sroofs).data]
    assert f"DRAM {sroofs.bandwidth['dram'] / 1e9:,.0f} GB/s (ncu peak, {st.held[0].run.run_id})" in served
    assert "DRAM 3,325 GB/s (ncu peak, batch_size-1)" in served  # the study's batch-1 capture read its own clock
    # without ncu counters the roof is devices.yaml's, and the legend says so (no run measured it)
    spec = R.roofs(replace(dev, dram_gbps=3350.0), run.info, k)
    assert "DRAM 3,350 GB/s (spec)" in [t.name for t in F.roofline_physical(R.points(k, spec), spec, "decode").data]
