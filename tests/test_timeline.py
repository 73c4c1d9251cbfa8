"""Timeline ingest and chapter 01 arithmetic on the bundled H200 capture."""
import numpy as np
import pandas as pd
import pytest

from conftest import REPO, RUN
from kernelbook.analyze import timeline as T
from kernelbook.contract.kernels import Category, category_of, friendly_name, library_of, short_name
from kernelbook.contract.shapes import is_matvec
from kernelbook.load.trace import ingest_torch_trace
from kernelbook.narrate import timeline as TN


def test_busy_time_counts_overlap_once():
    start = np.array([0, 5, 20, 22])
    end = np.array([10, 12, 25, 23])
    assert T.busy_ns(start, end) == (12 - 0) + (25 - 20)


def test_raw_trace_ingests_to_the_committed_timeline(run):
    tl, phases = ingest_torch_trace(RUN / "raw" / "trace.json.gz")
    assert len(tl) == len(run.timeline) == 52223 + int((run.timeline.kind != "kernel").sum())
    assert (tl.phase.value_counts().sort_index() == run.timeline.phase.value_counts().sort_index()).all()
    assert phases.phase.value_counts()["decode"] == 63


def test_phase_summary_arithmetic(run):
    s = T.phase_summary(run.timeline, run.phases).set_index("phase")
    d = run.timeline[run.timeline.phase == "decode"]
    assert s.loc["decode", "kernels"] == (d.kind == "kernel").sum()
    assert s.loc["decode", "launches_per_step"] == pytest.approx((d.kind == "kernel").sum() / 63)
    # each step from its range's start to its range's end or its last kernel's end, whichever is later
    ranges = run.phases[run.phases.phase == "decode"].groupby("step").agg(start=("start_ns", "min"), end=("end_ns", "max"))
    last = d[d.kind.isin(["kernel", "memcpy", "memset"])].groupby("step").end_ns.max()
    wall = (np.maximum(ranges.end, last.reindex(ranges.index).fillna(0)) - ranges.start).sum()
    busy = T.busy_ns(d.start_ns.to_numpy(), d.end_ns.to_numpy())
    assert s.loc["decode", "idle_pct"] == pytest.approx(100 * (1 - busy / wall))
    assert s.loc["decode", "idle_pct"] > 50  # decode is launch-bound on this run


@pytest.mark.parametrize("run_dir", ["data/runs/h100-variant-static-graphs", "data/studies/h100-serving/runs/batch_size-8",
                                     "data/runs/h200-deepseek-decoder-tp2-b1"])
def test_a_phase_lasts_at_least_its_gpu_work(run_dir):
    """Under CUDA graphs a decode step's host range ends once the graph is launched (1.6 ms at batch 8) while its
    kernels run 5.3 ms: the phase's wall runs to the last kernel, so the GPU is never busy more than 100 % of it."""
    from kernelbook.load.run import load_run

    r = load_run(REPO / run_dir)
    s = T.phase_summary(r.timeline, r.phases).dropna(subset=["wall_ms"])  # 'other': kernels outside every range
    assert len(s) >= 2 and (s.gpu_busy_ms <= s.wall_ms * (1 + 1e-9)).all(), s[["phase", "wall_ms", "gpu_busy_ms"]].to_string()
    from kernelbook.analyze.steps import profiled_steps

    st = profiled_steps(r)  # and each profiled decode step
    assert len(st) and (st.busy_ms <= st.wall_ms * (1 + 1e-9)).all(), st.to_string()


def test_top_kernels_shares_are_of_phase_time(run):
    t = T.top_kernels(run.timeline, "decode", 15)
    d = run.timeline[(run.timeline.phase == "decode") & (run.timeline.kind == "kernel")]
    first = d[d.name == t.loc[0, "name"]]
    assert t.loc[0, "time_pct"] == pytest.approx(100 * first.duration_ns.sum() / d.duration_ns.sum())
    assert t.loc[0, "calls"] == len(first)


