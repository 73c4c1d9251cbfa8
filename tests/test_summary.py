"""Chapter 07's analysis on the committed H100 runs: the baseline (bundled) and its three variants (static
cache + CUDA graphs, batch 8, eager attention), all captured on the H100 by the capture code."""
import pandas as pd
import pytest

from conftest import REPO, RUN
from kernelbook.analyze import compare as D
from kernelbook.analyze import summary as S
from kernelbook.narrate import summary as NS
from kernelbook.analyze import whatif as W
from kernelbook.capture.models import DEEPSEEK_OCR2_ARCH
from kernelbook.load.run import load_run

VARIANT = REPO / "data" / "runs" / "h100-variant-static-graphs"
BATCH8 = REPO / "data" / "runs" / "h100-variant-batch8"
EAGER = REPO / "data" / "runs" / "h100-variant-eager-attention"


@pytest.fixture(scope="module")
def runs():
    base, var = load_run(RUN), load_run(VARIANT)
    tb, gpu, roofs, _ = W.for_run(base)
    tv = W.for_run(var)[0]
    return base, var, tb, tv, gpu, roofs


def test_the_variant_run_records_what_it_changed(runs):
    base, var, *_ = runs
    assert var.manifest["params"]["variant"] == "static cache + CUDA graphs"
    assert S.changed_params(base.manifest["params"], var.manifest["params"]) == {"cache_implementation": "static"}
    assert var.manifest["timeline_info"]["generate_kwargs"]["cache_implementation"] == "static"


