"""Chapters 03-06 analysis on the bundled run's real values, arithmetic visible in the assertions."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from kernelbook.analyze import classify as C
from kernelbook.analyze import histograms as H
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.contract.shapes import elementwise_work
from kernelbook.devices import lookup
from kernelbook.narrate import classify as NC
from kernelbook.narrate import histograms as HN
from kernelbook.narrate import roofline as RN


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
    # d004 (the decode lm_head GEMV, nvjet 384x8): memory 83 % ≥ 60 and SM 3.6 % < 60 → memory-bound
    r = row(k, "d004")
    assert r.memory_pct >= 60 > r.sm_pct and c.loc["d004", "class"] == "memory-bound"
    # d000 (the 1280x1280 decode GEMV, nvjet 64x8): SM 2.1 %, memory 16.6 %, both < 30 → latency-bound
    r = row(k, "d000")
    assert r.sm_pct < 30 and r.memory_pct < 30 and c.loc["d000", "class"] == "latency-bound"
    # p003 (a prefill GEMM): memory 40 % and SM 39 % are neither high nor low → balanced
    assert 30 <= row(k, "p003").memory_pct < 60 and c.loc["p003", "class"] == "balanced"
    # locality flag: d004's L2 hit is 3 % < 80 %, but a GEMV uses each weight byte once (M = 1): streaming,
    # not a locality problem; a prefill GEMM that reuses its operands is flagged below 80 %
    assert row(k, "d004").l2_hit_pct < 80 and not c.loc["d004", "locality_issue"]
    assert "used once" in c.loc["d004", "reason"]
    low_gemm = c[(c.category == "GEMM") & (c.l2_hit_pct < 80)]
    assert len(low_gemm) and c.loc[low_gemm.index, "locality_issue"].all()
    # thresholds are parameters: at high = 90 the same kernel is no longer memory-bound
    strict = C.classify(k, dev.ridge("bf16"), C.Rules(high_pct=90)).set_index("kernel_id")
    assert strict.loc["d004", "class"] == "balanced"
    assert C.classify_row(70, 10) == "compute-bound" and C.classify_row(float("nan"), 10) == "unknown"


def test_weighted_vs_unweighted_class_means(k, dev):
    c = C.classify(k, dev.ridge("bf16"))
    plain, timed = C.class_table(c, weighted=False), C.class_table(c, weighted=True)
    mb = c[c["class"] == "memory-bound"]
    assert plain.loc["DRAM throughput %", "memory-bound"] == pytest.approx(mb.dram_pct.mean())
    assert timed.loc["DRAM throughput %", "memory-bound"] == pytest.approx(
        (mb.dram_pct * mb.share).sum() / mb.share.sum())
    assert plain.loc["mean duration µs", "overall"] == pytest.approx(c.duration_ns.mean() / 1e3)


def test_roofline_point_arithmetic(run, k, roofs, dev):
    p = R.points(k, roofs).set_index(["kernel_id", "level"])
    r = row(k, "d004")
    q = p.loc[("d004", "DRAM")]
    assert q.intensity == pytest.approx(r.flops / r.dram_bytes)           # FLOP / byte
    assert q.flops_per_s == pytest.approx(r.flops / (r.duration_ns * 1e-9))
    attainable = min(dev.peak_flops("bf16"), dev.dram_bytes_per_s * q.intensity)
    assert q.roof_flops_per_s == pytest.approx(attainable)
    assert q.pct_of_roof == pytest.approx(100 * q.flops_per_s / attainable)
    assert q.bound == "memory"  # 8.0 FLOP/B (padded MMA FLOPs over 334 MB) is left of the 295 FLOP/B ridge
    assert dev.ridge("bf16") == pytest.approx(dev.peak_flops("bf16") / dev.dram_bytes_per_s)
    # the L2 roof comes from ncu's own peak counter: bytes per cycle × L2 clock, median over the results
    m = run.ncu_metrics().pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")
    per_result = m["lts__t_bytes.sum.peak_sustained"] * m["lts__cycles_elapsed.avg.per_second"]
    assert roofs.bandwidth["l2"] == pytest.approx(per_result.median()) and "peak_sustained" in roofs.sources["l2"]
    # no kernel's L2 point lies above it: the estimate older captures used (bytes/s ÷ L2 %) is a lower bound
    top = k.loc[k.l2_pct.idxmax()]
    assert top.l2_bytes_per_s / (top.l2_pct / 100) <= roofs.bandwidth["l2"] * 1.05
    assert not R.points(k, roofs).above_roof.any()


def test_a_point_above_its_roof_is_flagged_with_a_cause(run, k, roofs):
    """Halve a kernel's measured duration: its DRAM point goes above the roof and gets a cause."""
    fast = k.copy()
    i = fast.index[fast.kernel_id == "d004"][0]
    fast.loc[i, "duration_ns"] /= 2.5
    fast.loc[i, "flops_per_s"] *= 2.5
    p = R.points(fast, roofs)
    flagged = p[p.above_roof]
    assert set(flagged.kernel_id) == {"d004"}
    causes = R.above_roof_causes(p, fast, roofs)
    assert len(causes) == len(flagged) and causes.likely_cause.str.len().gt(20).all()
    # with chapter 02's fidelity table the cause is the MMA padding of this GEMV's tensor FLOPs
    from kernelbook.analyze.ncu_report import fidelity

    fid = fidelity(fast, run.timeline)
    assert fid.set_index("kernel_id").loc["d004", "flops_ratio"] > 1.05
    padded = R.above_roof_causes(p, fast, roofs, fid)
    assert padded.likely_cause.str.contains("pads the small dimension").all()


