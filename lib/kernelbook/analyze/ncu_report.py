"""Chapter 02's analysis: coverage, explained time, the per-kernel metric table and fidelity checks, as numbers and
English phrases (`contract.phrase`: a table cell's verdict); the chapter's sentences, labels and notes are
`narrate.ncu_report`'s."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract.shapes import (FLOPS_TOLERANCE, dim3, elementwise_bytes, elementwise_flops, expected_gemm_flops,
                               implied_bytes, is_matvec, readable, tile_paddings)
from ..contract.kernels import with_identity
from ..contract.manifest import Manifest, read_manifest
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
from ..digits import count
from ..escape import md_code

# How far an ncu duration may stray from the timeline median before the prose counts it (the FLOP target,
# tensor FLOPs ÷ 2·M·N·K within ±5 %, is contract.shapes.FLOPS_TOLERANCE).
DURATION_TOLERANCE = 0.25

TABLE_COLUMNS = ["kernel_id", "friendly_name", "category", "share_pct", "duration_us", "sm_pct", "dram_pct",
                 "memory_pct", "l1_hit_pct", "l2_hit_pct", "achieved_occupancy_pct",
                 "theoretical_occupancy_pct", "registers", "grid", "block", "waves_per_sm", "spill_bytes",
                 "dram_bytes", "flops_tensor", "flops_cuda", "intensity_dram"]

def coverage(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per phase: selected, profiled, coverage %, and the share of the phase's kernel time the profiled
    kernels explain (%)."""
    rows = []
    for ph, k in kernels.groupby("phase"):
        ok = k.status == "profiled"
        rows.append({"phase": ph, "selected": len(k), "profiled": int(ok.sum()),
                     "coverage_pct": 100 * ok.mean(), "explained_time_pct": 100 * k.loc[ok, "share"].sum(),
                     "selected_time_pct": 100 * k["share"].sum()})
    return pd.DataFrame(rows)