def test_decode_weight_bytes_are_what_the_architecture_implies(runs):
    """The weights one decode step reads, from the run's aten shapes, against the published config:
    attention q/k/v/o, the dense MLP of layer 0, 6 routed + 2 shared experts and the router in each of
    the 11 sparse layers, and the lm_head, in bf16."""
    _, _, tb, _, _, roofs = runs
    t = DEEPSEEK_OCR2_ARCH["text_config"]
    h, b = t["hidden_size"], 2
    sparse = t["mlp_layer_types"].count("sparse")
    expected = b * (t["num_hidden_layers"] * 4 * h * h + (t["num_hidden_layers"] - sparse) * 3 * h * t["intermediate_size"]
                    + sparse * ((t["num_experts_per_tok"] + t["n_shared_experts"]) * 3 * h * t["moe_intermediate_size"]
                                + h * t["n_routed_experts"])
                    + h * t["vocab_size"])
    lim = S.decode_limit(tb, load_run(RUN), roofs)
    assert lim.weight_bytes == pytest.approx(expected, rel=0.01)
    # K and V of every layer over the context (image + prompt tokens, then the tokens decoded so far)
    ctx = load_run(RUN).manifest["timeline_info"]["inputs"]["prompt_tokens"] + 64 / 2
    kv = 2 * t["num_hidden_layers"] * t["num_key_value_heads"] * (h // t["num_attention_heads"]) * b * ctx
    assert lim.kv_bytes == pytest.approx(kv, rel=0.03)
    assert lim.dram_source == "measured device-to-device copy"
    assert lim.busy_ms > lim.limit_ms and lim.wall_ms > lim.busy_ms  # no step beats its bytes


def test_predicted_against_measured_for_the_graph_variant(runs):
    base, var, tb, tv, gpu, _ = runs
    rows = S.variant_rows(tb, gpu, base, [(var, tv)]).set_index("phase")
    d = rows.loc["decode"]
    ref = W.predict(tb, gpu, host_scale=1.0).set_index("phase").loc["decode", "wall_ms_per_step"]
    graph = W.predict(tb, gpu.with_(launch_overhead_us=2.0, fuse_elementwise=True), host_scale=1.0)
    if d.basis.startswith("plain runs"):  # the model then predicts a plain run (no host scale for the profiler)
        graph = W.predict(tb, gpu.with_(launch_overhead_us=2.0, fuse_elementwise=True))
        ref = W.predict(tb, gpu).set_index("phase").loc["decode", "wall_ms_per_step"]
    assert d.predicted_ms == pytest.approx(graph.set_index("phase").loc["decode", "wall_ms_per_step"])
    assert d.predicted_gain == pytest.approx(ref / d.predicted_ms)
    # both captures timed their plain generates per phase, the variant minutes after the bundled run itself in one
    # lease (its manifest's host_baseline names the bundled run): plain runs of one host, and the basis says so
    twin = S.host_baseline(var, base)
    assert var.manifest["host_baseline"] == base.run_id == "h100-deepseek-ocr-2"
    assert twin is base and S.same_host(var, base) and d.basis == "plain runs, same host: h100-deepseek-ocr-2"
    sb, sv = (r.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"] for r in (twin, var))
    assert d.measured_gain == pytest.approx(sb / sv)
    assert d.gain_error_pct == pytest.approx(100 * (d.predicted_gain - d.measured_gain) / d.measured_gain)
    # one host: no host control (the static cache's own host work moved its profiled prefill and vision-encode wall
    # time 1.57x and 1.50x with the same GPU work: the variant's doing, not the host's)
    assert S.host_control(base, var).empty
    assert rows.loc["prefill", "predicted_gain"] == 1.0  # the prefill step stays eager in the variant


def test_phases_the_variant_does_not_touch_reveal_a_host_difference(runs):
    """Set against a baseline of another lease (its twin forgotten), the graph variant's phases with the same GPU
    work but a wall time moved by more than 10 % are named; with its twin there are none (one host), also where the
    twin is the bundled run itself.

    The re-capture put the bundled run and the graph variant on one lease, so the bundled run is no longer a
    baseline of another host: with the twin forgotten the control finds, from the walls alone, that the phases the
    variant does not touch kept their time (vision encode 1.02×, prefill 1.04×, GPU busy within 0.5 %) and names
    none. The other lease is h100-deepseek-ocr-2-host-s8 (the bundled configuration, captured 2026-11-23): against
    it the variant's prefill took 1.16× the wall (27.94 → 32.30 ms) for the same GPU work (1.003×) and is named;
    vision encode (0.99×) is not, nor decode (its GPU work changed)."""
    base, _, *_ = runs
    var = load_run(VARIANT)
    assert var.manifest["host_baseline"] == base.run_id and not S.host_control(base, var).shape[0]
    var.manifest.pop("host_baseline")
    assert not S.same_host(var, base) and S.host_baseline(var, base) is base
    # one host, unchecked: the untouched phases' walls agree within 10 % with the same GPU work, so none is named
    from kernelbook.analyze.compare import phases

    same = phases(base, var).set_index("phase").loc[["vision_encode", "prefill"]]
    assert ((same.wall_ratio - 1).abs() <= S.HOST_DIFFERS).all()
    assert ((same.gpu_busy_ratio - 1).abs() <= S.SAME_BUSY).all()
    assert not S.host_control(base, var).shape[0]
    # another lease: the phases whose GPU work did not change but whose wall moved by more than 10 % are named
    other = load_run(REPO / "data" / "runs" / "h100-deepseek-ocr-2-host-s8")
    assert other.manifest["created"][:10] != base.manifest["created"][:10]
    assert not S.same_host(var, other) and S.host_baseline(var, other) is other
    c = S.host_control(other, var).set_index("phase")
    assert len(c) and "decode" not in c.index and ((c.wall_ratio - 1).abs() > S.HOST_DIFFERS).all()
    assert (c.gpu_busy_ratio - 1).abs().max() <= S.SAME_BUSY


def test_levers_name_what_the_model_cannot_price():
    assert S.lever({"attn_implementation": "eager"}).design is None
    assert "implementation" in S.lever({"attn_implementation": "eager"}).why_not
    b8 = S.lever({"batch_size": 8})
    assert b8.batch == 8 and b8.design == {}
    assert S.lever({"dtype": "float16"}).why_not.startswith("the what-if model has no lever for dtype")


def test_diff_matches_kernels_launched_from_a_compiled_graph(runs):
    """Under CUDA graphs the profiler names the graph call, not the aten op; the capture gives a graph's
    library kernels the aten op of their eager twin in the shapes pass (load.trace.join_shapes), so the
    variant's decode GEMMs match the baseline's mm and bmm op by op, and Inductor's fused kernels, which
    have no aten op, fall back to the compiled graph's family match."""
    base, var, *_ = runs
    k = D.kernels(base, var, "decode").set_index(["op", "family"])
    tl = base.timeline
    steps = base.phases[base.phases.phase == "decode"].step.nunique()
    for op in ("aten::mm", "aten::bmm"):
        row = k.loc[(op, "nvjet GEMM (mixed)")]
        dec = tl[(tl.phase == "decode") & (tl.kind == "kernel") & (tl.op == op)]
        fam = dec.friendly_name.map(D.family) == "nvjet GEMM (mixed)"
        assert row.us_per_step_a == pytest.approx(dec[fam].duration_ns.sum() / steps / 1e3)
        assert row.us_per_step_b > 0 and not row.only_in  # matched on both sides
    assert "compiled graph" in k.index.get_level_values("op")
    assert not k.index.get_level_values("op").str.contains("CompiledFxGraph").any()


def test_comparison_section_pairs_the_run_with_its_first_variant(runs):
    base, var, *_ = runs
    pair = S.comparison_pair(None, base, [(var, None)])
    assert pair == (base, var)
    tables = S.comparison(pair)
    assert set(tables["phases"].phase) >= {"vision_encode", "prefill", "decode"}
    assert all(isinstance(t, pd.DataFrame) for t in tables.values())
    assert S.comparison(None)["phases"].empty and "No `baseline_run`" in NS.comparison_note(None)


def test_plain_phase_timings_become_the_basis_when_both_runs_have_them(runs, tmp_path):
    """Captures that timed their plain calls per phase (`plain_phases`, new in the capture) are compared
    on those, with the model predicting a plain run; the committed runs predate it (profiled basis)."""
    import json
    import shutil

    base, var, tb, tv, gpu, _ = runs
    # both committed runs have them (the variant against the baseline captured beside it: the bundled run itself)
    assert set(S.variant_rows(tb, gpu, base, [(var, tv)]).basis) == {"plain runs, same host: h100-deepseek-ocr-2"}
    copies = []
    for run, ms in ((RUN, 14.0), (VARIANT, 1.6)):
        dst = tmp_path / run.name
        shutil.copytree(run, dst, ignore=shutil.ignore_patterns("raw"))
        m = json.loads((dst / "manifest.json").read_text())
        m["timeline_info"]["plain_phases"] = {"decode": {"steps": 63, "ms_per_step": ms}}
        (dst / "manifest.json").write_text(json.dumps(m))
        copies.append(load_run(dst))
    rows = S.variant_rows(tb, gpu, copies[0], [(copies[1], tv)]).set_index("phase")
    # the copied variant still names the copied bundled run as its host baseline: one host on either basis
    assert copies[1].info.host_baseline == copies[0].run_id
    assert rows.loc["decode", "basis"] == "plain runs, same host: h100-deepseek-ocr-2"
    assert rows.loc["prefill", "basis"] == "profiled pass, same host: h100-deepseek-ocr-2"
    assert rows.loc["decode", "measured_gain"] == pytest.approx(14.0 / 1.6)
    copies[1].manifest.pop("host_baseline")  # a variant of another lease: the basis names no host
    other = S.variant_rows(tb, gpu, copies[0], [(copies[1], tv)]).set_index("phase")
    assert other.loc["decode", "basis"] == "plain runs" and other.loc["prefill", "basis"] == "profiled pass"
    plain = W.predict(tb, gpu.with_(launch_overhead_us=2.0, fuse_elementwise=True)).set_index("phase")
    assert rows.loc["decode", "predicted_ms"] == pytest.approx(plain.loc["decode", "wall_ms_per_step"])


@pytest.mark.parametrize("path, label, changed", [
    (BATCH8, "batch 8", {"batch_size": 8}),
    (EAGER, "eager attention", {"attn_implementation": "eager"}),
])
def test_each_variant_changed_one_capture_parameter(runs, path, label, changed):
    base = runs[0]
    var = load_run(path)
    assert var.manifest["params"]["variant"] == label and var.manifest["status"] == "complete"
    assert S.changed_params(base.manifest["params"], var.manifest["params"]) == changed
    ncu = var.manifest["ncu"]
    assert all(p["profiled"] == p["selected"] for p in ncu["phases"].values())  # counters for every selection


def test_batch8_predicted_against_measured(runs):
    """Batch 8 runs 8 prompts per call: the model scales the work by 8 on the baseline's kernels and keeps the
    launches; per token (decode) it predicts 8 tokens a step. The two runs were captured in one call on one
    machine (bench/gpu_book_variants.sh), so both timed plain calls per phase and the gains are of plain runs;
    the chapter states each error against the 25 % target, whichever side it falls."""
    base, _, tb, _, gpu, _ = runs
    var = load_run(BATCH8)
    rows = S.variant_rows(tb, gpu, base, [(var, W.for_run(var)[0])]).set_index("phase")
    # measured against the baseline captured beside it (same lease, same host), not the re-captured bundled run
    twin = S.host_baseline(var, base)
    assert twin.run_id == "h100-deepseek-ocr-2-host-s8" and twin.run_id != base.run_id
    assert (rows.basis == "plain runs, same host: h100-deepseek-ocr-2-host-s8").all()
    batched = W.predict(tb, gpu, batch=8, host_scale=None).set_index("phase")  # host gaps as in a plain run
    assert rows.loc["decode", "predicted_ms"] == pytest.approx(batched.loc["decode", "wall_ms_per_step"] / 8)
    plain = {ph: (S.plain_ms_per_step(twin, ph), S.plain_ms_per_step(var, ph)) for ph in ("decode", "prefill")}
    assert rows.loc["decode", "measured_gain"] == pytest.approx(8 * plain["decode"][0] / plain["decode"][1])
    assert rows.loc["prefill", "measured_gain"] == pytest.approx(plain["prefill"][0] / plain["prefill"][1])
    assert abs(rows.loc["prefill", "gain_error_pct"]) <= S.TARGET_PCT, rows.loc["prefill"].to_dict()
    prose = NS.variants_prose(rows.reset_index(), {})
    for x in rows.itertuples():
        side = "within" if abs(x.gain_error_pct) <= S.TARGET_PCT else "outside"
        assert f"({x.gain_error_pct:+.0f} %, {side} the 25 % target)" in prose, prose


def test_eager_attention_is_measured_and_says_why_it_is_not_predicted(runs):
    base, _, tb, _, gpu, _ = runs
    var = load_run(EAGER)
    rows = S.variant_rows(tb, gpu, base, [(var, W.for_run(var)[0])]).set_index("phase")
    assert rows.predicted_ms.isna().all() and (rows.why_no_prediction.str.len() > 0).all()
    # eager attention: more launches and an unfused softmax; measured against its own host's baseline (the bundled
    # run re-captured in a later lease ran on a slower host: set against it, eager attention would "gain" 1.13×)
    assert rows.loc["decode", "measured_gain"] < 1
    twin = S.host_baseline(var, base)
    assert rows.loc["decode", "measured_gain"] == pytest.approx(
        S.plain_ms_per_step(twin, "decode") / S.plain_ms_per_step(var, "decode"))
    # the eager path's own softmax: one more launch per layer and step than the baseline's (MoE router) softmax
    k = D.kernels(base, var, "decode").set_index("op").loc["aten::_softmax"]
    layers = DEEPSEEK_OCR2_ARCH["text_config"]["num_hidden_layers"]
    assert k.launches_per_step_b - k.launches_per_step_a == layers


def test_headline_decode_step_is_the_plain_step_whatever_is_passed(runs):
    """The headline's decode step is the plain (unprofiled) one, 12.66 ms on the bundled run, not the
    21.58 ms the step takes under the profiler: with or without the deployed table beside it."""
    base, _, tb, _, _, roofs = runs
    lim = S.decode_limit(tb, base, roofs)
    plain = base.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"]
    assert plain == pytest.approx(12.663, abs=1e-3)
    assert lim.plain_ms == plain and lim.step_ms == plain and lim.wall_ms == pytest.approx(21.576, abs=1e-3)
    none = pd.DataFrame(columns=S.VARIANT_COLUMNS)
    for dep in (None, S.deployed(base, lim, [])):
        line = NS.headline(S.phase_table(base), lim, none, dep)
        assert f"a plain eager decode step takes {plain:.1f} ms, {plain / lim.limit_ms:.0f}×" in line, line
        assert f"{lim.wall_ms:.1f} ms" not in line
    # a run without plain step timings says its step is the profiled one
    old = S.DecodeLimit(**{**lim.__dict__, "plain_ms": None})
    assert "under the profiler (the run has no plain step timing)" in NS.headline(S.phase_table(base), old, none)
    t = NS.limit_table(lim).set_index("quantity")
    assert t.loc["wall per step (measured, plain run)", "value"] == plain


def test_the_limit_prose_names_the_bandwidth_it_divides_by(runs):
    """Chapter 07 priced the step's bytes "at the measured 3,008 GB/s" beside chapter 04's 3,343 GB/s DRAM roof: the
    3,008 is the device-to-device copy the capture measured (as chapter 00 and the limit table name it), and a run
    without measured peaks divides by the spec sheet's figure, which the prose called measured too."""
    from kernelbook.analyze.modules import dram_bandwidth

    base, _, tb, _, _, roofs = runs
    lim = S.decode_limit(tb, base, roofs)
    assert lim.dram_bytes_per_s == base.info.measured_peaks.d2d_copy_gbps * 1e9 == dram_bandwidth(base)[0]
    assert "at 3,008 GB/s (measured device-to-device copy) that takes 0.41 ms" in NS.decode_limit_prose(lim)
    spec = S.DecodeLimit(**{**lim.__dict__, "dram_bytes_per_s": 3350e9, "dram_source": "spec sheet"})
    line = NS.decode_limit_prose(spec)
    assert "at 3,350 GB/s (spec sheet)" in line and "measured" not in line.split("that takes")[0]


def test_a_sampled_generation_says_how_many_decode_steps_its_phase_share_rests_on():
    """The 2048-token run's profiled pass recorded windows of decode steps (72 of 2,047): its "decode holds N %"
    says so; a run that recorded every step does not."""
    from kernelbook.load.run import load_run

    long = load_run(REPO / "data" / "runs" / "h100-long-generation-2048")
    sampling = long.info.timeline_info.sampling
    ph = S.phase_table(long)
    line = NS.headline(ph, None, pd.DataFrame(columns=["phase"]))
    assert (f"(the profiler recorded {sampling['profiled_decode_steps']} of its "
            f"{sampling['decode_steps']:,} decode steps)") in line
    bundled = S.phase_table(load_run(REPO / "data" / "runs" / "h100-deepseek-ocr-2"))
    assert "recorded" not in NS.headline(bundled, None, pd.DataFrame(columns=["phase"]))


def test_a_graph_run_alone_is_never_called_eager(tmp_path):
    """Chapters 06 and 07 on a CUDA-graph run with no eager twin beside it (a serving-study point, batch 32): the
    headline names the step as run, as graphs, and neither chapter calls its figures eager's (issue 41 point 3,
    issue 42)."""
    import subprocess
    import sys

    run = REPO / "data" / "studies" / "h100-serving" / "runs" / "batch_size-32"
    out = tmp_path / "book"
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--run", str(run), "--chapters",
                           "06_npu,07_summary", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    import re

    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "07_summary.html").read_text()))
    step = load_run(run).info.plain_ms_per_step()["decode"]  # 18.06 ms on the H100 (session 23's study)
    assert f"a plain decode step as CUDA graphs takes {step:.2f} ms" in page
    assert "eager decode step" not in page and "are eager HF generate's" not in page
    assert "This run decoded as CUDA graphs, as serving stacks run decode" in page
    npu = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "06_npu.html").read_text()))
    assert "batch_size-32 itself decoded as CUDA graphs" in npu and "the chapter shows the eager run only" not in npu
    # the fitted latency and slowdown per kernel class is shown, its caption above its table (it was its cell's
    # first expression, so the notebook never displayed it)
    assert re.search(r"Latency L and slowdown b per kernel class, fitted on the run</p>\s*<div", (out / "06_npu.html")
                     .read_text().replace("&nbsp;", " "))