def test_matvec_gemm_counts_as_gemv():
    assert is_matvec("1x1280;1280x1280") and is_matvec("6x1792x1280;6x1280x1")
    assert not is_matvec("1129x1280;1280x1280")
    shares = pd.DataFrame({"phase": ["decode"] * 2, "category": ["GEMM", "GEMM"],
                           "op_shapes": ["1x1280;1280x1280", "64x1280;1280x1280"], "duration_ns": [3, 1]})
    assert T.category_shares(shares).set_index("category").loc["GEMV", "pct"] == pytest.approx(75.0)


@pytest.mark.parametrize("name,lib,cat", [
    ("nvjet_sm90_tst_16x64_64x16_4x1_v_bz_TNN", "cuBLAS", Category.GEMM),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     "PyTorch ATen", Category.GATHER),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0",
     "cuDNN", Category.ATTENTION),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "PyTorch ATen", Category.ELEMENTWISE),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4>)", "PyTorch ATen", Category.REDUCTION),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 1, false>(at::cuda::detail::TensorInfo<float const, "
     "unsigned int>, unsigned int)", "PyTorch ATen", Category.MOE),
])
def test_identity_of_real_kernel_names(name, lib, cat):
    assert library_of(name).value == lib
    assert category_of(name) == cat
    assert friendly_name(name)


def test_split_kv_reduction_counts_as_attention(run):
    """cuDNN's decode attention runs as the SDPA kernel and `lean_reduction_kernel`, which combines its
    split-KV partial results, both under `aten::_cudnn_attention_forward`; the reduction (756 launches,
    1.56 ms in decode) was counted as reduction/norm, so attention's decode share was short by it."""
    t = run.timeline
    lean = t[t.name.str.contains("lean_reduction_kernel")]
    assert len(lean) == 756 and set(lean.op) == {"aten::_cudnn_attention_forward"}
    assert set(lean.category) == {"attention"}
    assert friendly_name(lean.name.iloc[0], "aten::_cudnn_attention_forward") == "cuDNN Split-KV Reduction (float)"
    d = t[t.phase == "decode"]  # shares are of all decode GPU work; the op's memsets stay memcpy/memset
    att = d[(d.op == "aten::_cudnn_attention_forward") & (d.kind == "kernel")].duration_ns.sum()
    share = T.category_shares(t).set_index(["phase", "category"]).loc[("decode", "attention"), "pct"]
    assert share == pytest.approx(100 * att / d.duration_ns.sum())


def test_every_bundled_kernel_has_identity(run):
    assert run.timeline.friendly_name.notna().all()
    # one tile, two kernels: the vision encoder's GEMMs with and without a bias epilogue read apart
    a, b = (friendly_name(f"nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB{e}_TNN", "aten::addmm") for e in ("_bias", ""))
    assert a == "nvjet GEMM (mixed, 192x192 tile, bias)" and b == "nvjet GEMM (mixed, 192x192 tile)"
    assert short_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<int, 4>(int)") == \
        "CatArrayBatchedCopy"


