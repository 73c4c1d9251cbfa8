"""Why a kernel is slow (analyze.why): stall reasons, occupancy limits, the SM clock and NVIDIA's rules, on the
bundled H100 run's real counters and on the committed H200 .ncu-rep fixture (the one with rule results)."""
import json

import pandas as pd
import pytest

from conftest import FIXTURE_REP
from kernelbook.analyze import classify as C
from kernelbook.analyze import roofline as R
from kernelbook.analyze import why as Y
from kernelbook.devices import lookup
from kernelbook.narrate import why as YN

STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


@pytest.fixture(scope="module")
def dev(run):
    return lookup(run.manifest["device"])


@pytest.fixture(scope="module")
def cp(run, dev):
    c = C.classify(R.profiled_kernels(run), dev.ridge("bf16"))
    return c[c.phase == "decode"]


@pytest.fixture(scope="module")
def metrics(run):
    return run.ncu_metrics()


@pytest.fixture(scope="module")
def fixture_report():
    from kernelbook.load.ncu import read_ncu_report

    return read_ncu_report(FIXTURE_REP)


def test_stall_shares_are_shares_of_the_stall_cycles(run, metrics):
    s = Y.stalls(metrics)
    # every profiled launch of the run (75: vision encode, prefill and decode), 19 reasons each
    assert s.result_id.nunique() == run.manifest["ncu"]["results"] == metrics.result_id.nunique() == 75
    assert set(s.groupby("result_id").size()) == {19}
    total = s.groupby("result_id").stall_share_pct.sum()
    assert total.round(9).eq(100).all()  # every launch's shares add up to its stall cycles, no more
    assert s[s.reason == "selected"].stall_share_pct.isna().all()  # issuing is not a stall


def test_a_known_kernels_top_stall_from_the_metrics_table(run, cp, metrics):
    """d001, the decode MoE gather: long scoreboard 49.94 cycles per issued instruction of 57.98 stalled (the 18
    reasons but `selected`, read from the metrics table at its result)."""
    rid = run.ncu_kernels().set_index("kernel_id").loc["d001", "result_id"]
    m = metrics[metrics.result_id == rid].set_index("metric").value
    stalled = sum(m[STALL.format(r)] for r in Y.STALLS if r != "selected")
    top = Y.top_stalls(cp, metrics)
    d001 = top[top.kernel_id == "d001"].set_index("rank")
    assert d001.loc[1, "stall"] == "long scoreboard: waiting on global/local memory loads (L1TEX)"
    assert d001.loc[1, "stall_share_pct"] == pytest.approx(100 * m[STALL.format("long_scoreboard")] / stalled)
    assert d001.loc[1, "stall_share_pct"] == pytest.approx(86.13, abs=0.01)
    assert d001.loc[1, "cycles_per_instruction"] == m[STALL.format("long_scoreboard")] == pytest.approx(49.940, abs=1e-3)
    assert stalled == pytest.approx(57.98, abs=0.01)
    assert d001.loc[2, "stall"].startswith("wait:")  # 2.57 cycles, the next largest
    assert d001.loc[2, "cycles_per_instruction"] == m[STALL.format("wait")] == pytest.approx(2.566, abs=1e-3)
    # three per kernel, largest first, and three shares never above 100 %
    assert top.groupby("kernel_id").size().eq(3).all() and len(top) == 3 * len(cp)
    assert (top.groupby("kernel_id").stall_share_pct.sum() <= 100).all()
    assert top.groupby("kernel_id").stall_share_pct.apply(lambda v: v.is_monotonic_decreasing).all()


def test_class_stalls_are_weighted_by_kernel_time(cp, metrics):
    cs = Y.class_stalls(cp, metrics).set_index(["class", "rank"])
    top = Y.top_stalls(cp, metrics, n=20)
    mb = top[(top["class"] == "memory-bound") & top.stall.str.startswith("long scoreboard")]
    expected = (mb.share * mb.stall_share_pct).sum() / mb.share.sum()
    assert cs.loc[("memory-bound", 1), "stall"].startswith("long scoreboard")
    assert cs.loc[("memory-bound", 1), "stall_share_pct"] == pytest.approx(expected)
    assert cs.loc[("memory-bound", 1), "kernels"] == (cp["class"] == "memory-bound").sum()