def metric_table(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """The per-kernel metric table: `TABLE_COLUMNS` the run has, then `status` as the ncu stage wrote it (English
    capture data: `narrate.ncu_report.metric_table` shows it in the reader's language)."""
    k = with_identity(kernels, timeline, ["friendly_name", "category"])
    k["share_pct"] = 100 * k["share"]
    k["duration_us"] = k["duration_ns"] / 1e3
    return k[[c for c in TABLE_COLUMNS if c in k.columns] + ["status"]]


class Launches:
    """A run's timeline indexed once for the per-kernel lookups below: its launches by (kernel name, phase) and its
    kernel launches by (phase, step). Every function that takes `timeline` also takes this (`Launches.of`); a loop
    over the profiled kernels builds it once instead of scanning the whole timeline per kernel."""

    def __init__(self, timeline: pd.DataFrame):
        self.frame = timeline
        self._named = timeline.groupby(["name", "phase"], sort=False).indices if len(timeline) else {}
        steps = timeline[timeline.kind == "kernel"] if "kind" in timeline else timeline
        self._steps = ({key: steps.index[pos] for key, pos in steps.groupby(["phase", "step"], sort=False).indices.items()}
                       if "step" in timeline and len(steps) else {})
        self._memo: dict = {}  # lookups already made: launch configurations and sorted steps

    @staticmethod
    def of(timeline: "pd.DataFrame | Launches") -> "Launches":
        return timeline if isinstance(timeline, Launches) else Launches(timeline)

    def named(self, name, phase) -> pd.DataFrame:
        """The launches of kernel `name` in `phase`, in timeline order."""
        pos = self._named.get((name, phase))
        return self.frame.iloc[pos] if pos is not None else self.frame.iloc[:0]

    def step(self, phase, step) -> pd.DataFrame:
        """The kernel launches of one step of `phase`, in launch order (as the ncu stage numbers a graph phase's
        launches: by launch time, then start)."""
        key = ("step", phase, step)
        if key not in self._memo:
            idx = self._steps.get((phase, step))
            st = self.frame.loc[idx] if idx is not None else self.frame.iloc[:0]
            self._memo[key] = st.sort_values([c for c in ("launch_ns", "start_ns") if c in st], kind="stable")
        return self._memo[key]

    def config(self, name, phase, grid, block) -> pd.DataFrame:
        """The launches of kernel `name` in `phase` with launch configuration (`grid`, `block`), all of its launches
        in the phase when none has it (`launch_config`)."""
        key = ("config", name, phase, dim3(grid), dim3(block))
        if key not in self._memo:
            tl = self.named(name, phase)
            same = tl[(tl.grid.map(dim3) == key[3]) & (tl.block.map(dim3) == key[4])]
            self._memo[key] = same if len(same) else tl
        return self._memo[key]


def _profiled_rows(k, timeline: "pd.DataFrame | Launches", cfg: pd.DataFrame) -> pd.DataFrame:
    """The timeline row(s) of the launch ncu profiled: (`profiled_step`, `op_index`) in an eager phase, the
    op call's launches of the kernel's configuration `cfg`; (`profiled_step`, `launch_index`) in a graph phase,
    the step's launch at that index in launch order (as the ncu stage numbered them). Empty when the run does
    not say."""
    ix = Launches.of(timeline)
    step, op_index, li = k.get("profiled_step"), k.get("op_index"), k.get("launch_index")
    if not pd.notna(step) or "step" not in ix.frame:
        return cfg.iloc[:0]
    if li is not None and pd.notna(li) and li >= 0:
        st = ix.step(k["phase"], step)
        if int(li) < len(st) and st.iloc[int(li)]["name"] == k["name"]:
            return st.iloc[[int(li)]]
        return cfg.iloc[:0]
    at = cfg[cfg.step == step]
    if pd.notna(op_index) and "op_index" in at:
        return at[at.op_index == op_index]
    return cfg.iloc[:0]


def launch_config(k, timeline: "pd.DataFrame | Launches") -> pd.DataFrame:
    """Every timeline launch of the kernel's name in its phase with its launch configuration (grid and block;
    all of its launches in the phase when none match)."""
    return Launches.of(timeline).config(k["name"], k["phase"], k.get("grid"), k.get("block"))


def profiled_launch(k, timeline: "pd.DataFrame | Launches") -> tuple[pd.DataFrame, str | None, str | None]:
    """For one profiled kernel row: the timeline launches of its launch shape — its launch configuration and
    the aten op shapes of the launch ncu profiled (`profiled_step` with `op_index`, or `launch_index` in a graph
    phase; a decode attention's KV length grows with the step), else the configuration's most common shapes —
    and that aten op and those shapes. Launches of other shapes of the same kernel and grid are left out: a
    grid can run two projections of different sizes (gate_up and down of one MoE), whose times differ. Where
    the timeline records no shapes, the configuration's launches. Every check against the shapes uses this."""
    ix = Launches.of(timeline)
    cfg = launch_config(k, ix)
    at = _profiled_rows(k, ix, cfg)
    shapes = at.op_shapes.dropna() if at.op_shapes.notna().any() else cfg.op_shapes.dropna().mode()
    shp = shapes.iloc[0] if len(shapes) else None
    ref = cfg[cfg.op_shapes == shp] if shp is not None else cfg
    ref = ref if len(ref) else cfg
    op = ref.op.dropna().iloc[0] if shp is not None and ref.op.notna().any() else None
    return ref, op, shp


# An ncu duration more than this factor from the timeline median of the same launch shape is flagged with its
# reason (issue 41: 1.25×, both ways).
CONTEXT_FACTOR = 1.25
# Below this many operand bytes a launch's DRAM bytes under a cold cache are dominated by what every cold launch
# reads besides its operands (its code, its parameters, whole 32-byte sectors): the project's own heuristic, set
# from the bundled runs, where launches that move at most 16 B of operands read 5–6 kB and launches of a few kB of
# operands 9–100 kB.
SMALL_OPERANDS_BYTES = 64e3
# how many launches before a kernel's profiled launch are looked at for the producer of its operands
PRODUCER_WINDOW = 3
_PRODUCES = ("gather/index", "copy/cast")
# a tile's padding explains counted ÷ useful FLOPs when it gives the ratio within this (ncu counts whole MMAs)
TILE_MATCH = 0.002


def _ddr_ceiling(manifest: Manifest | None) -> tuple[float | None, str]:
    """The DRAM ceiling in-loop traffic is compared with: the run's measured device-to-device copy bandwidth
    (GB/s, read + write) and its name (a phrase), else none."""
    if manifest is None:
        return None, ""
    gbps = manifest.measured_peaks.d2d_copy_gbps if manifest.measured_peaks else None
    return ((float(gbps), phrase("the {gbps:,.0f} GB/s device-to-device copy measured on this GPU", gbps=gbps))
            if gbps else (None, ""))


def _producer(k, timeline: "pd.DataFrame | Launches", cfg: pd.DataFrame) -> pd.Series | None:
    """The launch that wrote this kernel's operands just before it, when one of the `PRODUCER_WINDOW` launches
    before the profiled one (same step) is a gather/index or copy/cast kernel: None otherwise."""
    ix = Launches.of(timeline)
    at = _profiled_rows(k, ix, cfg)
    if at.empty or "start_ns" not in ix.frame:
        return None
    me = at.iloc[0]
    st = ix.step(k["phase"], me.step)
    st = st[st.start_ns < me.start_ns]
    before = st.sort_values("start_ns").tail(PRODUCER_WINDOW)
    hit = before[before.category.isin(_PRODUCES)] if "category" in before else before.iloc[:0]
    return hit.iloc[-1] if len(hit) else None


def _context(r: dict, floor_us: float, ceiling: float | None, ceiling_text: str, l2_bytes: float | None,
             producer, cache: str | None) -> tuple[str, bool]:
    """(the verdict on ncu against the loop, a phrase; whether the loop reads part of its operands from L2) for one
    row of `fidelity`."""
    ratio, loop_us, gbps = r["duration_ratio"], r["timeline_median_us"], r["in_loop_gbps"]
    above_ceiling = ceiling is not None and gbps == gbps and gbps > ceiling
    fits_l2 = l2_bytes is not None and r["dram_bytes"] == r["dram_bytes"] and r["dram_bytes"] <= l2_bytes
    floor = ratio > CONTEXT_FACTOR and loop_us < floor_us
    chained = (producer is not None and fits_l2 and ratio > CONTEXT_FACTOR and not floor
               and r["dram_bytes"] >= SMALL_OPERANDS_BYTES)
    in_l2 = bool(above_ceiling or chained)
    if above_ceiling:
        what = phrase("its {mb:.1f} MB of cold-cache DRAM bytes in the loop's {us:.2f} µs would be {gbps:,.0f} GB/s, "
                      "above {ceiling}: in the loop part of its operands come from L2", mb=r["dram_bytes"] / 1e6,
                      us=loop_us, gbps=gbps, ceiling=ceiling_text)
        if producer is not None:
            what = joined(what, phrase(", written there by the launch just before it (`{name}`, {category})",
                                       name=md_code(_short(producer)), category=producer.category))
        return phrase("producer → consumer: {what}; ncu, with caches flushed, reads them from DRAM", what=what), in_l2
    if 1 / CONTEXT_FACTOR <= ratio <= CONTEXT_FACTOR:
        return phrase("agrees (within {factor:.2f}×)", factor=CONTEXT_FACTOR), in_l2
    if floor:
        return phrase("small-kernel floor: {us:.2f} µs in the loop, below the {floor:.2f} µs of the shortest launch "
                      "ncu timed in this run (a replayed launch pays its launch and drain alone)", us=loop_us,
                      floor=floor_us), in_l2
    if chained:
        return phrase("producer → consumer: it reads what `{name}` ({category}) wrote just before it, {mb:.1f} MB, "
                      "inside the {l2:.0f} MB L2 in the loop; ncu, with caches flushed, reads it from DRAM",
                      name=md_code(_short(producer)), category=producer.category, mb=r["dram_bytes"] / 1e6,
                      l2=l2_bytes / 1e6), in_l2
    if ratio > CONTEXT_FACTOR and cache == "all":
        return phrase("cold-cache replay: ncu flushes the caches before the launch, so every operand comes from DRAM; "
                      "in the loop the launch before it has just written its inputs to L2"), in_l2
    if ratio > CONTEXT_FACTOR:
        return phrase("slower under ncu; nothing in the run's tables says why"), in_l2
    return phrase("faster under ncu than in the loop: in the loop it shares the GPU with the launches around it or "
                  "runs at another clock; nothing in the run's tables says which"), in_l2


def inloop_measured(k) -> dict | None:
    """A profiled kernel's DRAM reads in the loop where the run measured them (the range pass, capture.ncu_ranges:
    the kernel with its producer minus the producer alone, caches flushed before each range): `cold_read_bytes` (the
    main pass's DRAM reads, caches flushed before the launch; its DRAM bytes where the run has no reads),
    `inloop_read_bytes`. None where the run has no in-loop column or the pass did not reach this kernel (NaN)."""
    get = k.get if hasattr(k, "get") else (lambda c, d=None: getattr(k, c, d))
    rin = get("dram_read_bytes_inloop")
    if rin is None or not rin == rin:
        return None
    cold = get("dram_read_bytes")
    cold = get("dram_bytes") if cold is None or not cold == cold else cold
    return {"cold_read_bytes": float(cold), "inloop_read_bytes": float(rin)}


def has_inloop(kernels: pd.DataFrame) -> bool:
    """Whether the run's kernel table carries the in-loop pass's figures for any profiled kernel."""
    return "dram_read_bytes_inloop" in kernels and bool(kernels.dram_read_bytes_inloop.notna().any())


# how the in-loop reads were measured, and why a producer → consumer kernel has none (phrases: shown in the reader's
# language by `narrate.say`)
INLOOP_HOW = phrase("ncu's range pass: the launch with its producer's, minus the producer alone, caches flushed before "
                    "each range as in every ncu figure")


INLOOP_NOT_MEASURED = phrase("not measured in the loop: the range pass measures decode kernels whose op call launches "
                             "them alone; a graph step's, a prefill's or a vision encode's kernels are read cold")


def inloop_words(m: dict) -> str:
    """The measured in-loop reads beside the cold ones, a phrase (`inloop_measured`)."""
    return phrase("measured in the loop ({how}): {inr:.2f} MB read from DRAM against {cold:.2f} MB with caches flushed "
                  "before the launch", how=INLOOP_HOW, inr=m["inloop_read_bytes"] / 1e6,
                  cold=m["cold_read_bytes"] / 1e6)


def _listed(parts: list, sep: str) -> str:
    """`parts` (phrases) one after another with the phrase `sep` between them, as one phrase ("" for none): the
    reader's language writes the separator its own way too."""
    return joined(*[x for i, p in enumerate(parts) for x in ((sep, p) if i else (p,))]) if parts else ""


def _short(row) -> str:
    name = row.get("short_name") if hasattr(row, "get") else None
    return str(name if isinstance(name, str) and name else row["name"])[:60]


def _instruction_flops(metrics: pd.DataFrame | None, result_id) -> dict:
    """A result's CUDA-core FLOPs by instruction (ncu's predicated-on thread instructions): FMA counted 2, ADD and
    MUL 1, fp32 and fp16/bf16 apart. Empty without the metric table."""
    if metrics is None or result_id is None or not result_id == result_id:
        return {}
    m = metrics[metrics.result_id == int(result_id)]
    get = m.set_index("metric").value
    out = {}
    for op in ("ffma", "fadd", "fmul", "hfma", "hadd", "hmul"):
        name = f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
        if name in get.index:
            v = get[name]
            out[op] = float(v.iloc[0] if isinstance(v, pd.Series) else v)
    return out


def _flops_verdict(r: dict, k, inst: dict) -> str | None:
    """Why a kernel's counted FLOPs differ from the useful FLOPs of its shapes, a phrase (None when within
    `FLOPS_TOLERANCE` or there is nothing to compare)."""
    ratio = r["flops_ratio"]
    useful, counted = r["expected_flops"], r["counted_flops"]
    if useful == 0 and counted and counted == counted:
        return phrase("a copy does no arithmetic, yet ncu counts {counted} FLOPs: every executed floating-point "
                      "FMA/ADD/MUL counts, also those the compiler emits for a copy (conversions, index math in float)",
                      counted=count(counted))
    if not ratio == ratio or abs(ratio - 1) <= FLOPS_TOLERANCE:
        return None
    if not r["cuda_core"]:
        pads = sorted(tile_paddings(k.get("name"), r["op_shapes"]), key=lambda p: abs(p[0] / ratio - 1))
        fit = [p for p in pads if abs(p[0] / ratio - 1) <= TILE_MATCH]
        if fit:
            return phrase("tensor cores: the MMA tile pads {shape} ({pad:.3f}×, as counted): the tensor pipe does that "
                          "much more than the useful work, the shapes match", shape=fit[0][1], pad=fit[0][0])
        if r["grouped"] and ratio > 1:
            return phrase("a grouped (MoE) GEMM, checked against 2·M·N·K summed over its groups (every routed row "
                          "through one expert): each expert's rows are padded up to the MMA tile, so the tensor pipe "
                          "does {ratio:.2f}× the useful work; the group sizes are not in the op's shapes, so the padding "
                          "itself cannot be checked from them", ratio=ratio)
        if ratio > 1 and "splitK" in str(k.get("name")):
            return phrase("tensor cores, split-K: the MMA tile pads the vector to 8 rows (8×) and the split-K partial "
                          "sums add the rest ({ratio:.2f}× in all)", ratio=ratio)
        return phrase("tensor cores, {ratio:.2f}× the useful work: no tile of the kernel's name explains it, so the "
                      "aten shapes may not be this launch's", ratio=ratio)
    fma = 2 * (inst.get("ffma", 0) + inst.get("hfma", 0))
    rest = counted - fma
    if r["category"] in ("GEMM", "GEMV"):
        if ratio < 1 - FLOPS_TOLERANCE:
            return phrase("CUDA cores, {counted} of {useful} FLOPs: one of the kernels the op launches (cuBLAS "
                          "splits this product: a partial-product kernel, then a reduction); the op's 2·M·N·K is "
                          "counted in the other", counted=count(counted), useful=count(useful))
        if inst and abs(fma / useful - 1) <= FLOPS_TOLERANCE:
            return phrase("CUDA cores, no tensor-pipe work: its {fma} FLOPs of FMA instructions are 2·M·N·K "
                          "({x:.2f}×); the other {rest} are ADD/MUL instructions of the kernel's reduction of partial "
                          "sums, not model work", fma=count(fma), x=fma / useful, rest=count(rest))
        return phrase("CUDA cores, counted from its FMA/ADD/MUL instructions, which include work beyond 2·M·N·K (tile "
                      "edges, the epilogue)")
    basis = phrase(r["flops_basis"])  # a catalog key: contract.shapes' rule in words
    if inst:
        return phrase("{counted} FLOPs counted against {useful} useful ({basis}): {fma} from FMA and "
                      "{rest} from ADD/MUL instructions; ncu counts every executed floating-point FMA/ADD/MUL, also "
                      "those the compiler adds beside the op's arithmetic (conversions, index math in float)",
                      counted=count(counted), useful=count(useful), basis=basis, fma=count(fma), rest=count(rest))
    return phrase("{counted} FLOPs counted against {useful} useful ({basis}): ncu counts every executed "
                  "floating-point FMA/ADD/MUL, also those beside the op's arithmetic", counted=count(counted),
                  useful=count(useful), basis=basis)


def fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame, manifest: Manifest | dict | None = None,
             metrics: pd.DataFrame | None = None, l2_bytes: float | None = None, verdicts: bool = True) -> pd.DataFrame:
    """Per profiled kernel, ncu in context:
    - duration: ncu's ÷ the timeline median of the same launch shape (configuration and aten shapes of the
      launch profiled, `profiled_launch`; never pooled across shapes), the launches of that shape, the other
      shapes of the same kernel and grid left out (`other_shapes`), and `in_context`: the verdict (agrees within
      `CONTEXT_FACTOR`, else its reason: small-kernel floor, producer → consumer, cold-cache replay);
    - `in_loop_gbps`: ncu's DRAM bytes over the loop's median duration (GB/s): above the run's measured DRAM copy
      bandwidth (`manifest`) the loop cannot have read them all from DRAM; `in_loop_l2` marks those kernels, and
      those that read what a gather or copy just wrote (within `l2_bytes`, the device's L2) and run > 1.25×
      slower under ncu: their cold-cache DRAM bytes are above what the loop moves;
    - FLOPs: counted (tensor, else CUDA-core) ÷ useful: 2·M·N·K for a matrix product (grouped MoE GEMM: summed
      over its groups), one per element for a pointwise op or reduction (`shapes.elementwise_flops`), with the
      verdict on any difference (`flops_verdict`; `metrics`, the run's long table, splits CUDA-core FLOPs by
      instruction).
    `verdicts=False`: the measured and expected figures only, for a line of prose that needs no more (the verdict
    columns, `other_shapes` and `in_loop_l2` stay empty)."""
    info = read_manifest(manifest) if manifest is not None else None
    cache = info.cache_control if info is not None else None
    ceiling, ceiling_text = _ddr_ceiling(info)
    if l2_bytes is None and info is not None and info.environment is not None and info.environment.gpu is not None:
        l2_bytes = info.environment.gpu.l2_bytes
    kernels = with_identity(kernels, timeline, ["friendly_name", "category"])
    prof = kernels[kernels.status == "profiled"]
    ix = Launches(timeline)
    rows = []
    for _, k in prof.iterrows():
        cfg = launch_config(k, ix)
        ref, op, shp = profiled_launch(k, ix)
        others = cfg[cfg.op_shapes.notna() & (cfg.op_shapes != shp)] if shp is not None and verdicts else cfg.iloc[:0]
        other = _listed([phrase("{shapes}: {n} launches, median {us:.2f} µs", shapes=readable(s) or s, n=len(g),
                                us=g.duration_ns.median() / 1e3) for s, g in others.groupby("op_shapes")], phrase("; "))
        gemm = k.get("category") in ("GEMM", "GEMV") or (isinstance(k.get("name"), str) and "nvjet" in k["name"])
        if gemm:
            expect, basis = expected_gemm_flops(shp), phrase("2·M·N·K")
        else:
            ew = elementwise_flops(op, shp)
            expect, basis = (ew if ew else (np.nan, None))
        tensor = (k.get("flops_tensor") or 0) > 0
        counted = k.get("flops_tensor") if tensor else k.get("flops_cuda")
        loop_ns = ref.duration_ns.median()
        dram = k.get("dram_bytes")
        r = {"kernel_id": k.kernel_id, "phase": k["phase"], "friendly_name": k.get("friendly_name"),
             "category": k.get("category"), "ncu_us": k.duration_ns / 1e3, "timeline_median_us": loop_ns / 1e3,
             "launches": len(ref), "duration_ratio": k.duration_ns / loop_ns, "op_shapes": shp,
             "other_shapes": other or None, "dram_bytes": dram, "in_loop_gbps": dram / loop_ns if dram == dram else np.nan,
             "matvec": is_matvec(shp), "expected_flops": expect, "flops_basis": basis,
             "tensor_flops": k.get("flops_tensor"), "counted_flops": counted, "grouped": op == "aten::_grouped_mm",
             "cuda_core": not tensor,
             # an FP32 GEMM (the MoE router) runs on CUDA cores: its counted FLOPs are those
             "flops_ratio": (counted / expect if expect and expect == expect and counted == counted
                             else (np.nan if not expect == expect else (np.inf if counted else 1.0)))}
        m = inloop_measured(k)
        r.update({"cold_read_bytes": m["cold_read_bytes"] if m else np.nan,
                  "inloop_read_bytes": m["inloop_read_bytes"] if m else np.nan})
        if expect == 0:
            r["flops_ratio"] = np.nan  # a copy: no ratio to a useful 0; the verdict says what was counted
        rows.append((r, k, cfg))
    floor_us = prof.duration_ns.min() / 1e3 if len(prof) else np.nan
    out = []
    for r, k, cfg in rows:
        if not verdicts:
            out.append(r)
            continue
        prod = _producer(k, ix, cfg)
        r["in_context"], r["in_loop_l2"] = _context(r, floor_us, ceiling, ceiling_text, l2_bytes, prod, cache)
        m = inloop_measured(k)
        if r["in_loop_l2"] and m:
            r["in_context"] = joined(r["in_context"], phrase("; {measured}", measured=inloop_words(m)))
        r["flops_verdict"] = _flops_verdict(r, k, _instruction_flops(metrics, k.get("result_id")))
        out.append(r)
    cols = ["kernel_id", "phase", "friendly_name", "category", "ncu_us", "timeline_median_us", "launches",
            "duration_ratio", "in_context", "op_shapes", "other_shapes", "dram_bytes", "in_loop_gbps", "in_loop_l2",
            "matvec", "expected_flops", "flops_basis", "tensor_flops", "counted_flops", "grouped", "cuda_core",
            "flops_ratio", "flops_verdict", "cold_read_bytes", "inloop_read_bytes"]
    fid = pd.DataFrame(out, columns=cols)
    for c in ("in_context", "other_shapes", "flops_verdict") if verdicts else ():
        fid[c] = phrase_column((r[c] for r in out), index=fid.index)  # phrases kept (a text column holds plain str)
    return fid


