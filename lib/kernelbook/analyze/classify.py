"""Chapter 05's analysis: bottleneck classes, per-class metrics, metric health, wave quantization,
tile analysis, and the top optimization opportunities per phase (the profiler output contract).

Rules (the project's own heuristic, inherited from the reference report's profiling notes, which are not
public; see `THRESHOLD_SOURCES`): memory % high and compute % low → memory-bound; compute % high
and memory % low → compute-bound; both low → latency-bound; otherwise balanced; L2 hit below its
threshold adds a locality flag, for kernels whose work reuses its operands (GEMM, attention over more than
one query): a GEMV, a copy or a decode step's attention touches each byte once, so a low hit rate is what
streaming gives, not a locality problem. "Compute %" is ncu's SM throughput (the max over SM pipes, tensor
included) and "memory %" its memory throughput (the max over DRAM, L2 and L1), both % of peak.

Numbers, tables and English phrases (`contract.phrase`) only: the chapter's sentences, and its tables in the reader's
language, are `narrate.classify`'s.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
from .histograms import weighted_mean
from .ncu_report import inloop_measured
from ..contract.manifest import Manifest, read_manifest
from ..contract.names import PHASE_NAMES
from .steps import graph_node_gaps
from .timeline import plain_ms_per_step

MAX_WARPS_PER_SM = {"hopper": 64, "ampere": 64, "ada": 48, "blackwell": 64}
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class Rules:
    high_pct: float = 60.0      # a throughput at or above this is "high"
    low_pct: float = 30.0       # below this is "low"
    l2_hit_min_pct: float = 80.0
    mem_latency_cycles: float = 800.0  # global-memory latency assumed for S_min and Little's law


# class names are machine values (report.md's Bottleneck column, the logic below) and catalog keys: the display
# layer shows a text cell that is a catalog key translated, the prose uses narrate.classify.class_label
CLASSES = (phrase("memory-bound"), phrase("compute-bound"), phrase("latency-bound"), phrase("balanced"),
           phrase("unknown"))
SIDES = (phrase("memory"), phrase("compute"), phrase("no FLOPs"))
_CLASS_PHRASES = {str(p): p for p in CLASSES}



def class_phrase(cls: str):
    """A bottleneck class (a machine value) as a phrase, which the narration shows in the reader's language."""
    return _CLASS_PHRASES.get(str(cls), str(cls))


def phase_phrase(phase: str):
    """A phase (a machine value) as a reader names it, a phrase shown in the reader's language."""
    return PHASE_NAMES.get(str(phase), str(phase))


def classify_row(sm_pct: float, mem_pct: float, rules: Rules = Rules()) -> str:
    if not (sm_pct == sm_pct and mem_pct == mem_pct):
        return "unknown"
    if mem_pct >= rules.high_pct and sm_pct < rules.high_pct:
        return "memory-bound"
    if sm_pct >= rules.high_pct and mem_pct < rules.high_pct:
        return "compute-bound"
    if sm_pct < rules.low_pct and mem_pct < rules.low_pct:
        return "latency-bound"
    return "balanced"


def classify(kernels: pd.DataFrame, ridge_flop_per_byte: float, rules: Rules = Rules(),
             in_loop: set[str] | None = None) -> pd.DataFrame:
    """One row per profiled kernel: class, roofline side (DRAM intensity vs the ridge), locality flag,
    and the reason in words with the numbers that triggered it. `in_loop` (kernel ids: chapter 02's
    producer → consumer kernels, `ncu_report.in_loop_l2`) marks classes read from cold-cache counters whose
    loop reads part of the operands from L2 (`counters`)."""
    k = kernels[kernels.status == "profiled"].copy()
    k["class"] = [classify_row(s, m, rules) for s, m in zip(k.sm_pct, k.memory_pct)]
    k["roofline_side"] = np.where(k.flops > 0, np.where(k.intensity_dram < ridge_flop_per_byte, "memory", "compute"),
                                  "no FLOPs")
    reuse = reuses_operands(k)
    low_hit = k.l2_hit_pct < rules.l2_hit_min_pct
    k["locality_issue"] = low_hit & reuse
    k["issue_bound"] = issue_bound(k)
    k["reason"] = phrase_column((joined(
        phrase("SM {sm:.1f} %, memory {mem:.1f} % (high ≥ {high:.0f}, low < {low:.0f})", sm=s, mem=m,
               high=rules.high_pct, low=rules.low_pct),
        (phrase("; L2 hit {hit:.0f} % < {min:.0f} %", hit=h, min=rules.l2_hit_min_pct) if r else
         phrase("; L2 hit {hit:.0f} %: each byte is used once, nothing for L2 to reuse", hit=h)) if lo else "",
        phrase("; no tensor-core work: the SM is busy issuing CUDA-core and load/store instructions (index "
               "arithmetic, conversions, loads, stores), which more tensor FLOP/s would not speed up") if ib else "")
        for s, m, h, lo, r, ib in zip(k.sm_pct, k.memory_pct, k.l2_hit_pct, low_hit, reuse, k.issue_bound)),
        k.index)
    def counters(r):
        if not (in_loop and r.kernel_id in in_loop):
            return phrase("cold cache, as in the loop")
        m = inloop_measured(r)
        if m is None:
            return phrase("cold-cache figure, in-loop traffic lower (producer → consumer)")
        # the class stays on the flushed counters, the basis of every other kernel's class; the loop's own traffic,
        # measured by ncu's range pass, stands beside it
        return phrase("cold-cache figure (the class uses the flushed counters): {cold:.2f} MB read from DRAM; in the "
                      "loop (measured) {inr:.2f} MB (producer → consumer)", cold=m["cold_read_bytes"] / 1e6,
                      inr=m["inloop_read_bytes"] / 1e6)

    k["counters"] = phrase_column((counters(r) for r in k.itertuples()), k.index)
    return k