def test_occupancy_limiter_is_the_fewest_blocks(cp, metrics):
    occ = Y.occupancy(cp, metrics).set_index("kernel_id")
    lim = metrics[metrics.metric.str.startswith("launch__occupancy_limit_")]
    per = lim.pivot_table(index="result_id", columns="metric", values="value")
    for kid, rid in zip(cp.kernel_id, cp.result_id.astype(int)):
        assert occ.loc[kid, "blocks_per_sm"] == per.loc[rid].min()
    # d000 (nvjet 64x8, 384 threads, 168 registers, 165 KB shared): 1 block by registers and by shared memory
    # → 384 / 32 = 12 warps of 64: theoretical 18.75 %
    d000 = occ.loc["d000"]
    assert d000.limiter == "registers, shared memory" and d000.blocks_per_sm == 1
    assert d000.theoretical_occupancy_pct == pytest.approx(100 * 1 * (384 / 32) / 64)
    assert d000.limits_occupancy and not occ.loc["d001", "limits_occupancy"]  # d001 can fill the SM (100 %)
    assert occ.loc["d001", "limiter"] == "registers, warps" and occ.loc["d001", "blocks_per_sm"] == 8


def test_clock_readings_and_their_explanation(run, cp, metrics, dev):
    s = Y.clock_summary(metrics, dev.sm_clock_max_mhz)
    # the same readings straight from the metric table, one row per launch
    w = metrics[metrics.metric.isin([Y.SM_CLOCK, Y.GPC_CLOCK, Y.DURATION])].pivot_table(
        index="result_id", columns="metric", values="value")
    sm, gpc, us = w[Y.SM_CLOCK] / 1e6, w[Y.GPC_CLOCK] / 1e6, w[Y.DURATION] / 1e3
    assert dev.sm_clock_max_mhz == 1980 and s["results"] == len(w) == 75
    assert s["sm_min_mhz"] == pytest.approx(sm.min()) == pytest.approx(1763.9, abs=0.1)
    assert s["sm_max_mhz"] == pytest.approx(sm.max()) == pytest.approx(2241.7, abs=0.1)
    assert s["above"] == (sm > 1980).sum() == 41  # SM-counter readings above the maximum clock...
    assert s["gpc_max_mhz"] == pytest.approx(gpc.max()) and s["gpc_max_mhz"] < 1.01 * 1980  # ...the GPC clock stays near it
    # the readings beyond anything the GPC counter read are short kernels; those within it include vision encode's
    # millisecond copies, read at the clock the GPC itself ran (1992–1995 MHz on both counters)
    far = sm > gpc.max() * (1 + Y.CLOCK_SLACK)
    assert s["far"] == far.sum() == 29 and s["far_max_us"] == pytest.approx(us[far].max()) == pytest.approx(9.984)
    assert s["above_max_us"] == pytest.approx(us[sm > 1980].max()) == pytest.approx(1274.592)
    long_above = (sm > 1980) & ~far & (us > 100)
    assert long_above.sum() == 3 and ((sm - gpc).abs()[long_above] < 2).all()  # within 2 MHz of their GPC reading
    clk = Y.clocks(cp, metrics, dev.sm_clock_max_mhz).set_index("kernel_id")
    # d019 (2.7 µs, the shortest launch): 2242 MHz by the SM counter, 1986 by the GPC counter
    rid = int(run.ncu_kernels().set_index("kernel_id").loc["d019", "result_id"])
    assert clk.sm_clock_mhz.idxmax() == "d019" and clk.loc["d019", "duration_us"] == pytest.approx(us[rid])
    assert clk.loc["d019", "sm_clock_mhz"] == pytest.approx(sm[rid]) == pytest.approx(2241.7, abs=0.1)
    assert clk.loc["d019", "gpc_clock_mhz"] == pytest.approx(gpc[rid]) == pytest.approx(1986.2, abs=0.1)
    prose = YN.clock_prose(s, dev.display_name, "none")
    assert "41 are above" in prose and "1995 MHz" in prose and "29 launches reading more than 0.5 %" in prose
    assert "10.0 µs or less" in prose and "The other 12 read within that" in prose and "1274.6 µs" in prose