def in_loop_l2(fid: pd.DataFrame) -> set[str]:
    """Kernel ids whose loop reads part of their operands from L2 (producer → consumer): their ncu DRAM bytes,
    class and roofline point are the cold-cache figure, the loop's DRAM traffic is lower."""
    return set(fid.loc[fid.in_loop_l2.astype(bool), "kernel_id"]) if len(fid) and "in_loop_l2" in fid else set()


def context_figures(fid: pd.DataFrame) -> dict:
    """What chapter 02 says of `fidelity` (verdicts on) beside its table: over its `n` kernels the ncu ÷ loop
    duration ratio's `median`, `low` and `high`; `pooled`, the kernels that run other shapes on the same grid; `off`,
    the rows more than `CONTEXT_FACTOR` off; `l2`, the producer → consumer rows; `measured`, those of them whose
    in-loop reads the run measured, with `inloop_pct` (their in-loop reads as % of the cold ones); `rest`, the ids of
    the others; `checked` and `flops_ok`, the kernels with a FLOP ratio and those within `FLOPS_TOLERANCE`;
    `verdicts`, the rows with a FLOP verdict."""
    off = fid[(fid.duration_ratio > CONTEXT_FACTOR) | (fid.duration_ratio < 1 / CONTEXT_FACTOR)]
    l2 = fid[fid.in_loop_l2.astype(bool)] if "in_loop_l2" in fid else fid.iloc[:0]
    measured = l2[l2.inloop_read_bytes.notna()] if "inloop_read_bytes" in l2 else l2.iloc[:0]
    measured = measured.assign(inloop_pct=[100 * x.inloop_read_bytes / x.cold_read_bytes if x.cold_read_bytes
                                           else float("nan") for x in measured.itertuples()])
    checked = fid.dropna(subset=["flops_ratio"])
    return {"n": len(fid), "median": fid.duration_ratio.median(), "low": fid.duration_ratio.min(),
            "high": fid.duration_ratio.max(),
            "pooled": fid.other_shapes.notna().sum() if "other_shapes" in fid else 0, "off": off, "l2": l2,
            "measured": measured, "rest": sorted(set(l2.kernel_id) - set(measured.kernel_id)),
            "checked": len(checked), "flops_ok": len(checked[(checked.flops_ratio - 1).abs() <= FLOPS_TOLERANCE]),
            "verdicts": fid[fid.flops_verdict.notna()] if "flops_verdict" in fid else fid.iloc[:0]}


