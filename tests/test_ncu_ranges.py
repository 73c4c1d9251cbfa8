"""The range pass (issue 41 point 7, capture.ncu_ranges): DRAM bytes in the loop measured with caches flushed, on the
bundled runs captured with it on one H100 lease (the eager run: the decode step whole and 19 kernels with their
producers; the CUDA-graph run: the decode step whole)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from kernelbook.analyze import modules as M
from kernelbook.analyze import ncu_report as N
from kernelbook.capture.ncu import representative_launches, select_kernels
from kernelbook.capture.ncu_ranges import consumer_reads, plan_ranges, ranges_json, tie_ranges
from kernelbook.contract.layout import RunLayout, seen_file
from kernelbook.load.run import load_run

REPO = Path(__file__).resolve().parents[1]
EAGER, GRAPHS = REPO / "data/runs/h100-deepseek-ocr-2", REPO / "data/runs/h100-variant-static-graphs"


@pytest.fixture(scope="module")
def eager():
    return load_run(EAGER)


@pytest.fixture(scope="module")
def graphs():
    return load_run(GRAPHS)


def _plan(run):
    step = run.info.ncu.phases["decode"].step
    reps = representative_launches(run.timeline, select_kernels(run.timeline, "decode", 20, step))
    return step, *plan_ranges(run.timeline, step, reps)


def test_the_plan_is_what_the_capture_gave_the_worker_and_its_spans_never_overlap(eager):
    step, plan, planned = _plan(eager)
    assert ranges_json(plan) == RunLayout(EAGER).ncu().ranges_targets.read_text()
    assert plan[("decode", step)] == "step"
    for (_, s), spans in plan.items():
        if spans == "step":
            continue
        assert s > step
        for i, (a, b) in enumerate(spans):  # one profiler range open at a time
            assert all(b < c or d < a for c, d in spans[i + 1:])
    # a pair holds its producer, so the two never share a step; both run the op calls of the profiled step
    pairs = planned[planned.kind != "step"].pivot_table(index="kernel_id", columns="kind", values="step")
    assert len(pairs) == 19 and (pairs["pair"] != pairs["producer"]).all()
    ops = eager.timeline[eager.timeline.kind == "kernel"].drop_duplicates(["phase", "step", "op_index"]).set_index(
        ["phase", "step", "op_index"]).op
    for r in planned[planned.kind != "step"].itertuples():
        assert ops[("decode", r.step, r.first_op)] == ops[("decode", step, r.first_op)]
        assert ops[("decode", r.step, r.last_op)] == ops[("decode", step, r.last_op)]


def test_every_planned_range_was_closed_and_measured_and_the_kernel_table_holds_pair_minus_producer(eager):
    nd = RunLayout(EAGER).ncu()
    ranges = eager.ncu_ranges()
    assert len(ranges) == 39 and ranges.dram_read_bytes.notna().all()
    assert eager.info.ncu.inloop.mode == "range" and eager.info.ncu.inloop.cache_control == "all"
    assert eager.info.ncu.inloop.error is None and eager.info.ncu.inloop.passes == 1
    reads = consumer_reads(ranges).set_index("kernel_id").dram_read_bytes_inloop
    k = eager.ncu_kernels().set_index("kernel_id")
    assert k.dram_read_bytes_inloop.dropna().sort_index().to_dict() == reads.sort_index().to_dict()
    seen = json.loads(seen_file(nd.ranges_targets).read_text())
    _, _, planned = _plan(eager)
    again, error = tie_ranges(planned, seen, _range_metrics(ranges))
    assert error is None and len(again) == 39
    short, error = tie_ranges(planned, seen[:-1], _range_metrics(ranges))
    assert short.empty and "the worker closed 38" in error


def _range_metrics(ranges: pd.DataFrame) -> pd.DataFrame:
    """The measured ranges back in the report's long form (one result per range, in the worker's order)."""
    cols = {"dram_read_bytes": "dram__bytes_read.sum", "dram_write_bytes": "dram__bytes_write.sum"}
    order = ranges.sort_values(["step", "first_op"]).reset_index(drop=True)
    return (order[list(cols)].rename(columns=cols).rename_axis("result_id").reset_index()
            .melt(id_vars="result_id", var_name="metric", value_name="value"))


def test_in_the_loop_the_expert_gemm_reads_a_third_of_its_flushed_bytes_and_weight_readers_read_theirs(eager):
    """The MoE expert GEMM after the gather that copied the experts reads the copy from L2 in the loop (27.6 MB with
    caches flushed, 8.6 MB in the loop); a kernel whose producer wrote little reads its weights from DRAM either way
    (within 5 % for every such kernel over 1 MB)."""
    k = eager.ncu_kernels().set_index("kernel_id")
    big = k[k.dram_read_bytes_inloop.notna() & (k.dram_read_bytes > 1e6)]
    ratio = big.dram_read_bytes_inloop / big.dram_read_bytes
    gemm = big.index[big.name.str.contains("nvjet_sm90_tst_128x8")]
    assert len(gemm) == 1 and ratio[gemm[0]] < 0.4
    assert ((ratio.drop(gemm) - 1).abs() < 0.05).all() and len(ratio) >= 5


@pytest.mark.parametrize("which", ["eager", "graphs"])
def test_the_decode_step_measured_whole_reads_its_must_move_bytes_about_once(which, request):
    from kernelbook.narrate import modules as MN

    run = request.getfixturevalue(which)
    ledger, says = MN.run_ledger(run)
    measured = M.step_measured(run.ncu_ranges())
    must = ledger[ledger.module_type == "step"].must_bytes.iloc[0]
    assert measured["step"] == run.info.ncu.phases["decode"].step
    assert 0.95 < measured["read_bytes"] / must < 1.15  # weights + KV cache, read once from DRAM
    assert f"the step read {measured['read_bytes'] / 1e6:.0f} MB from DRAM" in says
    assert f"wrote {measured['write_bytes'] / 1e6:.0f} MB" in says


def test_a_run_without_the_range_pass_says_nothing_of_it(graphs):
    from kernelbook.narrate import modules as MN

    ledger, _ = M.run_ledger(graphs)
    assert M.step_measured(None) is None
    assert "range pass" not in MN.ledger_prose(ledger, None, (3e12, "x"))


def test_chapter_words_name_the_range_pass_for_its_in_loop_figures(eager):
    k = eager.ncu_kernels()
    row = k[k.dram_read_bytes_inloop.notna()].iloc[0]
    m = N.inloop_measured(row)
    assert set(m) == {"cold_read_bytes", "inloop_read_bytes"}  # bytes only: a range's duration spans host launches
    words = N.inloop_words(m)
    assert "range pass" in words and "µs" not in words