def test_runs_captured_before_the_rules_column_say_nothing_of_them(dev):
    from kernelbook.load.run import load_run

    from conftest import REPO

    old = load_run(REPO / "data" / "runs" / "llava-h100")
    c = C.classify(R.profiled_kernels(old), dev.ridge("bf16"))
    assert "rules" not in old.ncu_results().columns
    assert Y.nvidia_rules(c[c.phase == "decode"], old.ncu_results()) is None and YN.rules_prose(None) == ""


def test_nvidia_rules_beside_the_book_class_on_the_bundled_run(run, cp):
    """The re-captured bundled run carries NVIDIA's rule results: its verdicts agree with the book's class on all 20
    decode kernels. d005 (the nvjet expert GEMM), "Small Grid" to NVIDIA and balanced to the book in the capture
    before, is memory-bound to both now; d004 (the LM head) is "High Throughput", which supports memory-bound."""
    rules = Y.nvidia_rules(cp, run.ncu_results()).set_index("kernel_id")
    assert len(rules) == 20 and rules.agrees.sum() == 20
    assert rules.loc["d005", "nvidia_verdict"] == "High Memory Throughput" and rules.loc["d005", "class"] == "memory-bound"
    assert rules.loc["d004", "nvidia_verdict"] == "High Throughput" and rules.loc["d004", "agrees"]
    # agreement is the verdict's classes holding the book's class, kernel by kernel
    for kid, r in rules.iterrows():
        assert r.agrees == (r["class"] in Y.RULE_CLASSES[("SOLBottleneck", r.nvidia_verdict)])
    assert "agrees with the book's class for 20 of 20 kernels" in YN.rules_prose(rules.reset_index())


def test_nvidia_rules_beside_the_book_class_on_the_fixture(fixture_report):
    """The fixture's 4 launches (H200 decode): NVIDIA's SOLBottleneck verdicts are Small Grid, Small Grid, High
    Memory Throughput and Latency Issue. The book's rules on the same counters: results 0 and 1 are
    latency-bound (SM 9.7 / 8.8 %, memory 12.0 / 11.0 %, all < 30), result 2 memory-bound (memory 64.3 % ≥ 60,
    SM 22.5 %), result 3 balanced (memory 47.9 %: neither ≥ 60 nor < 30) — where NVIDIA says "Latency Issue"."""
    from kernelbook.capture.ncu_tables import derive

    metrics, results = fixture_report
    d = derive(metrics)
    c = pd.DataFrame({"kernel_id": [f"r{i}" for i in d.result_id], "friendly_name": list(results.function),
                      "result_id": d.result_id, "share": 0.25,
                      "class": [C.classify_row(s, m) for s, m in zip(d.sm_pct, d.memory_pct)]})
    assert list(c["class"]) == ["latency-bound", "latency-bound", "memory-bound", "balanced"]
    nv = Y.nvidia_rules(c, results).set_index("kernel_id")
    assert list(nv.nvidia_verdict) == ["Small Grid", "Small Grid", "High Memory Throughput", "Latency Issue"]
    assert list(nv.agrees) == [True, True, True, False]
    first = {r["rule"]: r for r in json.loads(results.rules[0]) if r["rule"] == "LaunchConfiguration"}
    # largest estimate first; a rule without a title goes by its name
    assert nv.loc["r0", "nvidia_advice"].startswith("Issue Slot Utilization (≤ 75 %); Theoretical Occupancy (≤ 75 %)")
    assert f"Small Grid (≤ {first['LaunchConfiguration']['speedup_pct']:.0f} %)" in nv.loc["r0", "nvidia_advice"]
    prose = YN.rules_prose(nv.reset_index())
    assert "agrees with the book's class for 3 of 4 kernels" in prose
    assert "NVIDIA says “Latency Issue”, the book says balanced" in prose
    # the card of a kernel shows NVIDIA's verdict
    why = Y.kernel_why(c.assign(theoretical_occupancy_pct=d.theoretical_occupancy_pct,
                                achieved_occupancy_pct=d.achieved_occupancy_pct), metrics, 1980, results)
    card = why["r3"].set_index("metric").value
    assert card["NVIDIA's bottleneck verdict"] == "Latency Issue" and card["stall 1: " + Y.STALLS["long_scoreboard"]] > 50
