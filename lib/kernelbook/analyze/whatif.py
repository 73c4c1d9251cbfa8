"""Chapter 06's what-if model: replay the run's kernel sequence on an accelerator described in params/npus.yaml.

Work per launch (one row per phase × kernel identity × op shapes × grid, `work_table`; the shape arithmetic is
`contract.shapes`'):
- matrix products: FLOPs = 2·M·N·K from the aten shapes (mm, bmm, addmm, grouped_mm); DRAM bytes = each
  operand read once and the output written once (the active weights are far larger than any L2); for decode
  kernels profiled by ncu the counted tensor FLOPs (MMA padding included: the work the unit does).
- attention (SDPA): 4·B·H·Sq·Sk·D tensor FLOPs; bytes of q, k, v, mask and output.
- elementwise/copy/reduction: bytes of the inputs and the broadcast output (in-place ops write their
  first input, cat writes what it reads), element size from the kernel's dtype; ~1 op per output element.
- profiled decode kernels whose shapes do not give the work (index/gather): ncu's FLOPs, DRAM and L1
  bytes. A matrix op's helper kernels (setup, split-K reduction) carry no work. Rows with none of these take their category's work per ns of kernel time; every row says where
  its numbers came from.

Device time of a launch = L + b·ideal, where ideal = max over units (tensor FLOPs ÷ matrix peak, CUDA-core
FLOPs ÷ vector peak, DRAM bytes ÷ DRAM bandwidth, on-chip bytes ÷ SRAM bandwidth), L is a fixed kernel
latency and b ≥ 1 how far real kernels sit from ideal (small grids, uncoalesced access, tails).
L and b per category are fitted on the run's own kernels (`calibrate`); validation holds out the phase it
predicts. Only a share φ of the DRAM term moves with a design's bandwidth (the class's ncu DRAM throughput as
a fraction of peak: at batch 1 most kernels are bound by bytes in flight, not by the peak), and a design
measured on another GPU (`floor_us`) scales L by its kernel floor over the fitting GPU's. `cross_device`
fits on one run and predicts the same workload's run on another GPU, both ways. Wall time replays the run's launch sequence (`replay`): the host issues each launch after its
recorded host gap, the device runs kernels in order, and a device-to-host copy blocks the host, so partial
overlap of host and device is modelled rather than assumed.

This module returns numbers, named quantities and English phrases (`contract.phrase`); the chapters' sentences
about the model, and its tables in the reader's language, are `narrate.whatif`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
import yaml

from ..contract.shapes import (arg_shapes, attention_work, elementwise_work, iterated_elements, expected_gemm_flops,
                               gemm_dims, grid_blocks, implied_bytes)
from . import roofline as R
from .histograms import weighted_mean
from ..contract.manifest import Manifest, read_manifest
from .steps import graph_node_gaps
from .timeline import phase_summary, plain_ms_per_step, work_category

NPUS_YAML = Path(__file__).resolve().parents[3] / "params" / "npus.yaml"
PHASES = ("vision_encode", "prefill", "decode")
FUSIBLE = ("elementwise", "copy/cast", "reduction/norm")
MATRIX = ("GEMM", "GEMV", "attention")
SHAPED = ("elementwise", "copy/cast", "reduction/norm", "MoE routing/topk")
MATRIX_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::_grouped_mm", "aten::cudnn_convolution",
              "aten::_cudnn_attention_forward", "aten::_scaled_dot_product_flash_attention",
              "aten::_flash_attention_forward", "aten::_efficient_attention_forward")
# where a work row's numbers come from (`source`): English in the data, shown in the book's language
SCALED = phrase("scaled from category")
NCU_SHAPES = phrase("ncu FLOPs + bytes from shapes")
GEMM_SHAPES = phrase("2·M·N·K + bytes from shapes")
ATTENTION_SHAPES = phrase("attention FLOPs and bytes from shapes")
ATEN_SHAPES = phrase("bytes from aten shapes")
HELPER = phrase("helper of a matrix op (its work is on the op's main kernel)")
# what bounds a predicted phase (`predict`'s `bound`)
DEVICE_BOUND, HOST_BOUND = phrase("device"), phrase("host/launch")
COMMA = phrase(", ")  # a list's separator, in the reader's language ('、' in zh)
REQUIRED = ("matrix_tflops", "vector_tflops", "dram_gbps", "sram_mb", "sram_gbps", "kernel_floor_us",
            "launch_overhead_us", "mem_efficiency", "matrix_efficiency", "fuse_elementwise", "source")
# keys a design may leave out (null or absent: inherited from the run)
OPTIONAL = ("graph_floor_us", "weight_precision", "sram_keeps_weights")
# bytes of a weight per parameter, as a share of bf16's: weight-only quantisation (activations, KV cache and the
# matrix unit's input precision unchanged; dequantisation is not priced)
WEIGHT_SCALE = {"bf16": 1.0, "fp8": 0.5, "int4": 0.25}


@dataclass(frozen=True)
class Design:
    key: str
    matrix_tflops: dict
    vector_tflops: float
    dram_gbps: float
    sram_mb: float
    sram_gbps: float
    kernel_floor_us: float | None
    launch_overhead_us: float | None
    mem_efficiency: float | None
    matrix_efficiency: float | None
    fuse_elementwise: bool
    source: str
    # a GPU measured in a run: its shortest kernels' duration (µs, `kernel_floor_us_of`); a design fitted on
    # another GPU scales that GPU's fitted latencies by the ratio of the two floors. None: not measured (npus.yaml)
    floor_us: float | None = None
    # fixed time a graph-launched decode step pays once (µs), beyond its kernels and the gaps between its nodes;
    # None: the run's GPU's, which sits inside the measured host time between replays (not separable there).
    # Applies where decode ran as CUDA graphs (`ReplayHost.graph`); an eager run's launches pay per launch.
    graph_floor_us: float | None = None
    # weight precision ('bf16', 'fp8', 'int4': weight bytes × 1, 0.5, 0.25); None: the run's own (bf16)
    weight_precision: str | None = None
    # whether the on-chip memory keeps weights resident (a managed SRAM: hottest bytes first, `resident_fraction`).
    # A GPU's L2 is a cache: a step streams ~1 GB of weights through it, so none survive to the next step
    sram_keeps_weights: bool = True

    def with_(self, **kw) -> "Design":
        return replace(self, **kw)

    @property
    def weight_scale(self) -> float:
        return WEIGHT_SCALE[self.weight_precision or "bf16"]


def load_designs(path: str | Path = NPUS_YAML) -> dict[str, Design]:
    raw = yaml.safe_load(Path(path).read_text())
    out, problems = {}, []
    for key, d in raw.items():
        missing = [f for f in REQUIRED if f not in d]
        unknown = sorted(set(d) - set(REQUIRED) - set(OPTIONAL))
        bad = ([f"weight_precision {d['weight_precision']!r} not one of {sorted(WEIGHT_SCALE)}"]
               if d.get("weight_precision") not in (None, *WEIGHT_SCALE) else [])
        for f in ("mem_efficiency", "matrix_efficiency"):  # a fraction of peak, or one per kernel class
            v = d.get(f)
            vals = v.values() if isinstance(v, dict) else [] if v is None else [v]
            if not all(isinstance(x, (int, float)) and 0 < x <= 1 for x in vals):
                bad.append(f"{f} {v!r} not a fraction in (0, 1] (or a mapping of class to one)")
        if missing or unknown or bad:
            problems.append(f"{key}: " + "; ".join(([f"missing {missing}"] if missing else [])
                                                 + ([f"unknown {unknown}"] if unknown else []) + bad))
            continue
        out[key] = Design(key, **{f: d[f] for f in REQUIRED}, **{f: d[f] for f in OPTIONAL if d.get(f) is not None})
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems) + " (see the field list at the top of the file)")
    return out


def run_gpu_design(device, roofs, floor_us: float | None = None) -> Design:
    """The GPU that produced the run, as a design: `device`'s peaks (devices.yaml's spec, with the DRAM peak ncu
    measured on the GPU where the run has it: `devices.for_run`), L2 as the on-chip memory with chapter 04's L2 roof;
    latency, slowdown and host gaps left to the run (null); `floor_us` the run's measured kernel floor
    (`kernel_floor_us_of`), which `build` fills in when it is None. Its `source` names where the DRAM and L2
    figures come from (the design table shows it)."""
    l2 = roofs.bandwidth.get("l2")
    return Design(key=phrase("{device} (this run's GPU)", device=device.key),
                  matrix_tflops={p: device.tflops[p] for p in ("bf16", "fp8") if device.tflops.get(p)},
                  vector_tflops=device.tflops["fp32"], dram_gbps=device.dram_gbps, sram_mb=device.l2_mb,
                  sram_gbps=l2 / 1e9 if l2 else device.dram_gbps * 2, kernel_floor_us=None, launch_overhead_us=None,
                  mem_efficiency=None, matrix_efficiency=None, fuse_elementwise=False, floor_us=floor_us,
                  sram_keeps_weights=False,
                  source=phrase("devices.yaml {device} spec; DRAM bandwidth: {dram}; L2 bandwidth: {l2}; latency, "
                                "slowdown and host gaps fitted on the run", device=device.key,
                                dram=phrase(roofs.sources.get("dram", R.SPEC)),
                                l2=roofs.sources.get("l2", phrase("2 × DRAM (no estimate)"))))


def kernel_floor_us_of(timeline: pd.DataFrame) -> float:
    """The GPU's kernel floor as this run measured it (µs): the 5th percentile of its kernel durations in the
    modelled phases. At batch 1 most launches do almost no work, so this is the fixed cost a launch pays on
    the device (start, a first memory round trip, completion); across GPUs it moves the latency-bound
    kernels, which bandwidth does not (H100 1.18 µs, H200 0.93 µs on the bundled workload)."""
    k = timeline[(timeline.kind == "kernel") & timeline.phase.isin(PHASES)]
    return float(np.percentile(k.duration_ns, 5)) / 1e3


# --- work per launch --------------------------------------------------------------------------------

def _dtype_bytes(friendly_name: str) -> int:
    f = friendly_name or ""
    return 8 if "(int64" in f or "(double" in f else 4 if "(float" in f or "(int" in f else 2


def work_table(timeline: pd.DataFrame, kernels: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (phase, kernel identity, op shapes, grid): launches, measured time and per-launch
    work (flops_tensor, flops_cuda, dram_bytes, onchip_bytes, weight_bytes) with `source` saying where it
    came from."""
    tl = timeline[(timeline.kind == "kernel") & timeline.phase.isin(PHASES)]
    tl = tl.assign(category=work_category(tl), op_shapes=tl.op_shapes.fillna(""), op=tl.op.fillna(""),
                   grid=tl.grid.fillna("").astype(str))
    g = tl.groupby(["phase", "name", "op_shapes", "grid"], sort=False).agg(
        launches=("duration_ns", "size"), total_ns=("duration_ns", "sum"), median_ns=("duration_ns", "median"),
        category=("category", "first"), op=("op", "first"), friendly_name=("friendly_name", "first")).reset_index()
    # keyed by phase too: one kernel (the vectorised gather) is profiled in decode and in prefill, and the
    # prefill record, 1.4× the bytes, used to stand for decode's
    prof = {} if kernels is None else {(r["phase"], r["name"]): r
                                       for _, r in kernels[kernels.status == "profiled"].iterrows()}
    ft, fc, dram, chp, src, wb = [], [], [], [], [], []
    for r in g.itertuples():
        p_any = prof.get((r.phase, r.name))
        p = p_any if r.phase == "decode" else None
        dims = gemm_dims(r.op_shapes) if r.category in ("GEMM", "GEMV") else None
        att = attention_work(r.op_shapes) if r.category == "attention" else None
        if dims is not None:
            # compulsory traffic: each operand read once, the output written once (bf16)
            read, write, _ = implied_bytes(r.op, r.op_shapes, r.category, 2)
            nbytes = read + write
            if p is not None:  # counted FLOPs include MMA padding: the work the unit really does
                row = (p.flops_tensor, p.flops_cuda or 0.0, nbytes, nbytes, NCU_SHAPES)
            else:
                row = (expected_gemm_flops(r.op_shapes), 0.0, nbytes, nbytes, GEMM_SHAPES)
        elif att is not None:
            row = (att[0], 0.0, att[1], att[1], ATTENTION_SHAPES)
        else:
            b, ops = (elementwise_work(r.op, r.op_shapes, _dtype_bytes(r.friendly_name))
                      if r.category in SHAPED else (np.nan, np.nan))
            if b == b:
                row = (0.0, ops, b, b, ATEN_SHAPES)
            elif p_any is not None:  # shapes do not say (index tables, attention helpers): ncu's counts, for
                # the configuration it profiled; another grid of the same kernel moves work in proportion
                # to its blocks (decode's expert-weight gather: 6x1120 blocks move twice 6x560's bytes)
                f = grid_blocks(r.grid) / grid_blocks(p_any.grid) if grid_blocks(p_any.grid) else 1.0
                row = (f * p_any.flops_tensor, f * (p_any.flops_cuda or 0.0), f * p_any.dram_bytes,
                       f * p_any.l1_bytes, "ncu")
            else:
                row = (np.nan,) * 4 + (SCALED,)
        ft.append(row[0]), fc.append(row[1]), dram.append(row[2]), chp.append(row[3]), src.append(row[4])
        wb.append(2.0 * dims[4] if dims is not None else 0.0)
    g["flops_tensor"], g["flops_cuda"], g["dram_bytes"], g["onchip_bytes"], g["source"] = ft, fc, dram, chp, src
    g["weight_bytes"] = wb
    g["per_selection"] = _per_selection(g)
    block = generic_block(g)
    g["elements"] = generic_elements(g, block)
    _split_launches(g, block)
    # ncu's DRAM throughput (% of peak) of the profiled kernel of that name in that phase: how much of its
    # time the DRAM is the limit (`calibrate` turns it into the share of time that moves with bandwidth)
    if kernels is not None and "dram_pct" in kernels:
        pk = kernels[kernels.status == "profiled"].drop_duplicates(["phase", "name"]).set_index(["phase", "name"])
        g["dram_pct"] = pk.dram_pct.reindex(pd.MultiIndex.from_frame(g[["phase", "name"]])).to_numpy(dtype=float)
    else:
        g["dram_pct"] = np.nan
    _helpers(g)
    _scale_missing(g)
    return g