def test_fidelity_shows_the_shapes_of_the_launch_ncu_profiled(run, k):
    """A decode attention's KV length grows by one per step: chapter 02's fidelity table shows the shapes of
    the launch ncu profiled (its step), not of the configuration's first or most common launch."""
    from kernelbook.analyze.ncu_report import fidelity

    fid = fidelity(k, run.timeline).set_index("kernel_id")
    att = k.set_index("kernel_id").loc["d008"]  # cuDNN SDPA, decode
    kv = run.manifest["timeline_info"]["inputs"]["prompt_tokens"] + int(att.profiled_step)
    assert fid.loc["d008", "op_shapes"].split(";")[1] == f"1x10x{kv}x128"


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
    g = w.loc["d001"]  # 6720 gather blocks (6x1120), 8 resident per SM on 132 SMs
    assert g.waves == pytest.approx(6720 / (132 * 8)) == pytest.approx(g.ncu_waves_per_sm, rel=1e-3)
    assert g.tail_efficiency_pct == pytest.approx(100 * (6720 / 1056) / 7)
    assert g.meets_4x_sms and not w.loc["d000", "meets_4x_sms"]  # 20 blocks (4x5) < 4 × 132
    assert C.decode_tile("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT") == {"BM": 128, "BN": 8, "BK": 64, "stages": 12}
    t = C.tile_table(c, dev).set_index("kernel_id").loc["d005"]  # the 6-expert decode GEMV, nvjet 128x8
    assert t.tile_intensity == pytest.approx(128 * 8 / (128 + 8))
    assert t.smem_stages_bytes == 12 * (128 + 8) * 64 * 2 <= t.smem_launch_bytes
    per_sm_cycle = dev.peak_flops("bf16") / (dev.sm_count * dev.sm_clock_max_mhz * 1e6)
    assert t.t_tile_cycles == pytest.approx(2 * 128 * 8 * 64 / per_sm_cycle)
    # a stage's (128 + 8) x 64 bf16 tile arrives at the SM's share of 3.35 TB/s in 1358 cycles, longer
    # than its 35 cycles of compute: the load sets the stage time, and 800 cycles of latency need
    # ceil(800 / 1358) + 1 = 2 stages, not the 25 the compute time alone asks for
    dram_per_sm_cycle = dev.dram_bytes_per_s / (dev.sm_count * dev.sm_clock_max_mhz * 1e6)
    assert t.t_load_cycles == pytest.approx((128 + 8) * 64 * 2 / dram_per_sm_cycle)
    assert t.s_min == math.ceil(800 / t.t_load_cycles) + 1 == 2 and t.stages_ok


