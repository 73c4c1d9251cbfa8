"""contract.shapes on shapes the bundled run recorded (data/runs/h100-deepseek-ocr-2, DeepSeek-OCR-2 in bf16 on an
H100): the aten op shapes of its decode GEMVs, prefill GEMMs, MoE products and attention, and the launch dimensions
ncu reported. The arithmetic is written out in each assertion; where ncu counted the same launch, its number is
checked against the shapes' (the tile padding of a GEMV, a GEMV reading its weights once)."""
import math

import pandas as pd
import pytest

from kernelbook.contract.shapes import (FLOPS_TOLERANCE, arg_shapes, attention_work, dim3, elementwise_work,
                                        expected_gemm_flops, gemm_dims, grid_blocks, implied_bytes, is_matvec,
                                        matvec_rows, numel)

BF16 = 2  # bytes per element of the run's dtype
Q_PROJ = "1x1280;1280x1280"  # decode: one token's 1280 activations through a 1280x1280 projection (d000)
DECODE_ATTENTION = "1x10x1x128;1x10x1161x128;1x10x1161x128;;;;;;;;;;"  # d008: one query, 1161 cached keys


def test_decode_q_proj_gemv():
    # aten::mm MxK · KxN: M = 1 token, K = N = 1280; the weight is the larger operand
    assert gemm_dims(Q_PROJ) == (1, 1, 1280, 1280, 1280 * 1280)
    assert is_matvec(Q_PROJ)
    assert expected_gemm_flops(Q_PROJ) == 2 * 1 * 1280 * 1280 == 3_276_800
    assert 1280 * 1280 * BF16 == 3_276_800  # 3.28 MB of bf16 weights
    # compulsory traffic: activations + weights read once, the 1x1280 output written once
    assert implied_bytes("aten::mm", Q_PROJ, "GEMV", BF16) == (
        BF16 * (1 * 1280 + 1280 * 1280), BF16 * 1 * 1280, "1×1280 · 1280×1280")


def test_decode_lm_head_and_router_are_matvecs():
    # lm_head over the 129,280-token vocabulary (d004)
    assert gemm_dims("1x1280;1280x129280") == (1, 1, 129280, 1280, 1280 * 129280)
    assert expected_gemm_flops("1x1280;1280x129280") == 2 * 1280 * 129280 == 330_956_800
    # the router's scores batched as 1x64x1 · 1x1x1: N = 1
    assert gemm_dims("1x64x1;1x1x1") == (1, 64, 1, 1, 64)
    assert is_matvec("1x64x1;1x1x1")


def test_decode_expert_bmm_puts_the_weights_first():
    # six routed experts' 1792x1280 weights times the token's 1280-vector (d005): bmm BxMxK · BxKxN
    shp = "6x1792x1280;6x1280x1"
    assert gemm_dims(shp) == (6, 1792, 1, 1280, 6 * 1792 * 1280)
    assert is_matvec(shp)
    assert expected_gemm_flops(shp) == 2 * 6 * 1792 * 1 * 1280 == 27_525_120
    assert implied_bytes("aten::bmm", shp, "GEMV", BF16) == (
        BF16 * 6 * (1792 * 1280 + 1280 * 1), BF16 * 6 * 1792 * 1, "6× 1792×1280 · 1280×1")


def test_prefill_gemm_and_addmm():
    # prefill's q_proj over 1129 tokens (p003): a GEMM, not a matvec
    shp = "1129x1280;1280x1280"
    assert gemm_dims(shp) == (1, 1129, 1280, 1280, max(1129 * 1280, 1280 * 1280))
    assert not is_matvec(shp)
    assert expected_gemm_flops(shp) == 2 * 1129 * 1280 * 1280 == 3_699_507_200
    # the vision tower's addmm: its 1-D bias comes first and is not an operand of the product
    assert gemm_dims("128;1728x896;896x128;;") == (1, 1728, 128, 896, 1728 * 896)
    assert expected_gemm_flops("128;1728x896;896x128;;") == 2 * 1728 * 128 * 896


def test_prefill_grouped_moe_gemm():
    # 6774 routed rows (1129 tokens x 6 experts) through 64 experts' 1280x1792 weights (p000)
    shp = "6774x1280;64x1280x1792;64;;"
    assert gemm_dims(shp) == (1, 6774, 1792, 1280, 64 * 1280 * 1792)
    assert expected_gemm_flops(shp) == 2 * 6774 * 1792 * 1280 == 31_075_860_480
    read, write, what = implied_bytes("aten::_grouped_mm", shp, "GEMM", BF16)
    assert read == BF16 * (6774 * 1280 + 64 * 1280 * 1792)  # every expert's weights are read
    assert write == BF16 * 6774 * 1792
    assert what == "6774×1280 routed rows · 64 experts' 1280×1792 weights"


def test_not_a_matrix_product():
    for shp in ("1x1x1280;;;", "64x1792x1280;", "", None, float("nan")):
        assert gemm_dims(shp) is None and not is_matvec(shp)
        assert math.isnan(expected_gemm_flops(shp))
    assert implied_bytes("aten::mean", "1x1x1280;;;", "reduction/norm", BF16) is None