def issue_bound(k: pd.DataFrame) -> pd.Series:
    """Of classified kernels (`class`, as `classify` sets it): true for a compute-bound kernel that does no tensor-core work: its high SM throughput is the issue of CUDA-core
    and load/store instructions (an elementwise, copy or norm kernel, over a strided or broadcast layout above all,
    spends it on index arithmetic, conversions, loads and stores), which more tensor FLOP/s would not speed up (on the
    bundled run, vision encode's strided copy and add: SM 64 and 88 %, DRAM 47 and 18 %, no tensor FLOPs)."""
    tensor = k["flops_tensor"].fillna(0) if "flops_tensor" in k else pd.Series(0.0, index=k.index)
    return k["class"].eq("compute-bound") & tensor.le(0)


def reuses_operands(k: pd.DataFrame) -> pd.Series:
    """True where the kernel's work reads an operand byte more than once, so L2 can serve the repeats: a
    matrix-matrix product, attention outside decode (several queries per key). A GEMV (one token's
    activations), copies, gathers, pointwise work and a decode step's attention (one query) stream each
    byte once."""
    cat = k["category"] if "category" in k else pd.Series("", index=k.index)
    phase = k["phase"] if "phase" in k else pd.Series("", index=k.index)
    return cat.eq("GEMM") | (cat.eq("attention") & phase.ne("decode"))


CLASS_METRICS = {phrase("SM throughput %"): "sm_pct", phrase("DRAM throughput %"): "dram_pct",
                 phrase("memory throughput %"): "memory_pct", phrase("achieved occupancy %"): "achieved_occupancy_pct",
                 phrase("L1 hit %"): "l1_hit_pct", phrase("L2 hit %"): "l2_hit_pct",
                 phrase("mean duration µs"): "duration_us"}
OVERALL = phrase("overall")  # class_table's column of every kernel


def class_counts(c: pd.DataFrame) -> pd.DataFrame:
    g = c.groupby("class").agg(kernels=("kernel_id", "size"), time_share=("share", "sum"))
    g["pct_of_profiled"] = 100 * g.kernels / g.kernels.sum()
    g["pct_of_profiled_time"] = 100 * g.time_share / g.time_share.sum()
    return g.drop(columns="time_share").sort_values("kernels", ascending=False).reset_index()


def class_table(c: pd.DataFrame, weighted: bool) -> pd.DataFrame:
    """The reference report's per-class table: rows are metrics (`CLASS_METRICS`' labels), columns are classes +
    `OVERALL` (English; `narrate.classify.class_table` shows them in the reader's language).
    `weighted`: means weighted by each kernel's share of phase kernel time (else plain means)."""
    cols = {}
    for name, grp in list(c.groupby("class")) + [(OVERALL, c)]:
        w = grp.share if weighted else pd.Series(1.0, index=grp.index)
        cols[name] = {label: weighted_mean(grp[col], w) for label, col in CLASS_METRICS.items()}
    return pd.DataFrame(cols).rename_axis("metric")


def dominant_class(cp: pd.DataFrame) -> tuple[str, float]:
    """The class holding the most profiled time, and its fraction of that time."""
    t = cp.groupby("class").share.sum()
    return str(t.idxmax()), float(t.max() / t.sum())


def lead(cp: pd.DataFrame) -> dict:
    """The class that holds most of a phase's profiled kernel time (`class`), its share of that time (`pct`, %), its
    kernels (`kernels`) and the phase's profiled kernels (`of`); where it is compute-bound, the share of its time (%)
    in kernels without tensor-core work (`issue_pct`, `issue_bound`) and their categories by time
    (`issue_categories`)."""
    top, frac = dominant_class(cp)
    lead_k = cp[cp["class"] == top]
    issue = lead_k[lead_k.issue_bound] if "issue_bound" in lead_k else lead_k.iloc[:0]
    return {"class": top, "pct": 100 * frac, "kernels": (cp["class"] == top).sum(), "of": len(cp),
            "issue_pct": 100 * issue.share.sum() / lead_k.share.sum() if len(issue) else 0.0,
            "issue_categories": tuple(issue.groupby("category").share.sum().sort_values(ascending=False).index)
            if len(issue) and "category" in issue else ()}


