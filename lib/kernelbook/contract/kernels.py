"""Kernel identity: library, category, a friendly name and a one-line description, from the name.

Small pure predicates over the demangled kernel name (plus the aten op when the backend gives one),
tested on names collected from real captures. Part of the run's contract: capture writes these columns beside
each kernel and load recomputes them on read, so naming improvements reach old runs.
"""
from __future__ import annotations

import re
from enum import Enum

import numpy as np
import pandas as pd

from .shapes import matvec_rows
from ..i18n import N_


class Library(str, Enum):
    CUBLAS = "cuBLAS"
    CUTLASS = "CUTLASS"
    ATEN = "PyTorch ATen"
    FLASH = "FlashAttention"
    CUDNN = "cuDNN"
    TRITON = "Triton"
    NCCL = "NCCL"
    DRIVER = "CUDA driver"
    OTHER = "other"


class Category(str, Enum):
    GEMM = "GEMM"
    GEMV = "GEMV"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction/norm"
    COPY = "copy/cast"
    GATHER = "gather/index"
    MOE = "MoE routing/topk"
    MEMCPY = "memcpy/memset"
    COMM = "communication"
    OTHER = "other"


def is_nccl(n: str) -> bool:
    return "nccl" in n.lower()


def is_flash(n: str) -> bool:
    return bool(re.search(r"\bflash::|flash_fwd|flash_bwd|pytorch_flash::|fmha|_attention_|attn_fwd|"
                          r"efficient_attention|cutlass_fmha|FlashAttn", n))


def is_cublas(n: str) -> bool:
    return bool(re.search(r"\bnvjet|gemvx|gemv2[NT]|gemvNSP|gemv_kernel|cublas|sm\d+_xmma|xmma_gemm|"
                          r"^(void )?(ampere|sm80|sm90|hopper|volta|turing)_[a-z0-9_]*gemm|splitKreduce|"
                          r"gemmSN|gemmk1|cutlass_\d+_tensorop|cublasLt", n))


def is_cutlass(n: str) -> bool:
    return "cutlass" in n.lower()


def is_triton(n: str) -> bool:
    return n.startswith("triton_") or "triton" in n.lower()


def is_aten(n: str) -> bool:
    return "at::native" in n or "at::cuda" in n or "c10::" in n


def is_cudnn(n: str) -> bool:
    return "cudnn" in n.lower() or n.startswith(("void cudnn", "cudnn"))


def is_conv(n: str) -> bool:
    """A convolution run as an implicit GEMM (cuDNN's `implicit_convolve_sgemm`, its `fprop_implicit_gemm`
    kernels): a GEMM by its work, named for what it is."""
    return bool(re.search(r"implicit_convolve|convolve_sgemm|fprop_implicit_gemm|implicit_gemm_conv", n))


def is_simt_gemm(n: str) -> bool:
    """A GEMM on the CUDA cores, not the tensor cores: FP32 FMA tiles (`…_ffma`, `sgemm`), cuDNN's SIMT implicit
    GEMM (`implicit_convolve_sgemm`)."""
    return bool(re.search(r"_ffma|(?<![a-z])sgemm", n))


def is_attention_op(op: str | None) -> bool:
    """An aten op that runs fused attention: every kernel it launches is part of the attention, e.g.
    cuDNN's split-KV `lean_reduction_kernel` under `aten::_cudnn_attention_forward`, which combines the
    partial softmax results of the SDPA kernel before it."""
    return bool(re.search(r"aten::_(?:cudnn|flash|efficient)_attention|_scaled_dot_product_(?:cudnn|flash|efficient)",
                          op or "", re.I))