# PyTorch's generic TensorIterator kernel (`at::native::elementwise_kernel<threads, elements per thread>`, not its
# vectorised or unrolled forms): the path a strided, permuted or broadcast operand takes, which computes every
# operand's offset per element from the tensor's sizes and strides. Each block covers threads × elements per thread
GENERIC_PATH = r"(?<![A-Za-z_])elementwise_kernel<\s*(\d+)\s*,\s*(\d+)"


def generic_block(g: pd.DataFrame) -> np.ndarray:
    """Per work row, the elements one block of PyTorch's generic elementwise path covers (threads × elements per
    thread of its template); NaN for every other kernel."""
    t = g.name.str.extract(GENERIC_PATH).astype(float)
    return (t[0] * t[1]).where(g.category.isin(FUSIBLE)).to_numpy(dtype=float)


def generic_elements(g: pd.DataFrame, block: np.ndarray) -> np.ndarray:
    """Per work row, the elements a launch of PyTorch's generic elementwise path iterates: blocks × threads ×
    elements per thread of its template (the launch's own share: an op over more than 2³¹ elements runs as
    several launches, each over a part), 0 for every other kernel. That path is bound by the index arithmetic it
    issues per element, not by bytes: on the H100 the SAM encoder's relative-position add (72×48⁴ BF16 outputs
    from two broadcast inputs) wrote 0.61 TB/s and its permuted copy moved 1.54 TB/s, against 3.35 TB/s of DRAM;
    both ~300–400 G elements/s, like prefill's masked_fill and mul on the same path. `calibrate` fits the issue
    cost per element. `block`: `generic_block(g)`."""
    return np.nan_to_num(block * g.grid.map(grid_blocks).to_numpy(dtype=float))


def _split_launches(g: pd.DataFrame, block: np.ndarray) -> None:
    """Bytes and operations of a generic-path launch follow its own elements (`generic_elements`), at the bytes per
    element its op's shapes imply (`iterated_elements`). An elementwise op over more than 2³¹ elements runs as
    several launches, each over a part, and each records the op's whole shapes (batch 8's SAM copies: the op's
    6 GB on each 224 µs launch); rarely the profiler ties a launch to the op before its own (batch 8: a launch of
    3× its op's elements). Where the launch covers under 99 % of the op's, or more than the op's and one block
    (its last block may be partial), the launch's own count wins."""
    shaped = (g.source == ATEN_SHAPES) & (g.elements > 0)
    for i in np.flatnonzero(shaped.to_numpy()):
        whole = iterated_elements(g.op.iat[i], g.op_shapes.iat[i])
        if not whole == whole or whole <= 0:
            continue
        f = g.elements.iat[i] / whole
        if f < 0.99 or g.elements.iat[i] > whole + block[i]:
            g.iloc[i, [g.columns.get_loc(c) for c in ("flops_cuda", "dram_bytes", "onchip_bytes")]] *= f


def _helpers(g: pd.DataFrame) -> None:
    """A matrix op that launches several kernels (setup, split-K reduction) records its shapes on each;
    the work belongs to the one that takes the most time, the others are helpers (latency only)."""
    m = g.op.isin(MATRIX_OPS) & (g.op_shapes != "")
    rest = []
    for _, grp in g[m].groupby(["phase", "op", "op_shapes"]):
        if len(grp) > 1:
            rest.extend(grp.index.drop(grp.total_ns.idxmax()))
    if rest:  # one assignment for all groups (one per group took 0.4 s of each what-if build)
        g.loc[rest, ["flops_tensor", "flops_cuda", "dram_bytes", "onchip_bytes", "weight_bytes"]] = 0.0
        g.loc[rest, "source"] = HELPER


def _scale_missing(g: pd.DataFrame) -> None:
    """Rows without work numbers take their category's work per ns of measured kernel time."""
    miss = g.source == SCALED
    known = g[~miss]
    for col in ("flops_tensor", "flops_cuda", "dram_bytes", "onchip_bytes"):
        k = known[known[col].notna()]
        per_ns = (k[col] * k.launches).groupby(k.category).sum() / k.groupby("category").total_ns.sum()
        overall = float((k[col] * k.launches).sum() / k.total_ns.sum()) if len(k) else 0.0
        rows = miss | g[col].isna()
        g.loc[rows, col] = [per_ns.get(c, overall) * t for c, t in zip(g.category[rows], g.median_ns[rows])]


# --- device time per launch -------------------------------------------------------------------------

def at_precision(work: pd.DataFrame, precision: str | None) -> pd.DataFrame:
    """The work table with its weights at `precision` ('bf16', 'fp8', 'int4'; None: as run): the weight operand
    of each GEMM/GEMV launch (`weight_bytes`) × 1, 0.5 or 0.25, and the DRAM and on-chip byte columns less what
    that saves; activations, KV cache and FLOPs unchanged (weight-only quantisation)."""
    f = WEIGHT_SCALE[precision or "bf16"]
    if f == 1.0:
        return work
    saved = work.weight_bytes * (1 - f)
    return work.assign(weight_bytes=work.weight_bytes * f, dram_bytes=work.dram_bytes - saved,
                       onchip_bytes=work.onchip_bytes - saved)


def resident_fraction(work: pd.DataFrame, sram_mb: float) -> np.ndarray:
    """Per work row, the share of its weight bytes that stay in an on-chip SRAM of `sram_mb` MiB (0–1).

    Per phase, the hottest weights first: rows ranked by how often their weight operand is read per step
    (`launches_per_step`; ties: the smaller operand first), each charged its weight bytes × launches per step
    (every launch its own tensor, as each layer has its own weights: the conservative count), filled up to the
    capacity; the row at the boundary is resident in part. The rest still comes from DRAM. Resident bytes grow
    continuously with capacity, so the predicted time cannot jump (no all-or-nothing cliff)."""
    wgt = work.weight_bytes.to_numpy(dtype=float)
    per_step = (work.launches_per_step.to_numpy(dtype=float) if "launches_per_step" in work
                else work.launches.to_numpy(dtype=float))
    out = np.zeros(len(work))
    cap = sram_mb * 2**20
    if cap <= 0:
        return out
    phase = work.phase.to_numpy()
    for ph in pd.unique(phase):
        idx = np.flatnonzero((phase == ph) & (wgt > 0))
        if not len(idx):
            continue
        o = idx[np.lexsort((wgt[idx], -per_step[idx]))]
        need = wgt[o] * per_step[o]
        before = np.cumsum(need) - need
        out[o] = np.clip((cap - before) / need, 0.0, 1.0)
    return out


def ideal_s(work: pd.DataFrame, d: Design, batch: int = 1, active_bytes: float | None = None,
            dram_scaling: np.ndarray | None = None, ref_gbps: float | None = None) -> np.ndarray:
    """Seconds per launch at the design's peaks: the slowest unit's time. Batch scales FLOPs and
    activation bytes, not weights. Weights at the design's precision (`at_precision`); a design whose SRAM keeps
    weights (`sram_keeps_weights`) reads the resident share of them on chip, not from DRAM (`resident_fraction`,
    hottest first). With `dram_scaling` φ (per row, 0–1) and the fitting GPU's DRAM GB/s
    `ref_gbps`, only φ of the DRAM term moves with the design's bandwidth; the rest keeps the fitting GPU's
    time per byte (latency-bound: bytes in flight, not peak bandwidth, set its rate). `active_bytes` is kept
    for callers of the former all-or-nothing rule and no longer used."""
    work = at_precision(work, d.weight_precision)
    wgt = work.weight_bytes.to_numpy()
    ft = work.flops_tensor.to_numpy() * batch
    fc = np.nan_to_num(work.flops_cuda.to_numpy()) * batch
    # a MoE's expert product reads one gathered copy of its experts per token (`per_selection`): its weights grow
    # with the batch as the run executes it (the study measures the gather's bytes growing so), others are read once
    sel = work["per_selection"].to_numpy(dtype=bool) if "per_selection" in work else np.zeros(len(work), bool)
    wread = np.where(sel, wgt * batch, wgt)
    dram = wread + (np.nan_to_num(work.dram_bytes.to_numpy()) - wgt) * batch
    chip = wread + (np.nan_to_num(work.onchip_bytes.to_numpy()) - wgt) * batch
    if d.sram_keeps_weights:
        dram = dram - wgt * resident_fraction(work, d.sram_mb)
    if dram_scaling is None or ref_gbps is None:
        dram_s = dram / (d.dram_gbps * 1e9)
    else:
        dram_s = dram * (dram_scaling / (d.dram_gbps * 1e9) + (1 - dram_scaling) / (ref_gbps * 1e9))
    t = np.maximum.reduce([np.nan_to_num(ft) / (d.matrix_tflops["bf16"] * 1e12), fc / (d.vector_tflops * 1e12),
                           dram_s, chip / (d.sram_gbps * 1e9)])
    return t


def issue_s(work: pd.DataFrame, d: Design, ops_per_element: float, batch: int = 1) -> np.ndarray:
    """Seconds per launch that PyTorch's generic elementwise path spends issuing its index arithmetic on the design's
    vector units: elements (`generic_elements`) × batch × `ops_per_element` (fitted by `calibrate`) ÷ vector
    FLOP/s; 0 for every other kernel. A launch takes at least this, whatever its bytes."""
    if "elements" not in work or not ops_per_element:
        return np.zeros(len(work))
    return work.elements.to_numpy(dtype=float) * batch * ops_per_element / (d.vector_tflops * 1e12)


def kernel_class(work: pd.DataFrame) -> pd.Series:
    """What L and b are fitted per: the work category, with PyTorch's vectorised elementwise/copy path
    (contiguous, aligned) apart from its strided/broadcast path, and indexed writes (index_copy_, index_put_:
    a static KV cache's update) apart from gathers: on the H100 the prefill KV write ran 8× its ideal, the
    expert-weight gathers 1–1.5×, and one slowdown for both set decode's gathers at 8×."""
    vec = work.friendly_name.fillna("").str.contains(r"\bvec\b") & work.category.isin(FUSIBLE)
    scatter = (work.category == "gather/index") & work.op.fillna("").str.endswith("_")
    return work.category + np.where(vec, " (vec)", "") + np.where(scatter, " (scatter)", "")


def _fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, L_default: float = 0.0) -> tuple[float, float]:
    """y = L + b·x (w = launches): L = launch-weighted median time of the latency-dominated rows (ideal
    under 10 % of the measured time), else `L_default` (the pooled latency for a class: a class whose every
    kernel does work still pays the launch floor, and a latency of 0 put the whole floor into b, which
    then multiplied the large gathers' work); b = launch-weighted median of (y − L)/x over the other rows,
    at least 1. Medians, so that one pathological kernel does not set the rate for its whole class."""
    lat = x < 0.1 * y
    L = min(_wmedian(y[lat], w[lat]), float(y.min())) if lat.any() else min(L_default, float(y.min()))
    work = ~lat & (x > 0)
    b = _wmedian((y[work] - L) / x[work], w[work]) if work.any() else 1.0
    return L, max(1.0, b)


def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float] | None:
    """A robust line y = Lw + b·x through rows that do work (Theil–Sen, weighted by launches): b the weighted median
    of the slopes between rows whose ideal differs by 1.5× or more (at least 1), Lw the weighted median of y − b·x. None when
    under 3 rows or their ideals span under 4×. A memory-bound class whose small launches take a fixed few µs more
    than their bytes (DRAM latency before the stream reaches its rate: decode's 3 MB GEMVs at 5 µs, its 334 MB
    lm_head at 84 % of peak) is a line with an intercept, not one slowdown: a median slowdown of 2.8 set by the
    small ones had the lm_head at 2.3× its time."""
    if len(x) < 3 or x.max() < 4 * x.min():
        return None
    i, j = np.triu_indices(len(x), 1)
    far = (np.maximum(x[i], x[j]) >= 1.5 * np.minimum(x[i], x[j]))
    if far.sum() < 2:
        return None
    i, j = i[far], j[far]
    b = max(1.0, _wmedian((y[j] - y[i]) / (x[j] - x[i]), w[i] * w[j]))  # no launch beats its roof at the margin
    return _wmedian(y - b * x, w), b


def _wmedian(v: np.ndarray, w: np.ndarray) -> float:
    o = np.argsort(v)
    c = np.cumsum(w[o])
    return float(v[o][np.searchsorted(c, c[-1] / 2)])


