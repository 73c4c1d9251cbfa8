"""ncu in context (issue 41, point 7 and point 9's figures): each profiled kernel against the timeline launches of
its own launch shape, producer → consumer kernels flagged, every FLOP and byte discrepancy with its verdict, the
tensor pipe's real utilisation, and words from the run (a graph run is never told to use CUDA graphs). Every test
reads committed runs."""
import re

import pytest

from conftest import REPO
from kernelbook.analyze import classify as C
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.contract.shapes import elementwise_flops, tile_padding
from kernelbook.load.run import load_run
from kernelbook.narrate import ncu_report as NN
from kernelbook.narrate import timeline as TN

BUNDLED, GRAPHS = "data/runs/h100-deepseek-ocr-2", "data/runs/h100-variant-static-graphs"


@pytest.fixture(scope="module")
def eager():
    return load_run(REPO / BUNDLED)


@pytest.fixture(scope="module")
def graphs():
    return load_run(REPO / GRAPHS)


def _fid(run):
    return N.fidelity(run.ncu_kernels(), run.timeline, run.manifest, run.ncu_metrics()).set_index("kernel_id")


def test_ncu_is_compared_per_launch_shape_never_pooled(eager):
    """p000 (CUTLASS grouped GEMM, grid 132) ran gate_up (147.8 µs) and down (80.3 µs) on one grid: pooled, the
    timeline median was 111.4 µs and the ratio 1.39×, past `CONTEXT_FACTOR`; against its own shape it is 1.05×. d000
    (nvjet 64x8, grid 4x5) pools 1x1280·1280x1280 (4.93 µs) with 1x1792·1792x1280 (5.54 µs)."""
    f = _fid(eager)
    tl = eager.timeline
    kern = eager.ncu_kernels().set_index("kernel_id")
    p0 = f.loc["p000"]
    mine = tl[(tl.phase == "prefill") & (tl.name == kern.loc["p000", "name"])]
    gate_up = mine[mine.op_shapes == "6774x1280;64x1280x1792;64;;"]
    down = mine[mine.op_shapes == "6774x896;64x896x1280;64;;"]
    assert set(mine.grid) == {"132x1x1"} and len(mine) == len(gate_up) + len(down) == 22
    assert p0.op_shapes == "6774x1280;64x1280x1792;64;;" and p0.launches == len(gate_up) == 11
    assert p0.timeline_median_us == pytest.approx(gate_up.duration_ns.median() / 1e3) == pytest.approx(147.842)
    ncu_ns = kern.loc["p000", "duration_ns"]
    assert p0.duration_ratio == pytest.approx(ncu_ns / gate_up.duration_ns.median())  # 1.05
    assert p0.duration_ratio <= N.CONTEXT_FACTOR < ncu_ns / mine.duration_ns.median()  # pooled: 1.39, flagged
    # the other shapes read as the shapes column does (×, ·, no empty slots)
    median = down.duration_ns.median() / 1e3
    assert f"6774×896 · 64×896×1280 · 64: 11 launches, median {median:.2f} µs" == p0.other_shapes
    d0 = f.loc["d000"]
    d0_tl = tl[(tl.phase == "decode") & (tl.name == kern.loc["d000", "name"]) & (tl.grid == "4x5x1")]
    own = d0_tl[d0_tl.op_shapes == "1x1280;1280x1280"]
    assert d0.timeline_median_us == pytest.approx(own.duration_ns.median() / 1e3) == pytest.approx(4.928)
    assert d0.launches == len(own) == 3024
    assert d0.duration_ratio == pytest.approx(kern.loc["d000", "duration_ns"] / own.duration_ns.median())
    other = d0_tl[d0_tl.op_shapes == "1x1792;1792x1280"]
    assert f"1×1792 · 1792×1280: {len(other)} launches, median {other.duration_ns.median() / 1e3:.2f} µs" in \
        d0.other_shapes and len(other) == 693
    # every kernel off by more than 1.25x carries a reason; those within say they agree
    off = (f.duration_ratio > N.CONTEXT_FACTOR) | (f.duration_ratio < 1 / N.CONTEXT_FACTOR)
    assert f.loc[~off, "in_context"].str.startswith("agrees").all()
    assert not f.loc[off, "in_context"].str.startswith("agrees").any()


