"""Vision encode under ncu (issue 41, point 7): the few huge launches that hold a heavy-tailed kernel's time, named
with their module, op and shapes, on the committed runs. Every expected number is recomputed here from the timeline
by another path (string filters on the raw module paths) than chapter 02's grouping."""
import numpy as np
import pytest

from conftest import REPO
from kernelbook.analyze import ncu_report as N
from kernelbook.i18n import use_language
from kernelbook.load.run import load_run
from kernelbook.narrate import ncu_report as NN

BUNDLED, GRAPHS = "data/runs/h100-deepseek-ocr-2", "data/runs/h100-variant-static-graphs"
NO_VISION_NCU, NO_VISION = "data/runs/h100-long-generation-2048", "data/runs/qwen3-moe-h100"
GLOBAL = [f"model.vision_tower.sam_encoder.layers.{i}.attn" for i in (2, 5, 8, 11)]


@pytest.fixture(scope="module", autouse=True)
def english():
    use_language("en")


def _analysis(run):
    ht = N.heavy_tailed(run.ncu_kernels(), run.timeline)
    return ht, N.heavy_launches(ht, run.timeline, run.manifest)


@pytest.fixture(scope="module", params=[BUNDLED, GRAPHS])
def run(request):
    return load_run(REPO / request.param)


def _vision(run):
    """The vision encode kernel launches and the phase's kernel time (ns), straight from the timeline."""
    tl = run.timeline
    v = tl[(tl.phase == "vision_encode") & (tl.kind == "kernel")]
    return v, v.duration_ns.sum()


def test_rule_flags_vision_copy_and_add(run):
    """v000 (copy) and v001 (add): mean ÷ median from the timeline's launches of their name in vision encode."""
    ht, _ = _analysis(run)
    ht = ht.set_index("kernel_id")
    v, _ = _vision(run)
    k = run.ncu_kernels().set_index("kernel_id")
    for kid in ("v000", "v001"):
        d = v[v.name == k.loc[kid, "name"]].duration_ns
        assert ht.loc[kid, "launches"] == len(d) == k.loc[kid, "launches"]
        assert ht.loc[kid, "mean_over_median"] == pytest.approx(d.mean() / d.median())
        assert ht.loc[kid, "mean_over_median"] >= N.HEAVY_MEAN_MEDIAN
        assert ht.loc[kid, "heavy"]
    # decode's kernels are not heavy-tailed on either run
    assert not ht[ht.phase == "decode"].heavy.any()


def test_heavy_launches_are_named_with_their_module(run):
    """v001's longest launches: the 72×48×48×48×1 + 72×48×48×1×48 broadcast adds of sam_encoder's global-attention
    layers 2, 5, 8, 11 (one each per call, 1.31 ms); v000's: the 72×48×48×48×48 copies of the same layers."""
    _, hl = _analysis(run)
    v, phase_ns = _vision(run)
    k = run.ncu_kernels().set_index("kernel_id")
    for kid, op, shapes in (("v001", "aten::add", "72x48x48x48x1;72x48x48x1x48;"),
                            ("v000", "aten::copy_", "72x48x48x48x48;72x48x48x48x48;")):
        top = hl[hl.kernel_id == kid].iloc[0]
        assert top.module == "sam_encoder.layers.{2, 5, 8, 11}.attn"
        assert (top.op, top.op_shapes) == (op, shapes)
        assert set(top.modules) == set(GLOBAL)
        # another path: the raw module strings, the op and its shapes
        mine = v[v.name == k.loc[kid, "name"]]
        same = mine[mine.module.isin(GLOBAL) & (mine.op == op) & (mine.op_shapes == shapes)]
        assert top.launches == len(same) == 4
        assert top.launches_per_call == 4  # vision encode ran one call (step 0)
        assert top.us_each == pytest.approx(same.duration_ns.mean() / 1e3)
        assert top.max_us == pytest.approx(same.duration_ns.max() / 1e3)
        assert top.kernel_share_pct == pytest.approx(100 * same.duration_ns.sum() / mine.duration_ns.sum())
        assert top.phase_share_pct == pytest.approx(100 * same.duration_ns.sum() / phase_ns)
        # the longest launches of the kernel are these four
        assert set(mine.nlargest(4, "duration_ns").index) == set(same.index)


