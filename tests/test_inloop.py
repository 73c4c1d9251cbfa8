"""The in-loop figures of the bundled eager run (ncu's range pass, capture.ncu_ranges: each profiled decode kernel
with its producer minus the producer alone, caches flushed before each range) in the chapters: chapter 02's
producer → consumer verdicts, chapter 05's `counters` column, the cache-control note and the bytes ledger show the
measured in-loop DRAM reads beside the cold, flushed figures, say which figure each uses, and name what the pass
does not measure. CPU only."""
import pytest

from kernelbook.analyze import classify as C
from kernelbook.analyze import modules as M
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import roofline as R
from kernelbook.load.run import load_run
from kernelbook.narrate import modules as MN
from kernelbook.narrate import ncu_report as NN

EAGER = "data/runs/h100-deepseek-ocr-2"


@pytest.fixture(scope="module")
def eager():
    return load_run(EAGER)


@pytest.fixture(scope="module")
def fid(eager):
    return N.fidelity(eager.ncu_kernels(), eager.timeline, eager.manifest, eager.ncu_metrics())


def _expert_gemm(run) -> str:
    """The MoE expert GEMM after the gather (aten::index) that copied the routed experts: the 128x8 nvjet tile."""
    k = run.ncu_kernels()
    ids = k[(k.phase == "decode") & k.name.str.contains("nvjet_sm90_tst_128x8")].kernel_id
    assert len(ids) == 1
    return ids.iloc[0]


def test_the_expert_gemm_reads_a_third_in_the_loop(eager, fid):
    """The expert GEMM after the MoE gather: 27.56 MB read from DRAM with caches flushed, 8.56 MB in the loop (about a
    third: the gather has just written the rest to L2). Chapter 02's verdict and prose, the cache note and the byte
    check give the measured figure beside the cold one."""
    kid = _expert_gemm(eager)
    k = eager.ncu_kernels().set_index("kernel_id").loc[kid]
    assert eager.info.ncu.inloop.mode == "range" and eager.info.ncu.inloop.cache_control == "all"
    assert 0.25 < k.dram_read_bytes_inloop / k.dram_read_bytes < 0.4
    cold, inr = k.dram_read_bytes / 1e6, k.dram_read_bytes_inloop / 1e6
    row = fid.set_index("kernel_id").loc[kid]
    assert row.in_loop_l2 and (row.cold_read_bytes, row.inloop_read_bytes) == (k.dram_read_bytes, k.dram_read_bytes_inloop)
    assert row.in_context.startswith("producer → consumer")
    assert f"{inr:.2f} MB read from DRAM against {cold:.2f} MB with caches flushed before the launch" in row.in_context
    prose = NN.fidelity_prose(fid)
    assert f"{cold:.2f} MB read from DRAM with caches flushed, {inr:.2f} MB in the loop" in prose
    assert "stay on the cold, flushed counters" in prose and "does not measure by how much" not in prose
    note = NN.cache_control_note(eager.manifest, "05", N.in_loop_l2(fid), fid)
    assert f"{kid} {cold:.2f} MB flushed, {inr:.2f} MB in the loop" in note and "not measured by this capture" not in note
    bf = N.byte_fidelity(eager.ncu_kernels(), eager.timeline, eager.manifest, N.in_loop_l2(fid))
    assert f"{inr:.2f} MB read from DRAM against {cold:.2f} MB" in bf.set_index("kernel_id").loc[kid, "verdict"]


def test_what_the_range_pass_does_not_measure_is_named(eager, fid):
    """Prefill and vision-encode consumers (one step each: no later step to spread pairs over) and a decode kernel
    whose op call launches others beside it are read cold; the prose and the note name them, not 'all measured'."""
    in_loop = N.in_loop_l2(fid)
    measured = set(fid[fid.inloop_read_bytes.notna()].kernel_id)
    rest = sorted(in_loop - measured)
    assert rest and any(r.startswith(("p", "v")) for r in rest)
    note = NN.cache_control_note(eager.manifest, "05", in_loop, fid)
    assert NN.id_ranges(rest) in note and "the range pass measures decode kernels whose op call launches them alone" in note
    assert "the range pass measures decode kernels" in NN.fidelity_prose(fid)