def ncu_passes(kernels: pd.DataFrame, manifest: Manifest | dict) -> dict:
    """How ncu took the run's counters, for chapter 02's coverage notes: `info` (the manifest's ncu record, None
    without one); `eager`, the eager phases one ncu process profiled by position (empty where it did not), with the
    `results` (profiled launches) and `selected` kernels over them and `per_kernel`, their ratio; `op_check`, the
    worker's check of the op calls it marked (`checked`, `agree`, `differ`); `per_phase`, the other phases, each
    profiled by an ncu process of its own ((phase, record)); `identities`, how kernels were identified where it is not by position with
    agreeing names ((identity as the ncu stage wrote it, kernel ids)); `left_out`, the kernels left out of a phase's
    selection ((phase, record)); `not_profiled`, the rows of `kernels` ncu did not profile."""
    info = read_manifest(manifest).ncu
    phases = info.phases if info else {}
    eager = {p: v for p, v in phases.items() if not v.graph_replay}
    by_position = info is not None and info.expected_launches is not None and bool(eager)
    eager = eager if by_position else {}
    results, selected = sum(v.results for v in eager.values()), sum(v.selected for v in eager.values())
    identities = []
    if "identity" in kernels:
        other = kernels[kernels.identity.fillna("").str.len() > 0]
        other = other[~other.identity.eq("position; names agree")]
        identities = [(identity, list(ids)) for identity, ids in other.groupby("identity", sort=False)["kernel_id"]]
    return {"info": info, "eager": eager, "results": results, "selected": selected,
            "per_kernel": results / max(1, selected), "op_check": info.op_check if by_position else {},
            "per_phase": [(ph, v) for ph, v in phases.items() if ph not in eager], "identities": identities,
            "left_out": [(ph, d) for ph, v in phases.items() for d in v.left_out],
            "not_profiled": kernels[kernels.status != "profiled"]}


