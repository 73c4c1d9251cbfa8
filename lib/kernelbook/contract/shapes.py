"""Shape arithmetic: what an aten op's recorded input shapes and a launch's dimensions say about its work.

The timeline records each launch's aten op and its input shapes as one string, one argument per `;`:
`'1x1280;1280x1280'` (a tensor per argument, dims joined by `x`), `'[1, 10, 64]x[1, 10, 64];'` (a tensor-list
argument), an empty field for a scalar. From it, the one place every analysis takes them from:
- matrix products: (batch, M, N, K, weight elements) (`gemm_dims`), whether one is a matrix-vector product
  (`is_matvec`, `matvec_rows`), their useful work 2·M·N·K (`expected_gemm_flops`) and how far ncu's counted
  FLOPs may stray from it (`FLOPS_TOLERANCE`);
- the compulsory DRAM traffic of a matrix or attention launch (`implied_bytes`);
- the work of a fused attention forward (`attention_work`) and of an elementwise, copy or reduction launch
  (`elementwise_work`);
- launch dimensions as the tools write them: `dim3` ('6x1' → '6x1x1'), `grid_blocks` (thread blocks of a grid).

Chapter 02's FLOP and byte checks, chapter 04's useful work and chapter 06's what-if read these.
Pure functions on strings, numbers and Series; nothing above the base floor.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..i18n import N_, tr

# Fidelity target: a matrix kernel's counted tensor FLOPs ÷ 2·M·N·K of its shapes within ±5 %.
FLOPS_TOLERANCE = 0.05

_LIST = re.compile(r"\[([\d, ]*)\]")


def readable(op_shapes: str) -> str:
    """aten input shapes as one readable form: '1x10x1x128;1x10x1130x128;;;' and '[1, 10, 1160, 128]x[1, 10, 1, 128];'
    both become '1×10×1×128 · 1×10×1130×128'; empty slots dropped ('' where none is left)."""
    s = str(op_shapes).strip()
    if "[" in s:
        parts = [p.replace(" ", "").split(",") for p in re.findall(r"\[([^\]]*)\]", s)]
    else:
        parts = [p.split("x") for p in s.split(";")]
    return " · ".join(o for o in ("×".join(d for d in p if d) for p in parts) if o)


def arg_shapes(op_shapes: str | None) -> list[list[tuple[int, ...]]]:
    """The recorded input shapes per argument: '2x3;4;' -> [[(2, 3)], [(4,)], []]; a tensor-list argument
    ('[1, 10, 64]x[1, 10, 64]') gives one tuple per tensor; scalars and unparsable arguments give []."""
    out = []
    for arg in (op_shapes if isinstance(op_shapes, str) else "").split(";"):
        if "[" in arg:
            out.append([tuple(int(x) for x in m.split(",") if x.strip()) for m in _LIST.findall(arg)])
            continue
        try:
            out.append([tuple(int(x) for x in arg.split("x"))] if arg else [])
        except ValueError:
            out.append([])
    return out


def numel(shape: tuple[int, ...]) -> int:
    """Elements of a tensor of `shape` (a scalar, shape (), has one)."""
    return int(np.prod(shape)) if shape else 1


def _broadcast(shps: list[tuple[int, ...]]) -> tuple[int, ...]:
    n = max(len(s) for s in shps)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shps]
    return tuple(max(col) for col in zip(*padded))


# --- matrix products ----------------------------------------------------------------------------------

def gemm_dims(op_shapes: str | None) -> tuple[int, int, int, int, int] | None:
    """(batch, M, N, K, weight elements) of an aten matrix product from its recorded input shapes:
    mm/linear 'MxK;KxN' (activations may carry leading dims), bmm 'BxMxK;BxKxN', addmm with its
    1-D bias first, grouped_mm 'TxK;ExKxN' (each token through one expert). The weight is the larger
    input operand (decode bmm puts the expert weights first). None when the shapes are not a matrix product."""
    if not isinstance(op_shapes, str) or ";" not in op_shapes:
        return None
    try:
        dims = [[int(x) for x in s.split("x")] for s in op_shapes.split(";") if s]
    except ValueError:
        return None
    if len(dims) >= 3 and len(dims[0]) == 1:  # addmm(bias, mat1, mat2)
        dims = dims[1:]
    if len(dims) < 2:
        return None
    a, b = dims[0], dims[1]
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return a[0], a[1], b[2], a[2], max(a[0] * a[1] * a[2], b[0] * b[1] * b[2])
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:  # grouped: tokens x K, experts x K x N
        return 1, a[0], b[2], a[1], b[0] * b[1] * b[2]
    if len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:
        return 1, int(np.prod(a[:-1])), b[1], a[-1], max(int(np.prod(a)), b[0] * b[1])
    return None


def is_matvec(op_shapes: str | None) -> bool:
    """True when an aten mm/bmm/linear input pair is a matrix-vector product (M or N is 1)."""
    g = gemm_dims(op_shapes)
    return g is not None and (g[1] == 1 or g[2] == 1)


def matvec_rows(op_shapes: pd.Series) -> pd.Series:
    """`is_matvec` of every row, computed once per distinct shape string (a decode has ~10^5 rows and a
    few hundred distinct shapes)."""
    codes, uniques = pd.factorize(op_shapes)
    flags = np.append(np.fromiter((is_matvec(u) for u in uniques), bool, len(uniques)), False)
    return pd.Series(flags[codes], index=op_shapes.index)  # code -1 (no shapes) reads the appended False


def expected_gemm_flops(op_shapes: str | None) -> float:
    """2·M·N·K (× batch) FLOPs from an aten matrix product's recorded input shapes (see `gemm_dims`); NaN when
    the shapes are not a matrix product."""
    g = gemm_dims(op_shapes)
    return np.nan if g is None else 2.0 * g[0] * g[1] * g[2] * g[3]


# --- bytes and work -----------------------------------------------------------------------------------

def implied_bytes(op: str | None, op_shapes: str | None, category: str | None, elem_bytes: int
                  ) -> tuple[float, float, str] | None:
    """(read bytes, write bytes, what) a launch must move between DRAM and the SMs if each operand is
    read once and the output written once, at `elem_bytes` bytes per element: a matrix product's weights +
    activations and its output (a grouped MoE GEMM reads every expert's weights), an attention kernel's q, K
    and V (the KV cache in decode) and its output. `what` names the operands in the narrative language.
    None where the shapes do not say."""
    if category in ("GEMM", "GEMV"):
        g = gemm_dims(op_shapes)
        if g is None:
            return None
        b, m, n, k, w = g
        if op == "aten::_grouped_mm":
            return (float(elem_bytes) * (m * k + w), float(elem_bytes) * m * n,
                    tr("{m}×{k} routed rows · {experts} experts' {k}×{n} weights", m=m, k=k, n=n,
                       experts=w // (k * n)))
        return (float(elem_bytes) * b * (m * k + k * n), float(elem_bytes) * b * m * n,
                f"{'%d× ' % b if b > 1 else ''}{m}×{k} · {k}×{n}")
    if category == "attention":
        args = [a[0] for a in arg_shapes(op_shapes) if a]
        if len(args) < 3 or any(len(t) != 4 for t in args[:3]):
            return None
        q, kk, v = args[:3]
        kv = numel(kk) + numel(v)
        # an attention mask or bias (the 4th argument, 4-D: SAM's relative-position bias in vision encode, 23 MB for
        # 25×12×196×196) is read once too, as attention_work counts it
        mask = args[3] if len(args) > 3 and len(args[3]) == 4 else None
        what = f"q {'×'.join(map(str, q))} + K, V {'×'.join(map(str, kk))} ({kv * elem_bytes / 1e6:.2f} MB)"
        if mask is not None:
            what += tr(" + mask {shape}", shape="×".join(map(str, mask)))
        return (float(elem_bytes) * (numel(q) + kv + (numel(mask) if mask is not None else 0)),
                float(elem_bytes) * numel(q), what)
    return None


def attention_work(op_shapes: str) -> tuple[float, float] | None:
    """(tensor FLOPs, bytes) of a fused attention forward from q, k, v (and mask) shapes B×H×S×D: 4·B·H·Sq·Sk·D
    FLOPs (QKᵀ and PV, an FMA two), and 2 bytes per element of q, k, v, the mask and the output (q-sized);
    None when the first three arguments are not 4-D."""
    args = [a[0] for a in arg_shapes(op_shapes) if a]
    if len(args) < 3 or any(len(t) != 4 for t in args[:3]):
        return None
    (b, h, sq, dh), k = args[0], args[1]
    sk = k[2]
    flops = 4.0 * b * h * sq * sk * dh
    nbytes = 2.0 * (2 * numel(args[0]) + numel(k) + numel(args[2]) + sum(numel(t) for t in args[3:4]))
    return flops, nbytes


# ops whose shapes give the tensor indexed, not how much of it is read: no byte count from the shapes
_SELECTS = {"aten::index", "aten::index_copy_", "aten::index_select", "aten::gather", "aten::embedding",
            "aten::index_put_", "aten::scatter_", "aten::masked_select"}


def elementwise_bytes(op: str | None, op_shapes: str | None, dtype_bytes: int) -> tuple[float, float] | None:
    """(read bytes, write bytes) of an elementwise/copy/reduction launch from its aten input shapes if each
    operand is read once and the output written once, at `dtype_bytes` per element (the accounting of
    `elementwise_work`, split): cat and copy_ write what they read (copy_ reads its source, writes its
    destination), fill_ only writes, an in-place op writes its first input, a reduction its result. None when
    the shapes do not say."""
    if not isinstance(op, str) or not isinstance(op_shapes, str) or op in _SELECTS:
        return None
    args = [a for a in arg_shapes(op_shapes) if a]
    if not args:
        return None
    tensors = [t for a in args for t in a]
    read = sum(numel(t) for t in tensors)
    if op == "aten::cat":
        return float(read) * dtype_bytes, float(read) * dtype_bytes
    if op == "aten::fill_":
        return 0.0, float(numel(args[0][0])) * dtype_bytes
    if op == "aten::copy_" and len(tensors) >= 2:
        return float(numel(tensors[1])) * dtype_bytes, float(numel(tensors[0])) * dtype_bytes
    if op.endswith("_"):
        out = numel(args[0][0])
    elif op in ("aten::_softmax", "aten::native_layer_norm"):
        out = numel(args[0][0])
    elif "reduction" in op or op in ("aten::mean", "aten::sum"):
        out = 1
    else:
        out = numel(_broadcast([a[0] for a in args]))
    return float(read) * dtype_bytes, float(out) * dtype_bytes


def elementwise_work(op: str, op_shapes: str, dtype_bytes: int) -> tuple[float, float]:
    """(bytes moved, CUDA-core ops) of an elementwise/copy/reduction launch from its aten input shapes, at
    `dtype_bytes` bytes per element: the inputs read and the (broadcast) output written, ~1 op per output
    element; in-place ops write their first input, cat writes what it reads. (nan, nan) when the shapes do
    not say."""
    args = [a for a in arg_shapes(op_shapes) if a]
    if not args:
        return np.nan, np.nan
    tensors = [t for a in args for t in a]
    read = sum(numel(t) for t in tensors)
    if op == "aten::cat":
        return 2.0 * read * dtype_bytes, 0.0
    if op == "aten::fill_":
        return float(numel(args[0][0])) * dtype_bytes, 0.0
    if op == "aten::copy_":
        return float(read) * dtype_bytes, 0.0
    if op.endswith("_"):  # in place: reads its inputs, writes its first
        out = numel(args[0][0])
    elif "reduction" in op or op in ("aten::mean", "aten::sum", "aten::_softmax", "aten::native_layer_norm"):
        out = numel(args[0][0]) if op in ("aten::_softmax", "aten::native_layer_norm") else 1
    else:
        out = numel(_broadcast([a[0] for a in args]))
    return float(read + out) * dtype_bytes, float(max(out, read))


def iterated_elements(op: str, op_shapes: str) -> float:
    """Elements an elementwise/copy launch iterates over, from its aten input shapes: the (broadcast) output,
    the first input of an in-place op, the destination of a copy, all inputs of a cat. nan when the shapes do
    not say."""
    args = [a for a in arg_shapes(op_shapes) if a]
    if not args:
        return np.nan
    if op == "aten::cat":
        return float(sum(numel(t) for a in args for t in a))
    if op.endswith("_"):  # in place (copy_, fill_, masked_fill_): the first argument is written
        return float(numel(args[0][0]))
    return float(numel(_broadcast([a[0] for a in args])))


# --- launch dimensions --------------------------------------------------------------------------------

def dim3(s) -> str:
    """'6x1' → '6x1x1' so launch dimensions compare across tools (None stays unmatched: '?x1x1')."""
    parts = str(s).split("x") if s is not None else ["?"]
    while len(parts) < 3:
        parts.append("1")
    return "x".join(parts)


def grid_blocks(grid) -> float:
    """Thread blocks of a grid written '6x1120x1' (0 when unreadable)."""
    try:
        return float(np.prod([int(v) for v in str(grid).split("x")]))
    except ValueError:
        return 0.0


# --- useful work of pointwise ops and the MMA tile's padding ------------------------------------------

# aten ops whose useful arithmetic is one FLOP per output element (a binary op; its in-place form)
_ONE_PER_OUTPUT = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::add_", "aten::sub_", "aten::mul_",
                   "aten::div_"}
# reductions: one add per input element
_ONE_PER_INPUT = {"aten::sum", "aten::mean"}


def elementwise_flops(op: str | None, op_shapes: str | None) -> tuple[float, str] | None:
    """(useful FLOPs, basis) of a pointwise or reduction launch from its aten shapes: one FLOP per output
    element of a binary arithmetic op (add, sub, mul, div, broadcast as aten does), one per input element of a
    sum or mean; a copy or cat does none (0). None for ops whose FLOPs per element the shapes do not fix
    (silu, rsqrt, softmax, topk, ...). `basis` is the rule in words (English; a catalog key)."""
    if not isinstance(op, str) or not isinstance(op_shapes, str):
        return None
    tensors = [a[0] for a in arg_shapes(op_shapes) if a]
    if not tensors:
        return None
    if op in _ONE_PER_OUTPUT:
        return float(numel(_broadcast(tensors))), N_("1 FLOP per output element")
    if op in _ONE_PER_INPUT:
        return float(numel(tensors[0])), N_("1 FLOP per input element")
    if op in ("aten::copy_", "aten::cat", "aten::index", "aten::index_copy_", "aten::fill_"):
        return 0.0, N_("a copy: no arithmetic")
    return None


_TILE_CLUSTER = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_")
_TILE = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_")


def tile_padding(kernel_name: str | None, op_shapes: str | None) -> tuple[float, str] | None:
    """The factor by which a tiled matrix kernel's MMA work exceeds 2·M·N·K because M and N are rounded up
    to its tile (and, for nvjet's `_<BM>x<BN>_<BK>x<stages>_<cm>x<cn>_` names, to its cluster of tiles), with
    the padded shape in words ('1×1280 → 8×1280'): (padded M·N) ÷ (M·N). The kernel's name does not say
    which operand is its M, so both orientations are tried and each returned by `tile_paddings`; this one
    returns the smallest. None when the name carries no tile or the shapes are not a matrix product."""
    pads = tile_paddings(kernel_name, op_shapes)
    return min(pads, key=lambda p: p[0]) if pads else None


def tile_paddings(kernel_name: str | None, op_shapes: str | None) -> list[tuple[float, str]]:
    """Every candidate (padding factor, words) of `tile_padding`: tile rows on M or on N, with and without
    the cluster."""
    g = gemm_dims(op_shapes)
    name = (kernel_name or "") + "_"
    m = _TILE_CLUSTER.search(name) or _TILE.search(name)
    if g is None or m is None:
        return []
    _, mm, nn, _, _ = g
    bm, bn = int(m.group(1)), int(m.group(2))
    clusters = [(1, 1)]
    if m.re is _TILE_CLUSTER:
        clusters.append((int(m.group(5)), int(m.group(6))))
    out = []
    for cm, cn in clusters:
        for tm, tn in ((bm * cm, bn * cn), (bn * cn, bm * cm)):
            pm, pn = -(-mm // tm) * tm, -(-nn // tn) * tn
            out.append((pm * pn / (mm * nn), f"{mm}×{nn} → {pm}×{pn}"))
    return out