def class_figures(cp: pd.DataFrame, rules: Rules, cache_control: str) -> dict:
    """What chapter 05's paragraph on the classes says (`narrate.classify.class_prose`): each class's share of
    profiled time, largest first (`shares`: (class, %, kernels)); the latency-bound kernels' median duration (µs),
    blocks and fill of one wave (%) (`latency`, None without any); the GEMV/GEMM kernels the counters show not
    memory-bound at DRAM < 5 % under cache control `none`, their weights left in L2 (`warm`: (kernels, highest DRAM
    %), else None); the compute-bound kernels on the roofline's memory side (`disagree`); the kernels that reuse
    their operands and hit L2 below `rules.l2_hit_min_pct` (`locality`: (kernels, % of profiled time)) and those that
    stream (`streaming`, the same; None without any)."""
    t = cp.groupby("class").share.sum() / cp.share.sum()
    shares = [(cls, 100 * v, int((cp["class"] == cls).sum())) for cls, v in t.sort_values(ascending=False).items()]
    disagree = cp[(cp["class"] == "compute-bound") & (cp.roofline_side == "memory")]
    lat = cp[cp["class"] == "latency-bound"]
    warm = cp[cp.category.isin(["GEMV", "GEMM"]) & (cp["class"] != "memory-bound") & (cp.dram_pct < 5)]
    loc = cp[cp.locality_issue]
    stream = cp[(cp.l2_hit_pct < rules.l2_hit_min_pct) & ~cp.locality_issue]
    return {"shares": shares,
            "latency": (lat.duration_ns.median() / 1e3, lat.grid_size.median(), lat.waves_per_sm.median() * 100)
            if len(lat) else None,
            "warm": (len(warm), warm.dram_pct.max()) if len(warm) and cache_control == "none" else None,
            "disagree": len(disagree), "locality": (len(loc), 100 * loc.share.sum() / cp.share.sum()),
            "streaming": (len(stream), 100 * stream.share.sum() / cp.share.sum()) if len(stream) else None}


# Where the healthy levels come from: `narrate.classify.THRESHOLD_SOURCES`, under the health table and chapter 03's
# captions.
HEALTH = {  # label (a catalog key: the table's header): (column, healthy test)
    phrase("tensor pipe active > 60 %"): ("tensor_pipe_pct", lambda v: v > 60),
    phrase("DRAM > 70 %"): ("dram_pct", lambda v: v > 70),
    phrase("achieved occupancy > 25 %"): ("achieved_occupancy_pct", lambda v: v > 25),
    phrase("L2 hit > 80 %"): ("l2_hit_pct", lambda v: v > 80),
    phrase("spilling = 0 B"): ("spill_bytes", lambda v: v == 0),
    phrase("waves per SM > 1"): ("waves_per_sm", lambda v: v > 1),
}


