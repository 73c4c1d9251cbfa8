"""The ncu stage's range pass (capture.ncu_ranges, issue 41): ncu in app-range replay with `--cache-control all`, the
caches flushed before each range, not between the kernels inside it. One range is the profiled decode step as a
whole; each profiled decode kernel gets a pair (its op call with the one before it) and the producer alone, in later
steps, and its reads in the loop are the difference. Checked on the eager dense capture (by op call) and on the MoE's
CUDA-graph capture (the whole step: a graph replay's kernels are not ranged one by one): in the loop a kernel reads
no more from DRAM than with every cache flushed, and a kernel whose operands exceed the L2 by far (the dense model's
65.5 MB lm_head against the H100's 50 MB) reads them all from DRAM either way; a step reads its weights at least once."""
import pandas as pd
import pytest

pytestmark = pytest.mark.gpu

LM_HEAD_BYTES = 32000 * 1024 * 2  # vocab × hidden, bf16 (tests/gpu/conftest.DENSE)


def _ranges(run) -> pd.DataFrame:
    info = run.manifest["ncu"].get("inloop")
    assert info, "the manifest records no range pass (the suite's captures ask for it: ncu_inloop=True)"
    assert info["error"] is None, info["error"]
    assert info["mode"] == "range" and info["cache_control"] == "all" and info["passes"] == 1, info
    r = pd.read_parquet(run.path / "ncu" / "ranges.parquet")
    assert len(r) == info["ranges"] and (r.kind == "step").sum() == 1
    return r


def test_the_eager_capture_has_in_loop_bytes(dense_run, record_property):
    r = _ranges(dense_run)
    k = dense_run.ncu_kernels()
    k = k[(k.status == "profiled") & (k.phase == "decode")]
    got = k[k.dram_read_bytes_inloop.notna()]
    record_property("decode_kernels_inloop", f"{len(got)} of {len(k)}")
    assert len(got) >= 0.8 * len(k), f"only {len(got)} of {len(k)} decode kernels carry in-loop reads"
    # per kernel: a little noise (ncu's own traffic, refresh), twice a range's as the difference of two ranges (H100: a
    # 34 kB copy read 102 kB in the loop), but never a flushed cache's worth more than cold
    over = got[got.dram_read_bytes_inloop > 1.10 * got.dram_read_bytes + 128e3]
    assert over.empty, over[["kernel_id", "name", "dram_read_bytes", "dram_read_bytes_inloop"]].to_string()
    head = got[got.dram_read_bytes >= 0.9 * LM_HEAD_BYTES]
    assert len(head), "no measured decode kernel reads the lm_head's 65.5 MB"
    record_property("lm_head_inloop_mb", round(head.dram_read_bytes_inloop.iloc[0] / 1e6, 2))
    assert head.dram_read_bytes_inloop.iloc[0] >= 0.8 * LM_HEAD_BYTES  # larger than the L2: from DRAM in the loop too
    step = r[r.kind == "step"].iloc[0]
    record_property("step_read_mb", round(step.dram_read_bytes / 1e6, 1))
    assert step.dram_read_bytes >= LM_HEAD_BYTES  # the whole step reads at least its largest weight once


def test_the_graph_capture_has_in_loop_bytes_and_names_the_absent_phase(moe_graphs_run, record_property):
    r = _ranges(moe_graphs_run)
    assert moe_graphs_run.manifest["ncu"]["phases_absent"] == ["vision_encode"]
    step = r[r.kind == "step"].iloc[0]
    k = moe_graphs_run.ncu_kernels()
    cold = k[(k.status == "profiled") & (k.phase == "decode")].dram_read_bytes.sum()
    record_property("moe_step_read_mb_inloop", round(step.dram_read_bytes / 1e6, 2))
    record_property("moe_profiled_kernels_read_mb_cold", round(cold / 1e6, 2))
    assert step.dram_read_bytes > 0 and step.range_ns > 0