def test_gemms_on_the_cuda_cores_are_named_apart_from_tensor_core_ones(run):
    """Two GEMM-category kernels of the bundled run do no tensor-core work (ncu: no tensor FLOPs): the vision
    encoder's patch convolution, `implicit_convolve_sgemm` (cuDNN's, not cuBLAS's), and a prefill FP32 GEMM
    (`sm80_xmma_gemm_f32f32_…_ffma`). They were named 'cuBLAS GEMM (BF16)' and 'cuBLAS GEMM (mixed, …)' and
    described as a product on tensor cores."""
    from kernelbook.analyze import roofline as R
    from kernelbook.contract.kernels import DESCRIPTIONS, SIMT_GEMM

    t = run.timeline
    conv = t[t.name.str.contains("implicit_convolve_sgemm")].iloc[0]
    assert conv.friendly_name == "cuDNN Convolution (BF16, implicit GEMM, CUDA cores)" and conv.library == "cuDNN"
    ffma = t[t.name.str.contains("xmma_gemm_f32f32") & t.name.str.contains("ffma")].iloc[0]
    assert ffma.friendly_name.startswith("cuBLAS GEMM (FP32, 128x32x8 tile") and ffma.friendly_name.endswith(
        ", CUDA cores)")
    for row in (conv, ffma):
        assert row.category == "GEMM" and row.description == SIMT_GEMM
    # cuDNN's tensor-core convolutions (xmma implicit GEMM) are cuDNN's too, and not on the CUDA cores
    fprop = t[t.name.str.contains("xmma_fprop_implicit_gemm")]
    assert len(fprop) and set(fprop.library) == {"cuDNN"} and set(fprop.friendly_name) == {
        "cuDNN Convolution (BF16, implicit GEMM)"} and set(fprop.description) == {DESCRIPTIONS[Category.GEMM]}
    # ncu agrees: neither runs tensor-core FLOPs, while every GEMM named without ", CUDA cores" does
    k = R.profiled_kernels(run)
    gemm = k[k.category == "GEMM"]
    simt = gemm.name.map(lambda n: "CUDA cores" in friendly_name(n))
    assert (gemm[simt].flops_tensor.fillna(0) == 0).all() and len(gemm[simt]) >= 2
    assert (gemm[~simt].flops_tensor > 0).all()
    assert DESCRIPTIONS[Category.GEMM].startswith("Matrix-matrix product on tensor cores")


def test_nocast_elementwise_kernels_are_not_casts(run):
    """`gpu_kernel_impl_nocast<...MulFunctor...>` is a multiply, not a dtype cast (seen in the bundled run)."""
    from kernelbook.contract.kernels import category_of, friendly_name

    names = [n for n in run.timeline.name.unique() if "gpu_kernel_impl_nocast" in n and "MulFunctor" in n]
    assert names
    for n in names:
        assert category_of(n).value == "elementwise"
        assert friendly_name(n).startswith("Elementwise Multiply")


def test_two_pass_join_recovers_shapes_on_the_real_timeline(run):
    """The timed pass has no shapes and other start times; the shapes pass is the bundled timeline."""
    from kernelbook.load.trace import join_shapes

    shaped = run.timeline
    rng = np.random.default_rng(0)
    timing = shaped.assign(op_shapes=None, start_ns=shaped.start_ns + rng.integers(0, 50, len(shaped)).cumsum())
    joined, stats = join_shapes(timing, shaped)
    assert len(joined) == len(timing) and list(joined.columns) == list(timing.columns)
    k = shaped.kind == "kernel"
    assert stats["kernels_matched"] == stats["kernels"] == int(k.sum()) and stats["matched_pct"] == 100
    assert stats["instances_identical"] == stats["instances"]
    back = joined.set_index("start_ns").op_shapes
    want = timing.assign(s=shaped.op_shapes).set_index("start_ns").s
    assert (back.reindex(want.index).fillna("") == want.fillna("")).all()
    # a pass that diverged: decode step 5 lost its first kernel in the shapes pass, and one launch of
    # step 6 names another op — the rest still match, those launches get no shapes
    d5 = shaped[(shaped.phase == "decode") & (shaped.step == 5) & k].sort_values("start_ns")
    d6 = shaped[(shaped.phase == "decode") & (shaped.step == 6) & k].sort_values("start_ns")
    bad = shaped.drop(index=d5.index[0]).copy()
    bad.loc[d6.index[3], "op"] = "aten::something_else"
    joined, stats = join_shapes(timing, bad)
    assert stats["instances_identical"] == stats["instances"] - 1
    # launches of step 5 named like the dropped one shift by one occurrence, so only the last has no
    # partner; plus the renamed op of step 6
    assert stats["kernels"] - stats["kernels_matched"] == 2