def calibrate(work: pd.DataFrame, d: Design, phases=PHASES) -> pd.DataFrame:
    """Per kernel class, from the kernels of `phases`: fixed latency L (µs) and slowdown b over the ideal,
    fitted on the measured median time per launch of rows with their own work numbers (rows scaled from
    their category are left out: their work was derived from their time). A class with under 3 rows that do
    work takes the pooled latency and its own slowdown (a class of two ncu-counted gathers running near their
    ideal must not take the pooled slowdown of 2.8: it tripled decode's gathers); one whose rows do no work
    takes its latency from its rows and the pooled slowdown ('pooled' row, also used for classes absent
    from `phases`).

    `dram_scaling` φ (0–1): the share of the class's DRAM term that moves with DRAM bandwidth, ncu's DRAM
    throughput as a fraction of peak, time-weighted over the class's profiled kernels in `phases` (a kernel
    that keeps the DRAM busy 20 % of its time is limited by bytes in flight, not by the peak: on an H200 with
    1.43× the H100's bandwidth, kernels at 20 % ran 0–3 % faster, those at 60 % 12–24 %); classes without
    profiled kernels take the pooled value, and a run without ncu counters 1 (all of it moves).

    Two terms beside L and b: `ops_per_element`, the issue cost of PyTorch's generic elementwise path
    (`issue_ops_per_element`; the launches it binds are left out of the fit of b), and per class `work_latency_us`,
    what a launch that does work pays before b × ideal where its working launches lie on a line with an intercept
    above L (`_line`); elsewhere it equals L."""
    w = work[work.phase.isin(phases) & (work.source != SCALED)]  # their work is their time
    y, n = w.median_ns.to_numpy() * 1e-9, w.launches.to_numpy().astype(float)
    x = ideal_s(w, d)
    k = issue_ops_per_element(w, d, y, _fit(x, y, n)[0])
    # launches bound by the generic path's issue, not by their bytes: their time says nothing of the slowdown
    keep = ~((issue_s(w, d, k) > x) & (x >= 0.1 * y))
    w, y, n, x = w[keep], y[keep], n[keep], x[keep]
    cls = kernel_class(w).to_numpy()
    L0, b0 = _fit(x, y, n)
    u = w.dram_pct.to_numpy(dtype=float) / 100 if "dram_pct" in w else np.full(len(w), np.nan)
    t = w.total_ns.to_numpy(dtype=float)

    def phi(m):
        k = m & ~np.isnan(u)
        return float(np.clip(np.sum(u[k] * t[k]) / np.sum(t[k]), 0, 1)) if k.any() else np.nan

    phi0 = phi(np.ones(len(w), bool))
    phi0 = 1.0 if phi0 != phi0 else phi0
    rows = [{"class": phrase("pooled"), "latency_us": 1e6 * L0, "work_latency_us": 1e6 * L0, "slowdown": b0, "dram_scaling": phi0, "rows": len(w),
             "launches": int(n.sum()), "fit": phrase("all classes")}]
    for c in sorted(set(cls)):
        m = cls == c
        worked = m & (x >= 0.1 * y)  # as in _fit: rows whose ideal is not negligible beside their time
        Lw = None
        if m.sum() >= 3:
            L, b = _fit(x[m], y[m], n[m], L0)
            fit = phrase("fitted")
            line = _line(x[worked], y[worked], n[worked])
            if line is not None and line[0] > L:
                Lw, b = line
                fit = phrase("fitted; launches that do work: a line with an intercept")
        elif worked.any():
            L, b = L0, max(1.0, _wmedian((y[worked] - L0) / x[worked], n[worked]))
            fit = phrase("latency pooled, slowdown fitted")
        else:
            L, b = _wmedian(np.maximum(y[m] - b0 * x[m], 0), n[m]), b0
            fit = phrase("latency fitted, slowdown pooled")
        f = phi(m)
        rows.append({"class": c, "latency_us": 1e6 * L, "work_latency_us": 1e6 * (L if Lw is None else Lw),
                     "slowdown": b, "dram_scaling": phi0 if f != f else f,
                     "rows": int(m.sum()), "launches": int(n[m].sum()), "fit": fit})
    return pd.DataFrame(rows).assign(phases=", ".join(phases), ops_per_element=k)


def issue_ops_per_element(w: pd.DataFrame, d: Design, y: np.ndarray, latency_s: float) -> float:
    """Vector operations per element that PyTorch's generic elementwise path issues on `d` (its index arithmetic:
    `generic_elements`): over the rows of `w` on that path with at least 2²⁰ elements per launch (where, at a few
    hundred operations per element, issuing takes several times a launch's latency), the time-weighted median of
    (time per launch `y` − the pooled latency) × vector FLOP/s ÷ elements. 0 (no such term) when the fitted
    phases ran no such launch."""
    e = w.elements.to_numpy(dtype=float) if "elements" in w else np.zeros(len(w))
    m = (e >= 2**20) & (y > latency_s)
    if not m.any():
        return 0.0
    k = (y[m] - latency_s) * d.vector_tflops * 1e12 / e[m]
    return _wmedian(k, y[m] * w.launches.to_numpy(dtype=float)[m])


def line_classes(tr: "Trace") -> pd.DataFrame:
    """The kernel classes whose launches that do work are fitted as a line with an intercept (`_line`): `class` and
    that intercept `work_latency_us` (µs), in the calibration's order; no rows where no class is."""
    if "work_latency_us" not in tr.calib:
        return pd.DataFrame(columns=["class", "work_latency_us"])
    c = tr.calib[tr.calib.work_latency_us > tr.calib.latency_us + 1e-9]
    return c[["class", "work_latency_us"]]


def issue_term(tr: "Trace") -> dict | None:
    """The generic elementwise path's issue term as `calibrate` fitted it on the run: `rows` (its launch shapes of
    2²⁰ elements or more), `share` (their % of kernel time), `k` (vector operations issued per element) and `rate`
    (G elements/s on the run's GPU); None where no such launch ran (no term fitted)."""
    k = float(tr.calib.ops_per_element.iloc[0]) if "ops_per_element" in tr.calib else 0.0
    e = tr.work.elements if "elements" in tr.work else pd.Series(0.0, index=tr.work.index)
    big = tr.work[e >= 2**20]
    if not k:
        return None
    share = 100 * float(big.total_ns.sum() / tr.work.total_ns.sum())
    return {"rows": len(big), "share": share, "k": k, "rate": tr.gpu.vector_tflops * 1e3 / k}


def launch_time_s(work: pd.DataFrame, d: Design, calib: pd.DataFrame, gpu: Design, batch: int = 1,
                  active_bytes: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(device seconds per launch, fused mask): L + b·ideal with L, b from `calib` unless the design
    sets kernel_floor_us (L) or efficiencies (b = 1/eff); a design measured on another GPU (floor_us set)
    scales the fitted L by its kernel floor over `gpu`'s; the DRAM term moves with bandwidth only by the
    class's `dram_scaling` (see `ideal_s`); fused elementwise chains cost b·ideal only.
    Rows scaled from their category are not modelled: their measured time is carried over, scaled by
    the design's ideal time over the run GPU's (`gpu`)."""
    L, Lw, b, phi, matrix, fusible, scaled, median_s = _launch_inputs(work, calib)
    if d.kernel_floor_us is not None:
        L = Lw = np.full(len(work), d.kernel_floor_us * 1e-6)
    elif d.floor_us and gpu.floor_us:  # another measured GPU: its kernel floor over the fitting GPU's
        L, Lw = L * d.floor_us / gpu.floor_us, Lw * d.floor_us / gpu.floor_us
    for eff, m in ((d.matrix_efficiency, matrix), (d.mem_efficiency, ~matrix)):
        e = stated_efficiency(eff, work, m)
        b = np.where(np.isnan(e), b, 1 / np.where(np.isnan(e), 1.0, e))
    fused = fusible & bool(d.fuse_elementwise)
    k = float(calib.ops_per_element.iloc[0]) if "ops_per_element" in calib else 0.0
    ideal = ideal_s(work, d, batch, active_bytes, phi, gpu.dram_gbps)
    # the generic elementwise path issues its index arithmetic at least (a fused chain does not run that path)
    # a launch that does work pays its class's work intercept (`_line`), one that does none (a helper) its floor
    t = np.where(fused, 0.0, np.where(ideal > 0, Lw, L)) + np.maximum(b * ideal,
                                                                    np.where(fused, 0.0, issue_s(work, d, k, batch)))
    on_gpu = _memo("ideal on the run's GPU", (work, calib, gpu),
                   lambda: (ideal_s(work, gpu, dram_scaling=phi, ref_gbps=gpu.dram_gbps),))[0]
    # a row whose work is unknown (its bytes were derived from its time) keeps its measured time at any batch, moved by
    # the design's ideal time over the run GPU's only: nothing says how much of that time would grow with the batch
    at_one = ideal if batch == 1 else ideal_s(work, d, 1, active_bytes, phi, gpu.dram_gbps)
    with np.errstate(divide="ignore", invalid="ignore"):
        carried = median_s * at_one / on_gpu
    return np.where(scaled, np.nan_to_num(carried), t), fused


def stated_efficiency(eff, work: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """Per work row, the fraction of peak a design states for it (NaN: not stated, the fitted slowdown stays):
    `eff` one fraction for every row of `mask`, or a mapping of kernel class (`kernel_class`) or category to a
    fraction; rows outside `mask` NaN."""
    if eff is None:
        return np.full(len(work), np.nan)
    if isinstance(eff, dict):
        e = kernel_class(work).map(eff).fillna(work.category.map(eff)).to_numpy(dtype=float)
    else:
        e = np.full(len(work), float(eff))
    return np.where(mask, e, np.nan)


_MEMO: dict = {}  # (what, ids of the frames) -> (the frames, the result): a sweep prices one trace ~100 times


def _memo(what: str, frames: tuple, compute):
    """`compute()` once per `what` and frames. The cache holds the frames, so their ids cannot be reused while
    cached, and a hit must be the same objects; the model never changes a frame in place, and the result's
    arrays are read-only so that no caller changes them for the next."""
    key = (what, *map(id, frames))
    hit = _MEMO.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], frames)):
        if len(_MEMO) > 128:
            _MEMO.clear()
        result = compute()
        for a in result:
            a.flags.writeable = False
        hit = _MEMO[key] = (frames, result)
    return hit[1]


def _launch_inputs(work: pd.DataFrame, calib: pd.DataFrame) -> tuple:
    """Per work row: fitted latency (s), slowdown and DRAM-scaling share of its class, and the matrix,
    fusible and scaled-row masks and median launch time (s); once per (work, calibration) pair."""
    return _memo("launch inputs", (work, calib), lambda: _compute_launch_inputs(work, calib))


def _compute_launch_inputs(work: pd.DataFrame, calib: pd.DataFrame) -> tuple:
    c = calib.set_index("class")
    pooled = c.loc["pooled"]
    cls = kernel_class(work)
    L = cls.map(c.latency_us).fillna(pooled.latency_us).to_numpy(dtype=float) * 1e-6
    b = cls.map(c.slowdown).fillna(pooled.slowdown).to_numpy(dtype=float)
    phi = (cls.map(c.dram_scaling).fillna(pooled.dram_scaling).to_numpy(dtype=float) if "dram_scaling" in c
           else np.ones(len(work)))
    Lw = (cls.map(c.work_latency_us).fillna(pooled.work_latency_us).to_numpy(dtype=float) * 1e-6
          if "work_latency_us" in c else L)
    return (L, Lw, b, phi, work.category.isin(MATRIX).to_numpy(), work.category.isin(FUSIBLE).to_numpy(),
            (work.source == SCALED).to_numpy(), work.median_ns.to_numpy(dtype=float) * 1e-9)


# --- the run's launch sequence and its replay ---------------------------------------------------------

@dataclass(frozen=True)
class ReplayHost:
    """Where a decode step's time goes between kernels (ms per step unless named otherwise).

    On a run whose decode ran as CUDA graphs (`graph`), the kernels of one replay follow each other after a
    node gap (`node_gap_us_median`, summed per step in `node_gaps_ms`): the graph's own dispatch, on the device.
    The rest of the plain step beyond the replay's device span (GPU-busy + node gaps) is host time between
    replays: HF generate's loop (sampling, stopping checks, copying the next inputs into the graph's static
    buffers, the graph launch). `between_replays_ms` is that term, on the plain run's basis (the capture's timed
    plain step, else the profiled wall ÷ the profiler's overhead ratio); `host_profiled_ms` is the same host
    time as the profiled timeline shows it (the gaps that are not node gaps, inside a step and from the last
    kernel of one step to the first of the next), inflated by the profiler. An eager run has no such term: its
    host time is spread over its launches (`between_replays_ms` 0, node gaps NaN)."""
    graph: bool
    steps: int
    busy_ms: float
    node_gap_us_median: float
    node_gaps_ms: float
    node_launches: float     # kernel launches per step inside the replay
    host_profiled_ms: float
    plain_step_ms: float
    between_replays_ms: float
    basis: str
    timed: bool = True       # plain_step_ms is the step the capture timed (else the profiled wall ÷ the overhead)

    @property
    def step_name(self) -> str:
        """The named quantity `plain_step_ms` is (`contract.quantity`): the timed plain step, or its estimate."""
        return "decode.plain_step_ms" if self.timed else "decode.plain_step_estimate_ms"

    @property
    def span_ms(self) -> float:
        """The replay's device span per step: its kernels and the gaps between its nodes."""
        return self.busy_ms + self.node_gaps_ms