def test_compute_bound_kernels_without_tensor_work_are_named_issue_bound(run, k, dev):
    """Vision encode's lead class is compute-bound (62 % of its profiled time), but that time is a strided copy
    (SM 64 %, DRAM 47 %), a strided add (SM 88 %, DRAM 18 %) and a layer norm: no tensor-core work, so the SM is
    busy issuing index arithmetic, loads and stores, and 'compute-bound' read alone sends a reader to FLOP/s. The
    kernels' reasons, chapter 05's headline and report.md's root cause say so; a GEMM is never issue-bound."""
    c = C.classify(k, dev.ridge("bf16"))
    issue = c[c.issue_bound]
    assert len(issue) and (issue["class"] == "compute-bound").all() and (issue.flops_tensor.fillna(0) == 0).all()
    assert not c[c.category == "GEMM"].issue_bound.any()
    assert set(issue[issue.phase == "vision_encode"].category) == {"copy/cast", "elementwise", "reduction/norm"}
    assert all("no tensor-core work" in r for r in issue.reason)
    assert not any("no tensor-core work" in r for r in c[~c.issue_bound].reason)
    f = C.lead(c[c.phase == "vision_encode"])
    vis = c[(c.phase == "vision_encode") & (c["class"] == "compute-bound")]
    assert f["class"] == "compute-bound" and f["issue_pct"] == pytest.approx(
        100 * vis[vis.issue_bound].share.sum() / vis.share.sum()) and f["issue_pct"] > 95
    line = NC.headline(c[c.phase == "vision_encode"], None, "vision_encode")
    assert f"; {f['issue_pct']:.0f} % of that time without tensor-core work, in copy/cast, elementwise, " in line
    # decode's lead is latency-bound: no note
    assert "tensor-core" not in NC.headline(c[c.phase == "decode"], None, "decode")
    report = NC.report_for_run(run.path)
    cause = next(ln for ln in report.splitlines() if ln.startswith("Root cause") and "vision encode" in ln)
    assert "99 % of that is in kernels without tensor-core work (copy/cast, elementwise, reduction/norm)" in cause
    assert all("tensor-core" not in ln for ln in report.splitlines() if ln.startswith("Root cause")
               and "vision encode" not in ln)


def test_memory_bound_kernels_are_not_called_latency_bound(k, dev):
    """Chapter 05 said '3 of 3 have fewer stages than S_min: latency, not bandwidth, bounds them' of d000,
    d004 and d005, while its class table calls d004 memory-bound at 83 % of DRAM peak; and d004's achieved
    bytes in flight (8.50 kB per SM) exceeded what its warps supply (4.78 kB) with nothing to say how.
    Which tiled kernels are memory-bound is read from their counters, not named: d005 (nvjet 128x8) ran at
    61.5 % of DRAM peak in an earlier capture, 59.7 % in the next and 61.9 % in the current one, across the
    60 % line each time."""
    rules = C.Rules()
    c = C.classify(k, dev.ridge("bf16"), rules)
    cp = c[c.phase == "decode"]
    t = C.tile_table(cp, dev).set_index("kernel_id")
    tiled = cp.set_index("kernel_id").loc[t.index]
    high = set(tiled[(tiled.memory_pct >= rules.high_pct) & (tiled.sm_pct < rules.high_pct)].index)
    assert "d004" in high  # nvjet 384x8 at 83.9 % of DRAM peak
    assert set(tiled[tiled["class"] == "memory-bound"].index) == high and t.loc[sorted(high), "stages_ok"].all()
    # no tiled kernel with memory throughput at or above the low line is called latency-bound
    assert not (tiled[tiled.memory_pct >= rules.low_pct]["class"] == "latency-bound").any()
    d005 = tiled.loc["d005"]  # 28.1 MB from DRAM in 13.5 µs: 61.9 % of DRAM peak, over the line this capture
    assert d005.memory_pct >= rules.high_pct > d005.sm_pct and d005["class"] == "memory-bound"
    assert "d005" in high and t.loc["d005", "stages_ok"]
    # its reason prints the number that put it over the line (61.9), not a rounded 62 % beside "high ≥ 60"
    assert f"memory {d005.memory_pct:.1f} %" in d005.reason and f"memory {d005.memory_pct:.0f} %" not in d005.reason
    assert "fewer stages than S_min" not in NC.tile_prose(t.reset_index(), rules)
    ll = C.littles_law(cp, dev).set_index("kernel_id").loc["d004"]
    # nvjet 384x8, BK 64, 4 stages: 4 · (384 + 8) · 64 · 2 B of stage buffers filled by async copies
    assert ll.stage_buffer_bytes_per_sm == 4 * (384 + 8) * 64 * 2
    assert ll.warp_supply_bytes_per_sm < ll.achieved_bytes_per_sm < ll.stage_buffer_bytes_per_sm