def test_chapter_05_says_the_class_uses_the_flushed_counters(eager, fid):
    kid = _expert_gemm(eager)
    k = R.profiled_kernels(eager)
    dev, _, _ = R.for_run(eager, k)
    c = C.classify(k, dev.ridge("bf16"), C.Rules(), N.in_loop_l2(fid)).set_index("kernel_id")
    counters = c.loc[kid, "counters"]
    row = eager.ncu_kernels().set_index("kernel_id").loc[kid]
    assert counters.startswith("cold-cache figure (the class uses the flushed counters)")
    assert f"{row.dram_read_bytes / 1e6:.2f} MB read from DRAM; in the loop (measured) " \
           f"{row.dram_read_bytes_inloop / 1e6:.2f} MB" in counters
    # the class itself rests on the cold counters: the same class as without the in-loop set
    assert c.loc[kid, "class"] == C.classify(k, dev.ridge("bf16")).set_index("kernel_id").loc[kid, "class"]
    assert c.loc["d000", "counters"] == "cold cache, as in the loop"


def test_a_run_without_the_column_keeps_the_old_wording(eager, fid):
    kid = _expert_gemm(eager)
    old = eager.ncu_kernels().drop(columns=["dram_read_bytes_inloop"])
    f = N.fidelity(old, eager.timeline, eager.manifest, eager.ncu_metrics())
    assert f.inloop_read_bytes.isna().all() and kid in N.in_loop_l2(f)
    assert "measured in the loop" not in f.set_index("kernel_id").loc[kid, "in_context"]
    assert "this capture does not measure by how much" in NN.fidelity_prose(f)
    assert "not measured by this capture" in NN.cache_control_note(eager.manifest, "05", N.in_loop_l2(f), f)
    k = R.profiled_kernels(eager).drop(columns=["dram_read_bytes_inloop"], errors="ignore")
    c = C.classify(k, 300.0, C.Rules(), N.in_loop_l2(f)).set_index("kernel_id")
    assert c.loc[kid, "counters"] == "cold-cache figure, in-loop traffic lower (producer → consumer)"
    ledger = M.bytes_ledger(eager.timeline, old, 3e12)
    assert ledger.attrs["moved_basis"] == "cold"
    assert "DRAM reads measured in the loop" not in MN.ledger_prose(ledger, None, (3e12, "x"))


def test_the_ledger_moves_the_in_loop_reads(eager):
    """Where the run measured the loop, a profiled kernel's moved bytes are its in-loop DRAM reads (not reads +
    writes: its own output is written back later, under another launch). The eager run's MoE experts move less than
    with the cold counters, by each measured expert kernel's cold bytes − in-loop reads times its launches of the
    profiled shapes per step."""
    kern = eager.ncu_kernels()
    ledger = M.bytes_ledger(eager.timeline, kern, 3e12).set_index("module_type")
    cold = M.bytes_ledger(eager.timeline, kern.drop(columns=["dram_read_bytes_inloop"]), 3e12).set_index("module_type")
    assert ledger.attrs["moved_basis"] == "inloop_reads"
    assert ledger.loc["MoE experts", "moved_bytes"] < cold.loc["MoE experts", "moved_bytes"]
    gemm = kern.set_index("kernel_id").loc[_expert_gemm(eager)]
    per_launch = gemm.dram_bytes - gemm.dram_read_bytes_inloop
    saved = cold.loc["MoE experts", "moved_bytes"] - ledger.loc["MoE experts", "moved_bytes"]
    assert saved >= per_launch  # at least the expert GEMM's launch of the profiled shapes in each MoE layer
    _, says = MN.run_ledger(eager)
    assert "DRAM reads measured in the loop (ncu's range pass" in says and "Reads only" in says