def replay_host_of(timeline: pd.DataFrame, measured: pd.DataFrame, ratio: float, graph: bool) -> ReplayHost:
    """Measure `ReplayHost` for the decode phase from the timeline (see there). `graph`: decode ran as CUDA graphs
    (the workload's `graph_decode`); the timeline's `graph` column marks the launches of a replay."""
    t = timeline[(timeline.phase == "decode") & timeline.kind.isin(["kernel", "memcpy", "memset"])]
    t = t.sort_values("start_ns", kind="stable")
    m = measured.set_index("phase").loc["decode"] if "decode" in set(measured.phase) else None
    n = int(m.steps) if m is not None else 0
    if not n or t.empty:
        return ReplayHost(graph, n, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, 0.0, phrase("no decode"))
    start, end = t.start_ns.to_numpy(dtype=float), t.end_ns.to_numpy(dtype=float)
    prev_end = np.r_[np.nan, np.maximum.accumulate(end)[:-1]]
    # the phase's GPU-busy time per step as every chapter prints it (`timeline.phase_summary`: the union of its
    # launches' intervals), not the sum of their durations, which counts a copy that overlaps a kernel twice
    busy = float(m.busy_ms_per_step)
    plain = float(m.get("plain_timed_ms_per_step", np.nan))
    ng = graph_node_gaps(timeline, "decode")  # the one definition of a node gap (chapter 05 reads it too)
    node_ms = ng.ms_per_step * ng.steps / n if ng is not None else 0.0
    host_prof = float(np.nansum(np.clip(start - prev_end, 0, None))) / 1e6 / n - node_ms
    if not graph:
        return ReplayHost(False, n, busy, np.nan, 0.0, 0.0, host_prof, plain, 0.0,
                          phrase("eager: host time is spent per launch"))
    if plain == plain:
        step_ms, basis = plain, phrase("plain step the capture timed, less the replay's device span")
    else:
        step_ms, basis = float(m.wall_ms_per_step) / ratio, phrase("profiled wall ÷ the profiler's overhead ratio, "
                                                                    "less the replay's device span")
    span = busy + node_ms
    return ReplayHost(True, n, busy, ng.median_us if ng is not None else np.nan, node_ms,
                      ng.nodes_per_step * ng.steps / n if ng is not None else 0.0, host_prof, step_ms,
                      max(step_ms - span, 0.0), basis, timed=plain == plain)


@dataclass(frozen=True)
class HostGrowth:
    """Host time between graph replays per decode step (ms), measured at each batch of a serving study of the same
    work (`analyze.serving.host_growth`): what a batch lever adds to the run's own host term. The what-if cannot
    derive it from a batch-1 run: on the H100 study it grew 0.57, 1.00, 1.08, 1.72 ms at batch 1, 8, 16, 32, while
    the step's launches stayed the same."""
    batches: tuple
    ms: tuple
    source: str             # the study it was measured in
    steady_ms: tuple = ()   # the study's steady decode step (ms) at each of those batches: the batch lever's check

    def steady_at(self, batch: float) -> float | None:
        """The study's steady decode step (ms) at `batch`, where it measured that batch."""
        return dict(zip(self.batches, self.steady_ms)).get(batch)

    def extra_ms(self, batch: float) -> float:
        """The growth from the study's smallest batch to `batch`: linear between measured batches, beyond the last
        along its last segment, 0 at or below the first."""
        b, m = np.asarray(self.batches, dtype=float), np.asarray(self.ms, dtype=float)
        if batch <= b[0] or len(b) < 2:
            return 0.0
        if batch <= b[-1]:
            return float(np.interp(batch, b, m) - m[0])
        return float(m[-1] + (batch - b[-1]) * (m[-1] - m[-2]) / (b[-1] - b[-2]) - m[0])


@dataclass
class Trace:
    """What the model replays: per-launch work rows, the launch sequence, the run's measured phase times,
    and a calibration on the run's own GPU."""
    work: pd.DataFrame
    seq: pd.DataFrame       # launch order: phase, seg, row (work row, -1 for copies), dur_s, gap_s, sync
    measured: pd.DataFrame  # per phase: steps, wall and busy ms per step (profiled run), plain-run wall
    remainder_s: dict       # per phase: wall not covered by the replayed segments (host work outside them)
    overhead_ratio: float
    gpu: Design
    calib: pd.DataFrame | None = None
    device: str = ""        # devices.yaml key of the run's GPU (for_run), naming it in cross-device tables
    host: ReplayHost | None = None  # decode's host time between graph replays (graph runs) or per launch
    run_id: str = ""        # the run it models (for_run): the quantities' keys name it (contract.quantity)
    # HF generate's loop between two decode forwards (s per step, under the profiler): sampling, stopping checks,
    # the next step's inputs. Outside every decode range, so outside the phase's wall, yet inside the plain step
    # (token to token); a design does not remove it (`loop_s_of`)
    loop_s: float = 0.0
    # a graph run's host time between replays as the batch grows, measured by a serving study (None: held at the run's)
    host_growth: HostGrowth | None = None

    def q(self, name: str, value) -> "quantity.Q":
        """A figure of the modelled run as the named quantity `name` (`contract.quantity`)."""
        return quantity.q(self.run_id, name, value)

    @property
    def steps(self) -> dict:
        return dict(zip(self.measured.phase, self.measured.steps))


def build(timeline: pd.DataFrame, phases: pd.DataFrame, manifest: Manifest | dict,
          kernels: pd.DataFrame | None, gpu: Design) -> Trace:
    work = work_table(timeline, kernels)
    key = ["phase", "name", "op_shapes", "grid"]
    t = timeline[timeline.phase.isin(PHASES) & timeline.kind.isin(["kernel", "memcpy", "memset"])]
    t = t.assign(op_shapes=t.op_shapes.fillna(""), grid=t.grid.fillna("").astype(str)).sort_values("launch_ns")
    idx = pd.Series(range(len(work)), index=pd.MultiIndex.from_frame(work[key]))
    row = np.where(t.kind == "kernel", idx.reindex(pd.MultiIndex.from_frame(t[key])).fillna(-1).to_numpy(), -1)
    sync = ((t.kind == "memcpy") & (t.short_name == "DtoH")).to_numpy()
    launch = t.launch_ns.to_numpy(dtype=float)
    inst = t.phase.astype(str) + ":" + t.step.astype(str)
    new_run = (inst != inst.shift()).to_numpy()
    prev_sync = np.r_[False, sync[:-1]]
    seg = np.cumsum(new_run | prev_sync) - 1
    prev_end = np.r_[np.nan, np.where(sync, t.end_ns.to_numpy(dtype=float), launch)[:-1]]
    gap = np.where(new_run, 0.0, np.maximum(launch - prev_end, 0.0)) * 1e-9
    seq = pd.DataFrame({"phase": t.phase.to_numpy(), "seg": seg, "row": row.astype(int),
                        "dur_s": t.duration_ns.to_numpy() * 1e-9, "gap_s": gap, "sync": sync})
    summary = phase_summary(timeline, phases)
    info = read_manifest(manifest)
    ratio = info.overhead_ratio
    s = summary[summary.phase.isin(PHASES)].copy()
    s["n"] = np.where(s.phase == "decode", s.steps.clip(lower=1), 1)
    measured = pd.DataFrame({"phase": s.phase, "steps": s.n, "wall_ms_per_step": s.wall_ms / s.n,
                             "plain_wall_ms_per_step": s.wall_ms / s.n / ratio,
                             "busy_ms_per_step": s.gpu_busy_ms / s.n,
                             # the plain step the capture timed, where it did (NaN before plain phases were timed)
                             "plain_timed_ms_per_step": s.phase.map(info.plain_ms_per_step()).astype(float)
                             }).reset_index(drop=True)
    span = _segment_spans(seq, seq.dur_s.to_numpy(), seq.gap_s.to_numpy())
    remainder = {ph: float(measured.set_index("phase").loc[ph, "wall_ms_per_step"] * 1e-3
                           * measured.set_index("phase").loc[ph, "steps"] - span.get(ph, 0.0))
                 for ph in measured.phase}
    if gpu.floor_us is None:
        gpu = replace(gpu, floor_us=kernel_floor_us_of(timeline))
    # how often a row's operands are read per step of its phase (what SRAM residency ranks by)
    work["launches_per_step"] = work.launches / work.phase.map(dict(zip(measured.phase, measured.steps))).fillna(1)
    tr = Trace(work, seq, measured, remainder, ratio, gpu, loop_s=loop_s_of(phases),
               host=replay_host_of(timeline, measured, ratio, info.workload.graph_decode))
    tr.calib = calibrate(work, gpu)
    return tr


def loop_s_of(phases: pd.DataFrame) -> float:
    """Generate's loop per decode step (s, profiled pass): the mean gap from one decode step's range to the next's.
    On the bundled eager run 1.6 ms under the profiler (≈ 1.0 ms plain) of a 12.1 ms plain step; under CUDA graphs
    it is inside `ReplayHost.between_replays_ms`, measured on the plain run."""
    d = phases[phases.phase == "decode"].sort_values("start_ns")
    if len(d) < 2:
        return 0.0
    gaps = (d.start_ns.to_numpy()[1:] - d.end_ns.to_numpy()[:-1]) * 1e-9
    return float(np.clip(gaps, 0, None).mean())


def unmodellable(run) -> str | None:
    """Why the model cannot be built from `run`, None when it can: the timeline backend (its name, '?' where the
    manifest does not say) that recorded the run's kernels without the op calls that launched them (Nsight Systems'
    backend today). The model prices each launch by the work its aten op shapes imply, and such a timeline has
    none (`narrate.whatif.unmodellable` says so)."""
    tl = run.timeline
    k = tl[tl.kind == "kernel"] if "kind" in tl else tl
    if "op_shapes" in k and k.op_shapes.notna().any():
        return None
    return (run.info.timeline_backend.backend if run.info.timeline_backend else None) or "?"


def for_run(run) -> tuple["Trace", Design, object, pd.DataFrame]:
    """(trace, the run's GPU as a design, roofs, profiled kernels): what chapters 06 and 07 model a run with."""
    k = R.profiled_kernels(run)
    dev, _, roofs = R.for_run(run, k)  # the device and roofs chapters 04 and 05 use
    gpu = run_gpu_design(dev, roofs)
    tr = build(run.timeline, run.phases, run.info, k if len(k) else None, gpu)
    tr.device = dev.key
    tr.run_id = run.run_id
    return tr, tr.gpu, roofs, k


def _segment_spans(seq: pd.DataFrame, dur: np.ndarray, gap: np.ndarray) -> dict:
    """Replay: within a segment the host issues item i at H_i = Σ gaps, the device starts it at
    max(H_i, end of item i-1); a segment ends at a blocking copy or a phase-instance boundary. Returns the
    summed segment spans (s) per phase. Vectorised: end_i = D_i + max_{j≤i}(H_j − D_{j−1})."""
    seg = seq.seg.to_numpy()
    first = np.r_[True, seg[1:] != seg[:-1]]
    starts = np.flatnonzero(first)

    def seg_cumsum(v):
        c = np.cumsum(v)
        base = np.repeat(c[starts] - v[starts], np.diff(np.r_[starts, len(v)]))
        return c - base

    H, D = seg_cumsum(gap), seg_cumsum(dur)
    X = H - (D - dur) + seg * 1e4  # offset per segment turns a global running max into a per-segment one
    end = D + np.maximum.accumulate(X) - seg * 1e4
    last = np.r_[starts[1:] - 1, len(seg) - 1]
    codes, names = _phase_codes(seq)
    sums = np.bincount(codes[last], weights=end[last], minlength=len(names))
    present = np.zeros(len(names), bool)
    present[codes[last]] = True
    return {str(n): float(v) for n, v, p in zip(names, sums, present) if p}


def _seq_arrays(seq: pd.DataFrame) -> tuple:
    """The launch sequence's columns `predict` reads, as arrays, once per sequence: work row, recorded duration and
    gap (s), whether the item follows a blocking copy, whether it is decode's."""
    def compute():
        sync = seq.sync.to_numpy(dtype=bool)
        return (seq.row.to_numpy(), seq.dur_s.to_numpy(dtype=float), seq.gap_s.to_numpy(dtype=float),
                np.r_[False, sync[:-1]], (seq.phase == "decode").to_numpy(dtype=bool))

    return _memo("sequence arrays", (seq,), compute)