def library_of(name: str) -> Library:
    if name.startswith(("Memcpy", "Memset", "[memcpy", "[memset")):
        return Library.DRIVER
    if is_nccl(name):
        return Library.NCCL
    if is_flash(name) and not is_aten(name.split("(")[0]):
        return Library.FLASH
    if is_conv(name):  # cuDNN's convolutions, its xmma implicit-GEMM ones too (`sm90_xmma_fprop_implicit_gemm_…`)
        return Library.CUDNN
    if is_cublas(name):
        return Library.CUBLAS
    if is_cudnn(name):
        return Library.CUDNN
    if is_triton(name):
        return Library.TRITON
    if is_aten(name):
        return Library.ATEN
    if is_cutlass(name):
        return Library.CUTLASS
    return Library.OTHER


ELEMENTWISE_FUNCS = {
    "silu": "SiLU Activation", "gelu": "GELU Activation", "sigmoid": "Sigmoid", "tanh": "Tanh",
    "exp": "Exp", "rsqrt": "Rsqrt", "sqrt": "Sqrt", "neg": "Neg", "pow": "Pow", "abs": "Abs",
    "cos": "Cos", "sin": "Sin", "reciprocal": "Reciprocal", "clamp": "Clamp", "where": "Where",
    "Mul": "Elementwise Multiply", "mul": "Elementwise Multiply", "Add": "Elementwise Add",
    "add": "Elementwise Add", "Sub": "Elementwise Sub", "sub": "Elementwise Sub", "Div": "Elementwise Divide",
    "div": "Elementwise Divide", "fill": "Fill", "compare": "Compare", "eq": "Compare (==)",
    "ne": "Compare (!=)", "lt": "Compare (<)", "gt": "Compare (>)", "bitwise": "Bitwise", "log": "Log",
    "softplus": "Softplus", "relu": "ReLU", "threshold": "Threshold", "masked_fill": "Masked Fill",
    "arange": "Arange", "max": "Elementwise Max", "min": "Elementwise Min", "logical": "Logical op",
}


def _dtype(name: str) -> str:
    if re.search(r"bfloat16|BFloat16|bf16|__nv_bfloat16", name):
        return "BF16"
    if re.search(r"\bhalf\b|c10::Half|__half|fp16", name):
        return "FP16"
    if re.search(r"\bfloat\b|float32|fp32", name):
        return "float"
    if re.search(r"\blong\b|int64", name):
        return "int64"
    if re.search(r"\bint\b", name):
        return "int"
    if re.search(r"\bbool\b", name):
        return "bool"
    return ""


def category_of(name: str, op: str | None = None) -> Category:
    n = name
    low = n.lower()
    opl = (op or "").lower()
    if n.startswith(("Memcpy", "Memset", "[memcpy", "[memset")):
        return Category.MEMCPY
    if is_nccl(n):
        return Category.COMM
    if is_flash(n) or "attention" in low or "sdpa" in low or "flash_fprop" in low or is_attention_op(opl):
        return Category.ATTENTION
    if re.search(r"gemv|gemvx|gemmk1|gemmSN", n):
        return Category.GEMV
    if is_cublas(n) or re.search(r"gemm|xmma|nvjet|cutlass.*(tensorop|gemm)|wgmma|hgmma", low):
        return Category.GEMM
    if re.search(r"topk|sort|radix|bitonic|moe|expert|histogram|scan|cumsum", low) or opl in (
            "aten::topk", "aten::sort", "aten::cumsum", "aten::nonzero", "aten::one_hot"):
        return Category.MOE
    if re.search(r"norm|reduce_kernel|reduction|softmax|mean|welford|argmax|\bsum\b|_sum_", low):
        return Category.REDUCTION
    if re.search(r"index|gather|scatter|embedding|masked_scatter|take|put_|nonzero", low):
        return Category.GATHER
    if re.search(r"copy|(?<!no)cast|cat_|catarray|contiguous|transpose|permute|direct_copy|unrolled_elementwise.*copy|"
                 r"bf16_copy|float8_copy", low) or opl in ("aten::copy_", "aten::to", "aten::cat",
                                                            "aten::contiguous", "aten::_to_copy", "aten::clone"):
        return Category.COPY
    if re.search(r"elementwise|vectorized|unrolled|pointwise|launch_kernel|triton_poi", low):
        return Category.ELEMENTWISE
    return Category.OTHER


