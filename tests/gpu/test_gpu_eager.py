"""The eager capture (the dense model's run, as the book's one command captured it): timeline with phases and
steps, every selected kernel profiled by ncu with cache control all, and the counters checked against the shapes:
counted FLOPs against 2·M·N·K, a GEMV's DRAM bytes against its weights (also on the MoE model's graph capture,
whose batched expert GEMVs read the experts gathered for each token)."""
import json
import re

import pytest

pytestmark = pytest.mark.gpu

MIN_GEMV_WEIGHT_BYTES = 1 << 20  # below ~1 MB the vector, the output and ncu's own traffic are a visible share
# cuBLAS's nvjet kernels name their tile (M x N), K step and cluster: nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT
NVJET_TILE = re.compile(r"^nvjet_\w*?_(\d+)x(\d+)_(\d+)x\d+_(\d+)x(\d+)_")
# The matrix product's own kernel. A split-K GEMM's separate reduction (cublasLt::splitKreduce_kernel, cuBLAS's
# reduce_1Block_kernel) is launched by the same aten op and takes its shapes, but sums partial results: it moves
# neither the weights nor 2·M·N·K (on llava-h100: 41 kB of DRAM and 0.1 % of the FLOPs of its 33 MB GEMV).
GEMM_KERNEL = re.compile(r"nvjet|gemm|gemv|cutlass", re.I)
SPLIT_K_REDUCTION = re.compile(r"splitKreduce|reduce_1Block", re.I)


def is_product(name: str) -> bool:
    return bool(GEMM_KERNEL.search(name or "")) and not SPLIT_K_REDUCTION.search(name or "")


def test_the_timeline_has_every_phase_and_step(dense_run):
    import pandas as pd

    tl, ph = dense_run.timeline, dense_run.phases
    n = dense_run.manifest["params"]["max_new_tokens"]
    k = tl[tl.kind == "kernel"]
    assert {"prefill", "decode"} <= set(k.phase) and "vision_encode" not in set(k.phase)  # a text model
    assert set(k[k.phase == "prefill"].step) == {0} and set(ph[ph.phase == "prefill"].step) == {0}
    assert set(k[k.phase == "decode"].step) == set(range(1, n)) == set(ph[ph.phase == "decode"].step)
    assert (ph.duration_ns > 0).all()
    # every step of every plain generate timed (steps.parquet)
    steps = pd.read_parquet(dense_run.path / "steps.parquet")
    dec = steps[steps.phase == "decode"]
    assert dec.trial.nunique() == dense_run.manifest["params"]["timing_trials"]
    assert all(set(g.step) == set(range(1, n)) for _, g in dec.groupby("trial"))


def test_every_selected_kernel_is_profiled_with_cache_control_all(dense_run):
    info = dense_run.manifest["ncu"]
    assert (info["cache_control"], info["clock_control"]) == ("all", "none")
    assert info["mode"].startswith("by position") and "--cache-control all" in info["command"]
    k = dense_run.ncu_kernels()
    tl = dense_run.timeline
    p = dense_run.manifest["params"]
    for ph in p["ncu_phases"]:
        sel = k[k.phase == ph]
        n = min(p["ncu_top_n"], tl[(tl.phase == ph) & (tl.kind == "kernel")].name.nunique())
        assert info["phases"][ph]["error"] is None and len(sel) == n
        missed = sel[sel.status != "profiled"]
        assert missed.empty, missed[["kernel_id", "name", "status"]].to_string()
    # the worker marked every op call it was pointed at (each selected kernel's representative launch)
    targets = json.loads((dense_run.path / "ncu" / "targets.json").read_text())
    assert info["op_check"]["checked"] == sum(len(v) for v in targets.values()) > 0, info["op_check"]