def _phase_codes(seq: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The launch sequence's phase as integer codes and their names, once per sequence."""
    def compute():
        codes, names = pd.factorize(seq.phase)
        return codes, np.asarray(names, dtype=object)

    return _memo("phase codes", (seq,), compute)


def predict(tr: Trace, d: Design, batch: int = 1, active_bytes: float | None = None,
            calib: pd.DataFrame | None = None, host_scale: float | None = None) -> pd.DataFrame:
    """Per phase: device time, wall time (ms per step; decode also per token) and the device's share of the wall
    (`_predicted`, as a table)."""
    return pd.DataFrame(_predicted(tr, d, batch, active_bytes, calib, host_scale))


def _predicted(tr: Trace, d: Design, batch: int = 1, active_bytes: float | None = None,
               calib: pd.DataFrame | None = None, host_scale: float | None = None) -> list[dict]:
    """Per phase: device time, wall time (ms per step; decode also per token) and the device's share of
    the wall. Host gaps are the run's own × `host_scale` (default: ÷ the capture's profiled/plain ratio,
    i.e. a plain run), or the design's launch_overhead_us per launch when it sets one.

    A plain prediction (`host_scale` None) of a run whose decode ran as CUDA graphs prices a decode step as the
    host time between replays (`ReplayHost.between_replays_ms`, one term per step, not per launch) + the graph's
    node gaps + the design's device time + its `graph_floor_us`: the host and the graph replay do not overlap
    (generate waits for each step's token), and no per-launch dispatch applies inside a graph. At a batch above 1
    that host term grows by what a serving study of the same work measured (`Trace.host_growth`), where the run
    carries one."""
    scales = host_scales(tr) if host_scale is None else {ph: host_scale for ph in tr.steps}
    t_row, fused = launch_time_s(tr.work, d, tr.calib if calib is None else calib, tr.gpu, batch, active_bytes)
    seq = tr.seq
    row, dur_s, gap_s, after_sync, in_decode = _seq_arrays(seq)
    k = row >= 0
    rows = np.maximum(row, 0)
    dur = np.where(k, t_row[rows], dur_s)
    codes, names = _phase_codes(seq)
    gap = gap_s * np.array([scales.get(ph, 1 / tr.overhead_ratio) for ph in names])[codes]
    if d.launch_overhead_us is not None:
        gap = np.where((gap > 0) & ~after_sync, d.launch_overhead_us * 1e-6, gap)
    gap = np.where(k & fused[rows], 0.0, gap)  # a fused op is not launched
    spans = _segment_spans(seq, dur, gap)
    busy = dict(zip(names, np.bincount(codes, weights=dur, minlength=len(names))))
    out = []
    hr = tr.host
    graph_plain = hr is not None and hr.graph and host_scale is None
    for ph, n in tr.steps.items():
        s = scales.get(ph, 1 / tr.overhead_ratio)
        wall = (s * tr.remainder_s[ph] + spans.get(ph, 0.0)) / n
        if ph == "decode" and host_scale is None:  # a plain step runs token to token: generate's loop is in it
            wall += s * tr.loop_s
        dev = busy.get(ph, 0.0) / n
        if ph == "decode" and graph_plain:
            # a replayed graph: the host time between replays (generate's loop, a per-step term measured on the
            # plain run), then the step's kernels back to back after the graph's node gaps (fewer where the design
            # fuses kernels away), plus the design's per-graph floor where it states one
            dk = k & in_decode
            kept = 1 - float(fused[rows[dk]].sum()) / max(1, int(dk.sum()))
            between = hr.between_replays_ms + (tr.host_growth.extra_ms(batch) if tr.host_growth else 0.0)
            wall = (1e-3 * (between + hr.node_gaps_ms * kept) + dev
                    + 1e-6 * (d.graph_floor_us or 0.0))
        out.append({"phase": ph, "steps": n, "device_ms_per_step": 1e3 * dev, "wall_ms_per_step": 1e3 * wall,
                    "device_share_pct": 100 * dev / wall,
                    "bound": DEVICE_BOUND if dev / wall >= 0.5 else HOST_BOUND,
                    "per_token_ms": 1e3 * wall / batch if ph == "decode" else np.nan})
    return out


def host_scales(tr: Trace) -> dict[str, float]:
    """Per phase, what the profiler's host time shrinks by in a plain run: the phase's plain step (timed by the
    capture; decode token to token) over its profiled wall (decode with generate's loop between forwards), at most
    1; the capture's whole-generate ratio where the phase's plain step was not timed. Phases inflate unequally
    (bundled eager run: decode 22.7 → 12.1 ms per step, 0.53, against 0.62 for the whole generate)."""
    out = {}
    m = tr.measured.set_index("phase")
    for ph in m.index:
        plain = m.loc[ph].get("plain_timed_ms_per_step", np.nan)
        prof = m.loc[ph, "wall_ms_per_step"] + (1e3 * tr.loop_s if ph == "decode" else 0.0)
        out[ph] = float(min(1.0, plain / prof)) if plain == plain and prof > 0 else 1 / tr.overhead_ratio
    return out


def held_out_calibration(tr: Trace, phase: str) -> pd.DataFrame:
    """L and b fitted on every phase but `phase`: what validating `phase` may use."""
    return calibrate(tr.work, tr.gpu, [p for p in PHASES if p != phase])


def validation(tr: Trace) -> pd.DataFrame:
    """The model on the GPU that produced the run, each phase predicted with L and b fitted on the other
    phases only (held out), host gaps as recorded: wall per step vs the run's wall, device time vs
    GPU-busy time, error in %."""
    rows = []
    for ph in tr.measured.phase:
        cal = held_out_calibration(tr, ph)
        p = predict(tr, tr.gpu, calib=cal, host_scale=1.0).set_index("phase").loc[ph]
        m = tr.measured.set_index("phase").loc[ph]
        w = tr.work[tr.work.phase == ph]
        scaled = w.total_ns[w.source == SCALED].sum() / w.total_ns.sum()
        rows.append({"phase": ph, "steps": int(m.steps),
                     "wall_ms_per_step": tr.q(f"{ph}.profiled_step_ms", m.wall_ms_per_step),
                     "predicted_wall_ms": p.wall_ms_per_step,
                     "wall_error_pct": 100 * (p.wall_ms_per_step - m.wall_ms_per_step) / m.wall_ms_per_step,
                     "busy_ms_per_step": tr.q(f"{ph}.gpu_busy_step_ms", m.busy_ms_per_step),
                     "predicted_device_ms": p.device_ms_per_step,
                     "device_error_pct": 100 * (p.device_ms_per_step - m.busy_ms_per_step) / m.busy_ms_per_step,
                     "predicted_device_share_pct": p.device_share_pct, "calibrated_on": cal.phases.iloc[0],
                     "scaled_time_pct": 100 * scaled})
    out = pd.DataFrame(rows)
    for c in ("wall_ms_per_step", "busy_ms_per_step"):  # the run's measured steps, as the other chapters name them
        out[c] = quantity.column((r[c] for r in rows), out.index)
    return out


def host_time_per_launch_us(tr: Trace, phase: str = "decode") -> float:
    """The plain run's wall time per launch in `phase`: the plain step the capture timed (chapter 01's figure),
    else the profiled wall ÷ the profiled/plain ratio, over the phase's kernel launches per step."""
    m = tr.measured.set_index("phase").loc[phase]
    launches = int((tr.seq.row >= 0)[tr.seq.phase == phase].sum()) / m.steps
    timed = m.get("plain_timed_ms_per_step", np.nan)
    return 1e3 * (timed if timed == timed else m.plain_wall_ms_per_step) / launches


def active_weight_bytes(tr: Trace, precision: str | None = None, each_once: bool = False,
                        distinct: float | None = None) -> float:
    """Weight bytes one decode step reads (all GEMM/GEMV launches of decode ÷ steps), at `precision` ('fp8' halves
    them, 'int4' quarters them; None: as run, bf16). `each_once`: the bytes the step must move, each weight once: a
    MoE's expert product over the batch's expert selections (`per_selection` rows) counts the experts its router
    picked, `distinct` per call where the capture recorded them (its routing pass), else at most the router's E
    (`moe_router`), not one copy per selection (the physical limit)."""
    w = at_precision(tr.work[tr.work.phase == "decode"], precision)
    wb = w.weight_bytes * w.launches
    router = moe_router(tr) if each_once else None
    if router is not None and "per_selection" in w:
        cap = router[1] if distinct is None else distinct
        sel = w.op_shapes.map(lambda s: (gemm_dims(s) or (0,))[0]).where(w.per_selection, 0)
        wb = wb * np.where(sel > cap, cap / sel.clip(lower=1), 1.0)
    return float(wb.sum() / max(1, tr.steps.get("decode", 1)))


def weights_each_once(tr: Trace, routing) -> tuple[float, float | None, tuple[int, int] | None]:
    """(weight bytes a decode step must move, each weight once; the distinct experts per router call that the
    capture's routing pass recorded for this run's router, None where it did not and the bound E is taken; the
    router's (tokens, experts), None for a model without one). `routing`: the run's `timeline_info.moe_routing`
    (None: not recorded)."""
    router = moe_router(tr)
    picked = routing.router(*router) if routing is not None and router is not None else None
    distinct = picked.distinct_mean if picked is not None else None
    return active_weight_bytes(tr, each_once=True, distinct=distinct), distinct, router


def _router(work: pd.DataFrame) -> tuple[int, int] | None:
    """(tokens per decode step, experts) of a MoE's router, from its top-k's input [tokens, experts] in decode; None
    where decode runs no top-k over a 2-d input."""
    for shapes in work[(work.phase == "decode") & (work.op == "aten::topk")].op_shapes:
        first = arg_shapes(shapes)[0] if isinstance(shapes, str) else []
        if first and len(first[0]) == 2 and first[0][1] > 1:
            return int(first[0][0]), int(first[0][1])
    return None


def _per_selection(g: pd.DataFrame) -> np.ndarray:
    """Decode rows whose matrix product reads its weights once per token's expert choice: a `bmm` over tokens × k
    gathered experts (k ≥ 2), the tokens those of the router (`_router`)."""
    out = np.zeros(len(g), dtype=bool)
    router = _router(g)
    if router is None:
        return out
    tokens = router[0]
    dec = (g.phase == "decode").to_numpy()
    for i, (op, shapes) in enumerate(zip(g.op, g.op_shapes)):
        dims = gemm_dims(shapes) if dec[i] and op == "aten::bmm" else None
        if dims is not None and dims[0] % tokens == 0 and dims[0] // tokens >= 2:
            out[i] = True
    return out


def moe_router(tr: Trace) -> tuple[int, int] | None:
    """(tokens per decode step, experts) of the run's MoE router (`_router` over its work table)."""
    return _router(tr.work)


# sweep label (a catalog key: the figure shows it in the book's language) → lever and values. The levers that
# move a deployed (graph) decode step: kernel floor and efficiency first (the fitted L and b are the GPU's
# software as much as its silicon), then DRAM bandwidth, SRAM that keeps weights (partial residency: a
# continuous curve), weight precision and batch.
SWEEPS = {
    phrase("kernel floor (µs per kernel)"): ("kernel_floor_us", np.geomspace(0.25, 4, 13)),
    phrase("efficiency (fraction of peak, every class)"): ("efficiency", np.geomspace(0.1, 1, 11)),
    phrase("DRAM bandwidth (GB/s)"): ("dram_gbps", np.geomspace(500, 16000, 16)),
    phrase("on-chip SRAM keeping weights (MiB)"): ("sram_mb", np.geomspace(8, 4096, 28)),
    phrase("weight bytes per parameter (int4 0.5, fp8 1, bf16 2)"): ("weight_precision", np.array([0.5, 1.0, 2.0])),
    phrase("batch size"): ("batch", np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])),
}
PRECISION_OF_BYTES = {2.0: "bf16", 1.0: "fp8", 0.5: "int4"}


def swept(d: Design, fld: str, x: float) -> tuple[Design, int]:
    """Design `d` with one lever of `SWEEPS` at `x`, and the batch."""
    if fld == "batch":
        return d, int(x)
    if fld == "matrix_tflops":
        return d.with_(matrix_tflops={**d.matrix_tflops, "bf16": float(x)}), 1
    if fld == "efficiency":
        return d.with_(matrix_efficiency=float(x), mem_efficiency=float(x)), 1
    if fld == "weight_precision":
        return d.with_(weight_precision=PRECISION_OF_BYTES[float(x)]), 1
    if fld == "sram_mb":  # an SRAM that keeps the hottest weights, whatever the design's own memory does
        return d.with_(sram_mb=float(x), sram_keeps_weights=True), 1
    return d.with_(**{fld: float(x)}), 1


def sensitivity(tr: Trace, d: Design) -> pd.DataFrame:
    """Long format: sweep, x, phase, ms (decode per token, prefill per call; plain run) with everything else at `d`."""
    rows = []
    for label, (fld, xs) in SWEEPS.items():
        for x in xs:
            dd, batch = swept(d, fld, x)
            p = {r["phase"]: r for r in _predicted(tr, dd, batch)}  # rows, not a table: ~300 calls per chapter
            for ph, col in (("decode", "per_token_ms"), ("prefill", "wall_ms_per_step")):
                if ph in p:
                    rows.append({"sweep": label, "x": float(x), "phase": ph, "ms": float(p[ph][col])})
    return pd.DataFrame(rows)


def sram_curve(tr: Trace, d: Design, mib) -> pd.DataFrame:
    """Decode ms per token (plain run) against the MiB of an SRAM that keeps the hottest weights (`resident_fraction`),
    with the resident weight MiB per step; everything else at `d`."""
    rows = []
    for x in mib:
        dd = d.with_(sram_mb=float(x), sram_keeps_weights=True)
        p = predict(tr, dd).set_index("phase")
        rows.append({"sram_mb": float(x), "resident_mib": resident_weight_bytes(tr, dd) / 2**20,
                     "decode_ms": float(p.loc["decode", "per_token_ms"])})
    return pd.DataFrame(rows)


def knees(sens: pd.DataFrame, within_pct: float = 5.0) -> pd.DataFrame:
    """Per sweep and phase: the x beyond which the time stays within `within_pct` % of its best value
    (where that resource stops mattering); for a lever where less is better (the time grows with x), the x
    below which it does."""
    rows = []
    for (sw, ph), g in sens.groupby(["sweep", "phase"]):
        g = g.sort_values("x")
        if g.ms.iloc[-1] > g.ms.iloc[0]:  # a lever where less is better (kernel floor, bytes per weight)
            g = g.iloc[::-1]
        best = g.ms.min()
        ok = g.ms <= best * (1 + within_pct / 100)
        # first x from which every larger x is also within tolerance (monotone tail)
        tail = ok[::-1].cumprod()[::-1].astype(bool)
        knee = float(g.x[tail].iloc[0]) if tail.any() else np.nan
        rows.append({"sweep": sw, "phase": ph, "knee_x": knee, "best_ms": best, "worst_ms": g.ms.max()})
    return pd.DataFrame(rows)


def at(tr: Trace, d: Design, phase: str = "decode", batch: int = 1, **change) -> float:
    """One what-if number: decode ms per token (or the phase's ms per step) with fields of `d` changed."""
    p = predict(tr, d.with_(**change), batch, active_weight_bytes(tr)).set_index("phase")
    return float(p.loc[phase, "per_token_ms" if phase == "decode" else "wall_ms_per_step"])


# the reference report's nine areas (catalog keys: English in the frame, shown in the book's language)
AREAS = (phrase("matrix/vector unit balance"), phrase("memory bandwidth"), phrase("L1/L2 sizing"),
         phrase("dedicated decode (GEMV) units"), phrase("operator fusion hardware"), phrase("precision support"),
         phrase("parallelism and occupancy"), phrase("interconnect"), phrase("power"))