def _elementwise_func(name: str, op: str | None) -> str | None:
    for key in (re.findall(r"native::(?:\(anonymous namespace\)::|<unnamed>::)?(\w+?)(?:_kernel|Functor|_cuda)",
                           name) + re.findall(r"(\w+)Functor", name)):
        for k, v in ELEMENTWISE_FUNCS.items():
            if key == k or key.lower().startswith(k.lower()):
                return v
    if op:
        base = op.replace("aten::", "").rstrip("_")
        for k, v in ELEMENTWISE_FUNCS.items():
            if base == k.lower() or base == k:
                return v
    return None


def friendly_name(name: str, op: str | None = None) -> str:
    """A short human name in the style of the reference report, e.g. 'GEMV (BF16, template=7)'."""
    dt = _dtype(name)
    cat = category_of(name, op)
    lib = library_of(name)
    short = short_name(name)
    if cat == Category.MEMCPY:
        return name.split("(")[0].strip("[] ")
    if cat == Category.GEMV:
        tpl = re.search(r"gemvx?<[^>]*?\(int\)(\d+)", name) or re.search(r"\(int\)(\d+)", name)
        return f"GEMV ({dt or 'mixed'}{', template=' + tpl.group(1) if tpl else ''})"
    if cat == Category.GEMM:
        tile = re.search(r"(\d+)x(\d+)(?:x(\d+))?", short)
        dt = dt or ("FP32" if re.search(r"f32f32|_f32_", name) else "")
        simt = ", CUDA cores" if is_simt_gemm(name) else ""
        if is_conv(name):
            return f"cuDNN Convolution ({dt or 'mixed'}, implicit GEMM{simt})"
        kind = "nvjet" if "nvjet" in name else ("CUTLASS" if lib == Library.CUTLASS else "cuBLAS")
        # a bias epilogue is another kernel of the same tile (`…_coopB_bias_TNN` beside `…_coopB_TNN`)
        bias = ", bias" if re.search(r"(?:^|_)bias(?:_|$)", short) else ""
        return f"{kind} GEMM ({dt or 'mixed'}{', ' + tile.group(0) + ' tile' if tile else ''}{bias}{simt})"
    if cat == Category.ATTENTION:
        if "lean_reduction" in name:
            return f"cuDNN Split-KV Reduction ({dt or 'mixed'})"
        if "splitkv_combine" in name or "combine" in name:
            return "Flash Split-KV Combine"
        if "splitkv" in name:
            return f"Flash Forward Split-KV ({dt or 'mixed'})"
        if "sdpa" in name.lower():
            return f"cuDNN SDPA Flash Forward ({'FP16/BF16' if 'f16' in name else dt or 'mixed'})"
        if "flash" in name.lower():
            return f"Flash Attention Forward ({dt or 'mixed'})"
        return f"Memory-Efficient Attention ({dt or 'mixed'})"
    vec = ", vec" if "vectorized" in name else ""
    if cat == Category.COPY:
        if "CatArray" in name:
            return f"Cat Batched Copy ({dt or 'mixed'}{vec})"
        if "direct_copy" in name or "copy_kernel" in name:
            return f"Direct Copy ({dt or 'mixed'}{vec})"
        return f"Copy/Cast ({dt or 'mixed'}{vec})"
    if cat == Category.REDUCTION:
        for key, label in (("rms", "RMSNorm"), ("layer_norm", "LayerNorm"), ("softmax", "Softmax"),
                           ("Mean", "Mean Reduction"), ("mean", "Mean Reduction"), ("argmax", "Argmax"),
                           ("Sum", "Sum Reduction"), ("sum", "Sum Reduction"), ("norm", "Norm")):
            if key in name:
                return f"{label} ({dt or 'mixed'})"
        return f"Reduction ({dt or 'mixed'})"
    if cat == Category.ELEMENTWISE:
        func = _elementwise_func(name, op) or "Elementwise"
        return f"{func} ({dt or 'mixed'}{vec})"
    if cat == Category.GATHER:
        for key, label in (("index_select", "Index Select"), ("indexSelect", "Index Select"),
                           ("scatter", "Scatter"), ("gather", "Gather"), ("index", "Index"),
                           ("embedding", "Embedding")):
            if key in name:
                return f"{label} ({dt or 'mixed'})"
    if cat == Category.MOE:
        for key, label in (("topk", "Top-k"), ("sort", "Sort"), ("Radix", "Radix Sort"), ("scan", "Scan"),
                           ("cumsum", "Cumsum")):
            if key in name:
                return f"{label} ({dt or 'mixed'})"
    return short[:60]