@pytest.mark.parametrize("path", [BUNDLED, GRAPHS])
def test_producer_consumer_kernel_is_flagged_from_the_runs_own_data(path):
    """d005, the bmm over the 6 routed experts' gate_up weights (6x1792x1280, 27.5 MB), reads what the expert gather
    has just written: its ncu DRAM bytes in the loop's duration would beat the run's measured copy bandwidth. It is
    flagged, and the cache-control note no longer says every kernel reads its operands from DRAM as the loop does."""
    run = load_run(REPO / path)
    f = _fid(run)
    d5 = f.loc["d005"]
    ceiling = run.info.measured_peaks.d2d_copy_gbps
    assert d5.op_shapes == "6x1792x1280;6x1280x1"
    assert d5.in_loop_gbps == pytest.approx(d5.dram_bytes / (d5.timeline_median_us * 1e3)) and d5.in_loop_gbps > ceiling
    assert d5.in_loop_l2 and d5.in_context.startswith("producer → consumer")
    assert "gather/index" in d5.in_context  # the gather, the launch just before it
    # the GEMVs that stream weights no launch wrote stay unflagged
    gemv = f[(f.category == "GEMV") & f.op_shapes.str.contains("1x1280;1280x1280|1x1280;1280x129280", na=False)]
    assert len(gemv) and not gemv.in_loop_l2.any()
    note = NN.cache_control_note(run.manifest, "05", N.in_loop_l2(f.reset_index()))
    assert "as a launch in the decode loop does" not in note and "d005" in note and "cold-cache figure" in note
    bf = N.byte_fidelity(run.ncu_kernels(), run.timeline, run.manifest, N.in_loop_l2(f.reset_index()))
    assert "cold-cache figure" in bf.set_index("kernel_id").loc["d005", "verdict"]
    # chapter 05's class of it says which figure it rests on
    k = R.profiled_kernels(run)
    dev, _, _ = R.for_run(run, k)
    c = C.classify(k, dev.ridge("bf16"), C.Rules(), N.in_loop_l2(f.reset_index())).set_index("kernel_id")
    assert c.loc["d005", "counters"].startswith("cold-cache figure") and c.loc["d000", "counters"] == "cold cache, as in the loop"


def test_cuda_core_router_is_not_explained_by_tensor_cores(graphs):
    """The graph run's d008 is cuBLAS `dot_kernel<float>` for the router (1x1280 · 1280x64): 0 tensor FLOPs. Its
    556,032 counted FLOPs are 81,920 FMAs (2·M·N·K = 163,840 exactly) plus 392,192 FADDs; it once read "run on
    tensor cores: the MMA tile pads ... 3.4x"."""
    f = _fid(graphs)
    d8 = f.loc["d008"]
    assert d8.cuda_core and d8.tensor_flops == 0 and d8.op_shapes == "1x1280;1280x64"
    assert d8.expected_flops == 2 * 1280 * 64 and d8.flops_ratio == pytest.approx(556032 / 163840)
    assert "tensor core" not in d8.flops_verdict and "MMA" not in d8.flops_verdict
    assert "163,840 FLOPs of FMA" in d8.flops_verdict and "392,192" in d8.flops_verdict
    prose = NN.fidelity_prose(f.reset_index())
    line = next(x for x in prose.splitlines() if x.startswith("- d008"))
    assert "MMA tile" not in line and "CUDA cores" in line
    # the tensor-core explanation goes only to kernels with tensor-pipe work, and chapter 01 follows
    assert not f[f.flops_verdict.str.contains("MMA tile", na=False)].cuda_core.any()
    assert "3.39" not in TN.matvec_padding_prose(graphs)
    # and the router's bytes, in fp32, agree: 1280·64·4 B of weights
    bf = N.byte_fidelity(graphs.ncu_kernels(), graphs.timeline, graphs.manifest).set_index("kernel_id")
    assert bf.loc["d008", "implied_read_bytes"] == 4 * (1280 + 1280 * 64) and bf.loc["d008", "verdict"] == "agrees"