def test_opportunities_rank_and_rescale_idle_by_overhead(run, k, dev, roofs):
    c = C.classify(k, dev.ridge("bf16"))
    s = T.phase_summary(run.timeline, run.phases)
    opps = C.all_opportunities(run, s, c, roofs)["decode"]
    assert opps.gain_pct.is_monotonic_decreasing
    d = s.set_index("phase").loc["decode"]
    # the idle share is the plain (unprofiled) step's: 12.66 ms, not the profiled 21.58 ms (1359.29 ms ÷ 63 steps)
    plain = run.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"]
    assert plain == pytest.approx(12.6632, abs=1e-4) and d.wall_ms / d.steps == pytest.approx(21.576, abs=1e-3)
    assert opps.iloc[0].gain_pct == pytest.approx(100 * (1 - (d.gpu_busy_ms / d.steps) / plain))
    assert opps.iloc[0].speedup == pytest.approx(1 / (1 - opps.iloc[0].gain_pct / 100))
    # a run without plain per-phase timings: the profiled wall ÷ the whole call's profiled ÷ plain ratio
    ratio = run.manifest["timeline_info"]["overhead_ratio"]
    sh = T.category_shares(run.timeline)
    old = C.opportunities("decode", d, c, sh[sh.phase == "decode"].set_index("category").pct / 100, roofs, ratio)
    assert old.iloc[0].gain_pct == pytest.approx(100 * (1 - d.gpu_busy_ms / (d.wall_ms / ratio)))
    # prefill is one forward: its launch-overhead item names no decode step (report.md's prefill key issue)
    pre = C.all_opportunities(run, s, c, roofs)["prefill"]
    launch = pre[pre.opportunity.str.startswith("Cut launch overhead")].opportunity
    assert len(launch) == 1 and "decode" not in launch.iloc[0]


def test_report_md_defines_its_classes_and_gives_gains_as_speedups_on_the_plain_step():
    """An expert reader of report.md: 'Balanced' was never defined; 'est. 83 % gain' was a share of wall
    time (a 5.9× speedup) and did not say so; 'Duration (us) 21112 per step' was the profiled step (µs
    under the profiler), not the step's time."""
    import re

    run_dir = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
    text = NC.report_for_run(run_dir)
    man = json.loads((run_dir / "manifest.json").read_text())
    plain = man["timeline_info"]["plain_phases"]
    rows = {ln.split("|")[1].strip().replace("\\", ""): [x.strip() for x in ln.split("|")[2:8]]
            for ln in text.splitlines() if ln.startswith(("| decode", "| prefill", "| vision"))}
    # Duration: µs of the plain step (12.66 ms per decode step), per call for prefill and vision encode
    assert rows["decode"][0] == f"{1e3 * plain['decode']['ms_per_step']:.0f} per step" == "12663 per step"
    assert rows["prefill"][0] == f"{1e3 * plain['prefill']['ms_per_step']:.0f}" == "21324"
    assert rows["vision_encode"][0] == f"{1e3 * plain['vision_encode']['ms_per_step']:.0f}" == "84796"
    assert "each stage's wall time in µs in the plain generate call" in text
    # the profiled decode step: 1359.29 ms of decode wall over 63 steps
    assert "Under the profiler the same stages took" in text and "decode 21576 µs per step" in text
    # every class the report names, in its Bottleneck column or a section, is defined in one line
    def named_classes(text):
        rows = [ln.split("|")[2:8] for ln in text.splitlines() if ln.startswith(("| decode", "| prefill", "| vision"))]
        return {r[4].strip() for r in rows} | {m.lower() for m in re.findall(r"^Bottleneck: (.+)$", text, re.M)}

    named = named_classes(text)
    assert {"compute-bound", "balanced", "latency-bound"} <= named  # vision encode is profiled: compute-bound
    # a run whose ncu stage lacks vision encode (phases decode and prefill only) names and defines 'not profiled'
    lacking = NC.report_for_run(REPO / "data" / "runs" / "h100-long-generation-2048")
    assert "not profiled" in named_classes(lacking)
    for t, cls in [(text, c) for c in named] + [(lacking, c) for c in named_classes(lacking)]:
        assert len(re.findall(rf"^- \*\*{re.escape(cls)}\*\*: .+$", t, re.M)) == 1, cls
    # each gain is a share of the phase's (plain) wall time, given with its speedup 1 ÷ (1 − share)
    gains = re.findall(r"est\. ≤ ([\d.]+) % of (decode|prefill|vision encode) wall time, up to ([\d.]+)× faster", text)
    assert len(gains) == 9 and {ph for _, ph, _ in gains} == {"decode", "prefill", "vision encode"}
    for share, _, x in gains:
        want = 1 / (1 - float(share) / 100)  # within the last digit printed: 0.1 above 2×, 0.01 under
        assert float(x) == pytest.approx(want, abs=0.1 if want >= 2 else 0.01)
    assert "share of decode wall time (plain run, no profiler)" in text
    # the root cause's idle share is the same basis as decode's first gain, the profiled one beside it
    # (89.5 %: 142.79 ms of kernels in 1359.29 ms of profiled decode wall)
    first = float(next(share for share, ph, _ in gains if ph == "decode"))
    assert re.search(rf"GPU is idle {first:.0f} % of decode wall time .*; 89 % under the profiler", text)


@pytest.fixture(scope="module")
def tr(run, k, dev, roofs):
    return W.build(run.timeline, run.phases, run.manifest, k, W.run_gpu_design(dev, roofs))