# one line per category, English in the data (timeline parquet, report.md); the display layer shows it
# in the narrative language (a text cell whose value is a catalog key)
DESCRIPTIONS = {
    Category.GEMV: N_("Matrix-vector product: one token's activations against a weight matrix (memory-bound)"),
    Category.GEMM: N_("Matrix-matrix product on tensor cores (projections, MLPs, patch embedding)"),
    Category.ATTENTION: N_("Fused attention over the KV cache / image tokens"),
    Category.ELEMENTWISE: N_("Pointwise arithmetic or activation; a fusion candidate"),
    Category.REDUCTION: N_("Reduction or normalization across a dimension"),
    Category.COPY: N_("Data movement: layout change, concatenation or dtype cast"),
    Category.GATHER: N_("Indexed read or write (embedding, index_select, scatter)"),
    Category.MOE: N_("MoE routing: top-k, sort, scan or expert bookkeeping"),
    Category.MEMCPY: N_("Driver memory copy or set"),
    Category.COMM: N_("Collective communication"),
    Category.OTHER: N_("Other kernel"),
}


# a GEMM-category kernel on the CUDA cores (`is_simt_gemm`) is described apart from the tensor-core GEMMs
SIMT_GEMM = N_("Matrix-matrix product on the CUDA cores (FP32 FMA, no tensor cores): a convolution as an implicit "
               "GEMM, or an FP32 GEMM")


def short_name(name: str) -> str:
    """The function name without return type, namespaces, template and parameter lists."""
    s = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    depth, out = 0, []
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).split("(")[0].strip()
    s = s.split(" ")[-1]
    return s.split("::")[-1] or name[:60]


def annotate(df: pd.DataFrame) -> pd.DataFrame:
    """Add short_name, library, category, friendly_name, description (computed once per unique name). Each
    added column holds one Python string per distinct value, shared by the rows (dtype object): a timeline of
    10⁶ rows costs 8 bytes a row for each, not a copy of the text."""
    codes, names = pd.factorize(df["name"])  # names in order of first appearance; code −1: no name
    # one identity per kernel name: the op most often launching it names the function for elementwise
    if "op" in df:
        op_of = df.dropna(subset=["op"]).groupby("name")["op"].agg(lambda s: s.value_counts().index[0])
    else:
        op_of = pd.Series(dtype=object)
    rows = []
    for n in names:
        op = op_of.get(n)
        cat = category_of(n, op)
        rows.append((short_name(n), library_of(n).value, cat.value, friendly_name(n, op),
                     SIMT_GEMM if cat == Category.GEMM and is_simt_gemm(n) else DESCRIPTIONS[cat]))
    added = ["short_name", "library", "category", "friendly_name", "description"]
    ident = np.array([*rows, (np.nan,) * len(added)], dtype=object).reshape(len(rows) + 1, len(added))
    out = df.drop(columns=[c for c in added if c in df.columns]).reset_index(drop=True)
    for j, c in enumerate(added):
        out[c] = pd.Series(ident[codes, j], index=out.index, dtype=object)  # code −1 reads the NaN row
    if "op_shapes" in out:
        # category by the work done, on every row, so that no chapter sees the name's category and another
        # the work's: a cuBLAS GEMM kernel running a matrix-vector product (lm_head in decode) is a GEMV
        gemv = out["category"].eq(Category.GEMM.value) & matvec_rows(out["op_shapes"])
        out.loc[gemv, "category"] = Category.GEMV.value
        out.loc[gemv, "description"] = DESCRIPTIONS[Category.GEMV]
    return out


