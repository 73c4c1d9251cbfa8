"""The deployment-shaped runs (issue 27), captured on the H100 by bench/gpu_deploy.sh: the static-graphs
variant with counters (decode steps are CUDA-graph replays, profiled node by node) and a sampled long
generation. What they hold, ncu's selection by (step, launch index) on the recorded graph timeline, the
step curve's agreement check, and the whole book rendered from each on this CPU machine."""
import pandas as pd
import pytest

from conftest import CHAPTERS, REPO
from kernelbook import params as P
from kernelbook.analyze import steps as ST
from kernelbook.capture.ncu import graph_launches, graph_phase, select_kernels
from kernelbook.load.run import load_run
from kernelbook.runner import render_book

GRAPHS = REPO / "data" / "runs" / "h100-variant-static-graphs"
LONG = REPO / "data" / "runs" / "h100-long-generation-256"


def test_graph_decode_steps_are_told_from_eager_ones():
    g, e = load_run(GRAPHS).timeline, load_run(REPO / "data" / "runs" / "h100-deepseek-ocr-2").timeline
    assert graph_phase(g, select_kernels(g, "decode", 20))  # every kernel of the step launched by cudaGraphLaunch
    assert not graph_phase(g, select_kernels(g, "prefill", 20))  # the prefill stays eager under a static cache
    assert not graph_phase(e, select_kernels(e, "decode", 20))


def test_graph_kernels_are_selected_by_step_and_launch_index():
    """Each selected kernel's representative is the first launch, in the profiled step, of its launch
    configuration holding the most decode time; its launch index is its position in the step's replay."""
    r = load_run(GRAPHS)
    sel = select_kernels(r.timeline, "decode", 20)
    at = graph_launches(r.timeline, sel)
    step = r.timeline[(r.timeline.phase == "decode") & (r.timeline.kind == "kernel") & (r.timeline.step == sel.step)]
    step = step.sort_values(["launch_ns", "start_ns"], kind="stable").reset_index(drop=True)
    assert len(at) == len(sel.kernels) == 20 and at.launch_index.is_unique
    for a in at.itertuples():
        k = step.iloc[a.launch_index]
        assert (k["name"], k.grid, k.block) == (a.name, a.grid, a.block)
        before = step.iloc[:a.launch_index]
        assert not ((before.name == a.name) & (before.grid == a.grid) & (before.block == a.block)).any()
    # the run's ncu table carries the same (step, launch index) for every profiled decode kernel
    k = r.ncu_kernels().set_index("kernel_id")
    prof = k[(k.phase == "decode") & (k.status == "profiled")]
    assert (prof.profiled_step == sel.step).all()
    assert (prof.launch_index == at.set_index("kernel_id").launch_index.reindex(prof.index)).all()


def test_the_graph_run_has_counters_for_its_decode_step():
    r = load_run(GRAPHS)
    ncu = r.manifest["ncu"]
    assert r.manifest["status"] == "complete" and ncu["phases"]["decode"]["graph_replay"] is True
    assert "--graph-profiling node" in ncu["phases"]["decode"]["command"]
    k = r.ncu_kernels()
    dec = k[k.phase == "decode"]
    assert (dec.status == "profiled").sum() == ncu["phases"]["decode"]["profiled"] == 19
    # the one left out says why
    assert dec.loc[dec.status != "profiled", "status"].str.startswith("ncu wrote no result for this graph node").all()
    pre = k[(k.phase == "prefill") & (k.kernel_id == "p017")].iloc[0]  # the lm_head: its prefill launch had no op call
    assert pre.status == "profiled" and pre.identity.startswith("same kernel profiled in decode")
    # graph GEMM nodes carry their eager twin's aten op and shapes (join_shapes), so the FLOP check applies
    gemm = r.timeline[(r.timeline.phase == "decode") & r.timeline["graph"] & (r.timeline.op == "aten::mm")]
    assert len(gemm) and gemm.op_shapes.notna().all()


def test_the_long_run_profiled_windows_and_timed_every_step():
    r = load_run(LONG)
    s = r.manifest["timeline_info"]["sampling"]
    assert s["windows"] == [[1, 8], [248, 255]] and s["decode_steps"] == 255
    assert sorted(r.phases[r.phases.phase == "decode"].step.unique()) == list(range(1, 9)) + list(range(248, 256))
    plain = ST.plain_steps(r)
    assert list(plain.step) == list(range(1, 256))
    assert r.manifest["peak_rss_gb"]["timeline"]["capture"] < 8  # the bound on host memory
    check = ST.step_check(r).set_index("quantity")["value"]
    a = ST.agreement(dict(zip(plain.step, plain.wall_ms)), ST.profiled_steps(r).step.tolist())
    assert check["difference"] == pytest.approx(a["error_pct"])
    assert "stand for the whole decode: their estimate is +9.5 %" in ST.check_prose(r)
    assert a["sampled_estimate_ms"] == pytest.approx(
        plain[plain.step.isin([*range(1, 9), *range(248, 256)])].wall_ms.mean() * 255)
    assert abs(a["error_pct"]) <= ST.CHECK_PCT  # measured: +9.5 %, the plain step grows from 11.3 to 13.8 ms
    assert r.manifest["ncu"]["phases"]["decode"]["step"] == 248  # nearest recorded step to the middle (128)


def test_growth_is_measured_between_the_first_and_last_profiled_steps():
    r = load_run(LONG)
    g = ST.growing_kernels(r.timeline)
    k = r.timeline[(r.timeline.phase == "decode") & (r.timeline.kind == "kernel")]
    top = g.iloc[0]
    steps = sorted(k.step.unique())
    n = max(1, len(steps) // 10)
    mine = k[k.short_name == top.kernel]
    assert top.first_us == pytest.approx(mine[mine.step.isin(steps[:n])].duration_ns.sum() / n / 1e3)
    assert top.last_us == pytest.approx(mine[mine.step.isin(steps[-n:])].duration_ns.sum() / n / 1e3)
    assert (g.change_us.diff().dropna() <= 0).all()


@pytest.mark.parametrize("path", [GRAPHS, LONG], ids=lambda p: p.name)
def test_the_book_renders_every_chapter_of_the_run(path, tmp_path):
    out = render_book(P.validate({"run_dir": str(path.relative_to(REPO))}, consumer="book"), tmp_path / "rep",
                      log=lambda *_: None)
    for stem in CHAPTERS:
        assert "Traceback" not in (out / f"{stem}.html").read_text(), stem
    assert "Decode step time against position" in (out / "01_timeline.html").read_text()
