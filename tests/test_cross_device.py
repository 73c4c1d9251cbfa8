"""Chapter 06's cross-device check on the two committed captures of the bundled workload (DeepSeek-OCR-2,
random weights, 1 page, 64 decode steps, the same params): h100-deepseek-ocr-2 (H100 SXM) and
h200-deepseek-ocr-2 (H200). The model is fitted on one and predicts the other; the table's numbers are
recomputed here from each run's own files."""
import numpy as np
import pytest

from conftest import REPO
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.devices import for_run, lookup
from kernelbook.load.run import load_run
from kernelbook.narrate import whatif as WN

H100, H200 = REPO / "data/runs/h100-deepseek-ocr-2", REPO / "data/runs/h200-deepseek-ocr-2"
pytestmark = pytest.mark.skipif(not (H100 / "manifest.json").exists() or not (H200 / "manifest.json").exists(),
                                reason="the two committed captures of the bundled workload are not here")


@pytest.fixture(scope="module")
def runs():
    return load_run(H100), load_run(H200)


@pytest.fixture(scope="module")
def traces(runs):
    return W.for_run(runs[0])[0], W.for_run(runs[1])[0]


@pytest.fixture(scope="module")
def xd(traces):
    return W.cross_device(*traces)


def _busy_ms_per_step(run, phase):
    """GPU-busy ms per step of `phase`, straight from the run's timeline and phases tables."""
    s = T.phase_summary(run.timeline, run.phases).set_index("phase").loc[phase]
    return s.gpu_busy_ms / (max(1, s.steps) if phase == "decode" else 1)


def test_design_of_the_other_gpu_comes_from_the_devices_table_and_its_own_floor(runs, traces):
    a, b = traces
    assert (a.device, b.device) == ("h100-sxm", "h200")
    # DRAM: the peak ncu measured on each GPU (`devices.for_run`, as chapters 04 and 05), within 1 % of the spec
    assert b.gpu.dram_gbps == for_run(runs[1])[0].dram_gbps == pytest.approx(lookup("h200").dram_gbps, rel=0.01)
    assert lookup("h200").dram_gbps == 4800
    assert b.gpu.matrix_tflops["bf16"] == a.gpu.matrix_tflops["bf16"] == lookup("h100-sxm").tflops["bf16"]
    # the kernel floor: 5th percentile of the run's kernel durations in the modelled phases
    t = runs[1].timeline
    k = t[(t.kind == "kernel") & t.phase.isin(W.PHASES)]
    assert b.gpu.floor_us == pytest.approx(np.percentile(k.duration_ns, 5) / 1e3)
    assert b.gpu.floor_us < a.gpu.floor_us  # the H200's short kernels are shorter (0.93 vs 1.18 µs)


def test_cross_device_phase_rows_from_the_runs_own_files(runs, traces, xd):
    a, b = traces
    for (fit, other, ra, rb) in ((a, b, *runs), (b, a, runs[1], runs[0])):
        t = xd[(xd.fitted_on == fit.device) & (xd["class"] == W.ALL_KERNELS)].set_index("phase")
        assert list(t.index) == list(W.PHASES)
        own = W.predict(fit, fit.gpu).set_index("phase")
        pred = W.predict(fit, other.gpu).set_index("phase")
        for ph, r in t.iterrows():
            assert r.predicted == other.device
            assert r.measured_ms == pytest.approx(_busy_ms_per_step(rb, ph))
            assert r.measured_a_ms == pytest.approx(_busy_ms_per_step(ra, ph))
            assert r.predicted_ms == pytest.approx(pred.loc[ph, "device_ms_per_step"])
            assert r.model_a_ms == pytest.approx(own.loc[ph, "device_ms_per_step"])
            assert r.error_pct == pytest.approx(100 * (r.predicted_ms - r.measured_ms) / r.measured_ms)
            assert r.predicted_gain == pytest.approx(r.model_a_ms / r.predicted_ms)
            assert r.measured_gain == pytest.approx(r.measured_a_ms / r.measured_ms)


def test_cross_device_class_rows_sum_the_kernels_of_the_class(runs, traces, xd):
    a, b = traces
    t = runs[1].timeline
    steps = b.steps
    rows = xd[(xd.fitted_on == "h100-sxm") & (xd["class"] != W.ALL_KERNELS)]
    for _, r in rows.iterrows():
        w = b.work[(b.work.phase == r.phase) & (W.kernel_class(b.work) == r["class"])]
        assert r.measured_ms == pytest.approx(w.total_ns.sum() / 1e6 / steps[r.phase])
    # every kernel of the H200 timeline is in exactly one class row: the rows add up to its kernel time
    for ph in W.PHASES:
        k = t[(t.kind == "kernel") & (t.phase == ph)]
        got = rows[rows.phase == ph].measured_ms.sum()
        assert got == pytest.approx(k.duration_ns.sum() / 1e6 / steps[ph])


def test_cross_device_within_the_issue_targets(xd):
    """Issue 32's targets, both directions: device time per phase within 15 %, gain within 0.05×. Before the
    change (fitted on the H100, the H200 as a design) the errors were -27 %, -11 %, +17 % and the gains
    1.27-1.29× against 1.04-1.14× measured."""
    t = xd[xd["class"] == W.ALL_KERNELS]
    assert len(t) == 6
    assert (t.error_pct.abs() <= 15).all(), t[["fitted_on", "phase", "error_pct"]]
    assert (t.gain_error.abs() <= 0.05).all(), t[["fitted_on", "phase", "predicted_gain", "measured_gain"]]
    e = W.cross_device_error(xd).set_index("phase")
    assert e.loc["decode", "device_error_pct"] == pytest.approx(t[t.phase == "decode"].error_pct.abs().max())