REFERENCE_CLAIMS = dict(zip(AREAS, (
    phrase("reduce tensor-core density to 30-40 % of die area; more CUDA cores"),
    phrase("2-3 TB/s is enough for a high-end inference NPU"),
    phrase("L2 of 128-256 MB; KV-cache SRAM of 32-64 MB"),
    phrase("dedicated GEMV accelerators, weight-stationary dataflow"),
    phrase("a programmable fusion engine (21.7 % of time in small elementwise kernels)"),
    phrase("native BF16, FP8, INT4/INT8; 6 % conversion overhead"),
    phrase("fewer SMs (60-80), deeper pipelines"),
    phrase("300-500 GB/s inter-chip is enough"),
    phrase("3-5× TOPS/W by cutting tensor density and bandwidth"))))
CONFIDENCE = {"high": phrase("high"), "medium": phrase("medium"), "low": phrase("low"),
              "low_sram": phrase("low (model assumes SRAM bandwidth is sustained)"), "none": phrase("none (no data)")}
# each area's confidence, in the order of AREAS
AREA_CONFIDENCE = tuple(CONFIDENCE[c] for c in ("medium", "medium", "low_sram", "medium", "high", "low", "low",
                                                "none", "none"))


def recommendation_figures(tr: Trace, d: Design, kernels: pd.DataFrame, shares: pd.DataFrame,
                           graph_host_us: float = 2.0, xerr: pd.DataFrame | None = None,
                           env: dict | None = None) -> dict:
    """The numbers behind the reference report's nine areas (`narrate.whatif.recommendations` writes them): this
    run's evidence and each area's what-if, a what-if being the % change of decode ms per token (prefill ms per call
    where named) against the fitted model.
    On an eager run, what-ifs are taken at `graph_host_us` host time per launch (launches issued as a graph), beside
    the same change at the run's eager host gaps, where decode is launch-bound and the hardware knobs barely move
    it. On a run whose decode already ran as CUDA graphs (`graph`), what-ifs are taken on the run as it ran, and
    what is left between its kernels is named instead (the graph's node gaps and generate's host time between
    replays, `ReplayHost`).

    Keys: `graph`, `graph_host_us`, `host_us` (the run's host time per launch, plain); evidence: `tensor_pipe_pct`,
    `sm_pct`, `l2_hit_pct`, `occupancy_pct`, `under_wave_pct` (time-weighted over profiled decode kernels; NaN
    without ncu counters), `weights_gb` and `weights_mib` (one token's weights, bf16), `fp8_gb`, `int4_gb`,
    `gemv_pct`, `copy_pct`, `fusible_pct`, `comm_pct` (% of decode kernel time), `pad_lo`, `pad_hi` (counted tensor
    FLOPs over 2·M·N·K), `launches` (per token); what-ifs (%): `half_matrix`, `half_matrix_prefill`, `dram_2_5`,
    `dram_8`, `half_sram` and `all_sram` (an SRAM of `half_sram_mib` and `sram_mib` keeping the hottest weights),
    `batch_8`, `fused`, `fp8`, `int4`; on an eager run also `half_matrix_eager`, `dram_2_5_eager`, `dram_8_eager`
    and `graph_dispatch` (graph dispatch against eager); `replay` (`replay_quantities`: a graph run's node gaps and
    host time between replays, None on an eager run). Uncertainty:
    `held` (the fit's error on decode, `model_error`), `across` (decode's row of `xerr`, None where no other GPU was
    checked) and `outside` (per area, the ways its what-if's designs lie outside what the cross-device check
    covered, `outside_envelope`; None where the area has no what-if); `confidence` per area (`AREA_CONFIDENCE`)."""
    hr = tr.host
    graph = hr is not None and hr.graph
    g = d if graph else d.with_(launch_overhead_us=graph_host_us)
    active = active_weight_bytes(tr)
    base, base_p, eager = at(tr, g), at(tr, g, "prefill"), at(tr, d)
    work, steps = tr.work, tr.steps

    def pct(new, old):
        return 100 * (new - old) / old

    sh = shares[shares.phase == "decode"].set_index("category").pct
    if kernels.empty:  # no ncu counters (partial capture or ncu_top_n 0): the counter-based evidence is absent
        kernels = pd.DataFrame(columns=["phase", "status", "sm_pct", "flops_tensor", "share", "l2_hit_pct",
                                        "achieved_occupancy_pct", "waves_per_sm"], dtype=float)
    dk = kernels[(kernels.phase == "decode") & (kernels.status == "profiled")]
    # the tensor pipe's own activity where the run's counters have it (chapter 05's TC%), else SM throughput, said so
    tp = dk.tensor_pipe_pct if "tensor_pipe_pct" in dk else pd.Series(np.nan, index=dk.index)
    gv = work[(work.phase == "decode") & (work.source == NCU_SHAPES)]
    pad = gv.flops_tensor / gv.op_shapes.map(expected_gemm_flops).astype(float)
    half_m = {**d.matrix_tflops, "bf16": d.matrix_tflops["bf16"] / 2}
    mib = active / 2**20
    sram = max(1024, 1.1 * mib)  # the on-chip SRAM the what-if evaluates: one token's weights and 10 % room
    half_sram = mib / 2  # an SRAM that keeps the hottest half of them
    pin = dict(sram_keeps_weights=True)
    f = {"graph": graph, "graph_host_us": graph_host_us, "host_us": host_time_per_launch_us(tr),
         "sm_pct": weighted_mean(dk.sm_pct.where(dk.flops_tensor > 0), dk.share),
         "tensor_pipe_pct": weighted_mean(tp.where(dk.flops_tensor > 0), dk.share) if tp.notna().any() else np.nan,
         "l2_hit_pct": weighted_mean(dk.l2_hit_pct, dk.share),
         "occupancy_pct": weighted_mean(dk.achieved_occupancy_pct, dk.share),
         "under_wave_pct": 100 * weighted_mean((dk.waves_per_sm < 1).astype(float), dk.share),
         "weights_gb": active / 1e9, "weights_mib": mib, "fp8_gb": active_weight_bytes(tr, "fp8") / 1e9,
         "int4_gb": active_weight_bytes(tr, "int4") / 1e9, "gemv_pct": sh.get("GEMV", 0),
         "copy_pct": sh.get("copy/cast", 0), "fusible_pct": sum(sh.get(c, 0) for c in FUSIBLE),
         "comm_pct": sh.get("communication", 0), "pad_lo": pad.min(), "pad_hi": pad.max(),
         "launches": int(work[work.phase == "decode"].launches.sum() / max(1, steps.get("decode", 1))),
         "half_matrix": pct(at(tr, g, matrix_tflops=half_m), base),
         "half_matrix_prefill": pct(at(tr, g, "prefill", matrix_tflops=half_m), base_p),
         "dram_2_5": pct(at(tr, g, dram_gbps=2500), base), "dram_8": pct(at(tr, g, dram_gbps=8000), base),
         "half_sram_mib": half_sram, "sram_mib": sram,
         "half_sram": pct(at(tr, g, sram_mb=half_sram, **pin), base),
         "all_sram": pct(at(tr, g, sram_mb=sram, **pin), base),
         "batch_8": pct(at(tr, g, batch=8), base), "fused": pct(at(tr, g, fuse_elementwise=True), base),
         "fp8": pct(at(tr, g, weight_precision="fp8"), base), "int4": pct(at(tr, g, weight_precision="int4"), base)}
    f["replay"] = replay_quantities(tr)
    if not graph:
        f.update(half_matrix_eager=pct(at(tr, d, matrix_tflops=half_m), eager),
                 dram_2_5_eager=pct(at(tr, d, dram_gbps=2500), eager),
                 dram_8_eager=pct(at(tr, d, dram_gbps=8000), eager), graph_dispatch=pct(base, eager))
    # the designs each what-if moves to, against what the cross-device check covered
    moved = [[g.with_(matrix_tflops=half_m)], [g.with_(dram_gbps=2500), g.with_(dram_gbps=8000)],
             [g.with_(sram_mb=half_sram, **pin), g.with_(sram_mb=sram, **pin)], [g], [g.with_(fuse_elementwise=True)],
             [g.with_(weight_precision="fp8"), g.with_(weight_precision="int4")], [], [], []]
    batches = [1, 1, 1, 8, 1, 1, 1, 1, 1]
    f["across"] = (None if xerr is None else xerr.set_index("phase").loc["decode"] if "decode" in set(xerr.phase)
                   else None)
    f["held"] = model_error(validation(tr), None, tr=tr)
    f["outside"] = [list(dict.fromkeys(r for dd in ds for r in outside_envelope(dd, env, bt))) if ds else None
                    for ds, bt in zip(moved, batches)]
    f["confidence"] = AREA_CONFIDENCE
    return f


def replay_quantities(tr: Trace) -> dict | None:
    """A decode step that ran as CUDA graphs (`ReplayHost`), as the chapters name its figures (`contract.quantity`):
    `step` (the plain step, ms), `busy` (the replay's GPU-busy ms), `node` (its node gaps, ms), `gap` (the median
    node gap, µs), `host` (host time between replays, ms) and `host_share_pct` (that host time's % of the plain
    step); None where decode did not run as CUDA graphs."""
    hr = tr.host
    if hr is None or not hr.graph:
        return None
    return {"step": tr.q(hr.step_name, hr.plain_step_ms), "busy": tr.q("decode.gpu_busy_step_ms", hr.busy_ms),
            "node": tr.q("decode.node_gaps_ms", hr.node_gaps_ms), "gap": hr.node_gap_us_median,
            "host": tr.q("decode.host_between_replays_ms", hr.between_replays_ms),
            "host_share_pct": 100 * hr.between_replays_ms / hr.plain_step_ms}


def decode_reading(val: pd.DataFrame, tr: Trace) -> str:
    """How chapter 06's headline reads the decode step: 'graph' (it ran as CUDA graphs: the hardware knobs move what
    is not host time between replays), 'device' (the device busy at least half of the predicted step, `val`'s
    held-out prediction: the knobs move it) or 'host' (host-bound: no knob moves it until launches are batched)."""
    d = val.set_index("phase")
    hr = tr.host
    if hr is not None and hr.graph:
        return "graph"
    if "decode" in d.index and d.loc["decode", "predicted_device_share_pct"] >= 50:
        return "device"
    return "host"


def cross_device_bounds(xd: pd.DataFrame) -> dict | None:
    """The cross-device check at its worst over both directions and every phase: `pair` (the GPUs, each fitted on
    once), `pct` (the largest |device-time error|, %) and `gain` (the largest |gain error|, ×); None without rows."""
    t = xd[xd["class"] == ALL_KERNELS]
    if t.empty:
        return None
    return {"pair": list(dict.fromkeys(t.fitted_on)), "pct": t.error_pct.abs().max(), "gain": t.gain_error.abs().max()}


def worst_held_out_pct(val: pd.DataFrame) -> float:
    """The largest |device-time error| (%) over the phases of `validation`'s table, each held out of the fit: chapter
    06's answer in one number."""
    return float(val.device_error_pct.abs().max())


VALIDATION_TARGET_PCT = 25.0  # the held-out device-time error the model aims within


def validation_checks(val: pd.DataFrame) -> pd.DataFrame:
    """Per phase of `validation`'s table: `within_target` (its held-out device-time error within
    VALIDATION_TARGET_PCT) and `host_bound` (the device busy under half the predicted wall, so the wall error stays
    small whatever the device error)."""
    v = val.set_index("phase")
    return pd.DataFrame({"within_target": v.device_error_pct.abs() <= VALIDATION_TARGET_PCT,
                         "host_bound": v.predicted_device_share_pct < 50}, index=v.index)


ALL_KERNELS = phrase("all (GPU-busy)")


def class_ms(tr: Trace, t_s: np.ndarray | None = None) -> pd.Series:
    """Kernel ms per step by (phase, class): measured (t_s None) or from per-launch seconds `t_s`."""
    w = tr.work.assign(cls=kernel_class(tr.work),
                       ms=tr.work.total_ns / 1e6 if t_s is None else t_s * tr.work.launches * 1e3)
    g = w.groupby(["phase", "cls"]).ms.sum()
    return g / np.array([tr.steps[ph] for ph in g.index.get_level_values(0)])


def cross_device_one(a: Trace, b: Trace) -> pd.DataFrame:
    """Fit on run `a`, predict the GPU of run `b` (same workload), per phase and kernel class.

    The design for b is b's GPU as `for_run` builds it: devices.yaml spec compute and L2 size, the DRAM peak and
    L2 roof from b's ncu counters (device attributes, not kernel times), and b's kernel floor (5th percentile of its kernel durations);
    no kernel time of b enters the prediction. Latency, slowdown and DRAM scaling come from a's fit on all
    its phases. Device time per step (ms): predicted for b, measured on a and b; error of the prediction
    (%); gain a→b (a's time ÷ b's): predicted = the model's a ÷ the model's b (both from a's fit, what a
    what-if claims), measured = a's GPU-busy ÷ b's. Rows of class `all (GPU-busy)` are the phase's device
    time against its measured GPU-busy time; the class rows are kernel time only."""
    pa = predict(a, a.gpu).set_index("phase")
    pb = predict(a, b.gpu).set_index("phase")
    ma, mb = a.measured.set_index("phase"), b.measured.set_index("phase")
    rows = []
    for ph in ma.index.intersection(mb.index):
        rows.append({"phase": ph, "class": ALL_KERNELS, "model_a_ms": pa.loc[ph, "device_ms_per_step"],
                     "measured_a_ms": ma.loc[ph, "busy_ms_per_step"], "predicted_ms": pb.loc[ph, "device_ms_per_step"],
                     "measured_ms": mb.loc[ph, "busy_ms_per_step"]})
    ca = class_ms(a, launch_time_s(a.work, a.gpu, a.calib, a.gpu)[0])
    cb = class_ms(a, launch_time_s(a.work, b.gpu, a.calib, a.gpu)[0])
    meas_a, meas_b = class_ms(a), class_ms(b)
    for (ph, c), v in cb.items():
        if ph in ma.index and (ph, c) in meas_b.index:
            rows.append({"phase": ph, "class": c, "model_a_ms": ca[(ph, c)], "measured_a_ms": meas_a[(ph, c)],
                         "predicted_ms": v, "measured_ms": meas_b[(ph, c)]})
    out = pd.DataFrame(rows)
    out["error_pct"] = 100 * (out.predicted_ms - out.measured_ms) / out.measured_ms
    out["predicted_gain"] = out.model_a_ms / out.predicted_ms
    out["measured_gain"] = out.measured_a_ms / out.measured_ms
    out["gain_error"] = out.predicted_gain - out.measured_gain
    out.insert(0, "predicted", b.device)
    out.insert(0, "fitted_on", a.device)
    order = {ph: i for i, ph in enumerate(PHASES)}
    return _named_busy(out.sort_values(["phase", "class"], key=lambda s: s.map(order) if s.name == "phase"
                                       else (s != ALL_KERNELS).astype(int).astype(str) + s).reset_index(drop=True),
                       a, b)