IDENTITY_COLUMNS = ["friendly_name", "category", "library", "description"]


def identity(timeline: pd.DataFrame) -> pd.DataFrame:
    """One identity per (phase, kernel name), indexed by both: the category (and the rows' names and
    description) that holds most of that kernel's time in that phase. Every per-kernel table joins this,
    so a kernel's category is the one its time was counted under in the phase's category shares."""
    cols = [c for c in IDENTITY_COLUMNS if c in timeline]
    if timeline.empty:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=["phase", "name"]))
    t = timeline.groupby(["phase", "name", "category"], as_index=False, sort=False).agg(
        duration_ns=("duration_ns", "sum"), **{c: (c, "first") for c in cols if c != "category"})
    t = t.sort_values("duration_ns", ascending=False, kind="stable").drop_duplicates(["phase", "name"])
    return t.set_index(["phase", "name"])[cols]


def with_identity(kernels: pd.DataFrame, timeline: pd.DataFrame, cols: list[str] | None = None) -> pd.DataFrame:
    """`kernels` (one row per profiled kernel, with `phase` and `name`) with the timeline's identity
    columns (`cols`, default all of IDENTITY_COLUMNS) replacing any it carried."""
    ident = identity(timeline)
    cols = [c for c in (cols or IDENTITY_COLUMNS) if c in ident]
    k = kernels.drop(columns=[c for c in cols if c in kernels])
    return k.join(ident[cols], on=["phase", "name"])


_KEY_DROP = {"void", "unsigned", "long", "int", "short", "char", "bool", "const", "anonymous", "namespace",
             "unnamed", "lambda", "instance", "signed", "struct", "class", "operator"}


_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long long|long|char|short|bool)\)(\d+)")
_NV_LAMBDA = re.compile(r"\[lambda\(([^()]*)\) \(instance (\d+)\)\]")
_PAREN_GROUP = re.compile(r"\([^()]*\)")


def name_key(name: str) -> str:
    """A demangler-independent key for one kernel instantiation.

    Kineto prints `{lambda()#1}`, `(anonymous namespace)`, `2ul`, `false` and full parameter types;
    NVIDIA's tools print `[lambda() (instance 1)]`, `<unnamed>`, `(unsigned long)2`, `(bool)0` and
    template placeholders (`const T1 &`). Both reduce to the same template-argument tokens once casts
    and lambdas are normalized and every parenthesized list is dropped.
    """
    s = name.replace("(anonymous namespace)", "unnamed").replace("<unnamed>", "unnamed")
    s = _NV_LAMBDA.sub(lambda m: f"{{lambda#{m.group(2)}}}", s)
    s = _CAST.sub(lambda m: m.group(1), s)
    s = re.sub(r"\{lambda\([^()]*\)#", "{lambda#", s)
    while True:
        t = _PAREN_GROUP.sub("", s)
        if t == s:
            break
        s = t
    s = re.sub(r"\bfalse\b", "0", re.sub(r"\btrue\b", "1", s))
    out = []
    for t in re.findall(r"\d+[A-Za-z]*|[A-Za-z_][A-Za-z0-9_]*", s):
        if t in _KEY_DROP:
            continue
        m = re.fullmatch(r"(\d+)(?:ul|u|l|ll|ull)?", t)
        out.append(m.group(1) if m else t)
    return " ".join(out)
