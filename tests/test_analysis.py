"""Chapters 03-06 analysis on the bundled run's real values, arithmetic visible in the assertions."""
import math

import numpy as np
import pandas as pd
import pytest

from kernelbook.analyze import classify as C
from kernelbook.analyze import histograms as H
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.devices import lookup


@pytest.fixture(scope="module")
def k(run):
    return R.profiled_kernels(run)


@pytest.fixture(scope="module")
def dev(run):
    return lookup(run.manifest["device"])


@pytest.fixture(scope="module")
def roofs(run, k, dev):
    return R.roofs(dev, run.manifest, k, run.ncu_metrics())


def row(k, kid):
    return k.set_index("kernel_id").loc[kid]


def test_classification_rules_on_real_kernels(k, dev):
    c = C.classify(k, dev.ridge("bf16")).set_index("kernel_id")
    # k006 (a 128x8 nvjet GEMV): memory 86.5 % ≥ 60 and SM 8.1 % < 60 → memory-bound
    r = row(k, "k006")
    assert r.memory_pct >= 60 > r.sm_pct and c.loc["k006", "class"] == "memory-bound"
    # k000 (16x64 nvjet GEMV): SM 9.7 %, memory 12.5 %, both < 30 → latency-bound
    r = row(k, "k000")
    assert r.sm_pct < 30 and r.memory_pct < 30 and c.loc["k000", "class"] == "latency-bound"
    # k005: memory 34 % is neither high nor low → balanced
    assert 30 <= row(k, "k005").memory_pct < 60 and c.loc["k005", "class"] == "balanced"
    # locality flag: k006's L2 hit is 2 % < 80 %
    assert row(k, "k006").l2_hit_pct < 80 and c.loc["k006", "locality_issue"]
    # thresholds are parameters: at high = 90 the same kernel is no longer memory-bound
    strict = C.classify(k, dev.ridge("bf16"), C.Rules(high_pct=90)).set_index("kernel_id")
    assert strict.loc["k006", "class"] == "balanced"
    assert C.classify_row(70, 10) == "compute-bound" and C.classify_row(float("nan"), 10) == "unknown"


def test_weighted_vs_unweighted_class_means(k, dev):
    c = C.classify(k, dev.ridge("bf16"))
    plain, timed = C.class_table(c, weighted=False), C.class_table(c, weighted=True)
    mb = c[c["class"] == "memory-bound"]
    assert plain.loc["DRAM throughput %", "memory-bound"] == pytest.approx(mb.dram_pct.mean())
    assert timed.loc["DRAM throughput %", "memory-bound"] == pytest.approx(
        (mb.dram_pct * mb.share).sum() / mb.share.sum())
    assert plain.loc["mean duration µs", "overall"] == pytest.approx(c.duration_ns.mean() / 1e3)


def test_roofline_point_arithmetic(k, roofs, dev):
    p = R.points(k, roofs).set_index(["kernel_id", "level"])
    r = row(k, "k006")
    q = p.loc[("k006", "DRAM")]
    assert q.intensity == pytest.approx(r.flops / r.dram_bytes)           # FLOP / byte
    assert q.flops_per_s == pytest.approx(r.flops / (r.duration_ns * 1e-9))
    attainable = min(dev.peak_flops("bf16"), dev.dram_bytes_per_s * q.intensity)
    assert q.roof_flops_per_s == pytest.approx(attainable)
    assert q.pct_of_roof == pytest.approx(100 * q.flops_per_s / attainable)
    assert q.bound == "memory"  # 7.8 FLOP/B is left of the 206 FLOP/B bf16 ridge
    assert dev.ridge("bf16") == pytest.approx(989.4e12 / 4800e9)
    # the L2 roof of this capture is estimated from the most L2-loaded kernel: bytes/s ÷ (L2 % / 100)
    top = k.loc[k.l2_pct.idxmax()]
    assert roofs.bandwidth["l2"] == pytest.approx(top.l2_bytes_per_s / (top.l2_pct / 100))
    assert not R.points(k, roofs).above_roof.any()


def test_a_point_above_its_roof_is_flagged_with_a_cause(run, k, roofs):
    """Halve a kernel's measured duration: its DRAM point goes above the roof and gets a cause."""
    fast = k.copy()
    i = fast.index[fast.kernel_id == "k006"][0]
    fast.loc[i, "duration_ns"] /= 2.5
    fast.loc[i, "flops_per_s"] *= 2.5
    p = R.points(fast, roofs)
    flagged = p[p.above_roof]
    assert set(flagged.kernel_id) == {"k006"}
    causes = R.above_roof_causes(p, fast, roofs)
    assert len(causes) == len(flagged) and causes.likely_cause.str.len().gt(20).all()
    # with chapter 02's fidelity table the cause is the MMA padding of this GEMV's tensor FLOPs
    from kernelbook.analyze.ncu_report import fidelity

    fid = fidelity(fast, run.timeline)
    assert fid.set_index("kernel_id").loc["k006", "flops_ratio"] > 1.05
    padded = R.above_roof_causes(p, fast, roofs, fid)
    assert padded.likely_cause.str.contains("pads the small dimension").all()


def test_histograms_weight_by_time_share(k):
    d = k[k.phase == "decode"]
    h = H.histogram_table(d)
    assert set(h.metric) == {t for _, t, _, _ in H.HISTOGRAMS} and len(set(h.metric)) == 13
    sm = h[h.column == "sm_pct"]
    assert sm.count_pct.sum() == pytest.approx(100) and sm.time_pct.sum() == pytest.approx(100)
    # the 0-10 % bin by count: kernels with SM % < 10; by time: their share of profiled time
    low = d.sm_pct < 10
    assert sm.iloc[0].count_pct == pytest.approx(100 * low.mean())
    assert sm.iloc[0].time_pct == pytest.approx(100 * d.share[low].sum() / d.share.sum())
    assert H.weighted_median(pd.Series([1.0, 2.0, 100.0]), pd.Series([0.1, 0.1, 0.8])) == 100.0