def test_whatif_work_from_real_shapes(tr):
    w = tr.work
    # a profiled decode GEMV (nvjet 16x64, aten::mm 1x1280 · 1280x1280): ncu's tensor FLOPs, bytes = each
    # operand once + the output, weights = the larger operand
    g = w[(w.phase == "decode") & (w.op_shapes == "1x1280;1280x1280") & (w.category == "GEMV")].iloc[0]
    assert g.source == "ncu FLOPs + bytes from shapes"
    assert g.dram_bytes == 2 * (1 * 1280 + 1280 * 1280 + 1 * 1280) and g.weight_bytes == 2 * 1280 * 1280
    # vision's broadcast add 72x48x48x48x1 + 72x48x48x1x48 writes the broadcast 72x48x48x48x48 output
    a = w[(w.phase == "vision_encode") & (w.op_shapes == "72x48x48x48x1;72x48x48x1x48;")].iloc[0]
    n_in, n_out = 2 * 72 * 48 * 48 * 48, 72 * 48**4
    assert a.dram_bytes == 2 * (n_in + n_out)
    # a KV-cache cat reads and writes its tensor list; copy_ reads src and writes self
    assert elementwise_work("aten::cat", "[1, 10, 1, 64]x[1, 10, 1, 64];", 2) == (2 * 2 * 640 * 2, 0.0)
    assert elementwise_work("aten::copy_", "1x1x1280;1x1x1280;", 4)[0] == 2 * 1280 * 4
    # prefill SDPA on 1x10x1129x128: 4·B·H·Sq·Sk·D tensor FLOPs
    s = w[(w.phase == "prefill") & (w.source == "attention FLOPs and bytes from shapes")].iloc[0]
    assert s.flops_tensor == 4 * 10 * 1129 * 1129 * 128
    # the grouped MoE GEMM's setup kernel carries no work; the CUTLASS kernel carries 2·T·K·N
    gm = w[(w.phase == "prefill") & (w.op == "aten::_grouped_mm") & (w.op_shapes.str.startswith("6774x1280;"))]
    assert len(gm) == 2 and (gm.source == "helper of a matrix op (its work is on the op's main kernel)").sum() == 1
    assert gm.flops_tensor.max() == 2 * 6774 * 1280 * 1792


def test_whatif_launch_time_arithmetic(tr):
    w, cal = tr.work, tr.calib.set_index("class")
    one = w[(w.phase == "decode") & (w.op_shapes == "1x1280;1280x1280") & (w.category == "GEMV")].head(1)
    d = tr.gpu
    ideal = max(one.flops_tensor.iloc[0] / (d.matrix_tflops["bf16"] * 1e12), one.dram_bytes.iloc[0] / (d.dram_gbps * 1e9),
                one.onchip_bytes.iloc[0] / (d.sram_gbps * 1e9))
    t, _ = W.launch_time_s(one, d, tr.calib, d)
    # a launch that does work pays its class's work latency (the intercept of its line), then b × ideal
    assert t[0] == pytest.approx(cal.loc["GEMV", "work_latency_us"] * 1e-6 + cal.loc["GEMV", "slowdown"] * ideal)
    assert cal.loc["GEMV", "work_latency_us"] >= cal.loc["GEMV", "latency_us"]
    # one that does none (a helper: its work is on its op's main kernel) pays the class's floor
    helper = one.assign(flops_tensor=0.0, flops_cuda=0.0, dram_bytes=0.0, onchip_bytes=0.0, weight_bytes=0.0)
    assert W.launch_time_s(helper, d, tr.calib, d)[0][0] == pytest.approx(cal.loc["GEMV", "latency_us"] * 1e-6)
    # batch 8: FLOPs and activation bytes × 8, the weight operand read once
    t8 = W.ideal_s(one, d, batch=8)[0]
    act = one.dram_bytes.iloc[0] - one.weight_bytes.iloc[0]
    assert t8 == pytest.approx(max(8 * one.flops_tensor.iloc[0] / (d.matrix_tflops["bf16"] * 1e12),
                                   (one.weight_bytes.iloc[0] + 8 * act) / (d.dram_gbps * 1e9),
                                   (one.weight_bytes.iloc[0] + 8 * act) / (d.sram_gbps * 1e9)))
    # a design that sets latency and efficiency overrides the fitted ones
    fixed = d.with_(kernel_floor_us=3.0, matrix_efficiency=0.5, mem_efficiency=0.8)
    assert W.launch_time_s(one, fixed, tr.calib, d)[0][0] == pytest.approx(3e-6 + ideal / 0.5)


