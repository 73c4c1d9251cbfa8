"""Sampled windows of a longer generation (`sample_window`, `sample_every`), on the MoE model, eager: the profiler
records the planned windows only, every plain step is timed, and the profiled steps stand for the whole decode within
10 % (chapter 01's agreement check). No ncu here (the book's capture covers the ncu worker by op call)."""
import pytest

pytestmark = pytest.mark.gpu


def test_the_profiler_recorded_the_planned_windows_only(moe_sampled_run):
    from kernelbook.contract.sampling import plan

    run = moe_sampled_run
    p = run.manifest["params"]
    sampling = plan(p["max_new_tokens"], p["sample_window"], p["sample_every"])
    info = run.manifest["timeline_info"]["sampling"]
    assert info["windows"] == [list(w) for w in sampling.windows]
    assert info["profiled_decode_steps"] == len(sampling.steps) - 1 < p["max_new_tokens"] - 1
    dec = run.timeline[(run.timeline.phase == "decode") & (run.timeline.kind == "kernel")]
    assert set(dec.step) == set(sampling.steps) - {0}


def test_the_sampled_steps_stand_for_the_whole_decode(moe_sampled_run, record_property):
    from kernelbook.analyze.steps import CHECK_PCT, plain_steps, profiled_steps, agreement

    plain = plain_steps(moe_sampled_run)
    a = agreement(dict(zip(plain.step, plain.wall_ms)), profiled_steps(moe_sampled_run).step.tolist())
    record_property("agreement_error_pct", round(a["error_pct"], 2))
    record_property("plain_decode_total_ms", round(a["plain_total_ms"], 2))
    assert len(plain) == moe_sampled_run.manifest["params"]["max_new_tokens"] - 1
    assert abs(a["error_pct"]) <= CHECK_PCT, a
