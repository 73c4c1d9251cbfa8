"""Kernels in the model's terms (analyze.modules) on the committed runs captured with module ranges: module
types and layers, their sums against the timeline's own kernel time, and the decode bytes ledger against the
run's ncu counters and the op shapes."""
import pandas as pd
import pytest

from conftest import REPO
from kernelbook.analyze import modules as M
from kernelbook.analyze import timeline as T
from kernelbook.load.run import load_run
from kernelbook.narrate import modules as MN

BUNDLED = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
GRAPHS = REPO / "data" / "runs" / "h100-long-generation-2048-graphs"


@pytest.mark.parametrize("path", [BUNDLED, REPO / "data" / "runs" / "h200-deepseek-ocr-2",
                                  REPO / "data" / "runs" / "h100-long-generation-2048"], ids=lambda p: p.name)
def test_every_decode_kernel_has_a_module_and_the_types_sum_to_the_step(path):
    r = load_run(path)
    k = r.timeline[(r.timeline.kind == "kernel") & (r.timeline.phase == "decode")]
    recorded = k[k.module.notna()].step.unique()
    mine = k[k.step.isin(recorded)]
    assert mine.module.notna().mean() > 0.99  # eager decode: every kernel launched inside a module's forward
    types = M.by_module_type(r.timeline)
    dec = types[types.phase == "decode"]
    assert dec.us_per_step.sum() == pytest.approx(mine.duration_ns.sum() / 1e3 / len(recorded))
    assert dec.share_pct.sum() == pytest.approx(100.0)
    assert "other" not in set(dec.module_type.astype(str))
    # DeepSeek-OCR-2's decoder: 12 layers, the first dense, the rest MoE
    layers = M.by_layer(r.timeline)
    assert sorted(layers.layer.unique()) == list(range(12))
    assert set(layers[layers.module_type == "MoE experts"].layer) == set(range(1, 12))
    assert set(layers[layers.module_type == "dense MLP"].layer) == {0}


def test_the_ledger_sets_weights_and_kv_against_what_the_kernels_moved():
    """Must move: the weights of each matrix product (2·N·K bytes from the launch's shapes) and attention's
    q, k, v and output; moved: ncu's DRAM bytes for the profiled configuration (its in-loop DRAM reads where the
    run measured the loop, as the bundled run does), else the shapes' bytes."""
    r = load_run(BUNDLED)
    bw, _ = M.dram_bandwidth(r)
    led = M.bytes_ledger(r.timeline, r.ncu_kernels(), bw).set_index("module_type")
    body, step = led.drop(index="step"), led.loc["step"]
    for col in ("kernel_us", "must_bytes", "moved_bytes", "launches_per_step"):
        assert body[col].sum() == pytest.approx(step[col])
    assert step.floor_us == pytest.approx(step.must_bytes / bw * 1e6)
    # the lm_head GEMV reads its whole weight (vocab × hidden bf16) once per step, and ncu says so within 2 %
    lm = body.loc["lm_head"]
    assert lm.moved_ncu_pct == pytest.approx(100.0)
    assert lm.moved_bytes == pytest.approx(lm.must_bytes, rel=0.02)
    # the routed experts moved more than their weights. With flushed counters (the cold ledger: the in-loop reads
    # left out) the gather reads each routed expert's weights and writes the copy (2×), and the expert GEMM reads the
    # copy again (up to 3×): 1067 MB for 454 MB, 2.35×, on the re-captured run
    assert led.attrs["moved_basis"] == "inloop_reads"
    cold = M.bytes_ledger(r.timeline, r.ncu_kernels().drop(columns=["dram_read_bytes_inloop"]), bw)
    assert cold.attrs["moved_basis"] == "cold"
    cold = cold.set_index("module_type")
    must = body.loc["MoE experts", "must_bytes"]
    assert cold.loc["MoE experts", "must_bytes"] == pytest.approx(must)
    assert 2 * must < cold.loc["MoE experts", "moved_bytes"] < 3 * must
    # in the loop (the run's ledger: the profiled kernels' in-loop DRAM reads, reads only) the gather's write of the
    # copy is not counted and the expert GEMM finds part of the copy still in L2: more than the weights once (the
    # gather reads them all from DRAM), less than twice (the GEMM re-reads at most the whole copy): 752 MB, 1.66×
    # (tests/test_inloop.py has the saving per expert GEMM launch)
    moved = body.loc["MoE experts", "moved_bytes"]
    assert must < moved < 2 * must
    assert "MoE experts" in MN.ledger_prose(led.reset_index(), T.plain_ms_per_step(r.manifest).get("decode"), (bw, "x"))


def test_fused_graph_kernels_are_named_as_such_not_put_outside_the_layers():
    r = load_run(GRAPHS)
    types = M.by_module_type(r.timeline)
    dec = types[types.phase == "decode"].set_index("module_type")
    assert "compiled step (fused)" in dec.index
    k = r.timeline[(r.timeline.phase == "decode") & (r.timeline.kind == "kernel")]
    # a gather kernel takes the module of the expert GEMM it feeds (modules.attributed_modules): not fused
    gather = k.name.str.contains(M.GATHER_KERNEL)
    fused = k[k["graph"] & k.module.isna() & ~gather & k.step.isin(k[k.module.notna()].step.unique())]
    steps = k[k.module.notna()].step.nunique()
    assert dec.loc["compiled step (fused)", "us_per_step"] == pytest.approx(fused.duration_ns.sum() / 1e3 / steps)


def test_a_run_captured_before_module_ranges_says_so():
    r = load_run(REPO / "data" / "runs" / "llava-h100")
    assert not M.has_modules(r.timeline) and M.by_module_type(r.timeline).empty
    assert "before kernels were tied to modules" in MN.modules_prose(M.by_module_type(r.timeline))
    assert M.bytes_ledger(r.timeline, r.ncu_kernels(), 3e12).empty


@pytest.mark.parametrize("path,cls,want", [
    ("model.language_model.layers.3.mlp.experts", "DeepseekOcr2TextExperts", "MoE experts"),
    ("model.language_model.layers.3.mlp", "DeepseekOcr2TextMoe", "MoE dispatch"),
    ("model.layers.3.mlp", "Qwen3MoeSparseMoeBlock", "MoE dispatch"),
    ("model.layers.3.mlp", "LlamaMLP", "dense MLP"),
    ("model.layers.3.mlp.gate", "Linear", "MoE router"),
    ("model.layers.3.mlp.gate_proj", "Linear", "dense MLP"),
    ("model.layers.3.self_attn.q_proj", "Linear", "attention"),
    ("model.layers.3", "LlamaDecoderLayer", "residual"),
    ("model.norm", "LlamaRMSNorm", "norm"),
    ("lm_head", "Linear", "lm_head"),
    ("model.vision_tower.encoder.layers.0.mlp.fc1", "Linear", "dense MLP"),
    ("model.multi_modal_projector", "LlavaMultiModalProjector", "projector"),
    (None, None, "outside layers"),
])
def test_module_types_from_path_and_class(path, cls, want):
    assert M.module_type(path, cls) == want