def test_replay_overlaps_host_and_device():
    # one segment of three launches: host gaps 10 µs, kernels 1 µs → host-bound, span = 20 µs + 1 µs
    seq = pd.DataFrame({"phase": ["p"] * 3, "seg": [0, 0, 0]})
    us = 1e-6
    assert W._segment_spans(seq, np.array([1, 1, 1]) * us, np.array([0, 10, 10]) * us)["p"] == pytest.approx(21 * us)
    # kernels 20 µs, gaps 1 µs → device-bound: span = 60 µs
    assert W._segment_spans(seq, np.array([20, 20, 20]) * us, np.array([0, 1, 1]) * us)["p"] == pytest.approx(60 * us)
    # a blocking copy ends segment 0; segment 1 starts after 5 µs of host work with the device idle
    seq2 = pd.DataFrame({"phase": ["p"] * 4, "seg": [0, 0, 1, 1]})
    span = W._segment_spans(seq2, np.array([20, 2, 3, 3]) * us, np.array([0, 1, 5, 1]) * us)["p"]
    assert span == pytest.approx((20 + 2) * us + (5 + 3 + 3) * us)


def test_replay_reproduces_the_run_with_its_own_times(tr):
    # measured durations and recorded host gaps: the replayed segments hold every kernel's time and
    # fit inside the phase's wall (the remainder, host work outside them, is not negative)
    spans = W._segment_spans(tr.seq, tr.seq.dur_s.to_numpy(), tr.seq.gap_s.to_numpy())
    busy = tr.seq.groupby("phase").dur_s.sum()
    for ph, r in tr.measured.set_index("phase").iterrows():
        assert busy[ph] <= spans[ph] <= r.wall_ms_per_step * r.steps * 1e-3 * 1.001
        assert tr.remainder_s[ph] >= -1e-3 * spans[ph]


def test_whatif_validation_held_out(tr):
    v = W.validation(tr).set_index("phase")
    assert set(v.index) == {"vision_encode", "prefill", "decode"}
    # each phase is fitted on the other two only
    assert all(ph not in v.loc[ph, "calibrated_on"] for ph in v.index)
    # device time within the issue's 25 % on every phase of the bundled run (held out)
    assert (v.device_error_pct.abs() <= 25).all(), v.device_error_pct
    assert (v.scaled_time_pct < 10).all()


def test_a_design_added_by_yaml_alone(tmp_path):
    src = W.NPUS_YAML.read_text()
    (tmp_path / "npus.yaml").write_text(src + "\nmine:\n  matrix_tflops: {bf16: 100}\n  vector_tflops: 10\n"
                                        "  dram_gbps: 1000\n  sram_mb: 32\n  sram_gbps: 2000\n  kernel_floor_us: 1\n"
                                        "  launch_overhead_us: 2\n  mem_efficiency: 0.8\n  matrix_efficiency: 0.7\n"
                                        "  fuse_elementwise: false\n  source: test\n")
    designs = W.load_designs(tmp_path / "npus.yaml")
    assert "mine" in designs and len(designs) >= 4 and designs["mine"].dram_gbps == 1000
    (tmp_path / "bad.yaml").write_text("x:\n  dram_gbps: 1\n  dram_gbs: 2\n")
    with pytest.raises(ValueError, match=r"x: missing .*unknown \['dram_gbs'\]"):
        W.load_designs(tmp_path / "bad.yaml")


def test_designs_predict_from_the_yaml(tr):
    designs = {tr.gpu.key: tr.gpu, **W.load_designs()}
    t = W.design_table(designs, tr).set_index("design")
    # the run's GPU with graph dispatch and fusion is faster per token than the same GPU eager
    assert t.loc["h200-graph-fused", "decode ms/token"] < t.loc[tr.gpu.key, "decode ms/token"]
    # eager decode on the run's GPU is host-bound: the plain-run estimate of its step, token to token (generate's
    # loop between forwards included), is the plain step the capture timed
    m = tr.measured.set_index("phase").loc["decode"]
    assert t.loc[tr.gpu.key, "decode bound"] == "host/launch"
    assert t.loc[tr.gpu.key, "decode ms/token"] == pytest.approx(m.plain_timed_ms_per_step, rel=0.05)


def test_every_decode_gemv_sits_left_of_the_dram_ridge(k, roofs, dev):
    """Cache control `all`: a batch-1 GEMV reads its weights from DRAM once per launch, so its DRAM
    intensity is a few FLOP per byte (tensor FLOPs include the MMA padding), far left of the ridge."""
    p = R.points(k, roofs).set_index(["kernel_id", "level"])
    gemv = [r.kernel_id for r in k.itertuples() if r.phase == "decode" and r.kernel_id in ("d000", "d004", "d005")]
    assert len(gemv) == 3
    for kid in gemv:
        q = p.loc[(kid, "DRAM")]
        assert q.bound == "memory" and q.intensity < dev.ridge("bf16") / 10, (kid, q.intensity)