def test_wave_and_tile_formulas(run, k, dev):
    c = C.classify(k, dev.ridge("bf16"))
    w = C.wave_table(c, run.ncu_metrics(), dev.sm_count).set_index("kernel_id")
    g = w.loc["k001"]  # 6720 gather blocks, 8 resident per SM on 132 SMs
    assert g.waves == pytest.approx(6720 / (132 * 8)) == pytest.approx(g.ncu_waves_per_sm, rel=1e-3)
    assert g.tail_efficiency_pct == pytest.approx(100 * (6720 / 1056) / 7)
    assert g.meets_4x_sms and not w.loc["k000", "meets_4x_sms"]  # 80 blocks < 4 × 132
    assert C.decode_tile("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT") == {"BM": 128, "BN": 8, "BK": 64, "stages": 12}
    t = C.tile_table(c, dev).set_index("kernel_id").loc["k006"]
    assert t.tile_intensity == pytest.approx(128 * 8 / (128 + 8))
    assert t.smem_stages_bytes == 12 * (128 + 8) * 64 * 2 <= t.smem_launch_bytes
    per_sm_cycle = dev.peak_flops("bf16") / (dev.sm_count * dev.sm_clock_max_mhz * 1e6)
    assert t.t_tile_cycles == pytest.approx(2 * 128 * 8 * 64 / per_sm_cycle)
    assert t.s_min == math.ceil(800 / t.t_tile_cycles) + 1


def test_opportunities_rank_and_rescale_idle_by_overhead(run, k, dev, roofs):
    c = C.classify(k, dev.ridge("bf16"))
    s = T.phase_summary(run.timeline, run.phases)
    opps = C.all_opportunities(run, s, c, roofs)["decode"]
    assert opps.gain_pct.is_monotonic_decreasing
    d = s.set_index("phase").loc["decode"]
    ratio = run.manifest["timeline_info"]["overhead_ratio"]
    assert opps.iloc[0].gain_pct == pytest.approx(100 * (1 - d.gpu_busy_ms / (d.wall_ms / ratio)))


def test_whatif_arithmetic_on_real_rows(run, k):
    work = W.work_table(run.timeline, k)
    d = W.load_designs()["h200-as-measured"]
    # a decode GEMV row: FLOPs from ncu (padded), DRAM bytes = its weight operand K·N·2 B
    g = work[(work.phase == "decode") & (work.source == "ncu FLOPs + weight bytes from shapes")].iloc[0]
    k_, n_ = map(int, g.op_shapes.split(";")[1].split("x"))
    assert g.dram_bytes == k_ * n_ * 2
    one = work.loc[[g.name]]
    p = W.predict(one, d, host_us=10.0, steps={"decode": 1}).iloc[0]
    t = max(2e-6, g.flops_tensor / (989.4e12 * 0.75), g.dram_bytes / (4800e9 * 0.85), g.onchip_bytes / (7100e9 * 0.85))
    assert p.device_ms_per_step == pytest.approx(1e3 * t * g.launches)
    assert p.host_ms_per_step == pytest.approx(1e-3 * 10.0 * g.launches)
    # batch 8: FLOPs × 8, weight bytes unchanged
    p8 = W.predict(one, d, 10.0, batch=8, steps={"decode": 1}).iloc[0]
    t8 = max(2e-6, 8 * g.flops_tensor / (989.4e12 * 0.75), g.dram_bytes / (4800e9 * 0.85),
             8 * g.onchip_bytes / (7100e9 * 0.85))
    assert p8.device_ms_per_step == pytest.approx(1e3 * t8 * g.launches)


def test_whatif_validation_on_the_runs_gpu(run, k):
    work = W.work_table(run.timeline, k)
    s = T.phase_summary(run.timeline, run.phases)
    v = W.validation(work, W.load_designs()["h200-as-measured"], s, run.manifest).set_index("phase")
    # decode is host-bound: wall = launches per step × the run's host time per launch (its own number)
    assert v.loc["decode", "bound"] == "host/launch"
    assert abs(v.loc["decode", "wall_error_pct"]) < 1
    assert abs(v.loc["decode", "device_error_pct"]) <= 25 and abs(v.loc["prefill", "wall_error_pct"]) <= 25
    assert set(v.index) == {"vision_encode", "prefill", "decode"}


def test_a_design_added_by_yaml_alone(tmp_path):
    src = W.NPUS_YAML.read_text()
    (tmp_path / "npus.yaml").write_text(src + "\nmine:\n  matrix_tflops: {bf16: 100}\n  vector_tflops: 10\n"
                                        "  dram_gbps: 1000\n  sram_mb: 32\n  sram_gbps: 2000\n  kernel_floor_us: 1\n"
                                        "  launch_overhead_us: 2\n  mem_efficiency: 0.8\n  matrix_efficiency: 0.7\n"
                                        "  fuse_elementwise: false\n  source: test\n")
    assert "mine" in W.load_designs(tmp_path / "npus.yaml") and len(W.load_designs(tmp_path / "npus.yaml")) >= 4
    (tmp_path / "bad.yaml").write_text("x:\n  dram_gbps: 1\n")
    with pytest.raises(ValueError, match="x: missing"):
        W.load_designs(tmp_path / "bad.yaml")