def _named_busy(xd: pd.DataFrame, a: Trace, b: Trace) -> pd.DataFrame:
    """`xd` with the measured GPU-busy times of its whole-phase rows (`all (GPU-busy)`) as each run's named
    quantity (`contract.quantity`, as chapters 01, 05 and 07 print them) and their measured gain as the ratio of
    the two; the class rows' kernel times stay plain numbers."""
    whole = (xd["class"] == ALL_KERNELS).tolist()
    qa = [a.q(f"{ph}.gpu_busy_step_ms", v) if w else v for ph, v, w in zip(xd.phase, xd.measured_a_ms, whole)]
    qb = [b.q(f"{ph}.gpu_busy_step_ms", v) if w else v for ph, v, w in zip(xd.phase, xd.measured_ms, whole)]
    gain = [quantity.ratio(x, y, f"{x.key}_over/{b.run_id}") if w else g
            for x, y, g, w in zip(qa, qb, xd.measured_gain, whole)]
    return xd.assign(measured_a_ms=quantity.column(qa, xd.index), measured_ms=quantity.column(qb, xd.index),
                     measured_gain=quantity.column(gain, xd.index))


def cross_device(a: Trace, b: Trace) -> pd.DataFrame:
    """`cross_device_one` both ways: fitted on a predicting b, then fitted on b predicting a."""
    return pd.concat([cross_device_one(a, b), cross_device_one(b, a)], ignore_index=True)


# the parameters that make two runs the same workload (everything but the capture's own knobs)
WORKLOAD_KEYS = ("model", "weights", "dtype", "max_new_tokens", "batch_size", "attn_implementation",
                 "cache_implementation", "compile_decode", "crop_mode", "base_size", "prompt", "prompt_tokens",
                 "tensor_parallel", "variant", "seed", "no_repeat_ngram_size")


def cross_run_problem(run, other) -> str | None:
    """Why `other` cannot serve as run's cross-device check, None when it can: 'none' (no other run), 'workload'
    (not this workload: `workload_differs` names the parameters) or 'device' (captured on this run's GPU model). It
    must be the same workload (WORKLOAD_KEYS equal) captured on a different GPU model."""
    if other is None:
        return "none"
    if workload_differs(run, other):
        return "workload"
    if other.info.device == run.info.device:
        return "device"
    return None


def workload_differs(run, other) -> list[str]:
    """The WORKLOAD_KEYS whose values differ between the two runs' parameters (empty: the same workload)."""
    pa, pb = run.info.params, other.info.params
    return [k for k in WORKLOAD_KEYS if pa.get(k) != pb.get(k)]


def cross_device_error(xd: pd.DataFrame) -> pd.DataFrame:
    """Per phase, the worst of the two directions: |device-time error| (%) and |gain error| (×) of the phase
    totals; what the chapter's what-if numbers carry as their uncertainty."""
    t = xd[xd["class"] == ALL_KERNELS]
    return t.groupby("phase", sort=False).agg(device_error_pct=("error_pct", lambda s: s.abs().max()),
                                              gain_error=("gain_error", lambda s: s.abs().max())).reset_index()


CROSS_TARGET_PCT, CROSS_TARGET_GAIN = 15.0, 0.05  # the issue's targets: device time within 15 %, gain within 0.05×


def cross_device_checks(xd: pd.DataFrame, target_pct: float = CROSS_TARGET_PCT,
                        target_gain: float = CROSS_TARGET_GAIN) -> tuple[list, pd.Series | None]:
    """The cross-device table against its targets: per direction (fitted on, predicted, its whole-phase rows, whether
    every phase's device-time error is within `target_pct` % and its gain error within `target_gain`×), and the
    class row whose |device-time error| is the largest (None without class rows)."""
    t = xd[xd["class"] == ALL_KERNELS]
    directions = [(fa, pb, g, bool((g.error_pct.abs() <= target_pct).all()
                                   and (g.gain_error.abs() <= target_gain).all()))
                  for (fa, pb), g in t.groupby(["fitted_on", "predicted"], sort=False)]
    c = xd[xd["class"] != ALL_KERNELS]
    return directions, (c.loc[c.error_pct.abs().idxmax()] if len(c) else None)


def envelope(a: Trace, b: Trace) -> dict:
    """What the cross-device check covered: the two GPUs' DRAM bandwidths (GB/s), their common bf16 matrix
    peak, their on-chip memories (MiB); both eager runs, no fused elementwise, batch 1."""
    bw = sorted([a.gpu.dram_gbps, b.gpu.dram_gbps])
    mt = {a.gpu.matrix_tflops.get("bf16"), b.gpu.matrix_tflops.get("bf16")}
    return {"dram_gbps": bw, "matrix_tflops": mt, "sram_mb": sorted([a.gpu.sram_mb, b.gpu.sram_mb])}


def outside_envelope(d: Design, env: dict | None, batch: int = 1) -> list:
    """The ways design `d` (at `batch`) lies outside what the cross-device check validated, as phrases (empty:
    inside)."""
    if env is None:
        return [phrase("no other GPU was checked")]
    out = []
    lo, hi = env["dram_gbps"]
    if not lo * 0.95 <= d.dram_gbps <= hi * 1.05:
        out.append(phrase("DRAM {gbps:,.0f} GB/s outside the {lo:,.0f}–{hi:,.0f} GB/s checked", gbps=d.dram_gbps,
                          lo=lo, hi=hi))
    if d.matrix_tflops.get("bf16") not in env["matrix_tflops"]:
        out.append(phrase("matrix peak changed (both GPUs checked had {tf:g} TFLOP/s)",
                          tf=min(env["matrix_tflops"])))
    if d.sram_mb > env["sram_mb"][1] * 1.05:
        out.append(phrase("on-chip memory {mb:,.0f} MiB beyond the {max:,.0f} MiB L2 checked", mb=d.sram_mb,
                          max=env["sram_mb"][1]))
    if d.fuse_elementwise:
        out.append(phrase("fused elementwise chains"))
    if d.kernel_floor_us is not None or d.mem_efficiency is not None or d.matrix_efficiency is not None:
        out.append(phrase("latency or efficiency set by the design, not fitted"))
    if d.graph_floor_us is not None:
        out.append(phrase("a per-graph floor set by the design"))
    if d.sram_keeps_weights:
        out.append(phrase("weights kept in on-chip SRAM (a GPU's L2 keeps none)"))
    if d.weight_precision not in (None, "bf16"):
        out.append(phrase("{precision} weights (bytes only: dequantisation not priced)", precision=d.weight_precision))
    if batch != 1:
        out.append(phrase("batch {batch}", batch=batch))
    return out


def error_by_class(tr: Trace) -> pd.DataFrame:
    """Held-out prediction error per phase and kernel class: measured and predicted kernel ms per step."""
    out = []
    for ph in tr.measured.phase:
        cal = held_out_calibration(tr, ph)
        t, _ = launch_time_s(tr.work, tr.gpu, cal, tr.gpu)
        w = tr.work.assign(cls=kernel_class(tr.work), pred=t * tr.work.launches * 1e3, meas=tr.work.total_ns / 1e6)
        w = w[w.phase == ph]
        n = tr.steps[ph]
        g = w.groupby("cls")[["meas", "pred"]].sum() / n
        out.append(g.reset_index().assign(phase=ph))
    e = pd.concat(out, ignore_index=True).rename(columns={"cls": "class", "meas": "measured_ms", "pred": "predicted_ms"})
    e["error_ms"] = e.predicted_ms - e.measured_ms
    return e[["phase", "class", "measured_ms", "predicted_ms", "error_ms"]]


# the levers a design states or inherits (catalog keys: the design table's columns)
LEVERS = (phrase("kernel floor"), phrase("graph floor"), phrase("efficiency (matrix)"),
          phrase("efficiency (memory)"), phrase("dispatch"), phrase("on-chip SRAM"), phrase("weight precision"))


def _range(v: np.ndarray, fmt: str) -> str:
    lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def design_levers(d: Design, tr: Trace) -> dict[str, tuple[str, bool]]:
    """Per lever (`LEVERS`): what the design runs with, as the reader reads it (a phrase), and whether the design
    states it (True) or inherits it from the GPU the model was fitted on (False: the fitted per-class latency L and
    slowdown b, the run's host gaps or graph replay, the run's bf16 weights)."""
    cal = tr.calib[tr.calib["class"] != "pooled"]
    matrix = cal["class"].str.split(" ").str[0].isin(MATRIX).to_numpy()
    hr = tr.host
    out = {}
    if d.kernel_floor_us is not None:
        out["kernel floor"] = (phrase("{us:g} µs per kernel", us=d.kernel_floor_us), True)
    else:
        scale = d.floor_us / tr.gpu.floor_us if d.floor_us and tr.gpu.floor_us else 1.0
        out["kernel floor"] = (phrase("{range} µs per kernel (L fitted per class)",
                                      range=_range(cal.latency_us.to_numpy() * scale, "{:.1f}")), False)
    if d.graph_floor_us is not None:
        out["graph floor"] = (phrase("{us:g} µs per graph", us=d.graph_floor_us), True)
    elif hr is not None and hr.graph:
        out["graph floor"] = (phrase("inside the host time between replays ({ms:.2f} ms per step)",
                                     ms=hr.between_replays_ms), False)
    else:
        out["graph floor"] = (phrase("none: decode ran eager"), False)
    for lever, eff, m in (("efficiency (matrix)", d.matrix_efficiency, matrix),
                          ("efficiency (memory)", d.mem_efficiency, ~matrix)):
        fitted = 100 / cal.slowdown.to_numpy()[m] if m.any() else np.array([np.nan])
        if isinstance(eff, dict):
            out[lever] = (joined(joined(*(f"{c} {100 * v:.0f} %" for c, v in eff.items()), sep=COMMA),
                                 phrase("; other classes fitted")), True)
        elif eff is not None:
            out[lever] = (phrase("{pct:.0f} % of peak", pct=100 * eff), True)
        else:
            out[lever] = (phrase("{range} % of peak (1/b fitted per class)", range=_range(fitted, "{:.0f}")), False)
    if hr is not None and hr.graph:
        out["dispatch"] = (phrase("CUDA graph: node gaps {gap:.2f} µs (median), {node:.2f} ms per step",
                                  gap=hr.node_gap_us_median, node=hr.node_gaps_ms), False)
    elif d.launch_overhead_us is not None:
        out["dispatch"] = (phrase("{us:g} µs per launch", us=d.launch_overhead_us), True)
    else:
        out["dispatch"] = (phrase("the run's host gaps ({us:.1f} µs per launch, plain)",
                                  us=host_time_per_launch_us(tr)), False)
    sram = phrase("{mb:,.0f} MiB at {gbps:,.0f} GB/s", mb=d.sram_mb, gbps=d.sram_gbps)
    out["on-chip SRAM"] = (joined(sram, "" if d.sram_keeps_weights else phrase(", a cache: no weights stay")), True)
    out["weight precision"] = ((d.weight_precision, True) if d.weight_precision is not None
                               else (phrase("bf16 (the run's)"), False))
    return out


# the design table's other columns named by catalog keys (the table shows them in the narrative language)
DESIGN_COLUMNS = (phrase("resident weights MiB"), phrase("decode model error"),
                  phrase("decode ms/token as deployed"), phrase("as deployed: model error"))
# `design_table`'s cells that are phrases (or catalog keys)
DESIGN_TEXT = ("design", *LEVERS, "decode bound", "decode model error", "as deployed: model error",
               "outside what was checked", "source")


def lever_cell(value: str, own: bool) -> str:
    """A lever as the design table shows it (a phrase): its value and whether the design states it or inherits it."""
    return phrase("{value} (own)", value=value) if own else phrase("{value} (inherited)", value=value)


def resident_weight_bytes(tr: Trace, d: Design, phase: str = "decode") -> float:
    """Weight bytes per step of `phase` that design `d`'s SRAM keeps on chip (at its weight precision)."""
    w = at_precision(tr.work, d.weight_precision)
    if not d.sram_keeps_weights:
        return 0.0
    f = resident_fraction(w, d.sram_mb)
    m = (w.phase == phase).to_numpy()
    return float((f * w.weight_bytes * w.launches)[m].sum() / max(1, tr.steps.get(phase, 1)))


