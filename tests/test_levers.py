"""Software levers beside hardware ones (analyze.levers, issue 41 point 5) on the bundled deployed run and its eager
twin: each software figure recomputed here by another path from the run's tables, the levers the deployed run
already has not proposed, the ranking by gain, and the compiled step's gather kernel attributed to its module."""
import re

import pytest

from conftest import REPO
from kernelbook.analyze import levers as L
from kernelbook.analyze import modules as M
from kernelbook.analyze import whatif as W
from kernelbook.load.run import load_run

DEPLOYED = REPO / "data" / "runs" / "h100-variant-static-graphs"
EAGER = REPO / "data" / "runs" / "h100-deepseek-ocr-2"


@pytest.fixture(scope="module")
def runs():
    return load_run(DEPLOYED), load_run(EAGER)


@pytest.fixture(scope="module")
def table(runs):
    dep, eager = runs
    tr = W.for_run(dep)[0]
    return L.levers(dep, eager, tr, W.validation(tr))


def _decode(run):
    t = run.timeline
    return t[(t.phase == "decode") & (t.kind == "kernel")]


def _gathers(run):
    """The compiled step's two expert gathers, as ncu profiled them: (gate_up's, down's), by the bytes they read."""
    ncu = run.ncu_kernels()
    g = ncu[(ncu.phase == "decode") & ncu.name.map(L.is_gather)].sort_values("dram_read_bytes", ascending=False)
    assert len(g) == 2
    return g.iloc[0], g.iloc[1]


def test_moe_in_place_from_the_gather_kernels_and_the_consumers_bytes(runs, table):
    dep, eager = runs
    k = _decode(dep)
    steps = k.step.nunique()
    gathers = k[k.name.str.startswith("triton_poi_fused_clamp_index_view")]
    removed_us = gathers.duration_ns.sum() / 1e3 / steps  # 22 launches per step (2 per MoE layer, 11 MoE layers)
    assert len(gathers) / steps == 22
    up, down = _gathers(dep)
    # the gathers read the routed experts' weights: 6 experts × gate_up 1792×1280 and down 1280×896, bf16
    assert up.dram_read_bytes == pytest.approx(6 * 1792 * 1280 * 2, rel=0.01)
    assert down.dram_read_bytes == pytest.approx(6 * 1280 * 896 * 2, rel=0.01)
    # in place, each expert GEMM reads those bytes from DRAM; now it reads what the loop left there: the graph step
    # cannot be split, so gate_up's GEMM takes the eager twin's range-pass figure for the same kernel after the same
    # gather, and down's GEMM (not profiled in the twin) the part of its copy the gather wrote back to DRAM
    assert "dram_read_bytes_inloop" not in dep.ncu_kernels()
    gk = L.gather_kernels(dep, eager).set_index("name")
    twin = eager.ncu_kernels().set_index("kernel_id")
    ref = gk.loc[up["name"], "consumer_kernel_id"]
    assert ref.startswith(eager.run_id + "/")
    now_up = twin.loc[ref.split("/")[1], "dram_read_bytes_inloop"]
    assert gk.loc[up["name"], "consumer_read_bytes_inloop"] == now_up
    assert gk.loc[down["name"], "consumer_read_bytes_inloop"] != gk.loc[down["name"], "consumer_read_bytes_inloop"]
    extra = 11 * ((up.dram_read_bytes - now_up) + (down.dram_read_bytes - down.dram_write_bytes))
    bw = dep.info.measured_peaks.d2d_copy_gbps * 1e9
    lv = L.moe_in_place(dep, eager)
    assert lv.high_us == pytest.approx(removed_us)
    assert lv.saving_us == pytest.approx(removed_us - extra / bw * 1e6)
    plain = dep.info.plain_ms_per_step()["decode"]
    row = table[table.lever == "MoE experts read in place (no gather copy)"].iloc[0]
    assert row["decode ms/token"] == pytest.approx(plain - (removed_us - extra / bw * 1e6) / 1e3)
    assert row["change %"] == pytest.approx(100 * (row["decode ms/token"] - plain) / plain)
    # the detail is a table cell, escaped by the display: plain text, no Markdown escapes to show as backslashes
    assert "model.language_model.layers.N.mlp.experts" in str(lv.note) and "\\" not in str(lv.note)