def tile_padded(name: str, op_shapes: str) -> list[float]:
    """The work an nvjet GEMM's tensor pipe does ÷ 2·M·N·K: M and N padded to its tile times its cluster, K to its
    K step, in either orientation (cuBLAS may compute the transposed product). Empty for other kernels."""
    from kernelbook.contract.shapes import gemm_dims

    m, g = NVJET_TILE.match(name or ""), gemm_dims(op_shapes)
    if not m or g is None:
        return []
    a, b, kt, ca, cb = map(int, m.groups())
    _, rows, cols, depth, _ = g
    pad = lambda x, t: -(-x // t) * t  # noqa: E731
    kf = pad(depth, kt) / depth
    return [pad(rows, a * ca) * pad(cols, b * cb) / (rows * cols) * kf,
            pad(rows, b * cb) * pad(cols, a * ca) / (rows * cols) * kf]


def test_counted_flops_match_two_m_n_k(dense_run, record_property):
    """Tensor FLOPs ÷ 2·M·N·K of each profiled matrix kernel within ±5 % (contract.shapes.FLOPS_TOLERANCE) of 1, or of
    the tile padding its name gives (a GEMV on tensor cores pads its vector dimension to the MMA tile: 8× and more;
    a GEMM whose N is no multiple of the tile pads the last one: 1024 columns in 192-wide tiles do 1152)."""
    from kernelbook.analyze.ncu_report import fidelity
    from kernelbook.contract.shapes import FLOPS_TOLERANCE

    k = dense_run.ncu_kernels()
    fid = fidelity(k, dense_run.timeline).dropna(subset=["flops_ratio"]).merge(k[["kernel_id", "name"]])
    fid["padded"] = [tile_padded(n, s) for n, s in zip(fid.name, fid.op_shapes)]
    fid["ok"] = [abs(r - 1) <= FLOPS_TOLERANCE or any(abs(r / p - 1) <= FLOPS_TOLERANCE for p in pads)
                 for r, pads in zip(fid.flops_ratio, fid.padded)]
    record_property("flops_ratio", {r.kernel_id: [r.name[:48], r.op_shapes, round(r.flops_ratio, 3),
                                                  [round(p, 3) for p in r.padded]] for r in fid.itertuples()})
    fid = fid[fid.name.map(is_product)]
    assert len(fid) and not fid.grouped.any() and not fid.cuda_core.any()  # bf16 on tensor cores, no MoE here
    assert (~fid.matvec).any(), "no GEMM (only GEMVs) among the profiled kernels"
    assert fid.ok.all(), fid[["kernel_id", "name", "op_shapes", "flops_ratio", "padded"]].to_string()


@pytest.mark.parametrize("which", ["dense_run", "moe_graphs_run"])
def test_a_gemvs_dram_bytes_are_its_weights(which, request, record_property):
    """Under `--cache-control all` ncu flushes the caches before each replay pass, so a decode GEMV reads its
    weights from DRAM once: its DRAM bytes within 15 % of the weight bytes its shapes give (each profiled GEMV
    kernel with at least 1 MB of weights; a batched MoE GEMV's weights are the experts gathered for it, 805 MB at
    batch 32)."""
    from kernelbook.analyze.ncu_report import BYTES_TOLERANCE, DTYPE_BYTES, byte_fidelity, element_bytes
    from kernelbook.contract.shapes import gemm_dims

    run = request.getfixturevalue(which)
    bf = byte_fidelity(run.ncu_kernels(), run.timeline, run.manifest)
    names = run.ncu_kernels().set_index("kernel_id").name
    gemv = bf[(bf.category == "GEMV") & bf.kernel_id.map(names).map(is_product)].copy()
    elem = DTYPE_BYTES[run.manifest["params"]["dtype"]]
    gemv["weight_bytes"] = [gemm_dims(s)[4] * element_bytes(names[kid], elem)
                            for kid, s in zip(gemv.kernel_id, gemv.op_shapes)]
    big = gemv[gemv.weight_bytes >= MIN_GEMV_WEIGHT_BYTES]
    big = big.assign(ratio=big.dram_bytes / big.weight_bytes)
    record_property("gemv_dram_over_weights", {r.kernel_id: [r.op_shapes, round(r.ratio, 4)] for r in big.itertuples()})
    assert len(big), f"no profiled GEMV with ≥ 1 MB of weights:\n{bf.to_string()}"
    show = big[["kernel_id", "phase", "op_shapes", "weight_bytes", "dram_bytes", "ratio"]].to_string()
    assert ((big.ratio - 1).abs() <= BYTES_TOLERANCE).all(), show
