"""The in-loop figures (ncu's in-loop pass: `--cache-control none`, one replay pass, capture.ncu_stage._inloop) on the
graph run with the pass's measured columns restored (conftest.with_inloop; the committed run leaves them out): chapter 02's producer → consumer verdicts, chapter 05's `counters` column and the bytes ledger
show the measured in-loop DRAM reads beside the cold, flushed figures, and say which figure each uses. CPU only."""
import pytest

from conftest import with_inloop
from kernelbook.analyze import classify as C
from kernelbook.analyze import modules as M
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import roofline as R
from kernelbook.load.run import load_run

GRAPHS = "h100-variant-static-graphs"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return load_run(with_inloop(GRAPHS, tmp_path_factory.mktemp("inloop")))


@pytest.fixture(scope="module")
def fid(graphs):
    return N.fidelity(graphs.ncu_kernels(), graphs.timeline, graphs.manifest, graphs.ncu_metrics())


def test_the_expert_gemm_reads_a_third_in_the_loop(graphs, fid):
    """d005, the expert GEMM after the MoE gather: 27.56 MB read from DRAM with caches flushed, 9.01 MB in the loop
    (about a third: the gather has just written the rest to L2), 13.98 → 9.98 µs."""
    k = graphs.ncu_kernels().set_index("kernel_id").loc["d005"]
    assert graphs.info.ncu.inloop.cache_control == "none" and graphs.info.ncu.inloop.passes == 1
    assert k.dram_read_bytes == 27557632 and k.dram_read_bytes_inloop == 9009920
    assert k.dram_read_bytes_inloop / k.dram_read_bytes == pytest.approx(9009920 / 27557632)  # 0.327
    assert 0.25 < k.dram_read_bytes_inloop / k.dram_read_bytes < 0.4
    assert (k.duration_ns, k.duration_ns_inloop) == (13984, 9984)
    d5 = fid.set_index("kernel_id").loc["d005"]
    assert d5.in_loop_l2 and (d5.cold_read_bytes, d5.inloop_read_bytes) == (27557632, 9009920)
    assert d5.inloop_us == pytest.approx(9.984)
    # chapter 02's verdict and prose give the measured figures beside the cold ones
    assert d5.in_context.startswith("producer → consumer")
    assert "9.01 MB read from DRAM against 27.56 MB with caches flushed, 9.98 µs against 13.98 µs" in d5.in_context
    prose = N.fidelity_prose(fid)
    assert "27.56 MB read from DRAM with caches flushed, 9.01 MB in the loop (33 %); 13.98 µs flushed, 9.98 µs" in prose
    assert "stay on the cold, flushed counters" in prose and "does not measure by how much" not in prose
    note = N.cache_control_note(graphs.manifest, "05", N.in_loop_l2(fid), fid)
    assert "d005 27.56 MB flushed, 9.01 MB in the loop" in note and "not measured by this capture" not in note
    bf = N.byte_fidelity(graphs.ncu_kernels(), graphs.timeline, graphs.manifest, N.in_loop_l2(fid))
    assert "9.01 MB read from DRAM against 27.56 MB" in bf.set_index("kernel_id").loc["d005", "verdict"]


def test_chapter_05_says_the_class_uses_the_flushed_counters(graphs, fid):
    k = R.profiled_kernels(graphs)
    dev, _, _ = R.for_run(graphs, k)
    c = C.classify(k, dev.ridge("bf16"), C.Rules(), N.in_loop_l2(fid)).set_index("kernel_id")
    d5 = c.loc["d005", "counters"]
    assert d5.startswith("cold-cache figure (the class uses the flushed counters)")
    assert "27.56 MB read from DRAM, 13.98 µs" in d5 and "in the loop (measured) 9.01 MB, 9.98 µs" in d5
    # the class itself rests on the cold counters: the same class as without the in-loop set
    assert c.loc["d005", "class"] == C.classify(k, dev.ridge("bf16")).set_index("kernel_id").loc["d005", "class"]
    assert c.loc["d000", "counters"] == "cold cache, as in the loop"


def test_a_run_without_the_columns_keeps_the_old_wording(graphs, fid):
    cols = [c for c in graphs.ncu_kernels().columns if c.endswith("_inloop")]
    old = graphs.ncu_kernels().drop(columns=cols)
    f = N.fidelity(old, graphs.timeline, graphs.manifest, graphs.ncu_metrics())
    assert f.inloop_read_bytes.isna().all() and "d005" in N.in_loop_l2(f)
    assert "measured in the loop" not in f.set_index("kernel_id").loc["d005", "in_context"]
    assert "this capture does not measure by how much" in N.fidelity_prose(f)
    assert "not measured by this capture" in N.cache_control_note(graphs.manifest, "05", N.in_loop_l2(f), f)
    k = R.profiled_kernels(graphs).drop(columns=cols, errors="ignore")
    c = C.classify(k, 300.0, C.Rules(), N.in_loop_l2(f)).set_index("kernel_id")
    assert c.loc["d005", "counters"] == "cold-cache figure, in-loop traffic lower (producer → consumer)"
    ledger = M.bytes_ledger(graphs.timeline, old, 3e12)
    assert ledger.attrs["moved_basis"] == "cold"
    assert "measured in the loop" not in M.ledger_prose(ledger, None, (3e12, "x"))


def test_the_ledger_moves_the_in_loop_reads(graphs):
    """Where the run measured the loop, a profiled kernel's moved bytes are its in-loop DRAM reads (not reads + writes:
    in-loop writes are the L2's write-backs, other kernels' among them). The graph run's MoE experts (d005, and the
    kernels of the module ncu did not reach) move less than with the cold counters, by each profiled expert kernel's
    cold − in-loop bytes times its launches per step."""
    kern = graphs.ncu_kernels()
    ledger = M.bytes_ledger(graphs.timeline, kern, 3e12).set_index("module_type")
    cold = M.bytes_ledger(graphs.timeline, kern.drop(columns=[c for c in kern.columns if c.endswith("_inloop")]),
                          3e12).set_index("module_type")
    assert ledger.attrs["moved_basis"] == "inloop_reads"
    tl = graphs.timeline
    steps = tl[tl.phase == "decode"].step.nunique()
    saved = cold.loc["MoE experts", "moved_bytes"] - ledger.loc["MoE experts", "moved_bytes"]
    # d005 (the expert GEMM) and the compiled step's two expert gathers (d001, d002: attributed to the experts,
    # analyze.modules.attributed_modules), each launch per step × (cold read + write − in-loop read)
    expect = 0.0
    for kid in ("d001", "d002", "d005"):
        d = kern.set_index("kernel_id").loc[kid]
        per_step = ((tl.phase == "decode") & (tl.name == d["name"])).sum() / steps
        expect += per_step * (d.dram_bytes - d.dram_read_bytes_inloop)
    assert saved == pytest.approx(expect, rel=1e-6)
    _, says = M.run_ledger(graphs)
    assert "DRAM reads measured in the loop" in says and "Reads only" in says
