"""The deployment-shaped runs (issue 27), captured on the H100 by bench/gpu_deploy.sh: the static-graphs
variant with counters (decode steps are CUDA-graph replays, profiled node by node) and a sampled long
generation. What they hold, ncu's selection by (step, launch index) on the recorded graph timeline, the
step curve's agreement check, and the whole book rendered from each on this CPU machine."""
import pandas as pd
import pytest

from conftest import CHAPTERS, REPO
from kernelbook import params as P
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import steps as ST
from kernelbook.capture.ncu import graph_launches, graph_phase, select_kernels
from kernelbook.load.run import load_run
from kernelbook.narrate import ncu_report as NN
from kernelbook.narrate import steps as SN
from kernelbook.runner import render_book

GRAPHS = REPO / "data" / "runs" / "h100-variant-static-graphs"
LONG = REPO / "data" / "runs" / "h100-long-generation-2048"
LONG_GRAPHS = REPO / "data" / "runs" / "h100-long-generation-2048-graphs"
SHORT = REPO / "data" / "runs" / "h100-long-generation-256"


def test_graph_decode_steps_are_told_from_eager_ones():
    g, e = load_run(GRAPHS).timeline, load_run(REPO / "data" / "runs" / "h100-deepseek-ocr-2").timeline
    assert graph_phase(g, select_kernels(g, "decode", 20))  # every kernel of the step launched by cudaGraphLaunch
    assert not graph_phase(g, select_kernels(g, "prefill", 20))  # the prefill stays eager under a static cache
    assert not graph_phase(e, select_kernels(e, "decode", 20))


def test_a_graph_copy_node_is_left_out_of_the_selection():
    """memcpy32_post is the driver's kernel for a CUDA graph's memcpy node (22 per decode step here): ncu
    profiles kernel nodes only, so the selection takes the next kernel instead and names the one it left out."""
    r = load_run(GRAPHS)
    tl = r.timeline
    sel = select_kernels(tl, "decode", 20)
    assert "memcpy32_post" not in set(sel.kernels.name) and len(sel.kernels) == 20
    k = tl[(tl.phase == "decode") & (tl.kind == "kernel")]
    by_time = k.groupby("name").duration_ns.sum().sort_values(ascending=False)
    assert list(sel.kernels.name) == [n for n in by_time.index if n != "memcpy32_post"][:20]
    assert by_time.index.get_loc("memcpy32_post") < 20  # it ranked among the top 20
    (out,) = sel.left_out
    assert out["name"] == "memcpy32_post" and out["share"] == pytest.approx(by_time["memcpy32_post"] / k.duration_ns.sum())
    assert select_kernels(load_run(REPO / "data" / "runs" / "h100-deepseek-ocr-2").timeline, "decode", 20).left_out == []
    prose = NN.coverage_prose(N.coverage(r.ncu_kernels()), r.ncu_kernels(), r.manifest)
    assert "Left out of the decode selection: `memcpy32_post`" in prose
    assert "- d000–d019: graph node" in prose  # one note for the twenty kernels it applies to
    assert NN.id_ranges(["d000", "d001", "d002", "d005", "d006"]) == "d000–d002, d005, d006"


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
    assert (dec.status == "profiled").sum() == ncu["phases"]["decode"]["profiled"] == len(dec) == 20
    # the graph's copy-node kernel is not selected, and the manifest says why (re-derived by bench/rederive_ncu.py)
    assert [d["name"] for d in ncu["phases"]["decode"]["left_out"]] == ["memcpy32_post"]
    assert ncu["processes"] == 2  # the eager prefill's process and the graph step's
    pre = k[(k.phase == "prefill") & (k.kernel_id == "p017")].iloc[0]  # the lm_head: its prefill launch had no op call
    assert pre.status == "profiled" and pre.identity.startswith("same kernel profiled in decode")
    # graph GEMM nodes carry their eager twin's aten op and shapes (join_shapes), so the FLOP check applies
    gemm = r.timeline[(r.timeline.phase == "decode") & r.timeline["graph"] & (r.timeline.op == "aten::mm")]
    assert len(gemm) and gemm.op_shapes.notna().all()


def test_the_long_run_profiled_windows_and_timed_every_step():
    """2048 new tokens, eager (bench/gpu_deploy.sh on the H100): 9 windows of 8 steps, every plain step timed,
    within the issue's bounds on host memory and size, ncu's top-20 of decode and prefill all profiled at step
    257 with at most 1.3 results per selected kernel."""
    r = load_run(LONG)
    s = r.manifest["timeline_info"]["sampling"]
    assert s["windows"] == [[1 + 256 * i, 8 + 256 * i] for i in range(8)] + [[2040, 2047]]
    assert s["decode_steps"] == 2047 and r.manifest["status"] == "complete"
    want = sorted({st for a, b in s["windows"] for st in range(a, b + 1)})
    assert sorted(r.phases[r.phases.phase == "decode"].step.unique()) == want
    plain = ST.plain_steps(r)
    assert list(plain.step) == list(range(1, 2048))
    assert max(v["capture"] for v in r.manifest["peak_rss_gb"].values()) < 8  # the bound on host memory
    assert sum(f.stat().st_size for f in r.path.rglob("*") if f.is_file()) < 30e6
    check = ST.step_check(r).set_index("quantity")["value"]
    a = ST.agreement(dict(zip(plain.step, plain.wall_ms)), ST.profiled_steps(r).step.tolist())
    assert check["difference"] == pytest.approx(a["error_pct"])
    assert a["sampled_estimate_ms"] == pytest.approx(plain[plain.step.isin(want)].wall_ms.mean() * 2047)
    assert abs(a["error_pct"]) <= ST.CHECK_PCT  # measured: +2.0 %
    assert "stand for the whole decode: their estimate is +2.0 %" in SN.check_prose(r)
    ncu = r.manifest["ncu"]
    assert ncu["phases"]["decode"]["step"] == 257 and ncu["results_per_selected"] <= 1.3
    assert ncu["phases"]["decode"]["profiled"] == ncu["phases"]["prefill"]["profiled"] == 20
    k = r.ncu_kernels()
    assert (k[k.phase == "decode"].profiled_step == 257).all()  # each kernel where it launches at the chosen step


def test_a_short_sampled_run_says_when_its_windows_do_not_stand_for_the_decode():
    """256 tokens with two windows (1-8, 248-255) on a noisy host: the plain steps at the windows average 23 %
    above the whole decode's, and the chapter says so instead of passing the check."""
    r = load_run(SHORT)
    plain = ST.plain_steps(r)
    a = ST.agreement(dict(zip(plain.step, plain.wall_ms)), ST.profiled_steps(r).step.tolist())
    assert a["error_pct"] > ST.CHECK_PCT
    assert SN.check_prose(r).startswith("The profiled steps do not stand for the whole decode")


def test_the_long_graph_run_profiles_its_graph_step_node_by_node():
    r = load_run(LONG_GRAPHS)
    ncu = r.manifest["ncu"]
    assert r.manifest["status"] == "complete" and ncu["phases"]["decode"]["graph_replay"] is True
    assert ncu["phases"]["prefill"]["profiled"] == 20 and ncu["phases"]["decode"]["profiled"] == 20
    k = r.ncu_kernels()
    assert (k.status == "profiled").all() and len(k) == ncu["selected"] == 40
    # the step as deployed: plain decode step ~2.3 ms against the eager run's ~24 ms at the same length
    assert ST.plain_steps(r).wall_ms.median() * 5 < ST.plain_steps(load_run(LONG)).wall_ms.median()


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
