"""Chapter 06's what-if levers (issue 41): a design's own kernel floor and efficiency replace the fitted ones and
the design table says so; SRAM keeps the hottest weights in part (a continuous, monotone curve, no cliff);
fp8/int4 halve/quarter the weight bytes; the host time between CUDA-graph replays is its own per-step term, and a
graph run is never told to use CUDA graphs."""
import numpy as np
import pytest

from conftest import REPO
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.load.run import load_run
from kernelbook.narrate import whatif as WN

RUNS = REPO / "data" / "runs"


@pytest.fixture(scope="module")
def graph():
    run = load_run(RUNS / "h100-variant-static-graphs")
    tr, gpu, _, k = W.for_run(run)
    return run, tr, gpu, k


@pytest.fixture(scope="module")
def eager():
    run = load_run(RUNS / "h100-deepseek-ocr-2")
    tr, gpu, _, k = W.for_run(run)
    return run, tr, gpu, k


def test_sram_curve_is_continuous_and_monotone(graph):
    _, tr, gpu, _ = graph
    weights_mib = W.active_weight_bytes(tr) / 2**20
    mib = np.arange(0, 1.3 * weights_mib, 16.0)
    c = W.sram_curve(tr, gpu, mib)
    ms = c.decode_ms.to_numpy()
    # non-increasing in capacity, and no step between neighbours 16 MiB apart above 2 % of the time
    assert (np.diff(ms) <= 1e-12).all()
    assert (np.abs(np.diff(ms)) / ms[:-1]).max() < 0.02
    # it moves at all: the whole of a step's weights on chip saves more than 10 % (the old rule's cliff, spread out)
    assert ms[-1] < 0.9 * ms[0]
    # resident bytes grow with capacity up to the step's weights, never beyond
    assert c.resident_mib.iloc[5] == pytest.approx(mib[5])
    assert c.resident_mib.max() == pytest.approx(weights_mib)


def test_sram_decode_design_is_no_longer_slower_for_lack_of_residency(eager):
    _, tr, gpu, _ = eager
    d = W.load_designs()["sram-decode"]
    # 1 GiB keeps 1 GiB of the step's weights (partial residency) where the old rule kept none
    assert W.resident_weight_bytes(tr, d) == pytest.approx(1024 * 2**20)
    no_sram = d.with_(sram_keeps_weights=False)
    assert W.at(tr, d) < W.at(tr, no_sram)


def test_a_design_that_states_floor_and_efficiency_changes_the_prediction(eager):
    _, tr, gpu, _ = eager
    graphy = gpu.with_(launch_overhead_us=2.0, key="graphy")
    own = graphy.with_(kernel_floor_us=0.5, matrix_efficiency=0.9, mem_efficiency={"GEMV": 0.8, "elementwise": 0.7},
                       key="own")
    assert W.at(tr, own) < W.at(tr, graphy)  # below the fitted L (1.0-1.9 µs) and b (>1): faster
    # the stated L and b replace the fitted ones for the classes stated, and only those
    w = tr.work
    one = w[(w.phase == "decode") & (w.category == "GEMV")].head(1)
    ideal = W.ideal_s(one, own)[0]
    assert W.launch_time_s(one, own, tr.calib, gpu)[0][0] == pytest.approx(0.5e-6 + ideal / 0.9)
    other = w[(w.phase == "decode") & (w.category == "reduction/norm") & (w.source != W.SCALED)].head(1)  # memory side, not stated
    cal = tr.calib.set_index("class")
    b_fitted = cal.loc[W.kernel_class(other).iloc[0], "slowdown"]
    assert W.launch_time_s(other, own, tr.calib, gpu)[0][0] == pytest.approx(0.5e-6 + b_fitted * W.ideal_s(other, own)[0])
    t = W.design_table({"graphy": graphy, "own": own}, tr).set_index("design")
    assert t.loc["own", "kernel floor"] == "0.5 µs per kernel (own)"
    assert t.loc["own", "efficiency (matrix)"].endswith("(own)")
    assert t.loc["graphy", "kernel floor"].endswith("(inherited)")
    assert t.loc["graphy", "efficiency (memory)"].endswith("(inherited)")
    assert t.loc["own", "decode ms/token"] < t.loc["graphy", "decode ms/token"]


def test_fp8_halves_and_int4_quarters_the_weight_bytes(graph):
    _, tr, gpu, _ = graph
    bf16 = W.active_weight_bytes(tr)
    assert W.active_weight_bytes(tr, "fp8") == pytest.approx(bf16 / 2)
    assert W.active_weight_bytes(tr, "int4") == pytest.approx(bf16 / 4)
    w = tr.work[tr.work.phase == "decode"]
    for p, f in (("fp8", 0.5), ("int4", 0.25)):
        q = W.at_precision(w, p)
        # the byte columns lose exactly the weight bytes saved; activations (the rest) unchanged
        np.testing.assert_allclose(q.dram_bytes - q.weight_bytes, w.dram_bytes - w.weight_bytes)
        np.testing.assert_allclose(q.weight_bytes, w.weight_bytes * f)
        assert (q.flops_tensor.fillna(0) == w.flops_tensor.fillna(0)).all()
    base, fp8, int4 = (W.at(tr, gpu, weight_precision=p) for p in (None, "fp8", "int4"))
    assert int4 < fp8 < base