def _without_routing(tmp_path, b: int):
    """A copy of the study's batch-`b` point without its routing record (a run captured before the routing pass)."""
    import json
    import shutil

    dst = tmp_path / f"batch_size-{b}"
    shutil.copytree(REPO / "data" / "studies" / "h100-serving" / "runs" / f"batch_size-{b}", dst,
                    ignore=shutil.ignore_patterns("raw", "*.ncu-rep"))
    m = json.loads((dst / "manifest.json").read_text())
    m["timeline_info"]["moe_routing"] = None
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def test_the_limit_counts_each_expert_once_at_any_batch(tmp_path):
    """Issue 42 point 3: the physical limit of a batched MoE step counts the bytes the batch must move once. Without a
    routing record, at batch 32 the batch's 192 expert selections exceed the router's 64 experts: each expert counts
    at most once (5,538 MB of weights, less than the model holds), not a copy per selection (15,227 MB, more than the
    model holds). At batch 8 (48 selections) and batch 1 nothing changes."""
    got = {}
    for b in (1, 8, 32):
        r = load_run(_without_routing(tmp_path, b))
        tr, _, roofs, _ = W.for_run(r)
        got[b] = (S.decode_limit(tr, r, roofs), W.moe_router(tr), r.info.timeline_info.n_params)
    lim32, router32, n_params = got[32]
    assert router32 == (32, 64)
    assert lim32.weight_bytes < 2 * n_params < lim32.experts_once[2]  # bf16: 2 bytes a parameter
    assert lim32.weight_bytes == pytest.approx(5538e6, rel=1e-3)
    assert lim32.experts_once[2] == pytest.approx(15227e6, rel=1e-3)
    assert got[8][0].experts_once is None and got[1][0].experts_once is None
    assert got[1][0].weight_bytes < got[8][0].weight_bytes < lim32.weight_bytes
    assert "at most once" in NS.limit_prose(lim32) and "at most once" not in NS.limit_prose(got[8][0])