def test_kv_cat_is_the_eager_runs_cache_concatenation_and_the_deployed_run_has_none(runs, table):
    dep, eager = runs
    k = _decode(eager)
    cat = k[(k.op == "aten::cat") & k.op_shapes.fillna("").str.contains(r"^\[1, 10, \d+, 128\]x\[1, 10, 1, 128\]")]
    assert len(cat) / k.step.nunique() == 24  # K and V of 12 layers
    assert L.kv_cat_us(eager) == pytest.approx(cat.duration_ns.sum() / 1e3 / k.step.nunique())
    assert not _decode(dep).name.str.contains("CatArrayBatched").any()
    row = table[table.lever == "KV cache without torch.cat (static cache)"].iloc[0]
    assert row.status == "already in the deployed run" and row["change %"] == 0.0


def test_fused_norms_beyond_one_kernel_per_norm(runs, table):
    dep, eager = runs
    k = _decode(dep)
    steps = k.step.nunique()
    norm = k[k.name.str.contains("rsqrt")]
    red = norm[norm.name.str.startswith("triton_red")]
    assert len(red) / steps == 2 * 12 + 1  # one reduction per RMSNorm: two per layer and the final norm
    extra_us = norm[~norm.name.isin(red.name)].duration_ns.sum() / 1e3 / steps
    assert L.norm_excess_us(dep)[0] == pytest.approx(extra_us)
    # eager: every kernel launched in a norm module but the longest of each norm call
    e = M.with_module_types(_decode(eager))
    n = e[e.module_type == "norm"]
    per = n.groupby(["step", "module"]).duration_ns
    assert L.norm_excess_us(eager)[0] == pytest.approx((per.sum() - per.max()).sum() / 1e3 / n.step.nunique())
    plain = dep.info.plain_ms_per_step()["decode"]
    row = table[table.lever == "fused norms (one kernel per RMSNorm)"].iloc[0]
    assert row["decode ms/token"] == pytest.approx(plain - extra_us / 1e3)


def test_already_pulled_levers_are_not_proposed_and_gains_are_ranked(table):
    pulled = table[table.status == "already in the deployed run"]
    assert set(pulled.lever) == {"KV cache without torch.cat (static cache)", "CUDA graphs (compiled decode step)"}
    assert (pulled["change %"] == 0.0).all()
    gains = table[table.status == "gain"]
    assert list(gains["change %"]) == sorted(gains["change %"])
    assert list(table.index[table.status == "gain"]) == list(range(len(gains)))  # gains first, in rank order
    # hardware rows are chapter 06's lever_table on the deployed run, its change applied to the measured step
    hw = gains[gains.kind == "hardware"]
    assert len(hw) == 10 and hw["how priced"].eq("model prediction (chapter 06)").all()
    served = gains[gains.kind == "serving"]  # the batch lever: how the step is served, not a change of hardware
    assert list(served.lever) == ["batch"] and served["how priced"].eq("model prediction (chapter 06)").all()
    assert hw["model error"].str.contains("held out").all()
    plain = table[table.status == "baseline"]["decode ms/token"].iloc[0]
    assert list(hw["decode ms/token"]) == pytest.approx(list(plain * (1 + hw["change %"] / 100)))