def fit_error_pct(tr: Trace, phase: str = "decode") -> float:
    """Device-time error (%) of the calibration the what-ifs use (fitted on every phase) on `phase` of its own run,
    host gaps as recorded: what the held-out error does not show when a phase's own kernels pull the fit."""
    p = predict(tr, tr.gpu, host_scale=1.0).set_index("phase")
    m = tr.measured.set_index("phase")
    return float(100 * (p.loc[phase, "device_ms_per_step"] - m.loc[phase, "busy_ms_per_step"])
                 / m.loc[phase, "busy_ms_per_step"])


def model_error(val: pd.DataFrame | None, xerr: pd.DataFrame | None = None, phase: str = "decode",
                tr: Trace | None = None) -> str:
    """What a what-if number of `phase` carries, as a phrase: with `tr`, the device-time error of the fit it uses on
    its own run (`fit_error_pct`); its held-out device-time error on the run (`validation`) and, where a
    cross-device check ran, its error across GPUs."""
    parts = []
    if tr is not None and phase in tr.steps:
        parts.append(phrase("{pct:+.0f} % as fitted", pct=fit_error_pct(tr, phase)))
    if val is not None and phase in set(val.phase):
        parts.append(phrase("{pct:+.0f} % held out", pct=float(val.set_index("phase").loc[phase, "device_error_pct"])))
    if xerr is not None and phase in set(xerr.phase):
        parts.append(phrase("±{pct:.0f} % across GPUs",
                            pct=float(xerr.set_index("phase").loc[phase, "device_error_pct"])))
    return joined(*parts, sep=COMMA)


def design_table(designs: dict, tr: Trace, env: dict | None = None, deployed: Trace | None = None,
                 val: pd.DataFrame | None = None, dep_val: pd.DataFrame | None = None,
                 xerr: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per design: each lever (`LEVERS`) with '(own)' where the design states it and '(inherited)' where it
    carries what the model fitted on the run's GPU; the weight bytes of a decode step its SRAM keeps (MiB);
    predicted times (plain run) on `tr` and, with `deployed` (the same workload with decode as CUDA graphs),
    decode on the deployed run; each decode figure's model error (held out on its run, `val` / `dep_val`,
    computed when not given; across GPUs with `xerr`); `outside what was checked`: how the design lies outside the
    cross-device check's envelope (`envelope`), when there was one. Its text cells (DESIGN_TEXT) are phrases:
    `narrate.whatif.design_table` shows them in the reader's language."""
    val = validation(tr) if val is None else val
    if deployed is not None and dep_val is None:
        dep_val = validation(deployed)
    err = model_error(val, xerr, tr=tr)
    dep_err = model_error(dep_val, None, tr=deployed) if deployed is not None else ""  # xerr: eager runs only
    rows = []
    for key, d in designs.items():
        p = predict(tr, d).set_index("phase")

        def get(ph, col):
            return p.loc[ph, col] if ph in p.index else np.nan
        row = {"design": key}
        row.update({lv: lever_cell(*v) for lv, v in design_levers(d, tr).items()})
        row.update({"bf16 TFLOP/s": d.matrix_tflops.get("bf16"), "DRAM GB/s": d.dram_gbps, "SRAM MiB": d.sram_mb,
                    "resident weights MiB": resident_weight_bytes(tr, d) / 2**20,
                    "fuses elementwise": d.fuse_elementwise,
                    "vision_encode ms": get("vision_encode", "wall_ms_per_step"),
                    "prefill ms": get("prefill", "wall_ms_per_step"), "decode ms/token": get("decode", "per_token_ms"),
                    "decode bound": get("decode", "bound"), "decode model error": err})
        if deployed is not None:
            q = predict(deployed, d).set_index("phase")
            row["decode ms/token as deployed"] = q.loc["decode", "per_token_ms"] if "decode" in q.index else np.nan
            row["as deployed: model error"] = dep_err
        row["outside what was checked"] = joined(*outside_envelope(d, env), sep=COMMA) if env else ""
        row["source"] = d.source
        rows.append(row)
    out = pd.DataFrame(rows)
    for c in DESIGN_TEXT:  # the cells' phrases kept (an object column)
        if c in out:
            out[c] = phrase_column((r[c] for r in rows), out.index)
    return out if env else out.drop(columns="outside what was checked")


def deployed_step_figures(tr: Trace, deployed: Trace) -> dict:
    """The deployed run's decode step as chapter 06 shows it in three places, each what it is (ms per token of a plain
    run): `measured` the plain step the capture timed (a named quantity, `ReplayHost.step_name`); `as_fitted` the
    model of the deployed run fitted on its own phases (`lever_table`'s "as fitted" row: `at` on its own GPU);
    `on_this_gpu` the deployed run's launches on this run's GPU as a design (`design_table`'s first row: `predict`
    with `tr.gpu`, whose kernel floor scales the deployed run's fitted latencies, `launch_time_s`). `floor_us` and
    `floor_us_deployed`: the two runs' kernel floors (µs, `kernel_floor_us_of`), whose ratio is that scale and most
    of the gap between the last two figures. `design`: the design `on_this_gpu` is priced on (a phrase)."""
    h = deployed.host
    if h is not None and h.plain_step_ms == h.plain_step_ms:
        measured = deployed.q(h.step_name, h.plain_step_ms)
    else:
        measured = None
    return {"measured": measured, "as_fitted": at(deployed, deployed.gpu),
            "on_this_gpu": float(predict(deployed, tr.gpu).set_index("phase").loc["decode", "per_token_ms"]),
            "design": tr.gpu.key, "floor_us": tr.gpu.floor_us, "floor_us_deployed": deployed.gpu.floor_us}


def sensitivity_both(tr: Trace, d: Design, graph_host_us: float = 2.0, deployed: Trace | None = None) -> pd.DataFrame:
    """`sensitivity` per way of dispatching decode; `dispatch` labels each (a phrase: legend entries, which
    `narrate.whatif.sensitivity` shows in the reader's language). An eager run: at its own host gaps and at
    graph-style `graph_host_us` per launch, and with `deployed` (the same workload's CUDA-graph run) on that run as
    deployed. A run whose decode ran as CUDA graphs: that run alone (its host time between replays is a per-step
    term, not a per-launch one)."""
    hr = tr.host
    if hr is not None and hr.graph:
        return _dispatched(sensitivity(tr, d), phrase(
            "as run: CUDA graphs ({ms:.2f} ms host time per step between replays)", ms=hr.between_replays_ms))
    a = _dispatched(sensitivity(tr, d), phrase("eager (run's host gaps, {us:.0f} µs/launch)",
                                               us=host_time_per_launch_us(tr)))
    b = _dispatched(sensitivity(tr, d.with_(launch_overhead_us=graph_host_us)),
                    phrase("graph ({us:g} µs/launch)", us=graph_host_us))
    parts = [a, b]
    if deployed is not None and deployed.host is not None and deployed.host.graph:
        parts.append(_dispatched(sensitivity(deployed, deployed.gpu), phrase(
            "as deployed: CUDA graphs ({ms:.2f} ms host time per step between replays)",
            ms=deployed.host.between_replays_ms)))
    return pd.concat(parts, ignore_index=True)


def _dispatched(sens: pd.DataFrame, label) -> pd.DataFrame:
    """`sens` with its `dispatch` label (a phrase, kept in an object column)."""
    return sens.assign(dispatch=phrase_column([label] * len(sens), sens.index))


def knees_both(sens: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([knees(g).assign(dispatch=k) for k, g in sens.groupby("dispatch")], ignore_index=True)


def replay_host_table(traces: dict) -> pd.DataFrame:
    """Per run (label → Trace): how its decode step splits between the replay's kernels, the gaps between them
    and host time (ms per step; `ReplayHost`). On a graph run the host time between replays is one term per step;
    on an eager run it is spread over the launches (host µs per launch, plain)."""
    rows = []
    for label, t in traces.items():
        h = t.host
        if h is None:
            continue
        rows.append({"run": label, "decode as": phrase("CUDA graphs") if h.graph else phrase("eager launches"),
                     "plain step ms": t.q(h.step_name, h.plain_step_ms),
                     "GPU-busy ms": t.q("decode.gpu_busy_step_ms", h.busy_ms),
                     # an eager step has no graph nodes: its 0 is not a measured gap
                     "node gaps ms": t.q("decode.node_gaps_ms", h.node_gaps_ms) if h.graph else h.node_gaps_ms,
                     "node gap median µs": h.node_gap_us_median,
                     "host between replays ms": t.q("decode.host_between_replays_ms", h.between_replays_ms)
                     if h.graph else np.nan,
                     "host µs per launch (plain)": np.nan if h.graph else host_time_per_launch_us(t),
                     "host gaps under the profiler ms": h.host_profiled_ms, "basis": h.basis})
    out = pd.DataFrame(rows)
    for c in ("plain step ms", "GPU-busy ms", "node gaps ms", "host between replays ms"):
        if c in out:  # the named quantities the chapters' prose prints (`contract.quantity`)
            out[c] = quantity.column((r[c] for r in rows), out.index)
    return out


# the "as fitted" row's setting: its figures are the model's, not a measured step (the deployed run's measured step
# is the replay table's plain step; `deployed_step_figures` sets the two side by side)
AS_FITTED_SETTING = phrase("none: the model as fitted, not a measured step")
# the levers of `lever_table` (catalog keys)
LEVER_ROWS = (phrase("as fitted"), phrase("kernel floor"), phrase("efficiency"),
              phrase("efficiency and kernel floor"), phrase("DRAM bandwidth"), phrase("on-chip SRAM keeping weights"),
              phrase("weight precision"), phrase("batch"))


def lever_table(tr: Trace, d: Design, deployed: Trace | None = None, graph_host_us: float = 2.0,
                val: pd.DataFrame | None = None, dep_val: pd.DataFrame | None = None) -> pd.DataFrame:
    """One what-if per row, decode ms per token of a plain run: on `tr` (an eager run with launches issued as a
    graph at `graph_host_us` each; a graph run as it ran) and on `deployed` (the same workload's CUDA-graph run, as
    it ran), each with its change against the fitted model and the model's error (`model_error`) beside it. Its
    `setting` and `model error` cells are phrases (LEVER_TEXT: `narrate.whatif.lever_table` shows them in the
    reader's language)."""
    g = tr.gpu if tr.host is not None and tr.host.graph else tr.gpu.with_(launch_overhead_us=graph_host_us)
    mib = active_weight_bytes(tr) / 2**20
    keep = dict(sram_keeps_weights=True)
    cases = [("as fitted", AS_FITTED_SETTING, {}, 1), ("kernel floor", phrase("{us:g} µs per kernel", us=0.5),
                                        dict(kernel_floor_us=0.5), 1),
             ("efficiency", phrase("{pct:.0f} % of peak", pct=100), dict(matrix_efficiency=1.0, mem_efficiency=1.0), 1),
             ("efficiency and kernel floor", phrase("{pct:.0f} % of peak, {us:g} µs per kernel", pct=100, us=0.5),
              dict(matrix_efficiency=1.0, mem_efficiency=1.0, kernel_floor_us=0.5), 1),
             ("DRAM bandwidth", phrase("{gbps:,.0f} GB/s", gbps=8000), dict(dram_gbps=8000.0), 1)]
    for mb in (256, 512, 1024, float(np.ceil(1.1 * mib))):
        cases.append(("on-chip SRAM keeping weights", phrase("{mb:,.0f} MiB", mb=mb), dict(sram_mb=mb, **keep), 1))
    cases += [("weight precision", p, dict(weight_precision=p), 1) for p in ("fp8", "int4")]
    # the batch row (the last), its host time per step a study's where a run carries one (chapter 07 passes the
    # deployed run as `tr`)
    n = 8
    if tr.host_growth is not None:
        batch_setting = phrase("{n}, host time per step as study {study} measured it", n=n, study=tr.host_growth.source)
    elif deployed is not None and deployed.host_growth is not None:
        batch_setting = phrase("{n} (as deployed: host time per step as study {study} measured it)", n=n,
                               study=deployed.host_growth.source)
    else:
        batch_setting = str(n)
    cases.append(("batch", batch_setting, {}, n))
    runs = [(tr, g, val if val is not None else validation(tr), "")]
    if deployed is not None:
        runs.append((deployed, deployed.gpu, dep_val if dep_val is not None else validation(deployed), " as deployed"))
    out = pd.DataFrame({"lever": [c[0] for c in cases]})
    out["setting"] = phrase_column((c[1] for c in cases), out.index)
    for t, base_d, v, suffix in runs:
        base = at(t, base_d)
        ms = [at(t, base_d.with_(**ch), batch=b) for _, _, ch, b in cases]
        out["decode ms/token" + suffix] = ms
        out["change %" + suffix] = [100 * (m - base) / base for m in ms]
        err = [model_error(v, tr=t)] * len(out)
        measured = t.host_growth.steady_at(n) if t.host_growth is not None else None
        if measured and measured == measured:  # the batch row: against the study's step at that batch, not the fit's
            err[-1] = phrase("{pct:+.0f} % against study {study}'s steady step at batch {n}",
                             pct=100 * (n * ms[-1] - measured) / measured, study=t.host_growth.source, n=n)
        out["model error" + suffix] = phrase_column(err, out.index)
    return out


# `lever_table` and `replay_host_table` columns named by catalog keys
LEVER_COLUMNS = (phrase("lever"), phrase("setting"), phrase("change %"), phrase("model error"),
                 phrase("decode ms/token as deployed"), phrase("change % as deployed"),
                 phrase("model error as deployed"), phrase("decode as"), phrase("plain step ms"),
                 phrase("node gaps ms"), phrase("node gap median µs"), phrase("host between replays ms"),
                 phrase("host µs per launch (plain)"), phrase("host gaps under the profiler ms"))
# `lever_table`'s cells that are phrases
LEVER_TEXT = ("lever", "setting", "model error", "model error as deployed")