def test_dram_scaling_is_the_time_weighted_dram_throughput_of_the_class(traces):
    a = traces[0]
    w = a.work[a.work.source != W.SCALED]
    g = w[(W.kernel_class(w) == "GEMV") & w.dram_pct.notna()]
    assert len(g) > 0
    phi = (g.dram_pct / 100 * g.total_ns).sum() / g.total_ns.sum()
    assert a.calib.set_index("class").loc["GEMV", "dram_scaling"] == pytest.approx(phi)
    # on the run's own GPU the share changes nothing; at 1.43× the bandwidth only φ of the DRAM term shrinks
    one = w[W.kernel_class(w) == "GEMV"].head(1)
    x = W.ideal_s(one, a.gpu)[0]
    fast = a.gpu.with_(dram_gbps=a.gpu.dram_gbps * 1.43)
    dram_only = one.dram_bytes.iloc[0] / (a.gpu.dram_gbps * 1e9)
    assert W.ideal_s(one, a.gpu, dram_scaling=np.array([phi]), ref_gbps=a.gpu.dram_gbps)[0] == pytest.approx(x)
    if x == pytest.approx(dram_only):
        assert W.ideal_s(one, fast, dram_scaling=np.array([phi]), ref_gbps=a.gpu.dram_gbps)[0] == \
            pytest.approx(dram_only * (phi / 1.43 + 1 - phi))


def test_decode_gathers_fit_their_own_counters(traces):
    """Issue 28 item 8: the gather/index class was fitted with latency 0 and the pooled slowdown, and carried
    most of decode's held-out error (741 µs predicted vs 294 µs). The expert-weight gathers read their own
    decode ncu record (not prefill's, of the same kernel name), and the 6x560 grid moves half the 6x1120 one's."""
    a = traces[0]
    g = a.work[(a.work.phase == "decode") & (a.work.source == "ncu")].set_index("grid")
    assert g.loc["6x560x1", "dram_bytes"] == pytest.approx(g.loc["6x1120x1", "dram_bytes"] / 2)
    e = W.error_by_class(a).set_index(["phase", "class"]).loc[("decode", "gather/index")]
    assert e.predicted_ms == pytest.approx(e.measured_ms, rel=0.25)  # 246 µs against 295 µs measured
    assert abs(e.predicted_ms - e.measured_ms) < 0.1
    cal = W.held_out_calibration(a, "decode").set_index("class")
    assert cal.loc["gather/index", "latency_us"] > 0


def test_cross_run_note_names_what_cannot_serve(runs):
    a, b = runs
    assert W.cross_run_problem(a, b) is None and WN.cross_run_note(a, b) == ""
    assert W.cross_run_problem(a, a) == "device" and "h100-sxm" in WN.cross_run_note(a, a)
    batch8 = REPO / "data/runs/h100-variant-batch8"
    if (batch8 / "manifest.json").exists():
        assert "batch_size" in WN.cross_run_note(a, load_run(batch8))


def test_what_ifs_carry_the_cross_device_error(runs, traces, xd):
    from kernelbook.analyze import roofline as R

    a, b = traces
    xerr, env = W.cross_device_error(xd), W.envelope(a, b)
    assert env["dram_gbps"] == [for_run(r)[0].dram_gbps for r in runs] == pytest.approx([3350, 4800], rel=0.01)
    rec = WN.recommendations(a, a.gpu, R.profiled_kernels(runs[0]), T.category_shares(runs[0].timeline),
                             xerr=xerr, env=env).set_index("area")
    d = xerr.set_index("phase").loc["decode"]
    bw = rec.loc["memory bandwidth"]
    # the envelope is the two runs' own DRAM bandwidths (measured copy rates: 3,343 and 4,788 GB/s as captured)
    lo, hi = env["dram_gbps"]
    assert (f"{lo:,.0f}", f"{hi:,.0f}") == ("3,343", "4,788")
    assert f"±{d.device_error_pct:.0f} %" in bw.uncertainty and f"outside the {lo:,.0f}–{hi:,.0f} GB/s" in bw.uncertainty
    assert "graph" in bw["what-if"] and "eager" in bw["what-if"]
    assert rec.loc["power", "uncertainty"] == ""
    # a design inside the envelope (the H200 itself) names nothing; a fused one says so
    assert W.outside_envelope(b.gpu, env) == []
    assert W.outside_envelope(a.gpu.with_(fuse_elementwise=True), env) == ["fused elementwise chains"]


def test_a_run_without_ncu_counters_scales_all_of_its_dram_term(runs, traces):
    """A capture whose ncu stage failed has no DRAM throughput to split its DRAM term by: φ = 1 in every
    class (the model before the split), and the cross-device table still forms."""
    from kernelbook.analyze import roofline as R

    run, b = runs[0], traces[1]
    dev = lookup(run.manifest["device"])
    k = R.profiled_kernels(run)
    gpu = W.run_gpu_design(dev, R.roofs(dev, run.manifest, k, run.ncu_metrics()))
    bare = W.build(run.timeline, run.phases, run.manifest, None, gpu)
    bare.device = dev.key
    assert (bare.calib.dram_scaling == 1.0).all()
    xd = W.cross_device(bare, b)
    assert len(xd[xd["class"] == W.ALL_KERNELS]) == 6 and xd.error_pct.notna().all()