# Byte fidelity: ncu's DRAM bytes against the compulsory traffic the op's shapes imply.
BYTES_TOLERANCE = 0.15
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


def element_bytes(kernel_name: str, default: int) -> int:
    """Operand element size of a matrix kernel: 4 for cuBLAS's FP32 SGEMM-family kernels (the MoE router
    runs in float32), else the run's dtype."""
    n = kernel_name or ""
    cublas_fp32 = any(f"{k}<float" in n for k in ("dot_kernel", "reduce_1Block_kernel", "gemv2T_kernel_val",
                                                    "gemv2N_kernel", "gemvx"))
    return 4 if ("f32f32_f32f32" in n or "sgemm" in n.lower() or cublas_fp32) else default


def byte_fidelity(kernels: pd.DataFrame, timeline: pd.DataFrame, manifest: Manifest | dict,
                  in_loop: set[str] | None = None) -> pd.DataFrame:
    """Per profiled kernel with shapes: the bytes its operands imply (a matrix or attention kernel's, from
    `implied_bytes`; a pointwise, copy or reduction launch's, from `elementwise_bytes`) vs ncu's DRAM bytes (read +
    write), ratio and verdict: agrees (within ±BYTES_TOLERANCE of reads + writes); agrees with the reads (the
    output is still in L2 when the kernel ends: L2 is write-back, so those bytes reach DRAM later); below (under
    `--cache-control none`: the replay's warm L2; else operands served from L2); a small launch (under
    `SMALL_OPERANDS_BYTES` of operands: a cold launch's own reads dominate); or over-fetching (with the factor).
    `in_loop` (kernel ids, `in_loop_l2` of chapter 02's fidelity) marks the kernels whose loop reads part of
    their operands from L2: their DRAM bytes here are the cold-cache figure."""
    info = read_manifest(manifest)
    cache = info.cache_control
    elem = DTYPE_BYTES.get(info.workload.dtype, 2)
    k = with_identity(kernels, timeline, ["friendly_name", "category"])
    ix = Launches(timeline)
    rows = []
    for _, r in k[k.status == "profiled"].iterrows():
        _, op, shp = profiled_launch(r, ix)
        if shp is None:
            continue
        cat = "GEMV" if r.get("category") == "GEMM" and is_matvec(shp) else r.get("category")
        imp = implied_bytes(op, shp, cat, element_bytes(r["name"], elem))
        if imp is None and cat not in ("GEMM", "GEMV", "attention"):
            # a pointwise op or reduction computing in fp32 (RMSNorm's mean, the MoE's weighted sum) reads and writes
            # fp32 tensors: its friendly name says so; a copy or cat keeps the run's dtype (a cast mixes two)
            fp32 = "(float" in str(r.get("friendly_name")) and op not in ("aten::copy_", "aten::cat")
            ew = elementwise_bytes(op, shp, 4 if fp32 else elem)
            imp = (ew[0], ew[1], f"{op.removeprefix('aten::')} {shp.strip(';')}") if ew else None
        if imp is None or not (imp[0] + imp[1]):
            continue
        read, write, what = imp
        dram = r.get("dram_bytes")
        # reads alone: ncu's measured DRAM reads where the run has them (an output still in L2 at the kernel's end is
        # no read), else all DRAM bytes
        dram_read = r.get("dram_read_bytes")
        measured = dram_read is not None and dram_read == dram_read
        dram_read = dram_read if measured else dram
        ratio, ratio_read = dram / (read + write), (dram_read / read if read else np.inf)
        m = inloop_measured(r)
        rows.append({"inloop": m, "kernel_id": r["kernel_id"], "phase": r["phase"], "friendly_name": r.get("friendly_name"),
                     "category": cat, "op": op, "op_shapes": shp, "implies": what, "implied_read_bytes": read,
                     "implied_write_bytes": write, "dram_bytes": dram, "bytes_ratio": ratio, "read_ratio": ratio_read,
                     "reads_measured": measured})
    cols = ["kernel_id", "phase", "friendly_name", "category", "op", "op_shapes", "implies", "implied_read_bytes",
            "implied_write_bytes", "dram_bytes", "bytes_ratio", "verdict", "read_ratio"]
    if not rows:
        return pd.DataFrame(columns=cols)
    bf = pd.DataFrame(rows)
    tiny = bf[(bf.implied_read_bytes + bf.implied_write_bytes) <= 16]
    floor = (phrase(" (launches of this run with at most 16 B of operands read {lo:.1f}–{hi:.1f} kB)",
                    lo=tiny.dram_bytes.min() / 1e3, hi=tiny.dram_bytes.max() / 1e3) if len(tiny) else "")
    verdicts = []
    for x in bf.itertuples():
        ratio, ratio_read, total = x.bytes_ratio, x.read_ratio, x.implied_read_bytes + x.implied_write_bytes
        # with measured reads, reads + writes within the tolerance agree outright; with DRAM bytes alone, only when
        # they are nearer the operands than the reads alone (else the output is still in L2)
        if abs(ratio - 1) <= BYTES_TOLERANCE and (x.reads_measured or abs(ratio - 1) <= abs(ratio_read - 1)):
            v = phrase("agrees")
        elif abs(ratio_read - 1) <= BYTES_TOLERANCE:
            v = phrase("agrees with the reads: the {mb:.2f} MB output is still in L2 at the kernel's end",
                       mb=x.implied_write_bytes / 1e6)
        elif ratio > 1 and total < SMALL_OPERANDS_BYTES:
            v = phrase("a small launch: {op_kb:.1f} kB of operands, {dram_kb:.1f} kB read from DRAM; with caches "
                       "flushed every launch also reads its code, its parameters and whole 32-byte sectors from "
                       "DRAM{floor}, so the excess is not operand traffic", op_kb=total / 1e3,
                       dram_kb=x.dram_bytes / 1e3, floor=floor)
        elif ratio < 1:
            v = (phrase("cache-resident under replay (cache control none): the counters saw a warm L2")
                 if cache == "none" else
                 phrase("below the operands' bytes (×{ratio:.2f}): it read less than the shapes say; for a grouped "
                        "GEMM, experts that got no routed rows are skipped (routing is not in the shapes)", ratio=ratio)
                 if x.op == "aten::_grouped_mm" else
                 phrase("below the operands' bytes (×{ratio:.2f}): one of the kernels the op launches (a split-K or "
                        "split-KV reduction reads the partial results, not the operands), or operands still in L2",
                        ratio=ratio))
        else:
            v = phrase("over-fetching ×{ratio:.2f}: operands read from DRAM more than once", ratio=ratio)
        if in_loop and x.kernel_id in in_loop and x.inloop:
            v = joined(v, phrase("; cold-cache figure: in the loop part of its operands come from L2 (producer → "
                                 "consumer); {measured}", measured=inloop_words(x.inloop)))
        elif in_loop and x.kernel_id in in_loop:
            v = joined(v, phrase("; cold-cache figure: in the loop part of its operands come from L2 (producer → "
                                 "consumer), so its in-loop DRAM traffic is lower"))
        verdicts.append(v)
    bf["verdict"] = phrase_column(verdicts, index=bf.index)
    return bf[cols]