def test_every_flop_and_byte_discrepancy_has_a_verdict(eager):
    """d003, a BF16 multiply of 1,280 elements (1x10x1x128 · 1x1x1x128): ncu counts 6,400 FLOPs against 1,280
    useful, and 29.2 kB of DRAM against 5.4 kB of operands; both once went unchecked."""
    f = _fid(eager)
    d3 = f.loc["d003"]
    assert (d3.expected_flops, d3.counted_flops) == (1280, 6400) and d3.flops_ratio == 5.0
    assert "6,400 FLOPs counted against 1,280 useful" in d3.flops_verdict
    assert "1,280 from ADD/MUL" in d3.flops_verdict and "5,120 from FMA" in d3.flops_verdict
    off = f.flops_ratio.notna() & ((f.flops_ratio - 1).abs() > 0.05)
    assert off.sum() >= 10 and f.loc[off, "flops_verdict"].notna().all()
    bf = N.byte_fidelity(eager.ncu_kernels(), eager.timeline, eager.manifest).set_index("kernel_id")
    b3 = bf.loc["d003"]
    assert b3.implied_read_bytes + b3.implied_write_bytes == 2 * (1280 + 128) + 2 * 1280 == 5376
    ncu_bytes = eager.ncu_kernels().set_index("kernel_id").loc["d003", "dram_bytes"]
    assert b3.dram_bytes == ncu_bytes == 29184 and b3.dram_bytes > 5 * 5376 and b3.verdict.startswith("a small launch")
    assert bf.verdict.str.len().gt(0).all() and len(bf) > 9  # pointwise launches are checked too
    text = NN.byte_fidelity_prose(bf.reset_index(), eager.manifest)
    assert "d002–d003" in text or "d003" in text