def test_the_gather_kernel_of_the_graph_run_has_a_module(runs):
    dep, eager = runs
    k = _decode(dep)
    att = M.attributed_modules(k)
    g = k.name.str.startswith("triton_poi_fused_clamp_index_view")
    assert k[g].module.isna().all()  # the capture recorded none: a compiled step's graph node
    assert att[g].module.notna().all()
    assert att[g].module.str.fullmatch(r"model\.language_model\.layers\.\d+\.mlp\.experts").all()
    # each gather feeds the expert GEMM of the same module: the next launch with a module in its step
    assert set(att[g].consumer_shapes) == {"6x1792x1280;6x1280x1", "6x1280x896;6x896x1"}
    # the eager twin runs the same aten::index in the same modules, 2 per MoE layer and step
    e = _decode(eager)
    idx = e[(e.op == "aten::index") & e.module.fillna("").str.endswith("mlp.experts")]
    assert len(idx) / e.step.nunique() == g.sum() / k.step.nunique() == 22
    layers = lambda s: sorted({int(re.search(r"layers\.(\d+)", m).group(1)) for m in s})  # noqa: E731
    assert layers(att[g].module) == layers(idx.module) == list(range(1, 12))
    # and by_module_type puts them under MoE experts, not the fused step
    types = M.by_module_type(dep.timeline)
    dec = types[types.phase == "decode"].set_index("module_type")
    exp = k[k.module.fillna("").str.endswith("experts")]
    assert dec.loc["MoE experts", "us_per_step"] == pytest.approx(
        (exp.duration_ns.sum() + k[g].duration_ns.sum()) / 1e3 / k.step.nunique())
    gk = L.gather_kernels(dep, eager)
    assert set(gk.eager_index_shapes) == {"64x1792x1280", "64x1280x896"}


def test_moe_in_place_takes_the_twins_measured_in_loop_reads(runs):
    """The gate_up GEMM after the gather, measured in the eager twin's loop (the range pass), reads about what the
    graph step's gather wrote back to DRAM (within 5 %): the write-back proxy the lever falls back on holds where
    both exist; without the twin the lever takes the proxy."""
    dep, eager = runs
    up, _ = _gathers(dep)
    gk = L.gather_kernels(dep, eager).set_index("name")
    assert gk.loc[up["name"], "consumer_read_bytes_inloop"] == pytest.approx(up.dram_write_bytes, rel=0.05)
    alone = L.gather_kernels(dep).set_index("name")
    assert alone.consumer_read_bytes_inloop.isna().all()
    assert L.moe_in_place(dep).saving_us == pytest.approx(L.moe_in_place(dep, eager).saving_us, rel=0.05)



def test_the_baseline_row_and_the_prose_say_which_figure_is_measured_and_which_the_models(runs, table):
    """The deployed step's row showed 2.05 ms beside 2.20 ms with "how priced: measured": the first is the plain step
    measured, the second chapter 06's model as fitted, which the hardware levers' changes are taken against."""
    from kernelbook.narrate import levers as NL

    dep, _ = runs
    base = table[table.status == "baseline"].iloc[0]
    assert base["decode ms/token"] == pytest.approx(dep.info.plain_ms_per_step()["decode"])
    tr = W.for_run(dep)[0]
    assert base["predicted ms/token"] == W.at(tr, tr.gpu)
    assert base["how priced"] == "measured; predicted ms/token: chapter 06's model as fitted"
    prose = NL.levers_prose(table, dep)
    assert "plain step measured at 2.05 ms per token" in prose
    assert "-36.9 % by the model, against its own 2.20 ms as fitted" in prose


def test_the_gather_levers_bandwidth_names_whose_copy_it_is(runs):
    """The MoE lever priced its added reads at 2,954 GB/s beside chapter 07's 3,008 GB/s limit: each is the
    device-to-device copy its own capture measured (the deployed run's here, the eager run's for the limit)."""
    dep, eager = runs
    assert round(dep.info.measured_peaks.d2d_copy_gbps) == 2954 and round(eager.info.measured_peaks.d2d_copy_gbps) == 3008
    note = str(L.moe_in_place(dep, eager).note)
    assert "at 2,954 GB/s (measured device-to-device copy, run h100-variant-static-graphs; an upper bound)" in note