def test_one_category_per_kernel_in_every_chapter(run, k):
    """d004, the decode lm_head (nvjet 384x8 running aten::mm 1x1280 · 1280x129280, a matrix-vector
    product), was GEMV in chapter 01/02's shares and GEMM in 04/05 (the name's category, from the first
    timeline row with its name, a prefill launch without shapes); chapter 05's opportunities then quoted
    GEMV 34 % and GEMM 5 % of decode kernel time, 104 % in all."""
    from kernelbook.analyze import ncu_report as N

    assert row(k, "d004").category == "GEMV"
    assert N.metric_table(run.ncu_kernels(), run.timeline).set_index("kernel_id").loc["d004", "category"] == "GEMV"
    assert N.fidelity(run.ncu_kernels(), run.timeline).set_index("kernel_id").loc["d004", "category"] == "GEMV"
    shares = T.category_shares(run.timeline)
    for phase, grp in k.groupby("phase"):
        sh = shares[shares.phase == phase].set_index("category").pct
        # every profiled kernel's category is one its phase's shares count its time under ...
        assert set(grp.category) <= set(sh.index)
        # ... so the shares the opportunities quote, one per category, are parts of one whole
        assert sh[sorted(set(grp.category))].sum() <= 100 + 1e-9


def test_histograms_label_their_bins_and_the_headline_spells_small_percentages_as_tables_do(k):
    """Chapter 03: all 13 panels hid their tick labels (bins only on hover), the legend (y = 1.02, anchored
    at its top) lay over the first row's panel titles, and the headline said 'a median of 0.0 %' of a
    median SM throughput of 0.049 % that the table prints '< 0.1'."""
    from kernelbook.plots import figures as F

    d = k[k.phase == "decode"]
    cap = HN.captions(H.captions(d))
    fig = F.histogram_grid(HN.shown(H.histogram_table(d)), cap)
    used = sorted({t.xaxis for t in fig.data})  # 'x', 'x2', … 'x13': 13 panels on a 5 × 3 grid
    assert len(used) == 13 and all(fig.layout["xaxis" + a[1:]].showticklabels for a in used)
    assert fig.layout.xaxis.type in (None, "category", "-") and "0–10" in fig.data[0].x
    plot_px = fig.layout.height - fig.layout.margin.t - 80  # plotly's default bottom margin is 80 px
    titles_top = max(a.y for a in fig.layout.annotations)  # panel titles stand on y = 1, anchored at their foot
    assert fig.layout.legend.yanchor == "bottom" and (fig.layout.legend.y - titles_top) * plot_px >= 20
    sm = cap.set_index("column").loc["sm_pct", "median"]
    assert 0 < sm < 0.1  # 0.052 % on the re-captured run (0.049 % before: "< 0.1 %", never "0.0 %")
    from kernelbook.display import pct

    assert f"a median of {pct(sm)} %" in HN.headline(cap, "decode") and "0.0 %" not in HN.headline(cap, "decode")
    assert pct(0.049) == "< 0.1"


def test_roofline_drops_bypassed_levels_and_draws_every_point(k, roofs):
    """Chapter 04 drew d004's L1 point at 403,237 FLOP/B (2.66 GFLOP over the 6.6 kB L1 counted, while 334 MB
    came from DRAM: its loads go around L1), and its y axis started at 10^8 FLOP/s, under which the slowest
    point (d014 on the re-captured run, the bf16 copy: 256 FLOPs in 2.88 µs, 89 MFLOP/s) was clipped."""
    from kernelbook.plots import figures as F

    d4 = row(k, "d004")
    assert d4.l1_bytes < 0.01 * d4.dram_bytes and d4.flops / d4.l1_bytes == pytest.approx(403237, rel=1e-5)
    p = R.points(k, roofs)
    assert set(p[p.kernel_id == "d004"].level) == {"DRAM", "L2"}
    assert "d004" in RN.bypass_note(k, "decode")
    # small pointwise kernels keep their L1 points: d018's L1 holds 64 B of its 6.4 kB, 1 %, not under it
    assert "L1" in set(p[p.kernel_id == "d018"].level)
    d14 = row(k, "d014")
    assert d14.flops_per_s == pytest.approx(256 / 2880e-9) and d14.flops_per_s < 1e8
    fig = F.roofline_physical(p, roofs, "decode")
    assert 10 ** fig.layout.yaxis.range[0] < p[p.phase == "decode"].flops_per_s.min()