def test_tile_padding_explains_the_nvjet_ratios(eager):
    """nvjet's tile (and cluster of tiles) pads a GEMV's vector to 8 rows and N up to the tile: 1x1280·1280x129280
    on 384x8 tiles in 2x1 clusters counts 8 × 129,792/129,280 = 8.032× the useful work — the shapes match, not
    "shapes from the aten op do not match this launch"."""
    f = _fid(eager)
    d4 = f.loc["d004"]
    assert d4.flops_ratio == pytest.approx(8 * 129792 / 129280)
    assert "1×129280 → 8×129792" in d4.flops_verdict and "do not match" not in d4.flops_verdict
    assert tile_padding("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "6x1792x1280;6x1280x1")[0] == 8.0
    assert f.loc["d005", "flops_ratio"] == pytest.approx(8 * 2048 / 1792) and "2048×8" in f.loc["d005", "flops_verdict"]
    assert elementwise_flops("aten::mul", "1x10x1x128;1x1x1x128")[0] == 1280


def test_tc_column_is_the_tensor_pipe(eager):
    """report.md's TC% was the SM throughput of the kernels that issue tensor FLOPs; it is now ncu's tensor pipe
    activity (`sm__pipe_tensor_cycles_active`), time-weighted over the stage's profiled kernels, and the health
    table's column says so."""
    from kernelbook.narrate import classify as NC

    k = R.profiled_kernels(eager)
    d = k[k.phase == "decode"]
    m = eager.ncu_metrics()
    row = m[(m.result_id == int(d.set_index("kernel_id").loc["d000", "result_id"])) & (m.metric == R.TENSOR_PIPE)]
    assert d.set_index("kernel_id").loc["d000", "tensor_pipe_pct"] == pytest.approx(float(row.value.iloc[0]))
    tp = (d.tensor_pipe_pct.fillna(0) * d.share).sum() / d.share.sum()
    report = NC.report_for_run(REPO / BUNDLED)
    decode = next(line for line in report.splitlines() if line.startswith("| decode"))
    assert decode.split("|")[3].strip() == f"{tp:.0f}"
    old = (d.sm_pct.where(d.flops_tensor > 0) * d.share).sum() / d.share.where(d.flops_tensor > 0).sum()
    assert f"{tp:.0f}" != f"{old:.0f}"  # the SM-throughput reading it replaces
    assert "tensor pipe active" in report and "TC%: SM throughput" not in report
    h = C.health(C.classify(k, 300.0))
    assert "tensor pipe active > 60 %" in h and "tensor util > 60 %" not in h


def test_a_graph_run_is_never_told_to_use_cuda_graphs(graphs):
    """On the graph run the GPU-idle share is not launch overhead: the gaps inside a graph replay are 0.17 ms per
    step (median 0.45 µs) and the rest of the step is the host's generate loop between replays."""
    import numpy as np

    gaps = C.graph_replay_gaps(graphs.timeline, "decode")
    # the same figures by another path: per replay (step, launch), the gaps between its kernels in start order
    # (kernel nodes and the graph's memcpy/memset nodes alike)
    d = graphs.timeline[(graphs.timeline.phase == "decode") & graphs.timeline.kind.isin(["kernel", "memcpy", "memset"])]
    inside = np.concatenate([(x.start_ns.values[1:] - x.end_ns.values[:-1])
                             for _, x in d[d.graph.astype(bool)].sort_values("start_ns").groupby(["step", "launch_ns"])])
    assert gaps[0] == pytest.approx(inside.clip(min=0).sum() / 1e6 / d.step.nunique()) == pytest.approx(0.165, abs=1e-3)
    assert gaps[1] == pytest.approx(np.median(inside) / 1e3) == pytest.approx(0.448)
    k = R.profiled_kernels(graphs)
    dev, _, roofs = R.for_run(graphs, k)
    c = C.classify(k, dev.ridge("bf16"))
    summary = T.phase_summary(graphs.timeline, graphs.phases)
    opps = C.all_opportunities(graphs, summary, c, roofs)
    words = " ".join(opps["decode"].opportunity) + " ".join(opps["decode"].trigger)
    assert "CUDA graph" not in " ".join(opps["decode"].opportunity)
    assert "between graph replays" in words and f"{gaps[0]:.3f} ms" in words
    assert "CUDA graphs" in opps["prefill"].opportunity.iloc[0] or "CUDA graphs" in " ".join(opps["prefill"].opportunity)
    # the eager run keeps its launch-overhead row
    ke = R.profiled_kernels(load_run(REPO / BUNDLED))
    assert C.graph_replay_gaps(load_run(REPO / BUNDLED).timeline, "decode") is None and len(ke)


def test_thresholds_say_where_they_come_from():
    """Health thresholds cited "the profiling skill's table" and "the course notes' rule", neither of which a reader
    can find; they now say they are the project's rules of thumb, with their reasons."""
    srcs = [REPO / "notebooks" / n for n in ("03_histograms.py", "05_classification.py")]
    srcs += [REPO / "lib/kernelbook/analyze" / n for n in ("classify.py", "histograms.py")]
    srcs += [REPO / "lib/kernelbook/narrate" / "classify.py"]
    for p in srcs:
        t = p.read_text(encoding="utf-8")
        assert not re.search(r"profiling skill|course notes|skill seed|skill's", t), p.name
    from kernelbook.narrate import classify as NC

    assert "rules of thumb" in NC.THRESHOLD_SOURCES and "SOLBottleneck" in NC.THRESHOLD_SOURCES