def test_matvec_rows_one_answer_per_row():
    s = pd.Series([Q_PROJ, None, "1129x1280;1280x1280", Q_PROJ, "6x1792x1280;6x1280x1"], index=[5, 6, 7, 8, 9])
    assert matvec_rows(s).tolist() == [True, False, False, True, True]
    assert list(matvec_rows(s).index) == [5, 6, 7, 8, 9]


def test_argument_shapes_and_elements():
    assert arg_shapes("1x1x1280;;;") == [[(1, 1, 1280)], [], [], []]
    # a tensor-list argument (the KV cache's cat) gives one tuple per tensor
    assert arg_shapes("[1, 10, 1160, 128]x[1, 10, 1, 128];") == [[(1, 10, 1160, 128), (1, 10, 1, 128)], []]
    assert arg_shapes(None) == [[]]
    assert numel((1, 10, 1161, 128)) == 10 * 1161 * 128 == 1_486_080
    assert numel(()) == 1  # a scalar


def test_decode_attention_work_and_bytes():
    # one query against 1161 cached keys, 10 heads of 128: 4·B·H·Sq·Sk·D (QKᵀ and PV, an FMA two FLOPs)
    flops, nbytes = attention_work(DECODE_ATTENTION)
    assert flops == 4 * 1 * 10 * 1 * 1161 * 128 == 5_944_320
    q, kv = 1 * 10 * 1 * 128, 1 * 10 * 1161 * 128
    assert nbytes == BF16 * (2 * q + kv + kv)  # q read, the output (q-sized) written, K and V read
    read, write, what = implied_bytes("aten::_cudnn_attention_forward", DECODE_ATTENTION, "attention", BF16)
    assert (read, write) == (BF16 * (q + 2 * kv), BF16 * q)
    assert what == f"q 1×10×1×128 + K, V 1×10×1161×128 ({2 * kv * BF16 / 1e6:.2f} MB)" == (
        "q 1×10×1×128 + K, V 1×10×1161×128 (5.94 MB)")
    # prefill: 1129 queries against 1129 keys
    assert attention_work("1x10x1129x128;1x10x1129x128;1x10x1129x128;;;;;;;;;;")[0] == 4 * 10 * 1129 * 1129 * 128
    assert attention_work("1x1x1280;;;") is None  # not q, k, v of B×H×S×D


def test_elementwise_work_of_decode_ops():
    # rotary: q (1x10x1x128) times cos broadcast over the heads (1x1x1x128): reads both, writes q-sized
    assert elementwise_work("aten::mul", "1x10x1x128;1x1x1x128", BF16) == (
        BF16 * (1280 + 128 + 1280), float(1280 + 128))
    # RMSNorm's weight (1280) times the normalised token (1x1x1280)
    assert elementwise_work("aten::mul", "1280;1x1x1280", BF16) == (BF16 * (1280 + 1280 + 1280), 2560.0)
    # RMSNorm's mean of squares in float: reads 1280, writes one number
    assert elementwise_work("aten::mean", "1x1x1280;;;", 4) == (4 * (1280 + 1), 1280.0)
    # the router's softmax over 64 experts writes as many as it reads
    assert elementwise_work("aten::_softmax", "1x64;;", 4) == (4 * (64 + 64), 64.0)
    # copy_ reads src and writes self; cat reads its tensor list and writes as much
    assert elementwise_work("aten::copy_", "1x1x1280;1x1x1280;", BF16) == (BF16 * 2 * 1280, 0.0)
    assert elementwise_work("aten::cat", "[1, 10, 1, 64]x[1, 10, 1, 64];", 4) == (2 * 2 * 640 * 4, 0.0)
    assert all(math.isnan(x) for x in elementwise_work("aten::add", ";;", BF16))


def test_launch_dimensions():
    assert dim3("4x5") == "4x5x1" and dim3("128x24x1") == "128x24x1"
    assert dim3(None) == "?x1x1"  # never equal to a real launch
    # decode's expert-weight gather (d001) runs 6x1120 blocks; the lm_head GEMV (d004) 2x66
    assert grid_blocks("6x1120x1") == 6 * 1120 * 1 == 6720
    assert grid_blocks("2x66x1") == 132
    assert grid_blocks("") == 0.0 and grid_blocks(float("nan")) == 0.0


def test_shapes_against_what_ncu_counted(run):
    """ncu's counters of the same launches: the q_proj GEMV's tensor pipe does 8× its 2·M·N·K (the MMA tile pads
    the one-token dimension to 8) and reads its 3.28 MB of weights from DRAM once; prefill's q_proj GEMM counts
    within FLOPS_TOLERANCE of 2·M·N·K."""
    k = run.ncu_kernels().set_index("kernel_id")
    d000, p003 = k.loc["d000"], k.loc["p003"]
    assert d000.flops_tensor == 8 * 2 * 1 * 1280 * 1280 == 26_214_400
    assert d000.dram_bytes == 3_295_488
    assert d000.dram_bytes / (BF16 * 1280 * 1280) == pytest.approx(3_295_488 / 3_276_800)  # 1.0057: once
    assert p003.flops_tensor / (2 * 1129 * 1280 * 1280) == pytest.approx(3_748_659_200 / 3_699_507_200)
    assert abs(p003.flops_tensor / expected_gemm_flops("1129x1280;1280x1280") - 1) <= FLOPS_TOLERANCE