def test_reference_comparison_states_measured_padding_and_the_expert_gather(run):
    """Chapter 01 said the GEMM tiles pad M to 16–128 rows, where chapter 02 measures 8.00× (the vector
    padded to 8 rows), and put the GEMV gap to the reference on HBM vs GDDR7, which nothing measures."""
    from kernelbook.analyze.ncu_report import fidelity

    text = TN.reference_prose(T.reference_comparison(T.category_shares(run.timeline)), run)
    assert "16-128" not in text and "GDDR7" not in text
    f = fidelity(run.ncu_kernels(), run.timeline)
    f = f[f.matvec.astype(bool)].set_index("kernel_id").flops_ratio
    # d000: 1x1280 · 1280x1280 counted as 8 rows; d005 (6 experts, N = 1): 8 × 2048/1792 = 9.14
    assert f["d000"] == pytest.approx(8.0) and f["d005"] == pytest.approx(8 * 2048 / 1792)
    assert f"{f.min():.2f}–{f.max():.2f}×" in text  # 8.00–9.14×
    d = run.timeline[run.timeline.phase == "decode"]
    gather = d[(d.op == "aten::index") & d.op_shapes.isin(["64x1280x896;", "64x1792x1280;"])]
    gemv = T.category_shares(run.timeline).set_index(["phase", "category"]).pct[("decode", "GEMV")]
    pct = 100 * gather.duration_ns.sum() / d.duration_ns.sum()
    assert f"{pct:.1f} % of decode kernel time" in text and f"{gemv + pct:.1f} %" in text


def test_decode_gaps_lie_inside_the_decode_steps(run):
    """Chapter 01 said 1300 ms of decode is spent in gaps beside 1330 ms of decode wall and 142 ms GPU busy:
    the gaps ran across step boundaries, through generate's own work between forwards."""
    gaps = T.kernel_gaps_us(run.timeline, "decode")
    d = run.timeline[run.timeline.phase == "decode"]
    # per step: its span minus its busy time is its idle time, all of it in gaps between its kernels
    idle_us = sum((g.end_ns.max() - g.start_ns.min() - T.busy_ns(g.start_ns.to_numpy(), g.end_ns.to_numpy())) / 1e3
                  for _, g in d.groupby("step"))
    assert gaps.sum() == pytest.approx(idle_us)
    s = T.phase_summary(run.timeline, run.phases).set_index("phase").loc["decode"]
    assert gaps.sum() / 1e3 <= s.wall_ms - s.gpu_busy_ms  # 1182 ms ≤ 1330 − 142 ms
    assert len(gaps) == len(d) - 63  # no gap before a step's first kernel


def test_profiler_overhead_sentence_divides_what_it_names(run):
    """'phases above sum to 1.473 s under the profiler (1.58× the plain run)' divided 1.614 s (the whole
    profiled generate) by 1.023 s; 1.473 / 1.023 = 1.44."""
    tl = run.manifest["timeline_info"]
    summary = T.phase_summary(run.timeline, run.phases)
    text = TN.phase_prose(summary, run.manifest)
    ratio = tl["profiled_generate_s"] / tl["plain_generate"]["median_s"]
    assert f"it took {tl['profiled_generate_s']:.3f} s ({ratio:.2f}× the plain run)" in text  # 1.614 s, 1.58×
    assert f"{summary.wall_ms.sum() / 1e3:.3f} s of it in the phases above" in text  # 1.473 s, a part of it
    assert summary.wall_ms.sum() / 1e3 < tl["profiled_generate_s"]


def test_the_step_curve_says_which_plain_step_it_quotes(run):
    """Chapter 01 quotes the plain decode step three ways (the median generate's mean step in the headline, the
    first and last steps here, their total in the check): the step curve's figures are each step's median over the
    plain generates, and the sentence says so, or a reader takes 21.3 against 17.9 ms for a contradiction (the nsys
    pair's run)."""
    from kernelbook.narrate import steps as SN

    assert "each step's median over the plain generates, not their mean" in SN.prose(run)