def test_roofline_says_its_tensor_flops_include_padding(run, k, roofs):
    """Chapter 04 drew tensor FLOPs with the MMA padding in them without saying so: decode attention showed
    17.9 FLOP/B, 18.0× its useful work, and the decode GEMVs execute 8.00–9.14× their useful 2·M·N·K (d005: 8
    rows for one, N 1792 padded to 2048). The useful work from the shapes now stands beside the counted."""
    from kernelbook.plots import figures as F

    u = R.useful_work(k, run.timeline).set_index("kernel_id")
    assert u.loc["d005", "padding_ratio"] == pytest.approx(8 * 2048 / 1792)
    d8 = row(k, "d008")  # one query against 1161 keys, 10 heads of 128: 4·1·10·1·1161·128
    assert u.loc["d008", "useful_flops"] == 4 * 10 * 1161 * 128
    assert u.loc["d008", "padding_ratio"] == pytest.approx(d8.flops / (4 * 10 * 1161 * 128))  # 18.0×
    assert u.loc["d008", "useful_intensity_dram"] == pytest.approx(4 * 10 * 1161 * 128 / d8.dram_bytes)
    note = RN.useful_note(u.reset_index(), "decode")
    assert "8.00–18.02×" in note and "d008" in note and "d004" in note
    fig = F.roofline_physical(R.points(k, roofs), roofs, "decode", u.reset_index())
    hollow = [t for t in fig.data if t.marker.symbol == "circle-open"]
    assert len(hollow) == 1 and len(hollow[0].x) == 4  # d000, d004, d005, d008


def test_near_empty_kernels_cache_points_are_marked_artifacts(k, roofs):
    """One-element kernels showed a 1.4–2.1 MB L2-traffic floor: ncu counts at least 1.42 MB at L2 for any
    launch (d019: 1.42 MB at L2 for 5.1 kB from DRAM), so their L2 (and L1) points are ncu's, not theirs."""
    d19 = row(k, "d019")
    assert R.l2_floor(k) == d19.l2_bytes == 1421056 and d19.dram_bytes == 5120
    p = R.points(k, roofs).set_index(["kernel_id", "level"])
    assert p.loc[("d019", "L2"), "artifact"] and p.loc[("d019", "L1"), "artifact"]
    assert not p.loc[("d019", "DRAM"), "artifact"]
    # real traffic keeps its points: d008's 10.7 MB at L2 is 1.8× its 6.0 MB from DRAM
    assert not p.loc[("d008", "L2"), "artifact"] and not p.loc[("d004", "L2"), "artifact"]
    note = RN.near_empty_note(k, "decode")
    assert "1.42 MB–2.07 MB" in note and "d019" in note and "d008" not in note


def test_every_figure_draws_a_category_in_one_colour(run, k, roofs):
    """Category colours changed between chapter 01 and the rooflines: each figure dealt its palette out in the
    order its own categories sorted or appeared (attention was one colour in chapter 01's bars, another in
    chapter 04's). One map, by the Category enum, now colours every category figure."""
    from kernelbook.plots import figures as F

    def colours(fig):
        out = {}
        for t in fig.data:
            c = t.marker.color
            cat = (t.legendgroup or t.name or "").split(" @ ")[0]
            if isinstance(c, str) and cat in F.CATEGORY_COLOUR:
                out[cat] = c
        return out

    figs = [F.top_kernel_bars(T.top_kernels_by_phase(run.timeline, 12)),
            F.category_bars(T.category_shares(run.timeline)),
            F.roofline_physical(R.points(k, roofs), roofs, "decode"),
            F.roofline_normalized(R.normalized(k), "decode")]
    seen = [colours(f) for f in figs]
    assert all(seen) and "attention" in seen[2] and "attention" in seen[3]
    for s in seen:
        assert s == {c: F.CATEGORY_COLOUR[c] for c in s}
    assert len(set(F.CATEGORY_COLOUR.values())) == len(F.CATEGORY_COLOUR)  # 11 categories, 11 colours
    assert {f.layout.template.layout.colorway for f in figs} == {tuple(F.CATEGORY_COLOURS)}


def test_comparison_note_says_no_ncu_data_once(run):
    """Chapter 07 wrote '(ncu no ncu data)' for a run without an ncu stage."""
    from types import SimpleNamespace

    from kernelbook.narrate import summary as NS

    bare = SimpleNamespace(run_id="bare", ncu_kernels=lambda: None)
    note = NS.comparison_note((run, bare))
    assert "(no ncu data)" in note and "ncu no ncu" not in note
    assert "(ncu decode 20/20, prefill 20/20, vision\\_encode 20/20)" in note