def byte_figures(bf: pd.DataFrame) -> dict:
    """What chapter 02 says of `byte_fidelity` beside its table: `ok`, the rows within ±`BYTES_TOLERANCE` of their
    reads + writes or of their reads alone (the verdict's two 'agrees', from the numbers); `small`, the other rows
    above their operands' bytes with under `SMALL_OPERANDS_BYTES` of operands, with their DRAM bytes' and their
    operand bytes' range (`small_dram`, `small_operands`: (lowest, highest)); and per phase (phase, rows that agree,
    rows, median ratio to reads + writes)."""
    read_ratio = bf.read_ratio if "read_ratio" in bf else bf.dram_bytes / bf.implied_read_bytes
    ok = (((bf.bytes_ratio - 1).abs() <= BYTES_TOLERANCE) | ((read_ratio - 1).abs() <= BYTES_TOLERANCE))
    total = bf.implied_read_bytes + bf.implied_write_bytes
    small = ~ok & (bf.bytes_ratio > 1) & (total < SMALL_OPERANDS_BYTES)
    return {"ok": ok, "small": small,
            "small_dram": (bf.dram_bytes[small].min(), bf.dram_bytes[small].max()),
            "small_operands": (total[small].min(), total[small].max()),
            "phases": [(ph, int(ok[g.index].sum()), len(g), g.bytes_ratio.median()) for ph, g in bf.groupby("phase")]}


def in_loop_figures(fid: pd.DataFrame | None, in_loop: set[str] | None) -> tuple[pd.DataFrame | None, list[str]]:
    """The producer → consumer kernels `in_loop` whose in-loop reads the run measured (rows of `fidelity` by
    kernel id; None where `fid` is None or has no in-loop column), and the ids of the others."""
    measured = (fid[fid.kernel_id.isin(in_loop or ()) & fid.inloop_read_bytes.notna()].sort_values("kernel_id")
                if fid is not None and "inloop_read_bytes" in fid else None)
    return measured, sorted(set(in_loop or ()) - set(measured.kernel_id if measured is not None else ()))


