"""The ncu stage's in-loop pass (capture.ncu_stage._inloop): the same launches again with `--cache-control none`
and one replay pass each, so a kernel's DRAM bytes are the ones it causes with the L2 as the loop left it. Checked
on the eager dense capture (by op call) and on the MoE's CUDA-graph capture (node by node), against the main pass's
cold-cache bytes: in the loop a kernel can read no more from DRAM than with every cache flushed (its writes may
hold other kernels' write-backs: seen on the H100, 3.1 MB in the loop against 1.2 MB cold), and a kernel
whose operands exceed the L2 by far (the dense model's 65.5 MB lm_head against the H100's 50 MB) reads them all
from DRAM either way."""
import pytest

pytestmark = pytest.mark.gpu

LM_HEAD_BYTES = 32000 * 1024 * 2  # vocab × hidden, bf16 (tests/gpu/conftest.DENSE)


def _inloop(run):
    info = run.manifest["ncu"].get("inloop")
    assert info, "the manifest records no in-loop pass (the suite's captures ask for it: ncu_inloop=True)"
    assert info["error"] is None, info["error"]
    assert info["passes"] == 1, f"in-loop kernels needed {info['passes']} replay passes: later ones read a warm L2"
    k = run.ncu_kernels()
    k = k[k.status == "profiled"]
    assert {"dram_bytes_inloop", "dram_read_bytes_inloop", "duration_ns_inloop", "l2_bytes_inloop"} <= set(k.columns)
    got = k[k.dram_bytes_inloop.notna()]
    assert len(got) == len(k), f"{len(k) - len(got)} profiled kernels lack in-loop figures"
    return got


def _no_more_than_cold(k, record_property, label):
    cold, warm = k.dram_read_bytes.sum(), k.dram_read_bytes_inloop.sum()
    record_property(f"{label}_dram_read_mb_cold", round(cold / 1e6, 2))
    record_property(f"{label}_dram_read_mb_inloop", round(warm / 1e6, 2))
    record_property(f"{label}_dram_write_mb", [round(k.dram_write_bytes.sum() / 1e6, 2),
                                               round(k.dram_write_bytes_inloop.sum() / 1e6, 2)])
    # per kernel: a little noise (ncu's own traffic, refresh) but never a flushed cache's worth more
    over = k[k.dram_read_bytes_inloop > 1.10 * k.dram_read_bytes + 64e3]
    assert over.empty, over[["kernel_id", "name", "dram_read_bytes", "dram_read_bytes_inloop"]].to_string()
    assert warm <= 1.02 * cold


def test_the_eager_capture_has_in_loop_bytes(dense_run, record_property):
    k = _inloop(dense_run)
    _no_more_than_cold(k, record_property, "dense")
    head = k[(k.phase == "decode") & (k.dram_bytes >= 0.9 * LM_HEAD_BYTES)]
    assert len(head), "no decode kernel reads the lm_head's 65.5 MB"
    r = head.iloc[0]
    record_property("lm_head_inloop_over_cold", round(r.dram_bytes_inloop / r.dram_bytes, 3))
    assert r.dram_read_bytes_inloop >= 0.8 * LM_HEAD_BYTES  # larger than the L2: from DRAM in the loop too


def test_the_graph_capture_has_in_loop_bytes_and_names_the_absent_phase(moe_graphs_run, record_property):
    k = _inloop(moe_graphs_run)
    _no_more_than_cold(k, record_property, "moe_graphs")
    assert moe_graphs_run.manifest["ncu"]["phases_absent"] == ["vision_encode"]
    gap = (k.dram_read_bytes - k.dram_read_bytes_inloop).max()
    record_property("moe_largest_cold_minus_inloop_mb", round(gap / 1e6, 2))