def test_the_limit_counts_the_experts_the_routing_pass_recorded(tmp_path):
    """Issue 42 point 3: where the capture's routing pass recorded the experts the batch's routers picked, the limit
    counts those, each once. The record is the one the routing pass wrote on the H100 for this study point (session 23;
    session 22's re-capture recorded the same, 13.15): 13.16 experts a layer on average (9 to 20) of the bound's 48
    selections among 64 experts, so the expert weights shrink by 13.16/48; the prose says it was recorded. A router
    shape the record lacks falls back to the bound."""
    import json

    dst = _without_routing(tmp_path, 8)
    src = REPO / "data" / "studies" / "h100-serving" / "runs" / "batch_size-8"
    m = json.loads((src / "manifest.json").read_text())
    [router] = m["timeline_info"]["moe_routing"]["routers"]  # capture.routing's record, H100
    assert (router["tokens"], router["experts"], router["k"], router["bound"]) == (8, 64, 6, 48)
    assert (router["distinct_min"], router["distinct_max"]) == (9, 20)
    before, after = load_run(dst), load_run(src)
    tr, _, roofs, _ = W.for_run(before)
    bound, recorded = S.decode_limit(tr, before, roofs), S.decode_limit(tr, after, roofs)
    assert bound.experts_once is None  # 48 selections < 64 experts: the bound counts each selection
    per_choice = W.active_weight_bytes(tr)
    sel = tr.work[(tr.work.phase == "decode") & tr.work.per_selection]
    experts = float((sel.weight_bytes * sel.launches).sum()) / tr.steps["decode"]
    d = router["distinct_mean"]
    assert recorded.weight_bytes == pytest.approx(per_choice - experts * (1 - d / 48))
    assert recorded.experts_once == (8, 64, pytest.approx(per_choice), d)
    assert recorded.limit_ms < bound.limit_ms
    assert "13.2 of the MoE's 64 experts per layer on average" in NS.limit_prose(recorded)
    m["timeline_info"]["moe_routing"]["routers"][0]["experts"] = 32  # another router's record
    (dst / "manifest.json").write_text(json.dumps(m))
    assert S.decode_limit(tr, load_run(dst), roofs).weight_bytes == pytest.approx(bound.weight_bytes)