def test_host_between_replays_is_measured_on_the_graph_run_only(graph, eager):
    run, g, _, _ = graph
    _, e, _, _ = eager
    h = g.host
    assert h.graph and 0.3 < h.between_replays_ms < 1.0  # 0.61 ms of a 2.24 ms plain step, 1.47 GPU-busy
    assert h.plain_step_ms == pytest.approx(run.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"])
    assert h.between_replays_ms == pytest.approx(h.plain_step_ms - h.busy_ms - h.node_gaps_ms)
    assert h.node_gap_us_median < 1.0  # inside a replay the kernels follow each other in under a µs
    assert not e.host.graph and e.host.between_replays_ms == 0.0
    # the plain decode step of the graph run as the model prices it: host term + node gaps + device time
    p = W.predict(g, g.gpu).set_index("phase").loc["decode"]
    assert p.wall_ms_per_step == pytest.approx(h.between_replays_ms + h.node_gaps_ms + p.device_ms_per_step)
    # a design's dispatch cost per launch does not apply inside a graph; its per-graph floor does, once per step
    assert W.at(g, g.gpu, launch_overhead_us=50.0) == pytest.approx(W.at(g, g.gpu))
    assert W.at(g, g.gpu, graph_floor_us=10.0) == pytest.approx(W.at(g, g.gpu) + 0.010)


def test_a_graph_run_is_never_told_to_use_cuda_graphs(graph, eager):
    run, tr, gpu, k = graph
    rec = WN.recommendations(tr, gpu, k, T.category_shares(run.timeline))
    text = " ".join(rec["what-if"]) + " " + " ".join(rec["evidence (this run)"])
    assert "issued as a graph" not in text and "eager" not in text
    assert "already runs as CUDA graphs" in text and "between replays" in text
    assert "per launch, no profiler" not in WN.headline(W.validation(tr), tr)
    # the eager run keeps its graph-dispatch what-ifs
    run_e, tr_e, gpu_e, k_e = eager
    rec_e = WN.recommendations(tr_e, gpu_e, k_e, T.category_shares(run_e.timeline))
    assert any("issued as a graph" in s for s in rec_e["what-if"])


def test_sensitivity_sweeps_the_levers_and_a_graph_run_draws_one_line(graph):
    _, tr, gpu, _ = graph
    s = W.sensitivity_both(tr, gpu)
    assert set(s.sweep) == set(W.SWEEPS)
    assert s.dispatch.nunique() == 1 and "CUDA graphs" in s.dispatch.iloc[0]
    k = W.knees_both(s).set_index(["sweep", "phase"])
    # less is better for the kernel floor: its knee is the largest floor within 5 % of the best
    assert k.loc[("kernel floor (µs per kernel)", "decode"), "knee_x"] == k.loc[
        ("kernel floor (µs per kernel)", "decode"), "knee_x"]  # not NaN


def test_the_deployed_step_shows_three_figures_each_named_for_what_it_is(graph, eager):
    """Chapter 06 showed the deployed decode step as 2.28 ms (design table), 2.20 ms (lever table) and 2.05 ms
    (replay table) without saying which is which. 2.05 is the plain step measured; 2.20 the deployed run's model as
    fitted; 2.28 that run's launches on this run's GPU as a design, whose kernel floor (1.152 µs, the eager run's 5th
    percentile) scales the deployed run's fitted latencies against its own (1.056 µs). The design table's column is
    headed apart from the lever table's, the lever table's baseline says it is the model, and a note sets the three
    side by side."""
    run, g, _, _ = graph
    _, e, _, _ = eager
    f = W.deployed_step_figures(e, g)
    assert f["measured"] == pytest.approx(run.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"])
    assert f["measured"].key == "h100-variant-static-graphs/decode.plain_step_ms"
    levers = W.lever_table(e, e.gpu, g).set_index("lever")
    assert f["as_fitted"] == levers.loc["as fitted", "decode ms/token as deployed"]
    designs = W.design_table({e.gpu.key: e.gpu}, e, deployed=g).set_index("design")
    assert f["on_this_gpu"] == designs.loc[e.gpu.key, "decode ms/token as deployed"]
    # the same GPU twice, apart in the kernel floor each run measured (and by 0.1 % in the DRAM and L2 peaks ncu read
    # in each capture): with the deployed run's floor the design predicts the deployed run's own fit
    assert (f["floor_us"], f["floor_us_deployed"]) == (e.gpu.floor_us, g.gpu.floor_us) == pytest.approx((1.152, 1.056))
    assert W.predict(g, e.gpu.with_(floor_us=g.gpu.floor_us)).set_index("phase").loc[
        "decode", "per_token_ms"] == pytest.approx(f["as_fitted"], rel=1e-3)
    assert (round(f["measured"], 2), round(f["as_fitted"], 2), round(f["on_this_gpu"], 2)) == (2.05, 2.20, 2.28)
    note = WN.deployed_note(f)
    assert "plain step measured 2.05 ms" in note and "model as fitted predicts 2.20 ms" in note
    assert "h100-sxm (this run's GPU) in the table above, 2.28 ms" in note and "(1.15 ÷ 1.06 µs)" in note
    head = WN.design_headers()["decode ms/token as deployed"]
    assert "on this design" in head
    assert levers.loc["as fitted", "setting"] == "none: the model as fitted, not a measured step"


def test_this_runs_gpu_as_a_design_names_its_dram_peak(eager):
    """The design table's h100-sxm row showed DRAM 3,343 GB/s with the source 'devices.yaml h100-sxm spec' (3,350):
    the figure is ncu's DRAM peak measured on the run, and the source says so."""
    _, tr, gpu, _ = eager
    assert round(gpu.dram_gbps) == 3343
    assert "DRAM bandwidth: ncu DRAM peak × DRAM clock (measured on this GPU)" in gpu.source