# --- The few launches that hold a kernel's time (issue 41, point 7) -----------------------------------------------
# A kernel ncu profiled once (its representative launch) can spend most of its time in a few launches far longer
# than the rest: vision encode's copies and adds, whose mean launch is several times their median. Heavy-tailed
# here: the mean launch at least HEAVY_MEAN_MEDIAN × the median, or — with at least HEAVY_MIN_LAUNCHES launches —
# the longest HEAVY_TOP_FRACTION of its launches holding at least HEAVY_TOP_SHARE of its time. The project's own
# thresholds, set from the bundled runs: they single out vision encode's copy, add and attention (mean ÷ median
# 3.4–11×, longest tenth 57–73 % of the time) and one prefill kernel (2.1×), and none of decode's kernels
# (within 1.5×).
HEAVY_MEAN_MEDIAN = 2.0
HEAVY_TOP_FRACTION = 0.10
HEAVY_TOP_SHARE = 0.50
HEAVY_MIN_LAUNCHES = 10
# the groups of launches shown per kernel, longest first, until they hold this share of its time (at most
# HEAVY_MAX_GROUPS groups)
HEAVY_HOLD = 0.50
HEAVY_MAX_GROUPS = 8
# a module path's numeric components (layer, expert, block indices)
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _kernel_rows(timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline's kernel launches (no memcpy/memset rows), with `module`, `op`, `op_shapes` and `step` present
    (NaN where the run does not record them)."""
    tl = timeline[timeline.kind == "kernel"] if "kind" in timeline else timeline
    missing_cols = [c for c in ("module", "op", "op_shapes", "step") if c not in tl]
    return tl.assign(**{c: np.nan for c in missing_cols}) if missing_cols else tl


def index_set(values) -> str:
    """Indices in braces, runs of three or more as ranges: [2, 5, 8, 11] → '{2, 5, 8, 11}', [0..11] → '{0–11}'
    (a space after each comma: '{0,1,3}' would read as the number 13 in a table of numbers)."""
    v = sorted({int(x) for x in values})
    runs: list[list[int]] = []
    for x in v:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return "{" + ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs) + "}"


def module_template(path) -> tuple[str | None, tuple[int, ...]]:
    """A module path with its numeric components as `{}` and those numbers: 'model.x.layers.2.attn' →
    ('model.x.layers.{}.attn', (2,)). (None, ()) where the launch has no module."""
    if not isinstance(path, str) or not path:
        return None, ()
    return _INDEX.sub("{}", path), tuple(int(x) for x in _INDEX.findall(path))


def short_template(template: str, others) -> str:
    """The distinguishing tail of a module template: from the component that owns the first index list (two
    before the first `{}`; the last two components where there is none), extended to the left while another
    template of `others` (the phase's) ends the same way or the tail starts with a bare 'model'."""
    parts = template.split(".")
    first = next((i for i, p in enumerate(parts) if p == "{}"), None)
    start = max(0, (first - 2) if first is not None else len(parts) - 2)
    rest = [o.split(".") for o in set(others) if o != template]
    while start > 0 and (parts[start] == "model"
                         or any(len(o) >= len(parts) - start and o[-(len(parts) - start):] == parts[start:]
                                for o in rest)):
        start -= 1
    return ".".join(parts[start:])


def _fill_indices(template: str, indices: list[tuple[int, ...]]) -> str:
    """A short template with each `{}` filled by the set of indices the group's launches ran at there."""
    sets = [index_set(col) for col in zip(*indices)] if indices and indices[0] else []
    out = template
    # the short template keeps the last `{}`s of the full one
    sets = sets[len(sets) - out.count("{}"):] if out.count("{}") else []
    for s in sets:
        out = out.replace("{}", s.replace("{", "\x00").replace("}", "\x01"), 1)
    return out.replace("\x00", "{").replace("\x01", "}")


def heavy_tailed(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per profiled kernel, how its phase's launches of it spread (durations from the timeline, every launch of its
    name in its phase, the basis of its `share`): `launches`, `total_ns`, `mean_us`, `median_us`, `mean_over_median`,
    `top_launches` (the longest HEAVY_TOP_FRACTION, at least one) and the % of its time they hold (`top_share_pct`),
    its % of the phase's kernel time (`phase_share_pct`), and `heavy`: heavy-tailed by the rule above."""
    cols = ["kernel_id", "phase", "friendly_name", "category", "launches", "total_ns", "mean_us", "median_us",
            "mean_over_median", "top_launches", "top_share_pct", "phase_share_pct", "heavy", "name"]
    k = kernels[kernels.status == "profiled"] if "status" in kernels else kernels
    if k.empty:
        return pd.DataFrame(columns=cols)
    k = with_identity(k, timeline, ["friendly_name", "category"])
    tl = _kernel_rows(timeline)
    phase_ns = tl.groupby("phase").duration_ns.sum()
    rows = []
    for r in k.itertuples():
        d = np.sort(tl.loc[(tl.phase == r.phase) & (tl.name == r.name), "duration_ns"].to_numpy(float))[::-1]
        if not len(d) or not d.sum():
            continue
        top = max(1, int(np.ceil(len(d) * HEAVY_TOP_FRACTION)))
        mean, median, top_share = d.mean(), float(np.median(d)), d[:top].sum() / d.sum()
        ratio = mean / median if median else np.inf
        rows.append({"kernel_id": r.kernel_id, "phase": r.phase, "friendly_name": getattr(r, "friendly_name", None),
                     "category": getattr(r, "category", None), "launches": len(d), "total_ns": d.sum(),
                     "mean_us": mean / 1e3, "median_us": median / 1e3, "mean_over_median": ratio,
                     "top_launches": top, "top_share_pct": 100 * top_share,
                     "phase_share_pct": 100 * d.sum() / phase_ns[r.phase],
                     "heavy": bool(ratio >= HEAVY_MEAN_MEDIAN
                                   or (len(d) >= HEAVY_MIN_LAUNCHES and top_share >= HEAVY_TOP_SHARE)),
                     "name": r.name})
    return pd.DataFrame(rows, columns=cols)


def heavy_launches(ht: pd.DataFrame, timeline: pd.DataFrame, manifest: Manifest | dict | None = None) -> pd.DataFrame:
    """For each heavy-tailed kernel of `ht` (`heavy_tailed`): its launches grouped by (module with its indices
    gathered, aten op, op shapes), longest first (mean duration), until the groups hold HEAVY_HOLD of its time
    (at most HEAVY_MAX_GROUPS). Per group: `module` (the distinguishing tail, indices in braces; None where the
    timeline records no module), `modules` (the full paths), `op`, `op_shapes`, `launches`, `launches_per_call`
    (over the phase's steps: one call of vision encode or prefill, one decode step), `us_each` (mean µs),
    `min_us`, `max_us`, `total_ns`, `kernel_share_pct` (% of the kernel's time in its phase), `phase_share_pct`
    (% of the phase's kernel time), `cumulative_pct` (of the kernel's time, over the groups so far), and
    `implied_gbps` (the bytes the op's shapes imply a pointwise or copy launch moves, read + written, over its mean
    duration; NaN where the shapes do not say)."""
    cols = ["kernel_id", "phase", "friendly_name", "module", "op", "op_shapes", "launches", "launches_per_call",
            "us_each", "min_us", "max_us", "kernel_share_pct", "phase_share_pct", "cumulative_pct", "implied_gbps",
            "total_ns", "modules"]
    heavy = ht[ht.heavy.astype(bool)] if len(ht) else ht
    if heavy.empty:
        return pd.DataFrame(columns=cols)
    elem = 2
    if manifest is not None:
        elem = DTYPE_BYTES.get(read_manifest(manifest).workload.dtype, 2)
    tl = _kernel_rows(timeline)
    rows = []
    for h in heavy.itertuples():
        ph = tl[tl.phase == h.phase]
        steps = max(1, ph.step.nunique()) if ph.step.notna().any() else 1
        templates = {t for t in (module_template(m)[0] for m in ph.module.dropna().unique()) if t}
        mine = ph[ph.name == h.name].copy()
        tm = [module_template(m) for m in mine.module]
        mine["template"] = [t or "" for t, _ in tm]
        mine["indices"] = [i for _, i in tm]
        mine["op_key"] = mine.op.fillna("")
        mine["shape_key"] = mine.op_shapes.fillna("")
        total = mine.duration_ns.sum()
        groups = []
        for (tpl, op, shp), g in mine.groupby(["template", "op_key", "shape_key"], sort=False):
            groups.append((g.duration_ns.mean(), tpl, op, shp, g))
        groups.sort(key=lambda x: -x[0])
        cum = 0.0
        for mean, tpl, op, shp, g in groups[:HEAVY_MAX_GROUPS]:
            if cum >= HEAVY_HOLD * total:
                break
            cum += g.duration_ns.sum()
            idx = [i for i in g.indices if len(i) == tpl.count("{}")] if tpl else []
            module = _fill_indices(short_template(tpl, templates), idx) if tpl else None
            bytes_ = elementwise_bytes(op or None, shp or None, elem) if h.category not in ("GEMM", "GEMV",
                                                                                                "attention") else None
            rows.append({"kernel_id": h.kernel_id, "phase": h.phase, "friendly_name": h.friendly_name,
                         "module": module, "op": op or None, "op_shapes": shp or None, "launches": len(g),
                         "launches_per_call": len(g) / steps, "us_each": mean / 1e3,
                         "min_us": g.duration_ns.min() / 1e3, "max_us": g.duration_ns.max() / 1e3,
                         "kernel_share_pct": 100 * g.duration_ns.sum() / total,
                         "phase_share_pct": 100 * g.duration_ns.sum() / ph.duration_ns.sum(),
                         "cumulative_pct": 100 * cum / total,
                         "implied_gbps": sum(bytes_) / mean if bytes_ and mean else np.nan,
                         "total_ns": g.duration_ns.sum(),
                         "modules": tuple(sorted(g.module.dropna().unique()))})
    return pd.DataFrame(rows, columns=cols)


def heavy_table(hl: pd.DataFrame) -> pd.DataFrame:
    """`heavy_launches` as chapter 02 shows it (the full module paths and nanosecond totals left out)."""
    return hl.drop(columns=["total_ns", "modules"], errors="ignore")


def heavy_figures(ht: pd.DataFrame, hl: pd.DataFrame) -> dict:
    """What chapter 02 says of `heavy_tailed` (`ht`) and `heavy_launches` (`hl`): `worst`, the row of `ht` with the
    largest mean ÷ median (None without rows); `heavy`, per heavy-tailed kernel its row of `ht` and, over its groups
    in `hl`, the launches they hold (`shown`), how many groups (`groups`), the % of its time they hold (`held`) and
    their % of the phase's kernel time (`phase_share`); `no_module`, the groups with no module (their count) and their
    kernels' ids (`no_module_ids`)."""
    worst = ht.sort_values("mean_over_median", ascending=False).iloc[0] if len(ht) else None
    heavy = []
    for h in (ht[ht.heavy.astype(bool)] if len(ht) else ht).itertuples():
        g = hl[hl.kernel_id == h.kernel_id]
        heavy.append((h, {"shown": int(g.launches.sum()), "groups": len(g),
                          "held": g.cumulative_pct.iloc[-1] if len(g) else 0.0, "phase_share": g.phase_share_pct.sum()}))
    nomod = hl[hl.module.isna()]
    return {"worst": worst, "heavy": heavy, "no_module": len(nomod), "no_module_ids": sorted(set(nomod.kernel_id))}


VISION = "vision_encode"
# the kinds of kernel the vision sentence is about: vision encode's copies and pointwise ops (adds)
_COPIES_AND_POINTWISE = ("copy/cast", "elementwise")


def vision_heavy(ht: pd.DataFrame, hl: pd.DataFrame, timeline: pd.DataFrame) -> dict:
    """Where vision encode's copy and pointwise time goes, as numbers: `state` ('no phase', 'not profiled', 'not
    heavy', 'ok'); with 'ok': `kernels` (ids of its heavy-tailed copy/pointwise kernels, else of all its heavy-tailed
    kernels: `copies` says which), `kernel_pct` (their % of the phase's kernel time), `phase_ms` (the phase's kernel
    time per call, ms), `module` (the module whose shown groups hold the most of that time; None where the timeline
    records none), `launches`, `lo_us`, `hi_us`, `ops`, `pct` (those groups' launches, their duration range, their
    aten ops, their % of the phase's kernel time), and `next` (the same for the next module, or None)."""
    tl = _kernel_rows(timeline)
    if not (tl.phase == VISION).any():
        return {"state": "no phase"}
    mine = ht[ht.phase == VISION] if len(ht) else ht
    if mine.empty:
        return {"state": "not profiled"}
    heavy = mine[mine.heavy.astype(bool)]
    if heavy.empty:
        worst = mine.sort_values("mean_over_median", ascending=False).iloc[0]
        return {"state": "not heavy", "ratio": float(worst.mean_over_median), "kernel": worst.kernel_id}
    copies = heavy[heavy.category.isin(_COPIES_AND_POINTWISE)]
    pick = copies if len(copies) else heavy
    ph = tl[tl.phase == VISION]
    steps = max(1, ph.step.nunique()) if ph.step.notna().any() else 1
    g = hl[hl.kernel_id.isin(pick.kernel_id)].copy()
    g["module_key"] = g.module.fillna("")
    by = (g.groupby("module_key", sort=False)
          .agg(total_ns=("total_ns", "sum"), launches=("launches", "sum"), lo_us=("min_us", "min"),
               hi_us=("max_us", "max"), pct=("phase_share_pct", "sum"),
               ops=("op", lambda s: tuple(dict.fromkeys(x.removeprefix("aten::") for x in s.dropna()))))
          .sort_values("total_ns", ascending=False))

    def one(key, row) -> dict:
        return {"module": key or None, "launches": int(row.launches), "lo_us": float(row.lo_us),
                "hi_us": float(row.hi_us), "ops": row.ops, "pct": float(row.pct)}

    out = {"state": "ok", "copies": bool(len(copies)), "kernels": list(pick.kernel_id),
           "names": list(pick.friendly_name), "kernel_pct": float(pick.phase_share_pct.sum()),
           "phase_ms": ph.duration_ns.sum() / steps / 1e6, "steps": steps}
    out.update(one(by.index[0], by.iloc[0]))
    out["next"] = one(by.index[1], by.iloc[1]) if len(by) > 1 else None
    return out