def test_bundled_figures(run):
    """The figures the issue quotes: v001's adds take 1.31 ms each, v000's copies 0.99 ms; v000 and v001 are 54 % of
    vision encode kernel time; in the global-attention layers their 16 launches hold 27.7 % of it."""
    ht, hl = _analysis(run)
    h = hl.set_index(["kernel_id", "op_shapes"])
    assert h.loc[("v001", "72x48x48x48x1;72x48x48x1x48;"), "us_each"] == pytest.approx(1307.7, abs=2.0)
    assert h.loc[("v000", "72x48x48x48x48;72x48x48x48x48;"), "us_each"] == pytest.approx(993.5, abs=2.0)
    v, phase_ns = _vision(run)
    k = run.ncu_kernels().set_index("kernel_id")
    names = set(k.loc[["v000", "v001"], "name"])
    both = v[v.name.isin(names)]
    big = both[both.module.isin(GLOBAL) & both.op_shapes.isin(["72x48x48x48x1;72x48x48x1x48;",
                                                                 "12x64x64x64x1;12x64x64x1x64;",
                                                                 "72x48x48x48x48;72x48x48x48x48;",
                                                                 "12x64x64x64x64;12x64x64x64x64;"])]
    vh = N.vision_heavy(ht, hl, run.timeline)
    assert vh["state"] == "ok" and vh["kernels"] == ["v000", "v001"]
    assert vh["kernel_pct"] == pytest.approx(100 * both.duration_ns.sum() / phase_ns)
    assert round(vh["kernel_pct"]) == 54
    assert vh["module"] == "sam_encoder.layers.{2, 5, 8, 11}.attn"
    assert vh["launches"] == len(big) == 16
    assert vh["pct"] == pytest.approx(100 * big.duration_ns.sum() / phase_ns)
    assert vh["hi_us"] == pytest.approx(big.duration_ns.max() / 1e3)
    text = NN.vision_prose(vh, run.ncu_kernels())
    assert "`sam_encoder.layers.{2, 5, 8, 11}.attn`" in text and f"{vh['pct']:.1f} %" in text


def test_groups_stop_once_they_hold_half_the_kernel(run):
    _, hl = _analysis(run)
    for kid, g in hl.groupby("kernel_id"):
        assert g.cumulative_pct.is_monotonic_increasing
        assert g.cumulative_pct.iloc[-1] >= 100 * N.HEAVY_HOLD or len(g) == N.HEAVY_MAX_GROUPS
        assert len(g) == 1 or g.cumulative_pct.iloc[-2] < 100 * N.HEAVY_HOLD


def test_index_sets_and_short_modules():
    assert N.index_set([2, 8, 11]) == "{2, 8, 11}"
    assert N.index_set(range(12)) == "{0–11}"
    assert N.index_set([0, 1, 3, 4, 6, 7, 9, 10]) == "{0, 1, 3, 4, 6, 7, 9, 10}"
    others = {"model.vision_tower.sam_encoder.layers.{}.attn", "model.vision_tower.vision_encoder.layers.{}.self_attn"}
    assert N.short_template("model.vision_tower.sam_encoder.layers.{}.attn", others) == "sam_encoder.layers.{}.attn"
    assert N.short_template("lm_head", others) == "lm_head"


def test_without_modules_the_groups_say_so():
    """A timeline without module attribution (runs captured before it): grouped by op and shapes, the module empty
    and the prose saying why."""
    run = load_run(REPO / BUNDLED)
    tl = run.timeline.drop(columns=["module"])
    ht = N.heavy_tailed(run.ncu_kernels(), tl)
    hl = N.heavy_launches(ht, tl, run.manifest)
    assert len(hl) and hl.module.isna().all()
    assert "records no module" in NN.heavy_prose(ht, hl)
    vh = N.vision_heavy(ht, hl, tl)
    assert vh["module"] is None
    assert "no module in the timeline" in NN.vision_prose(vh, run.ncu_kernels())


@pytest.mark.parametrize("path, state", [(NO_VISION_NCU, "not profiled"), (NO_VISION, "no phase")])
def test_runs_without_vision_ncu_show_nothing_without_error(path, state):
    run = load_run(REPO / path)
    ht, hl = _analysis(run)
    assert not (ht.phase == "vision_encode").any()
    vh = N.vision_heavy(ht, hl, run.timeline)
    assert vh["state"] == state
    text = NN.vision_prose(vh, run.ncu_kernels())
    assert ("did not profile it" if state == "not profiled" else "no vision encode phase") in text
    prose = NN.heavy_prose(ht, hl)
    if hl.empty:
        assert "nothing to show" in prose
    assert N.heavy_table(hl).columns.tolist() == [c for c in hl.columns if c not in ("total_ns", "modules")]


def test_qwen_has_nothing_heavy():
    """qwen3-moe-h100: no vision, no module column, and no heavy-tailed kernel (largest mean ÷ median 1.70×, p002)."""
    run = load_run(REPO / NO_VISION)
    ht, hl = _analysis(run)
    assert hl.empty and not ht.heavy.any()
    worst = ht.sort_values("mean_over_median").iloc[-1]
    tl = run.timeline
    d = tl[(tl.phase == worst.phase) & (tl.name == run.ncu_kernels().set_index("kernel_id").loc[worst.kernel_id, "name"])
           & (tl.kind == "kernel")].duration_ns
    assert worst.mean_over_median == pytest.approx(d.mean() / np.median(d))
    assert "nothing to show" in NN.heavy_prose(ht, hl)