def test_a_run_that_changes_two_levers_is_not_set_against_the_run(runs, tmp_path):
    """Issue 42: a run is compared only with runs of the same workload and batch unless the comparison is the point
    and says so. A variant changes one lever (its label says which); a graph run at batch 8 beside the eager batch-1
    run changes two, so which change did what cannot be told: it is left out, with the reason."""
    import json
    import shutil

    base = runs[0]
    dst = tmp_path / "graphs-batch8"
    shutil.copytree(VARIANT, dst, ignore=shutil.ignore_patterns("raw", "*.ncu-rep"))
    m = json.loads((dst / "manifest.json").read_text())
    m["params"]["batch_size"] = 8  # what a batch-8 capture of the graph variant records
    (dst / "manifest.json").write_text(json.dumps(m))
    two = load_run(dst)
    assert S.lever_groups(S.changed_params(base.manifest["params"], two.manifest["params"])) == [
        "CUDA graphs", "batch_size"]
    kept, out = S.variants_of(base, [load_run(VARIANT), load_run(BATCH8), two])
    assert [r.run_id for r in kept] == ["h100-variant-static-graphs", "h100-variant-batch8"]
    assert len(out) == 1 and "changes more than one thing (CUDA graphs, batch_size)" in str(out[0]), out


def test_the_deployed_table_sets_graph_runs_of_the_runs_batch_only():
    """Chapter 07's eager-against-deployed table divides each graph run's step by this run's limit, a per-step limit
    of its batch: a graph run of another batch (the serving study's batch 8 beside its batch 1) is not in it."""
    study = REPO / "data" / "studies" / "h100-serving" / "runs"
    b1, b8 = load_run(study / "batch_size-1"), load_run(study / "batch_size-8")
    kept, out = S.variants_of(b1, [b8])
    assert [r.run_id for r in kept] == [b8.run_id] and not out  # the batch lever: one change
    tr, _, roofs, _ = W.for_run(b1)
    limit = S.decode_limit(tr, b1, roofs)
    table = S.deployed(b1, limit, [(b8, W.for_run(b8)[0])])
    assert table.attrs["run_ids"] == [b1.run_id]
