"""Chapter 02's analysis: coverage, explained time, the per-kernel metric table and fidelity checks."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract.shapes import (FLOPS_TOLERANCE, dim3, elementwise_bytes, elementwise_flops, expected_gemm_flops,
                               implied_bytes, is_matvec, tile_paddings)
from ..display import count, phase_label
from ..i18n import N_, text, tr

from ..contract.kernels import with_identity
from ..contract.manifest import Manifest, read_manifest
from ..escape import md, md_code

# How far an ncu duration may stray from the timeline median before the prose counts it (the FLOP target,
# tensor FLOPs ÷ 2·M·N·K within ±5 %, is contract.shapes.FLOPS_TOLERANCE).
DURATION_TOLERANCE = 0.25

TABLE_COLUMNS = ["kernel_id", "friendly_name", "category", "share_pct", "duration_us", "sm_pct", "dram_pct",
                 "memory_pct", "l1_hit_pct", "l2_hit_pct", "achieved_occupancy_pct",
                 "theoretical_occupancy_pct", "registers", "grid", "block", "waves_per_sm", "spill_bytes",
                 "dram_bytes", "flops_tensor", "flops_cuda", "intensity_dram"]

# Why a cell of the per-kernel and fidelity tables is empty, for the note under each table.
METRIC_MISSING = {
    "intensity_dram": N_("no FLOPs, or no DRAM bytes counted under replay: no intensity"),
    "l1_hit_pct": N_("ncu reports no L1 hit rate for a kernel without L1 traffic"),
    "l2_hit_pct": N_("ncu reports no L2 hit rate for a kernel without L2 traffic"),
    "spill_bytes": N_("not counted by the sections this capture ran"),
    "waves_per_sm": N_("not counted by the sections this capture ran"),
}
FIDELITY_MISSING = {
    "op_shapes": N_("the launch has no aten op shapes in the timeline"),
    "expected_flops": N_("not a matrix product, or its aten shapes do not give M, N and K"),
    "flops_ratio": N_("no 2·M·N·K to compare with"),
    "tensor_flops": N_("no tensor-core instructions counted"),
}


# What the ncu stage writes in a kernel's `status` and `identity` (capture data, English in the run), as
# catalog templates: the chapter shows them in the narrative language (`say`).
_STATUS_TEXT = [
    (re.compile(r"^profiled$"), N_("profiled")),
    (re.compile(r"^position; names agree$"), N_("position; names agree")),
    (re.compile(r"^position; ncu names it otherwise$"), N_("position; ncu names it otherwise")),
    (re.compile(r"^name \(more results than expected launches\)$"), N_("name (more results than expected launches)")),
    (re.compile(r"^no launch of it inside a numbered op call of the phase \(launched outside the model's forward\), "
                r"so ncu was not pointed at it$"),
     N_("no launch of it inside a numbered op call of the phase (launched outside the model's forward), so ncu was "
        "not pointed at it")),
    (re.compile(r"^ncu wrote (?P<n>\d+) results for (?P<expected>\d+) expected launches; this kernel's launch was not "
                r"among them$"),
     N_("ncu wrote {n} results for {expected} expected launches; this kernel's launch was not among them")),
    (re.compile(r"^same kernel profiled in (?P<phase>\S+) \(grid (?P<grid>.*?), block (?P<block>.*?)\): its "
                r"(?P<own>\S+) launch had no op call in the shapes pass$"),
     N_("same kernel profiled in {phase} (grid {grid}, block {block}): its {own} launch had no op call in the shapes "
        "pass")),
    (re.compile(r"^the CUDA driver's kernel for a graph's copy node: ncu profiles a graph's kernel nodes, not its copy "
                r"nodes, so it is left out of the selection and the next kernel taken$"),
     N_("the CUDA driver's kernel for a graph's copy node: ncu profiles a graph's kernel nodes, not its copy nodes, so "
        "it is left out of the selection and the next kernel taken")),
    (re.compile(r"^ncu: (?P<error>.*)$", re.S), N_("ncu: {error}")),
]


def say(value) -> str:
    """A kernel's `status` or `identity` as the ncu stage wrote it (English data), in the narrative language;
    a text no template matches is shown as written. Phase names inside are shown as the book names phases."""
    if not isinstance(value, str):
        return value
    for pattern, template in _STATUS_TEXT:
        m = pattern.match(value)
        if m:
            v = m.groupdict()
            for key in ("phase", "own"):
                if key in v:
                    v[key] = phase_label(v[key])
            return tr(template, **v)
    return value


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
    k = with_identity(kernels, timeline, ["friendly_name", "category"])
    k["share_pct"] = 100 * k["share"]
    k["duration_us"] = k["duration_ns"] / 1e3
    k["status"] = k["status"].map(say)  # capture data in English: shown in the narrative language
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
    (GB/s, read + write), else none."""
    if manifest is None:
        return None, ""
    gbps = manifest.measured_peaks.d2d_copy_gbps if manifest.measured_peaks else None
    return (float(gbps), tr("the {gbps:,.0f} GB/s device-to-device copy measured on this GPU", gbps=gbps)) if gbps else (None, "")


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
    """(the verdict on ncu against the loop, whether the loop reads part of its operands from L2) for one row of
    `fidelity`."""
    ratio, loop_us, gbps = r["duration_ratio"], r["timeline_median_us"], r["in_loop_gbps"]
    above_ceiling = ceiling is not None and gbps == gbps and gbps > ceiling
    fits_l2 = l2_bytes is not None and r["dram_bytes"] == r["dram_bytes"] and r["dram_bytes"] <= l2_bytes
    floor = ratio > CONTEXT_FACTOR and loop_us < floor_us
    chained = (producer is not None and fits_l2 and ratio > CONTEXT_FACTOR and not floor
               and r["dram_bytes"] >= SMALL_OPERANDS_BYTES)
    in_l2 = bool(above_ceiling or chained)
    if above_ceiling:
        what = tr("its {mb:.1f} MB of cold-cache DRAM bytes in the loop's {us:.2f} µs would be {gbps:,.0f} GB/s, above "
                  "{ceiling}: in the loop part of its operands come from L2", mb=r["dram_bytes"] / 1e6, us=loop_us,
                  gbps=gbps, ceiling=ceiling_text)
        if producer is not None:
            what += tr(", written there by the launch just before it (`{name}`, {category})",
                       name=md_code(_short(producer)), category=producer.category)
        return tr("producer → consumer: {what}; ncu, with caches flushed, reads them from DRAM", what=what), in_l2
    if 1 / CONTEXT_FACTOR <= ratio <= CONTEXT_FACTOR:
        return tr("agrees (within {factor:.2f}×)", factor=CONTEXT_FACTOR), in_l2
    if floor:
        return tr("small-kernel floor: {us:.2f} µs in the loop, below the {floor:.2f} µs of the shortest launch ncu "
                  "timed in this run (a replayed launch pays its launch and drain alone)", us=loop_us,
                  floor=floor_us), in_l2
    if chained:
        return tr("producer → consumer: it reads what `{name}` ({category}) wrote just before it, {mb:.1f} MB, inside "
                  "the {l2:.0f} MB L2 in the loop; ncu, with caches flushed, reads it from DRAM",
                  name=md_code(_short(producer)), category=producer.category, mb=r["dram_bytes"] / 1e6,
                  l2=l2_bytes / 1e6), in_l2
    if ratio > CONTEXT_FACTOR and cache == "all":
        return tr("cold-cache replay: ncu flushes the caches before the launch, so every operand comes from DRAM; in "
                  "the loop the launch before it has just written its inputs to L2"), in_l2
    if ratio > CONTEXT_FACTOR:
        return tr("slower under ncu; nothing in the run's tables says why"), in_l2
    return tr("faster under ncu than in the loop: in the loop it shares the GPU with the launches around it or "
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


INLOOP_HOW = N_("ncu's range pass: the launch with its producer's, minus the producer alone, caches flushed before "
                "each range as in every ncu figure")


INLOOP_NOT_MEASURED = N_("not measured in the loop: the range pass measures decode kernels whose op call launches them "
                         "alone; a graph step's, a prefill's or a vision encode's kernels are read cold")


def inloop_words(m: dict) -> str:
    """The measured in-loop reads beside the cold ones, in words (`inloop_measured`)."""
    return tr("measured in the loop ({how}): {inr:.2f} MB read from DRAM against {cold:.2f} MB with caches flushed "
              "before the launch", how=tr(INLOOP_HOW), inr=m["inloop_read_bytes"] / 1e6, cold=m["cold_read_bytes"] / 1e6)


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
    """Why a kernel's counted FLOPs differ from the useful FLOPs of its shapes (None when within
    `FLOPS_TOLERANCE` or there is nothing to compare)."""
    ratio = r["flops_ratio"]
    useful, counted = r["expected_flops"], r["counted_flops"]
    if useful == 0 and counted and counted == counted:
        return tr("a copy does no arithmetic, yet ncu counts {counted} FLOPs: every executed floating-point "
                  "FMA/ADD/MUL counts, also those the compiler emits for a copy (conversions, index math in float)",
                  counted=count(counted))
    if not ratio == ratio or abs(ratio - 1) <= FLOPS_TOLERANCE:
        return None
    if not r["cuda_core"]:
        pads = sorted(tile_paddings(k.get("name"), r["op_shapes"]), key=lambda p: abs(p[0] / ratio - 1))
        fit = [p for p in pads if abs(p[0] / ratio - 1) <= TILE_MATCH]
        if fit:
            return tr("tensor cores: the MMA tile pads {shape} ({pad:.3f}×, as counted): the tensor pipe does that much "
                      "more than the useful work, the shapes match", shape=fit[0][1], pad=fit[0][0])
        if r["grouped"] and ratio > 1:
            return tr("a grouped (MoE) GEMM, checked against 2·M·N·K summed over its groups (every routed row through "
                      "one expert): each expert's rows are padded up to the MMA tile, so the tensor pipe does "
                      "{ratio:.2f}× the useful work; the group sizes are not in the op's shapes, so the padding itself "
                      "cannot be checked from them", ratio=ratio)
        if ratio > 1 and "splitK" in str(k.get("name")):
            return tr("tensor cores, split-K: the MMA tile pads the vector to 8 rows (8×) and the split-K partial sums "
                      "add the rest ({ratio:.2f}× in all)", ratio=ratio)
        return tr("tensor cores, {ratio:.2f}× the useful work: no tile of the kernel's name explains it, so the aten "
                  "shapes may not be this launch's", ratio=ratio)
    fma = 2 * (inst.get("ffma", 0) + inst.get("hfma", 0))
    rest = counted - fma
    if r["category"] in ("GEMM", "GEMV"):
        if ratio < 1 - FLOPS_TOLERANCE:
            return tr("CUDA cores, {counted} of {useful} FLOPs: one of the kernels the op launches (cuBLAS "
                      "splits this product: a partial-product kernel, then a reduction); the op's 2·M·N·K is counted "
                      "in the other", counted=count(counted), useful=count(useful))
        if inst and abs(fma / useful - 1) <= FLOPS_TOLERANCE:
            return tr("CUDA cores, no tensor-pipe work: its {fma} FLOPs of FMA instructions are 2·M·N·K "
                      "({x:.2f}×); the other {rest} are ADD/MUL instructions of the kernel's reduction of partial "
                      "sums, not model work", fma=count(fma), x=fma / useful, rest=count(rest))
        return tr("CUDA cores, counted from its FMA/ADD/MUL instructions, which include work beyond 2·M·N·K (tile "
                  "edges, the epilogue)")
    if inst:
        return tr("{counted} FLOPs counted against {useful} useful ({basis}): {fma} from FMA and "
                  "{rest} from ADD/MUL instructions; ncu counts every executed floating-point FMA/ADD/MUL, also "
                  "those the compiler adds beside the op's arithmetic (conversions, index math in float)",
                  counted=count(counted), useful=count(useful), basis=text(r["flops_basis"]), fma=count(fma),
                  rest=count(rest))
    return tr("{counted} FLOPs counted against {useful} useful ({basis}): ncu counts every executed "
              "floating-point FMA/ADD/MUL, also those beside the op's arithmetic", counted=count(counted),
              useful=count(useful),
              basis=text(r["flops_basis"]))


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
        other = tr("; ").join(tr("{shapes}: {n} launches, median {us:.2f} µs", shapes=s, n=len(g),
                                  us=g.duration_ns.median() / 1e3) for s, g in others.groupby("op_shapes"))
        gemm = k.get("category") in ("GEMM", "GEMV") or (isinstance(k.get("name"), str) and "nvjet" in k["name"])
        if gemm:
            expect, basis = expected_gemm_flops(shp), N_("2·M·N·K")
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
            r["in_context"] += tr("; {measured}", measured=inloop_words(m))
        r["flops_verdict"] = _flops_verdict(r, k, _instruction_flops(metrics, k.get("result_id")))
        out.append(r)
    cols = ["kernel_id", "phase", "friendly_name", "category", "ncu_us", "timeline_median_us", "launches",
            "duration_ratio", "in_context", "op_shapes", "other_shapes", "dram_bytes", "in_loop_gbps", "in_loop_l2",
            "matvec", "expected_flops", "flops_basis", "tensor_flops", "counted_flops", "grouped", "cuda_core",
            "flops_ratio", "flops_verdict", "cold_read_bytes", "inloop_read_bytes"]
    return pd.DataFrame(out, columns=cols)


# what the reader sees of `fidelity`: its columns under headers in the narrative language (catalog keys)
FIDELITY_HEADERS = {
    "launches": N_("launches of this shape"),
    "in_context": N_("ncu against the loop"),
    "other_shapes": N_("other shapes of this kernel and grid (not compared)"),
    "in_loop_gbps": N_("ncu's DRAM bytes ÷ loop duration (GB/s)"),
    "in_loop_l2": N_("loop reads part from L2"),
    "cold_read_bytes": N_("DRAM read bytes, caches flushed"),
    "inloop_read_bytes": N_("DRAM read bytes in the loop (measured)"),
    "expected_flops": N_("useful FLOPs (from the shapes)"),
    "flops_basis": N_("useful FLOPs from"),
    "counted_flops": N_("counted FLOPs"),
    "flops_ratio": N_("counted ÷ useful FLOPs"),
    "flops_verdict": N_("FLOP check"),
}


def fidelity_table(fid: pd.DataFrame) -> pd.DataFrame:
    """`fidelity` as chapter 02 shows it: the columns a reader needs, headers in the narrative language."""
    show = fid.drop(columns=["matvec", "dram_bytes"], errors="ignore").copy()
    show["flops_basis"] = show.flops_basis.map(lambda b: text(b) if isinstance(b, str) else b)
    return show.rename(columns={c: text(h) for c, h in FIDELITY_HEADERS.items()})


def in_loop_l2(fid: pd.DataFrame) -> set[str]:
    """Kernel ids whose loop reads part of their operands from L2 (producer → consumer): their ncu DRAM bytes,
    class and roofline point are the cold-cache figure, the loop's DRAM traffic is lower."""
    return set(fid.loc[fid.in_loop_l2.astype(bool), "kernel_id"]) if len(fid) and "in_loop_l2" in fid else set()


def headline(cov: pd.DataFrame, fid: pd.DataFrame, manifest: dict) -> str:
    parts = [tr("{phase}: {profiled}/{selected} kernels profiled ({coverage:.0f} %), explaining {explained:.0f} % of "
                "its kernel time", phase=phase_label(c.phase), profiled=c.profiled, selected=c.selected,
                coverage=c.coverage_pct, explained=c.explained_time_pct) for c in cov.itertuples()]
    if len(fid):
        parts.append(tr("median ncu/timeline duration ratio {ratio:.2f} (per launch shape)",
                        ratio=fid.duration_ratio.median()))
    return tr("; ").join(parts)


def id_ranges(ids: list[str]) -> str:
    """Kernel ids with runs of three or more consecutive ones as ranges: ['d000', 'd001', 'd002', 'd005'] →
    'd000–d002, d005'."""
    runs: list[list[str]] = []
    for k in ids:
        last = runs[-1][-1] if runs else ""
        follows = (last and k[0] == last[0] and k[1:].isdigit() and last[1:].isdigit()
                   and int(k[1:]) == int(last[1:]) + 1)
        if follows:
            runs[-1].append(k)
        else:
            runs.append([k])
    return tr(", ").join(f"{r[0]}–{r[-1]}" if len(r) > 2 else tr(", ").join(r) for r in runs)


def coverage_prose(cov: pd.DataFrame, kernels: pd.DataFrame, manifest: Manifest | dict) -> str:
    info = read_manifest(manifest).ncu
    lines = []
    phases = info.phases if info else {}
    eager = {p: v for p, v in phases.items() if not v.graph_replay}
    by_position = info is not None and info.expected_launches is not None and bool(eager)
    if by_position:  # one ncu process for every eager phase; a graph phase has a process of its own (below)
        results, selected = sum(v.results for v in eager.values()), sum(v.selected for v in eager.values())
        lines.append(tr("- One ncu process for {phases}: {results} profiled launches for {selected} selected kernels "
                        "({per_kernel:.2f} per kernel) in {seconds:.0f} s; each kernel is identified by its position "
                        "(the op call that launched it in the timeline), so no name filter can miss one (clock "
                        "control `{clock}`, cache control `{cache}`).",
                        phases=tr(", ").join(phase_label(p) for p in eager), results=results,
                        selected=selected, per_kernel=results / max(1, selected), seconds=info.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
        check = info.op_check
        if check.get("checked"):
            pairs = sorted({tr("`{seen}` around `{op}`", seen=md_code(d["op_seen"]), op=md_code(d["op"]))
                            for d in check.get("differ", [])})
            others = tr("; the others the op that calls it at the dispatcher ({pairs})",
                        pairs=tr(", ").join(pairs)) if pairs else ""
            lines.append(tr("- The worker marked {checked} op calls; {agree} run the aten op the timeline names for "
                            "that kernel{others}.", checked=check["checked"], agree=check["agree"], others=others))
    for ph, v in phases.items():
        if by_position and ph in eager:
            continue
        lines.append(tr("- **{phase}**: one ncu process profiled step {step} of the phase, {results} launch "
                        "configurations in {seconds:.0f} s (clock control `{clock}`, cache control `{cache}`).",
                        phase=phase_label(ph), step=v.step, results=v.results, seconds=v.wall_s,
                        clock=md_code(info.clock_control), cache=md_code(info.cache_control)))
    if "identity" in kernels:
        other = kernels[kernels.identity.fillna("").str.len() > 0]
        other = other[~other.identity.eq("position; names agree")]
        for identity, ids in other.groupby("identity", sort=False)["kernel_id"]:
            lines.append(f"- {md(id_ranges(list(ids)))}: {md(say(identity))}.")
    for ph, v in phases.items():
        for d in v.left_out:
            lines.append(tr("- Left out of the {phase} selection: `{name}`, {share:.1f} % of the phase's GPU time: "
                            "{reason}.", phase=phase_label(ph), name=md_code(d.name), share=100 * d.share,
                            reason=say(d.reason)))
    bad = kernels[kernels.status != "profiled"]
    for r in bad.itertuples():
        lines.append(tr("- {kernel} not profiled: {status}", kernel=md(r.kernel_id), status=md(say(r.status))))
    if bad.empty:
        lines.append(tr("- Every selected kernel was profiled."))
    return "\n".join(lines)


def fidelity_prose(fid: pd.DataFrame) -> str:
    """ncu against the loop per launch shape (the ratio's spread, each kernel off by more than
    `CONTEXT_FACTOR` with its reason, grouped by reason), the producer → consumer kernels, and the FLOP check
    with each difference's verdict."""
    if fid.empty:
        return tr("No profiled kernels.")
    off = fid[(fid.duration_ratio > CONTEXT_FACTOR) | (fid.duration_ratio < 1 / CONTEXT_FACTOR)]
    pooled = fid.other_shapes.notna().sum() if "other_shapes" in fid else 0
    lines = [tr("ncu duration ÷ timeline median of the same launch shape (configuration and aten shapes; never "
                "pooled across shapes — {pooled} kernels run other shapes on the same grid, listed in the table, not "
                "compared): median {median:.2f}, range {low:.2f}–{high:.2f}; {n_off} of {n} kernels differ by more "
                "than {factor:.2f}×, each with its reason in the table.", pooled=pooled,
                median=fid.duration_ratio.median(), low=fid.duration_ratio.min(), high=fid.duration_ratio.max(),
                n_off=len(off), n=len(fid), factor=CONTEXT_FACTOR)]
    reasons = off.in_context.str.split(":").str[0]
    for why, g in off.groupby(reasons, sort=False):
        lines.append(tr("- {why}: {ids}", why=md(why), ids=md(id_ranges(list(g.kernel_id)))))
    l2 = fid[fid.in_loop_l2.astype(bool)] if "in_loop_l2" in fid else fid.iloc[:0]
    measured = l2[l2.inloop_read_bytes.notna()] if "inloop_read_bytes" in l2 else l2.iloc[:0]
    if len(measured):
        lines.append(tr("Producer → consumer: {ids} read(s) in the loop part of what the launch before them wrote, "
                        "still in L2; ncu flushed the caches and counted it from DRAM. This run measured the loop too "
                        "({how}):", ids=md(id_ranges(list(l2.kernel_id))), how=tr(INLOOP_HOW)))
        for x in measured.itertuples():
            lines.append(tr("- {id} {name}: {cold:.2f} MB read from DRAM with caches flushed, {inr:.2f} MB in the loop "
                            "({pct:.0f} %)", id=md(x.kernel_id), name=md(x.friendly_name), cold=x.cold_read_bytes / 1e6,
                            inr=x.inloop_read_bytes / 1e6,
                            pct=100 * x.inloop_read_bytes / x.cold_read_bytes if x.cold_read_bytes else float("nan")))
        rest = sorted(set(l2.kernel_id) - set(measured.kernel_id))
        if rest:
            lines.append(tr("- {ids}: {why}", ids=md(id_ranges(rest)), why=tr(INLOOP_NOT_MEASURED)))
        lines.append(tr("Their class (chapter 05) and roofline points (chapter 04) stay on the cold, flushed counters, "
                        "the same basis as every other kernel's; the in-loop bytes are what the loop moves."))
    elif len(l2):
        lines.append(tr("Producer → consumer: {ids} read(s) in the loop part of what the launch before them wrote, "
                        "still in L2; ncu flushed the caches and counted it from DRAM. Their DRAM bytes, their class "
                        "(chapter 05) and their roofline points (chapter 04) are the cold-cache figure; their in-loop "
                        "DRAM traffic is lower, and this capture does not measure by how much.",
                        ids=md(id_ranges(list(l2.kernel_id)))))
    g = fid[fid.flops_verdict.notna()] if "flops_verdict" in fid else fid.iloc[:0]
    checked = fid.dropna(subset=["flops_ratio"])
    ok = checked[(checked.flops_ratio - 1).abs() <= FLOPS_TOLERANCE]
    lines.append(tr("Counted FLOPs ÷ useful FLOPs of the shapes (2·M·N·K for a matrix product, one per element for a "
                    "pointwise op or a sum): {n_ok} of {n} kernels within ±{tol:.0f} %; every other one, and every copy "
                    "that counts FLOPs, has its verdict:", n_ok=len(ok), n=len(checked), tol=FLOPS_TOLERANCE * 100))
    for r in g.itertuples():
        ratio = tr("ratio {ratio:.2f}", ratio=r.flops_ratio) if r.flops_ratio == r.flops_ratio else tr("no ratio")
        lines.append(tr("- {kernel} {name}: {ratio} — {why}.", kernel=md(r.kernel_id), name=md(r.friendly_name),
                        ratio=ratio, why=md(r.flops_verdict)))
    return "\n".join(lines)


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
    floor = (tr(" (launches of this run with at most 16 B of operands read {lo:.1f}–{hi:.1f} kB)",
                lo=tiny.dram_bytes.min() / 1e3, hi=tiny.dram_bytes.max() / 1e3) if len(tiny) else "")
    verdicts = []
    for x in bf.itertuples():
        ratio, ratio_read, total = x.bytes_ratio, x.read_ratio, x.implied_read_bytes + x.implied_write_bytes
        # with measured reads, reads + writes within the tolerance agree outright; with DRAM bytes alone, only when
        # they are nearer the operands than the reads alone (else the output is still in L2)
        if abs(ratio - 1) <= BYTES_TOLERANCE and (x.reads_measured or abs(ratio - 1) <= abs(ratio_read - 1)):
            v = tr("agrees")
        elif abs(ratio_read - 1) <= BYTES_TOLERANCE:
            v = tr("agrees with the reads: the {mb:.2f} MB output is still in L2 at the kernel's end",
                   mb=x.implied_write_bytes / 1e6)
        elif ratio > 1 and total < SMALL_OPERANDS_BYTES:
            v = tr("a small launch: {op_kb:.1f} kB of operands, {dram_kb:.1f} kB read from DRAM; with caches flushed "
                   "every launch also reads its code, its parameters and whole 32-byte sectors from DRAM{floor}, so "
                   "the excess is not operand traffic", op_kb=total / 1e3, dram_kb=x.dram_bytes / 1e3, floor=floor)
        elif ratio < 1:
            v = (tr("cache-resident under replay (cache control none): the counters saw a warm L2")
                 if cache == "none" else
                 tr("below the operands' bytes (×{ratio:.2f}): it read less than the shapes say; for a grouped "
                    "GEMM, experts that got no routed rows are skipped (routing is not in the shapes)", ratio=ratio)
                 if x.op == "aten::_grouped_mm" else
                 tr("below the operands' bytes (×{ratio:.2f}): one of the kernels the op launches (a split-K or "
                    "split-KV reduction reads the partial results, not the operands), or operands still in L2",
                    ratio=ratio))
        else:
            v = tr("over-fetching ×{ratio:.2f}: operands read from DRAM more than once", ratio=ratio)
        if in_loop and x.kernel_id in in_loop and x.inloop:
            v += tr("; cold-cache figure: in the loop part of its operands come from L2 (producer → consumer); "
                    "{measured}", measured=inloop_words(x.inloop))
        elif in_loop and x.kernel_id in in_loop:
            v += tr("; cold-cache figure: in the loop part of its operands come from L2 (producer → consumer), so "
                    "its in-loop DRAM traffic is lower")
        verdicts.append(v)
    bf["verdict"] = verdicts
    return bf[cols]


def byte_fidelity_prose(bf: pd.DataFrame, manifest: Manifest | dict) -> str:
    ncu = read_manifest(manifest).ncu
    cache = (ncu.cache_control if ncu else None) or "unknown"
    if bf.empty:
        return tr("No profiled matrix or attention kernel has shapes that say what it must move.")
    # the verdict's two 'agrees' cases, from the numbers (the verdict is prose in the narrative language)
    read_ratio = bf.read_ratio if "read_ratio" in bf else bf.dram_bytes / bf.implied_read_bytes
    ok = (((bf.bytes_ratio - 1).abs() <= BYTES_TOLERANCE) | ((read_ratio - 1).abs() <= BYTES_TOLERANCE))
    lines = [tr("DRAM bytes ÷ the bytes the shapes imply: {n_ok} of {n} kernels within ±{tol:.0f} % "
                "of their reads + writes or of their reads alone (ncu cache control `{cache}`).", n_ok=int(ok.sum()),
                n=len(bf), tol=BYTES_TOLERANCE * 100, cache=md_code(cache))]
    for ph, g in bf.groupby("phase"):
        lines.append(tr("- {phase}: {n_ok} of {n} agree; median ratio to reads + writes {median:.2f}.",
                        phase=phase_label(ph), n_ok=int(ok[g.index].sum()), n=len(g), median=g.bytes_ratio.median()))
    total = bf.implied_read_bytes + bf.implied_write_bytes
    small = ~ok & (bf.bytes_ratio > 1) & (total < SMALL_OPERANDS_BYTES)
    if small.any():
        lines.append(tr("- {n} small launches (under {kb:.0f} kB of operands: {ids}) read {lo:.1f}–{hi:.1f} kB from DRAM "
                        "against {olo:.2f}–{ohi:.1f} kB of operands: with caches flushed a launch also reads its code, "
                        "parameters and whole sectors; not operand traffic, and not what the loop moves.",
                        n=int(small.sum()), kb=SMALL_OPERANDS_BYTES / 1e3, ids=md(id_ranges(list(bf.kernel_id[small]))),
                        lo=bf.dram_bytes[small].min() / 1e3, hi=bf.dram_bytes[small].max() / 1e3,
                        olo=total[small].min() / 1e3, ohi=total[small].max() / 1e3))
    for r in bf[~ok & ~small].itertuples():
        lines.append(f"- {md(r.kernel_id)} {md(r.friendly_name)} ({phase_label(r.phase)}): {md(r.verdict)}.")
    for r in bf[ok & bf.verdict.str.contains(tr("cold-cache figure"), regex=False)].itertuples():
        lines.append(f"- {md(r.kernel_id)} {md(r.friendly_name)} ({phase_label(r.phase)}): {md(r.verdict)}.")
    if cache == "none":
        lines.append(tr("This run was captured with `--cache-control none`: replay passes after the first read a warm "
                        "L2, so DRAM bytes, DRAM throughput and DRAM intensity of these kernels are not what the real "
                        "loop moves."))
    return "\n".join(lines)


# What `--cache-control none` distorts, per chapter that reads DRAM counters.
_DISTORTED = {
    "03": N_("the DRAM throughput %, DRAM hit and L2 hit histograms"),
    "04": N_("every DRAM-level roofline point: its intensity (FLOP per DRAM byte) is inflated and it can land "
             "right of the ridge, on the compute side, when the real loop is memory-bound"),
    "05": N_("the memory-bound vs latency-bound split, the locality flags and Little's-law bytes in flight"),
}


def cache_control_note(manifest: Manifest | dict, chapter: str, in_loop: set[str] | None = None,
                       fid: pd.DataFrame | None = None) -> str:
    """One sentence on the run's ncu cache control: under `none`, which of this chapter's figures it
    distorts; under `all`, that the DRAM counters are what a cold launch moves, which is what the loop moves
    except for the kernels in `in_loop` (`in_loop_l2` of chapter 02's fidelity: producer → consumer, part of
    their operands in L2 in the loop). With `fid` (chapter 02's fidelity) of a run that measured the loop (its
    in-loop columns), those kernels' measured in-loop DRAM reads stand beside the cold ones."""
    cache = read_manifest(manifest).cache_control
    if cache == "none":
        return tr("**This run was captured with ncu `--cache-control none`.** ncu replays each kernel in several "
                  "passes; after the first, its operands sit in L2, so DRAM counters read a warm cache that the real "
                  "decode loop never sees. Distorted here: {distorted}. Re-capture with `cache_control: all` (the "
                  "default) for figures to trust.", distorted=tr(_DISTORTED[chapter]))
    if cache == "all":
        out = tr("DRAM counters come from ncu with `--cache-control all`: caches are flushed before each replay pass, "
                 "so each kernel reads every operand from DRAM. In the decode loop that holds for what no launch just "
                 "before it wrote — the weights and the KV cache of a step (chapter 02 checks the bytes against the "
                 "shapes) — not for a consumer of what the launch before it has just written: that is still in L2.")
        measured = (fid[fid.kernel_id.isin(in_loop or ()) & fid.inloop_read_bytes.notna()]
                    if fid is not None and "inloop_read_bytes" in fid else None)
        if in_loop and measured is not None and len(measured):
            each = tr("; ").join(tr("{id} {cold:.2f} MB flushed, {inr:.2f} MB in the loop", id=md(x.kernel_id),
                                    cold=x.cold_read_bytes / 1e6, inr=x.inloop_read_bytes / 1e6)
                                 for x in measured.sort_values("kernel_id").itertuples())
            out += " " + tr("Here {ids} read(s) part of their operands from L2 in the loop (chapter 02's fidelity: "
                            "producer → consumer). Their class and roofline points stay on the cold-cache figure, the "
                            "flushed counters every kernel is classed by; the loop moves less, as this run measured "
                            "(DRAM reads, {how}): {each}.", ids=md(id_ranges(sorted(in_loop))), each=each,
                            how=tr(INLOOP_HOW))
            rest = sorted(set(in_loop) - set(measured.kernel_id))
            if rest:
                out += " " + tr("{ids}: {why}.", ids=md(id_ranges(rest)), why=tr(INLOOP_NOT_MEASURED))
        elif in_loop:
            out += " " + tr("Here {ids} read(s) part of their operands from L2 in the loop (chapter 02's fidelity: "
                            "producer → consumer): their DRAM bytes, class and roofline points are the cold-cache "
                            "figure, and their in-loop DRAM traffic is lower (not measured by this capture).",
                            ids=md(id_ranges(sorted(in_loop))))
        return out
    return tr("This run records no ncu cache control; treat its DRAM counters with care.")


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


# what the reader sees of `heavy_launches`: header overrides (catalog keys)
HEAVY_HEADERS = {
    "module": N_("Module (indices gathered)"),
    "launches": N_("Launches"),
    "launches_per_call": N_("Launches per step or call"),
    "us_each": N_("µs each (mean)"),
    "min_us": N_("shortest µs"),
    "max_us": N_("longest µs"),
    "kernel_share_pct": N_("% of the kernel's time"),
    "phase_share_pct": N_("% of the phase's kernel time"),
    "cumulative_pct": N_("cumulative % of the kernel's time"),
    "implied_gbps": N_("bytes the shapes imply ÷ duration (GB/s)"),
}
HEAVY_MISSING = {
    "module": N_("the timeline records no module for these launches (a CUDA graph's replayed kernels, a run captured "
                 "without module attribution, or a launch outside any module's forward)"),
    "op_shapes": N_("the launch has no aten op shapes in the timeline"),
    "implied_gbps": N_("a matrix or attention kernel, or shapes that do not say what a pointwise launch moves"),
}


def heavy_table(hl: pd.DataFrame) -> pd.DataFrame:
    """`heavy_launches` as chapter 02 shows it (the full module paths and nanosecond totals left out)."""
    return hl.drop(columns=["total_ns", "modules"], errors="ignore")


def heavy_headers() -> dict[str, str]:
    """The header of each column `heavy_table` shows, in the narrative language."""
    return {c: text(h) for c, h in HEAVY_HEADERS.items()}


def _ms_range(lo_us: float, hi_us: float) -> str:
    """A duration range in ms ('0.52–1.31 ms'; one value when both agree to 1 %)."""
    if hi_us <= lo_us * 1.01:
        return tr("{ms:.2f} ms", ms=hi_us / 1e3)
    return tr("{lo:.2f}–{hi:.2f} ms", lo=lo_us / 1e3, hi=hi_us / 1e3)


def heavy_prose(ht: pd.DataFrame, hl: pd.DataFrame) -> str:
    """The rule that makes a kernel heavy-tailed, then each such kernel: its mean against its median, what its
    longest tenth holds, and how many launches the table's groups take to hold HEAVY_HOLD of its time. Where no
    profiled kernel is heavy-tailed, says so (with the largest mean ÷ median seen)."""
    lines = [tr("A kernel's launches are heavy-tailed here when its mean launch is at least {ratio:.0f}× its median, or "
                "when, with at least {n} launches, its longest {top:.0f} % of launches hold at least {share:.0f} % of "
                "its time (the project's thresholds, set from the bundled runs). ncu profiled one launch of each "
                "kernel; for a heavy-tailed one that launch says little about where its time goes, so the table "
                "groups its longest launches by module (layer indices gathered in braces), aten op and shapes, "
                "longest first, until they hold {hold:.0f} % of its time.", ratio=HEAVY_MEAN_MEDIAN,
                n=HEAVY_MIN_LAUNCHES, top=100 * HEAVY_TOP_FRACTION, share=100 * HEAVY_TOP_SHARE,
                hold=100 * HEAVY_HOLD)]
    if ht.empty:
        lines.append(tr("No profiled kernel has launches in the timeline: nothing to show."))
        return "\n\n".join(lines)
    heavy = ht[ht.heavy.astype(bool)]
    if heavy.empty:
        worst = ht.sort_values("mean_over_median", ascending=False).iloc[0]
        lines.append(tr("No profiled kernel of this run is heavy-tailed: nothing to show. The largest mean ÷ median is "
                        "{ratio:.2f}× ({kernel}, {phase}).", ratio=worst.mean_over_median, kernel=md(worst.kernel_id),
                        phase=phase_label(worst.phase)))
        return "\n\n".join(lines)
    items = []
    for h in heavy.itertuples():
        g = hl[hl.kernel_id == h.kernel_id]
        items.append(tr("- {kernel} {name} ({phase}): {n} launches, mean {mean:.1f} µs against a median {median:.1f} µs "
                        "({ratio:.2f}×); its longest {top} hold {top_share:.0f} % of its time. In the table {shown} "
                        "launches in {groups} group(s) hold {held:.0f} % of its time, {phase_share:.1f} % of the "
                        "phase's kernel time.", kernel=md(h.kernel_id), name=md(h.friendly_name),
                        phase=phase_label(h.phase), n=h.launches, mean=h.mean_us, median=h.median_us,
                        ratio=h.mean_over_median, top=h.top_launches, top_share=h.top_share_pct,
                        shown=int(g.launches.sum()), groups=len(g),
                        held=g.cumulative_pct.iloc[-1] if len(g) else 0.0, phase_share=g.phase_share_pct.sum()))
    lines.append("\n".join(items))
    nomod = hl[hl.module.isna()]
    if len(nomod):
        lines.append(tr("The timeline records no module for {n} of these groups ({ids}): a CUDA graph's replayed "
                        "kernels, a run captured without module attribution, or launches outside any module's "
                        "forward carry none; they are grouped by aten op and shapes alone.", n=len(nomod),
                        ids=md(id_ranges(sorted(set(nomod.kernel_id))))))
    return "\n\n".join(lines)


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


def vision_prose(v: dict, kernels: pd.DataFrame) -> str:
    """`vision_heavy` in one sentence (what is missing where the run cannot say)."""
    if v["state"] == "no phase":
        return tr("This run has no vision encode phase: no vision kernels to look at.")
    if v["state"] == "not profiled":
        phases = tr(", ").join(phase_label(p) for p in dict.fromkeys(kernels.phase)) if len(kernels) else "—"
        return tr("Vision encode ran, but this run's ncu capture did not profile it (its selection covers {phases}): "
                  "its launches are in the timeline, their counters are not, so no vision kernel is shown here.",
                  phases=phases)
    if v["state"] == "not heavy":
        return tr("No profiled vision encode kernel is heavy-tailed (the largest mean ÷ median is {ratio:.2f}×, {kernel}).",
                  ratio=v["ratio"], kernel=md(v["kernel"]))
    what = tr("the copies and pointwise ops") if v["copies"] else tr("the heavy-tailed kernels")
    where = f"`{md_code(v['module'])}`" if v["module"] else tr("launches with no module in the timeline")
    out = tr("In vision encode {what} ({kernels}: {kernel_pct:.0f} % of its {ms:.1f} ms of kernel time per call) sit "
             "in a few launches: {n} launches of {range} in {where} ({ops}) hold {pct:.1f} % of vision encode kernel "
             "time", what=what, kernels=tr(", ").join(f"{md(k)} {md(n)}" for k, n in zip(v["kernels"], v["names"])),
             kernel_pct=v["kernel_pct"], ms=v["phase_ms"], n=v["launches"], range=_ms_range(v["lo_us"], v["hi_us"]),
             where=where, ops=tr(", ").join(f"`{md_code(o)}`" for o in v["ops"]), pct=v["pct"])
    nxt = v.get("next")
    if nxt:
        out += tr("; the next, {where}: {n} launches of {range}, {pct:.1f} %",
                  where=f"`{md_code(nxt['module'])}`" if nxt["module"] else tr("launches with no module in the timeline"),
                  n=nxt["launches"], range=_ms_range(nxt["lo_us"], nxt["hi_us"]), pct=nxt["pct"])
    return tr("{sentence}.", sentence=out)