def health(c: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: each health metric's value and whether it is healthy (`narrate.classify.THRESHOLD_SOURCES` says
    where the levels come from; `narrate.classify.health_styled` shows the table). Tensor pipe activity
    (`tensor_pipe_pct`, `roofline.with_tensor_pipe`) applies only to kernels that issue tensor FLOPs."""
    out = c[["kernel_id", "friendly_name"]].copy()
    for label, (col, ok) in HEALTH.items():
        v = c[col].astype(float) if col in c else pd.Series(np.nan, index=c.index)
        if label.startswith("tensor"):
            v = v.where(c.flops_tensor > 0)
        out[label] = v
        out[f"{label} ok"] = v.map(lambda x, ok=ok: bool(ok(x)) if x == x else None)
    return out.reset_index(drop=True)


def wave_table(c: pd.DataFrame, metrics: pd.DataFrame | None, sm_count: int, family: str = "hopper") -> pd.DataFrame:
    """Blocks vs SMs × resident blocks per SM, waves, tail-wave efficiency and the ≥ 4× SMs rule.

    Resident blocks per SM = the tightest of ncu's occupancy limits (blocks, registers, shared memory,
    warps) when recorded, else theoretical occupancy × max warps ÷ warps per block.
    """
    limits = _occupancy_limits(metrics)
    rows = []
    for _, k in c.iterrows():
        warps_per_block = math.ceil(k.block_size / 32)
        per_sm = limits.get(int(k.result_id)) if "result_id" in k and k.result_id == k.result_id else None
        if not per_sm:
            per_sm = max(1, int(k.theoretical_occupancy_pct / 100 * MAX_WARPS_PER_SM[family] // warps_per_block))
        slots = sm_count * per_sm
        waves = k.grid_size / slots
        full = math.ceil(waves) if waves > 0 else 0
        rows.append({"kernel_id": k.kernel_id, "friendly_name": k.friendly_name, "blocks": int(k.grid_size),
                     "threads_per_block": int(k.block_size), "blocks_per_sm": per_sm, "slots": slots,
                     "waves": waves, "ncu_waves_per_sm": k.waves_per_sm,
                     "tail_efficiency_pct": 100 * waves / full if full else np.nan,
                     "blocks_vs_sms": k.grid_size / sm_count, "meets_4x_sms": k.grid_size >= 4 * sm_count,
                     "share": k.share})
    return pd.DataFrame(rows)


def _occupancy_limits(metrics: pd.DataFrame | None) -> dict[int, int]:
    if metrics is None:
        return {}
    names = ["launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
             "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps"]
    m = metrics[metrics.metric.isin(names)]
    if m.empty:
        return {}
    return {int(r): int(v) for r, v in m.groupby("result_id")["value"].min().items()}


TILE = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_")


def decode_tile(name: str) -> dict | None:
    """(BM, BN, BK, stages) from an nvjet or CUTLASS kernel name: `..._<BM>x<BN>_<BK>x<stages>_...`
    (nvjet: `nvjet_sm90_tst_128x8_64x12_4x1_...`; CUTLASS: `..._128x128_32x3_...`)."""
    m = TILE.search(name + "_")
    if not m:
        return None
    bm, bn, bk, st = map(int, m.groups())
    return {"BM": bm, "BN": bn, "BK": bk, "stages": st}


def tile_table(c: pd.DataFrame, device, rules: Rules = Rules(), dtype_bytes: int = 2) -> pd.DataFrame:
    """The tiling seed's checks for every GEMM/GEMV kernel whose name gives its tile:
    tile intensity 2·BM·BN·BK / (bytes·(BM+BN)·BK) = BM·BN/(BM+BN) FLOP/B at 2-byte inputs, vs the
    ridge; shared memory for `stages` A+B buffers vs what the launch allocates; registers per block
    vs the SM's file; S_min = ceil(latency / T_tile) + 1 stages in flight, with T_tile the cycles one
    stage takes in steady state: the longer of its compute (tile FLOPs ÷ per-SM tensor FLOP/cycle) and
    its load ((BM+BN)·BK·bytes ÷ the SM's share of DRAM bandwidth per cycle). A tile that takes longer
    to arrive than to compute is bandwidth-bound, and few stages cover the latency."""
    rows = []
    cycles_per_s = device.sm_count * device.sm_clock_max_mhz * 1e6
    per_sm_cycle = device.peak_flops("bf16") / cycles_per_s
    dram_per_sm_cycle = device.dram_bytes_per_s / cycles_per_s
    ridge = device.ridge("bf16")
    for _, k in c[c.category.isin(["GEMM", "GEMV"])].iterrows():
        t = decode_tile(k["name"])
        if not t:
            continue
        bm, bn, bk, st = t["BM"], t["BN"], t["BK"], t["stages"]
        flops_tile = 2 * bm * bn * bk
        t_compute = flops_tile / per_sm_cycle
        t_load = (bm + bn) * bk * dtype_bytes / dram_per_sm_cycle
        s_min = math.ceil(rules.mem_latency_cycles / max(t_compute, t_load)) + 1
        smem_need = st * (bm + bn) * bk * dtype_bytes
        rows.append({"kernel_id": k.kernel_id, "friendly_name": k.friendly_name, **t,
                     "tile_intensity": bm * bn / (bm + bn) * (2 / dtype_bytes), "ridge": ridge,
                     "tile_vs_ridge": bm * bn / (bm + bn) * (2 / dtype_bytes) / ridge,
                     "smem_stages_bytes": smem_need, "smem_launch_bytes": k.shared_bytes_per_block,
                     "regs_per_block": k.registers * k.block_size,
                     "regs_fit_blocks": REGISTERS_PER_SM // max(1, int(k.registers * k.block_size)),
                     "t_tile_cycles": t_compute, "t_load_cycles": t_load, "s_min": s_min, "stages_ok": st >= s_min, "share": k.share})
    return pd.DataFrame(rows)


def _stage_bytes(name: str, dtype_bytes: int = 2) -> float:
    t = decode_tile(name)
    return float(t["stages"] * (t["BM"] + t["BN"]) * t["BK"] * dtype_bytes) if t else np.nan


def littles_law(c: pd.DataFrame, device, rules: Rules = Rules(), family: str = "hopper") -> pd.DataFrame:
    """For memory-bound kernels: bytes in flight per SM needed to reach the DRAM roof (Little's law,
    bandwidth per SM × latency) vs achieved (measured DRAM bytes/s × latency) vs what resident warps
    supply with one 16-byte load per thread outstanding, and, for a tiled kernel whose name gives its
    pipeline, what its stage buffers hold: stages × (BM+BN)·BK·2 bytes, filled by asynchronous copies
    (TMA / cp.async) that need no thread per load — how such a kernel has more bytes in flight than its
    warps' loads could carry."""
    lat_s = rules.mem_latency_cycles / (device.sm_clock_max_mhz * 1e6)
    need = device.dram_bytes_per_s / device.sm_count * lat_s
    mb = c[c["class"] == "memory-bound"]
    out = pd.DataFrame({
        "kernel_id": mb.kernel_id, "friendly_name": mb.friendly_name,
        "needed_bytes_per_sm": need,
        "achieved_bytes_per_sm": mb.dram_bytes_per_s / device.sm_count * lat_s,
        "warp_supply_bytes_per_sm": mb.achieved_occupancy_pct / 100 * MAX_WARPS_PER_SM[family] * 32 * 16,
        "stage_buffer_bytes_per_sm": [_stage_bytes(n) for n in mb["name"]],
    })
    out["achieved_vs_needed_pct"] = 100 * out.achieved_bytes_per_sm / need
    return out.reset_index(drop=True)


def wall_basis(summary_row, overhead_ratio: float | None = None, plain_ms: float | None = None, run_id: str = "",
               phase: str = "") -> tuple[float, float, str]:
    """(wall ms per step, GPU-busy ms per step, the basis in words: an English phrase) of a phase, for its idle
    share.

    The timeline was captured under the profiler, which stretches the host's gaps between kernels, not the
    kernels: the wall is the plain run's step (`plain_ms`, the capture's unprofiled timing of the phase)
    where the capture timed it, else the profiled step ÷ the capture's profiled ÷ plain ratio for the whole
    generate call, else the profiled step. GPU-busy time is the profiled timeline's. Both are named quantities of
    `run_id`'s `phase` (contract.quantity)."""
    steps = max(1, int(summary_row.get("steps", 1) or 1))
    busy = quantity.q(run_id, f"{phase}.gpu_busy_step_ms", summary_row.gpu_busy_ms / steps)
    prof = summary_row.wall_ms / steps
    if plain_ms:
        return quantity.q(run_id, f"{phase}.plain_step_ms", plain_ms), busy, phrase("plain run, no profiler")
    if overhead_ratio:
        return (quantity.q(run_id, f"{phase}.plain_step_estimate_ms", prof / overhead_ratio), busy,
                phrase("profiled wall ÷ {ratio:.2f} profiler overhead", ratio=overhead_ratio))
    return quantity.q(run_id, f"{phase}.profiled_step_ms", prof), busy, phrase("under the profiler")


def speedup(gain_pct: float) -> float:
    """The speedup of removing `gain_pct` % of a wall time: 1 ÷ (1 − share)."""
    return 1 / (1 - gain_pct / 100) if gain_pct < 100 else math.inf


def times(x: float) -> str:
    """A speedup as printed: two decimals under 2× (1.03), one above (8.1), so that a share printed to
    0.1 % gives it back within its last digit."""
    return f"{x:.2f}" if x < 2 else f"{x:.1f}"


def graph_replay_gaps(timeline: pd.DataFrame, phase: str = "decode") -> tuple[float, float] | None:
    """(ms per step of the gaps between a CUDA-graph replay's nodes, their median in µs) of a phase whose steps ran
    as graph replays (`steps.graph_node_gaps`, the definition chapter 06 reads too), else None."""
    g = graph_node_gaps(timeline, phase)
    return None if g is None else (g.ms_per_step, g.median_us)


def opportunities(phase: str, summary_row, c: pd.DataFrame, timeline_share: pd.Series, roofs,
                  overhead_ratio: float | None = None, plain_ms: float | None = None,
                  graph_gaps: tuple[float, float] | None = None, run_id: str = "") -> pd.DataFrame:
    """Candidates for one phase, ranked by estimated gain (`gain_pct`: % of the phase's wall time on the
    basis of `wall_basis`, the plain run's where the capture timed it; `speedup`: 1 ÷ (1 − share)):
    - launch overhead: the GPU-idle share of the phase (what CUDA graphs / fewer launches can recover); on a
      phase that already ran as CUDA graphs (`graph_gaps`: `graph_replay_gaps`), never graphs again: the idle
      share split into the gaps between the graph's kernels and the host's time between replays;
    - per category of profiled kernels: time above the kernel's roof, i.e. duration − max(FLOPs ÷ compute
      roof, bytes ÷ bandwidth at each level), scaled to the category's share of the phase's kernel time.
    Gains are upper bounds, each alone: they assume the roof is reachable and nothing else moves. `opportunity` and
    `trigger` are English phrases (`narrate.classify.opportunities` shows them in the reader's language)."""
    rows = []
    wall, busy, basis = wall_basis(summary_row, overhead_ratio, plain_ms, run_id, phase)
    busy_frac = min(1.0, busy / wall) if wall else 0.0
    idle = 1 - busy_frac
    if idle > 0 and graph_gaps is not None:
        # the step already runs as a CUDA graph: no launch overhead left to cut with graphs. What is left between
        # kernels is the graph's own node-to-node gaps and, between replays, the host's generate loop.
        inside_ms, median_us = graph_gaps
        inside = min(idle, inside_ms / wall) if wall else 0.0
        host = idle - inside
        rows.append({"opportunity": phrase("Cut the host's time between graph replays (the generate loop)"),
                     "gain_pct": 100 * host,
                     "trigger": phrase("decode already runs as CUDA graphs; of the {wall:.2f} ms step ({basis}) the "
                                       "GPU is busy {busy:.2f} ms, gaps inside the graph replay take {inside:.3f} ms, "
                                       "and the other {host:.2f} ms ({pct:.1f} %) lie between replays, on the host",
                                       wall=wall, basis=basis, busy=busy,
                                       inside=quantity.q(run_id, "decode.node_gaps_ms", inside_ms),
                                       host=quantity.q(run_id, "decode.host_between_replays_ms", host * wall),
                                       pct=100 * host)})
        rows.append({"opportunity": phrase("Fewer graph nodes: fuse kernels (gaps between a graph's kernels)"),
                     "gain_pct": 100 * inside,
                     "trigger": phrase("{inside:.3f} ms per step between the graph's kernels (median gap {median:.2f} "
                                       "µs, {launches:.0f} kernels per step)", inside=inside_ms, median=median_us,
                                       launches=summary_row.get("launches_per_step", float("nan")))})
    elif idle > 0:
        rows.append({"opportunity": phrase("Cut launch overhead: CUDA graphs / fused decode step") if phase == "decode"
                     else phrase("Cut launch overhead: CUDA graphs / fewer, fused kernels"),
                     "gain_pct": 100 * idle,
                     "trigger": phrase("GPU idle {idle:.1f} % of the {phase} step: {busy:.2f} ms busy in {wall:.2f} ms "
                                       "({basis}), {launches:.0f} launches per step", idle=100 * idle,
                                       phase=phase_phrase(phase), busy=busy, wall=wall, basis=basis,
                                       launches=summary_row.get("launches_per_step", float("nan")))})
    pc = c[c.phase == phase]
    if len(pc):
        roof_t = pc.apply(lambda k: roof_time_ns(k, roofs), axis=1)
        frac_above = (1 - roof_t / pc.duration_ns).clip(lower=0)
        pc = pc.assign(frac_above=frac_above)
        for cat, grp in pc.groupby("category"):
            cat_share = float(timeline_share.get(cat, grp.share.sum()))
            f = weighted_mean(grp.frac_above, grp.share)
            gain = 100 * busy_frac * cat_share * f
            top = grp.sort_values("share", ascending=False).iloc[0]
            rows.append({"opportunity": phrase("Bring {category} kernels to their roof ({hint})", category=cat,
                                               hint=_hint(cat, grp)),
                         "gain_pct": gain,
                         "trigger": phrase("{category} {share:.0f} % of kernel time at {pct:.0f} % of roof "
                                           "(time-weighted); e.g. {kernel}: SM={sm:.1f} %, DRAM={dram:.1f} %, "
                                           "occupancy={occ:.0f} %", category=cat, share=100 * cat_share,
                                           pct=100 * (1 - f), kernel=top.friendly_name, sm=top.sm_pct,
                                           dram=top.dram_pct, occ=top.achieved_occupancy_pct)})
    out = pd.DataFrame(rows, columns=["opportunity", "gain_pct", "trigger"])
    for col in ("opportunity", "trigger"):  # the cells' phrases kept
        out[col] = phrase_column((r[col] for r in rows), out.index)
    out.insert(2, "speedup", [speedup(g) for g in out.gain_pct])
    return out.sort_values("gain_pct", ascending=False).reset_index(drop=True)


def _hint(cat: str, grp: pd.DataFrame):
    if cat in ("GEMV", "GEMM") and (grp.intensity_dram.fillna(0) > 0).any():
        return phrase("fuse projections / batch tokens so weights are read once for more work")
    if cat in ("elementwise", "copy/cast", "reduction/norm"):
        return phrase("fuse the chain into neighbouring kernels")
    if cat == "gather/index":
        return phrase("fuse indexing into the consumer kernel")
    if cat == "attention":
        return phrase("decode-specialised attention (split-KV)")
    return phrase("specialise the kernel for this shape")


def roof_time_ns(k, roofs) -> float:
    """Lower bound on the kernel's duration from its work: max of FLOPs ÷ compute roof and bytes ÷
    bandwidth at every level that has a roof."""
    _, cpeak = roofs.compute_for(k)
    t = (k.flops or 0) / cpeak
    for lvl, bw in roofs.bandwidth.items():
        b = k.get(f"{lvl}_bytes")
        if b == b and b:
            t = max(t, b / bw)
    return 1e9 * t


# the profiler output contract's stage table header: machine-read, the same in every language
CONTRACT_HEADER = "| Stage | Duration (us) | TC% | DRAM% | Occ% | Bottleneck | Key Issue |"


def legend_figures(manifest: Manifest | dict, summary: pd.DataFrame, rows: list[list[str]]) -> dict:
    """What the Stages table's legend (`narrate.classify.contract_legend`) says of its `rows`: each stage's wall time
    in µs under the profiler (`profiled`: (stage, µs, True where per step: decode; per call for the others)), whether
    the capture timed every stage plainly (`plain`), and the classes its Bottleneck column names (`classes`)."""
    plain = plain_ms_per_step(manifest)
    stages = [r[0] for r in rows]
    s = summary.set_index("phase")
    profiled = [(ph, 1e3 * s.loc[ph].wall_ms / max(1, int(s.loc[ph].steps or 1)), True) if ph == "decode"
                else (ph, 1e3 * s.loc[ph].wall_ms, False) for ph in stages]
    return {"profiled": profiled, "plain": all(ph in plain for ph in stages), "classes": [r[5] for r in rows]}


def _duration_us(phase: str, s, plain_ms: float | None = None) -> str:
    """A Stages Duration cell: µs per decode step, µs per call for the other stages (their steps summed)."""
    steps = max(1, int(s.get("steps", 1) or 1))
    per_step_ms = plain_ms if plain_ms else s.wall_ms / steps
    return f"{1e3 * per_step_ms:.0f} per step" if phase == "decode" else f"{1e3 * per_step_ms * steps:.0f}"


def contract_stage_rows(summary: pd.DataFrame, c: pd.DataFrame, opps: dict[str, pd.DataFrame],
                        manifest: Manifest | dict | None = None) -> list[list[str]]:
    """The contract's Stages rows, cells as written (the columns of CONTRACT_HEADER). The stage rows are
    read by tools: their values stay as the contract writes them in every language. Duration is in µs,
    per decode step and per call for the other stages: the plain (unprofiled) run's time where the capture
    timed it (`manifest`'s `plain_phases`), else the profiled pass's."""
    plain = plain_ms_per_step(manifest or {})
    rows = []
    for _, s in summary.iterrows():
        if s.phase == "other":
            continue
        pc = c[c.phase == s.phase]
        per = _duration_us(s.phase, s, plain.get(s.phase))
        if len(pc):
            # TC%: tensor pipe active (% of peak), time-weighted over every profiled kernel of the stage (a kernel with
            # no tensor work counts 0 %): the stage's tensor-core utilisation while its profiled kernels run
            tp = pc.tensor_pipe_pct if "tensor_pipe_pct" in pc else pd.Series(np.nan, index=pc.index)
            tc = weighted_mean(tp.fillna(0.0), pc.share) if tp.notna().any() else np.nan
            dram = weighted_mean(pc.dram_pct, pc.share)
            occ = weighted_mean(pc.achieved_occupancy_pct, pc.share)
            bott, _ = dominant_class(pc)
            nums = [f"{tc:.0f}" if tc == tc else "—", f"{dram:.0f}", f"{occ:.0f}"]
        else:
            bott, nums = "not profiled", ["—", "—", "—"]
        o = opps.get(s.phase)
        issue = o.iloc[0].opportunity if o is not None and len(o) else "—"
        rows.append([s.phase, per, *nums, bott, issue])
    return rows


@dataclass(frozen=True)
class Section:
    """One phase's block of the contract (`narrate.classify.contract_sections` writes it): the class that holds most
    of its profiled kernel time (`bottleneck`) and its share of that time (`pct`, %); the step's wall and GPU-busy ms
    on `basis` (`wall_basis`: the plain run's step where the capture timed it) and its GPU-idle share (`idle_pct`,
    %); the idle share of the profiled step (`profiled_idle_pct`, %); `timed`: the wall is the plain run's or
    corrected for the profiler's overhead, not the profiled step's; `top`: its three largest opportunities
    (`opportunities`)."""
    phase: str
    bottleneck: str
    pct: float
    wall: float
    busy: float
    basis: str
    idle_pct: float
    profiled_idle_pct: float
    timed: bool
    top: pd.DataFrame
    # where the bottleneck is compute-bound: the share of its time (%) in kernels without tensor-core work
    # (`issue_bound`), and their categories by time
    issue_pct: float = 0.0
    issue_categories: tuple = ()


def sections(summary: pd.DataFrame, c: pd.DataFrame, opps: dict[str, pd.DataFrame],
             manifest: Manifest | dict | None = None) -> list[Section]:
    """The contract's per-phase sections, one per phase of `opps` (those with profiled kernels). Idle shares and
    gains are on `wall_basis`'s basis: the plain run's step where `manifest` timed it."""
    info = read_manifest(manifest or {})
    plain = info.plain_ms_per_step()
    ratio = info.timeline_info.overhead_ratio
    out = []
    for ph, o in opps.items():
        s = summary.set_index("phase").loc[ph]
        f = lead(c[c.phase == ph])  # opps holds only phases with profiled kernels
        wall, busy, basis = wall_basis(s, ratio, plain.get(ph), info.run_id or "", ph)
        out.append(Section(ph, f["class"], f["pct"], wall, busy, basis,
                           idle_pct=100 * max(0.0, 1 - busy / wall) if wall else float("nan"),
                           profiled_idle_pct=100 * (1 - s.gpu_busy_ms / s.wall_ms),
                           timed=bool(plain.get(ph) or ratio), top=o.head(3), issue_pct=f["issue_pct"],
                           issue_categories=f["issue_categories"]))
    return out


def all_opportunities(run, summary: pd.DataFrame, c: pd.DataFrame, roofs) -> dict[str, pd.DataFrame]:
    """Ranked opportunities for every phase that has profiled kernels."""
    from .timeline import category_shares

    shares = category_shares(run.timeline)
    ratio = run.info.timeline_info.overhead_ratio
    plain = run.info.plain_ms_per_step()
    out = {}
    for ph in c.phase.unique():
        if ph not in set(summary.phase):
            continue
        sh = shares[shares.phase == ph].set_index("category").pct / 100
        gaps = graph_replay_gaps(run.timeline, ph) if ph == "decode" and run.info.workload.graph_decode else None
        out[ph] = opportunities(ph, summary.set_index("phase").loc[ph], c, sh, roofs, ratio, plain.get(ph), gaps,
                                run.run_id)
    return out


def classified(run, rules: Rules = Rules()) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """(classes of every profiled kernel, ranked opportunities per phase) of a run, as chapter 05 computes them
    for its own run: its twin's (the eager run's or the deployed run's, `load.twins`) the same way."""
    from . import roofline as R
    from . import ncu_report as N
    from .timeline import phase_summary

    k = R.profiled_kernels(run)
    dev, _, roofs = R.for_run(run, k)
    c = classify(k, dev.ridge("bf16"), rules, N.in_loop_l2(N.fidelity(run.ncu_kernels(), run.timeline, run.manifest)))
    return c, all_opportunities(run, phase_summary(run.timeline, run.phases), c, roofs)


def wave_figures(w: pd.DataFrame, sm_count: int) -> dict:
    """What the wave table (`wave_table`) says (`narrate.classify.wave_prose`): the kernels that launch less than
    one wave (`under`) of all (`n`) and their share of profiled time (`pct`, %), the SM count (`sms`), the kernels
    under 4 × SMs blocks (`small`; `blocks` = 4 × SMs) and the time-weighted tail efficiency (`tail`, %)."""
    under = w[w.waves < 1]
    small = w[~w.meets_4x_sms]
    return {"under": len(under), "n": len(w), "pct": 100 * under.share.sum() / w.share.sum(), "sms": sm_count,
            "small": len(small), "blocks": 4 * sm_count, "tail": weighted_mean(w.tail_efficiency_pct, w.share)}


def tile_figures(t: pd.DataFrame, rules: Rules) -> dict | None:
    """What the decoded tiles (`tile_table`) say (`narrate.classify.tile_prose`); None when no GEMM/GEMV kernel name
    carries its tile. The tiled kernels (`n`), their tile intensity's range (`lo`, `hi`, FLOP/B) and its highest %
    of the ridge (`pct`; `below`: every tile under the ridge), the % whose stage buffers fit the launch's shared
    memory (`fit`), a stage's cycles (`c_lo`, `c_hi`), the latency covered (`latency`, cycles), the ranges of S_min
    (`s_lo`, `s_hi`), of the stages used (`st_lo`, `st_hi`) and of the blocks per SM registers allow (`r_lo`, `r_hi`),
    and the kernels with fewer stages than S_min (`short`)."""
    if t.empty:
        return None
    stage = np.maximum(t.t_tile_cycles, t.t_load_cycles)
    return {"n": len(t), "lo": t.tile_intensity.min(), "hi": t.tile_intensity.max(), "pct": 100 * t.tile_vs_ridge.max(),
            "below": t.tile_vs_ridge.max() < 1, "fit": (t.smem_stages_bytes <= t.smem_launch_bytes).mean() * 100,
            "c_lo": stage.min(), "c_hi": stage.max(), "latency": rules.mem_latency_cycles, "s_lo": t.s_min.min(),
            "s_hi": t.s_min.max(), "st_lo": t.stages.min(), "st_hi": t.stages.max(), "r_lo": t.regs_fit_blocks.min(),
            "r_hi": t.regs_fit_blocks.max(), "short": len(t[~t.stages_ok])}


def phase_first(c: pd.DataFrame, phase: str) -> pd.DataFrame:
    """Every classified kernel, those of `phase` first (the explorer's order: every profiled kernel has a card,
    which kernel ids in any chapter's table link to)."""
    return pd.concat([c[c.phase == phase], c[c.phase != phase]])


def kernel_cards(cp: pd.DataFrame, pts: pd.DataFrame, why: dict[str, pd.DataFrame] | None = None) -> dict[str, dict]:
    """Per kernel: the tables the explorer shows (metrics, roofline points, name, class and reason) and,
    given `why` (kernel_id → table, `why.kernel_why`), why it is slow: stalls, occupancy, clock, NVIDIA's rules.
    Phases in the order `cp` holds them (the chapter's phase first), each phase's kernels by time share. Labels,
    units and the class are English phrases (`narrate.classify.kernel_cards` shows them in the reader's language)."""
    cards = {}
    order = {p: i for i, p in enumerate(pd.unique(cp.phase))} if "phase" in cp else {}
    ranked = cp.assign(_order=cp.phase.map(order)) if order else cp.assign(_order=0)
    for _, k in ranked.sort_values(["_order", "share"], ascending=[True, False], kind="stable").iterrows():
        names = pd.Index([phrase("duration"), phrase("time share"), phrase("SM throughput"), phrase("DRAM throughput"),
                          phrase("memory throughput"), phrase("L1 hit"), phrase("L2 hit"), phrase("achieved occupancy"),
                          phrase("waves per SM"), phrase("registers"), phrase("FLOPs (tensor + CUDA core)"),
                          phrase("DRAM bytes")], dtype=object)
        metrics = pd.DataFrame({"value": [k.duration_ns / 1e3, 100 * k.share, k.sm_pct, k.dram_pct, k.memory_pct,
                                          k.l1_hit_pct, k.l2_hit_pct, k.achieved_occupancy_pct, k.waves_per_sm,
                                          k.registers, k.flops, k.dram_bytes],
                                "unit": phrase_column(["µs", phrase("% of phase kernel time"), phrase("% of peak"),
                                                       phrase("% of peak"), phrase("% of peak"), "%", "%", "%",
                                                       phrase("waves"), phrase("registers/thread"), "FLOP", "bytes"],
                                                      names)},
                               index=names).rename_axis("metric")
        p = pts[pts.kernel_id == k.kernel_id][["level", "intensity", "flops_per_s", "roof_flops_per_s",
                                                "pct_of_roof", "bound"]]
        cards[f"{k.kernel_id} {k.friendly_name}"] = {
            "kernel_id": k.kernel_id, "class": phrase("{cls}: {reason}", cls=class_phrase(k["class"]),
                                                      reason=k.reason),
            "name": k["name"], "metrics": metrics, "roofline": p,
            "why": (why or {}).get(k.kernel_id)}
    return cards


def report_inputs(run_dir, rules: Rules = Rules()) -> tuple | None:
    """What `report.md`, the profiler output contract for a run (`narrate.classify.report_for_run`), is written
    from: (the run, its phase summary, its classified kernels, the ranked opportunities per phase); None when it has
    no profiled kernels."""
    from ..load.run import load_run
    from .roofline import for_run, profiled_kernels
    from .timeline import phase_summary

    run = load_run(run_dir)
    k = profiled_kernels(run)
    if k.empty or not (k.status == "profiled").any():
        return None
    dev, _, roofs = for_run(run, k)  # the device and roofs chapters 04-07 use
    c = classify(k, dev.ridge("bf16"), rules)
    summary = phase_summary(run.timeline, run.phases)
    return run, summary, c, all_opportunities(run, summary, c, roofs)
