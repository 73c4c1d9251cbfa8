"""Chapter 05's analysis: bottleneck classes, per-class metrics, metric health, wave quantization,
tile analysis, and the top optimization opportunities per phase (the profiler output contract).

Rules follow the profiling skill seed: memory % high and compute % low → memory-bound; compute % high
and memory % low → compute-bound; both low → latency-bound; otherwise balanced; L2 hit below its
threshold adds a locality flag. "Compute %" is ncu's SM throughput (the max over SM pipes, tensor
included) and "memory %" its memory throughput (the max over DRAM, L2 and L1), both % of peak.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .histograms import weighted_mean

MAX_WARPS_PER_SM = {"hopper": 64, "ampere": 64, "ada": 48, "blackwell": 64}
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class Rules:
    high_pct: float = 60.0      # a throughput at or above this is "high"
    low_pct: float = 30.0       # below this is "low"
    l2_hit_min_pct: float = 80.0
    mem_latency_cycles: float = 800.0  # global-memory latency assumed for S_min and Little's law


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


def classify(kernels: pd.DataFrame, ridge_flop_per_byte: float, rules: Rules = Rules()) -> pd.DataFrame:
    """One row per profiled kernel: class, roofline side (DRAM intensity vs the ridge), locality flag,
    and the reason in words with the numbers that triggered it."""
    k = kernels[kernels.status == "profiled"].copy()
    k["class"] = [classify_row(s, m, rules) for s, m in zip(k.sm_pct, k.memory_pct)]
    k["roofline_side"] = np.where(k.flops > 0, np.where(k.intensity_dram < ridge_flop_per_byte, "memory", "compute"),
                                  "no FLOPs")
    k["locality_issue"] = k.l2_hit_pct < rules.l2_hit_min_pct
    k["reason"] = [
        f"SM {s:.0f} %, memory {m:.0f} % (high ≥ {rules.high_pct:.0f}, low < {rules.low_pct:.0f})"
        + (f"; L2 hit {h:.0f} % < {rules.l2_hit_min_pct:.0f} %" if h < rules.l2_hit_min_pct else "")
        for s, m, h in zip(k.sm_pct, k.memory_pct, k.l2_hit_pct)]
    return k


CLASS_METRICS = {"SM throughput %": "sm_pct", "DRAM throughput %": "dram_pct", "memory throughput %": "memory_pct",
                 "achieved occupancy %": "achieved_occupancy_pct", "L1 hit %": "l1_hit_pct",
                 "L2 hit %": "l2_hit_pct", "mean duration µs": "duration_us"}


def class_counts(c: pd.DataFrame) -> pd.DataFrame:
    g = c.groupby("class").agg(kernels=("kernel_id", "size"), time_share=("share", "sum"))
    g["pct_of_profiled"] = 100 * g.kernels / g.kernels.sum()
    g["pct_of_profiled_time"] = 100 * g.time_share / g.time_share.sum()
    return g.drop(columns="time_share").sort_values("kernels", ascending=False).reset_index()


def class_table(c: pd.DataFrame, weighted: bool) -> pd.DataFrame:
    """The reference report's per-class table: rows are metrics, columns are classes + overall.
    `weighted`: means weighted by each kernel's share of phase kernel time (else plain means)."""
    cols = {}
    for name, grp in list(c.groupby("class")) + [("overall", c)]:
        w = grp.share if weighted else pd.Series(1.0, index=grp.index)
        cols[name] = {label: weighted_mean(grp[col], w) for label, col in CLASS_METRICS.items()}
    return pd.DataFrame(cols).rename_axis("metric")


def dominant_class(cp: pd.DataFrame) -> tuple[str, float]:
    """The class holding the most profiled time, and its fraction of that time."""
    t = cp.groupby("class").share.sum()
    return str(t.idxmax()), float(t.max() / t.sum())


HEALTH = {  # label: (column, healthy test)
    "tensor util > 60 %": ("sm_pct", lambda v: v > 60),
    "DRAM > 70 %": ("dram_pct", lambda v: v > 70),
    "achieved occupancy > 25 %": ("achieved_occupancy_pct", lambda v: v > 25),
    "L2 hit > 80 %": ("l2_hit_pct", lambda v: v > 80),
    "spilling = 0 B": ("spill_bytes", lambda v: v == 0),
    "waves per SM > 1": ("waves_per_sm", lambda v: v > 1),
}


def health(c: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: each health metric's value and whether it is healthy (the skill seed's table).
    Tensor utilisation applies only to kernels that issue tensor FLOPs."""
    out = c[["kernel_id", "friendly_name"]].copy()
    for label, (col, ok) in HEALTH.items():
        v = c[col].astype(float)
        if label.startswith("tensor"):
            v = v.where(c.flops_tensor > 0)
        out[label] = v
        out[f"{label} ok"] = v.map(lambda x, ok=ok: bool(ok(x)) if x == x else None)
    return out.reset_index(drop=True)


def health_styled(h: pd.DataFrame):
    """Health values with unhealthy cells highlighted (a pandas Styler, rendered in the HTML)."""
    labels = list(HEALTH)
    show = h[["kernel_id", "friendly_name"] + labels]

    def colour(col):
        okc = h[f"{col.name} ok"] if f"{col.name} ok" in h else None
        if okc is None:
            return [""] * len(col)
        return ["background-color: #f8d0cc" if o is False else ("color: #999" if o is None else "") for o in okc]

    return show.style.apply(colour, subset=labels).format(precision=1, na_rep="n/a")


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
    vs the SM's file; S_min = ceil(latency / T_tile) + 1 with T_tile = tile FLOPs ÷ per-SM tensor
    FLOP/cycle; stages decoded vs S_min."""
    rows = []
    per_sm_cycle = device.peak_flops("bf16") / (device.sm_count * device.sm_clock_max_mhz * 1e6)
    ridge = device.ridge("bf16")
    for _, k in c[c.category.isin(["GEMM", "GEMV"])].iterrows():
        t = decode_tile(k["name"])
        if not t:
            continue
        bm, bn, bk, st = t["BM"], t["BN"], t["BK"], t["stages"]
        flops_tile = 2 * bm * bn * bk
        t_tile = flops_tile / per_sm_cycle
        s_min = math.ceil(rules.mem_latency_cycles / t_tile) + 1
        smem_need = st * (bm + bn) * bk * dtype_bytes
        rows.append({"kernel_id": k.kernel_id, "friendly_name": k.friendly_name, **t,
                     "tile_intensity": bm * bn / (bm + bn) * (2 / dtype_bytes), "ridge": ridge,
                     "tile_vs_ridge": bm * bn / (bm + bn) * (2 / dtype_bytes) / ridge,
                     "smem_stages_bytes": smem_need, "smem_launch_bytes": k.shared_bytes_per_block,
                     "regs_per_block": k.registers * k.block_size,
                     "regs_fit_blocks": REGISTERS_PER_SM // max(1, int(k.registers * k.block_size)),
                     "t_tile_cycles": t_tile, "s_min": s_min, "stages_ok": st >= s_min, "share": k.share})
    return pd.DataFrame(rows)


def littles_law(c: pd.DataFrame, device, rules: Rules = Rules(), family: str = "hopper") -> pd.DataFrame:
    """For memory-bound kernels: bytes in flight per SM needed to reach the DRAM roof (Little's law,
    bandwidth per SM × latency) vs achieved (measured DRAM bytes/s × latency) vs what resident warps
    supply with one 16-byte load per thread outstanding."""
    lat_s = rules.mem_latency_cycles / (device.sm_clock_max_mhz * 1e6)
    need = device.dram_bytes_per_s / device.sm_count * lat_s
    mb = c[c["class"] == "memory-bound"]
    out = pd.DataFrame({
        "kernel_id": mb.kernel_id, "friendly_name": mb.friendly_name,
        "needed_bytes_per_sm": need,
        "achieved_bytes_per_sm": mb.dram_bytes_per_s / device.sm_count * lat_s,
        "warp_supply_bytes_per_sm": mb.achieved_occupancy_pct / 100 * MAX_WARPS_PER_SM[family] * 32 * 16,
    })
    out["achieved_vs_needed_pct"] = 100 * out.achieved_bytes_per_sm / need
    return out.reset_index(drop=True)


def opportunities(phase: str, summary_row, c: pd.DataFrame, timeline_share: pd.Series, roofs,
                  overhead_ratio: float | None = None) -> pd.DataFrame:
    """Candidates for one phase, ranked by estimated gain (% of the phase's wall time):
    - launch overhead: the GPU-idle share of the phase (what CUDA graphs / fewer launches can recover);
    - per category of profiled kernels: time above the kernel's roof, i.e. duration − max(FLOPs ÷ compute
      roof, bytes ÷ bandwidth at each level), scaled to the category's share of the phase's kernel time.
    Gains are upper bounds: they assume the roof is reachable and nothing else moves."""
    rows = []
    # the timeline was captured under the profiler, which stretches host-side gaps: rescale the wall
    # time by the capture's profiled ÷ plain ratio so the idle share is that of the plain run
    wall = summary_row.wall_ms / (overhead_ratio or 1.0)
    busy_frac = min(1.0, summary_row.gpu_busy_ms / wall) if wall else 0.0
    idle = 1 - busy_frac
    if idle > 0:
        note = f" (profiled wall ÷ {overhead_ratio:.2f} profiler overhead)" if overhead_ratio else ""
        rows.append({"opportunity": "Cut launch overhead: CUDA graphs / fused decode step",
                     "gain_pct": 100 * idle,
                     "trigger": f"GPU idle={100 * idle:.0f} % of wall{note}, "
                                f"launches/step={summary_row.get('launches_per_step', float('nan')):.0f}"})
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
            rows.append({"opportunity": f"Bring {cat} kernels to their roof ({_hint(cat, grp)})",
                         "gain_pct": gain,
                         "trigger": f"{cat} {100 * cat_share:.0f} % of kernel time at "
                                    f"{100 * (1 - f):.0f} % of roof (time-weighted); e.g. {top.friendly_name}: "
                                    f"SM={top.sm_pct:.0f} %, DRAM={top.dram_pct:.0f} %, occupancy={top.achieved_occupancy_pct:.0f} %"})
    return pd.DataFrame(rows).sort_values("gain_pct", ascending=False).reset_index(drop=True)


def _hint(cat: str, grp: pd.DataFrame) -> str:
    if cat in ("GEMV", "GEMM") and (grp.intensity_dram.fillna(0) > 0).any():
        return "fuse projections / batch tokens so weights are read once for more work"
    if cat in ("elementwise", "copy/cast", "reduction/norm"):
        return "fuse the chain into neighbouring kernels"
    if cat == "gather/index":
        return "fuse indexing into the consumer kernel"
    if cat == "attention":
        return "decode-specialised attention (split-KV)"
    return "specialise the kernel for this shape"


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


def contract_markdown(run, summary: pd.DataFrame, c: pd.DataFrame, opps: dict[str, pd.DataFrame]) -> str:
    """The skill seed's profiler output contract, one block for the run, stages = phases."""
    m = run.manifest
    info = m.get("timeline_info", {})
    p = m.get("params", {})
    lines = [f"Profile: {p.get('model', '?')} [{run.run_id}]", "",
             "## Configuration", "", "| b | s | t | dtype |", "|---|---|---|---|",
             f"| {p.get('batch_size', '?')} | {info.get('inputs', {}).get('prompt_tokens', '?')} | "
             f"{p.get('max_new_tokens', '?')} | {p.get('dtype', 'bfloat16')} |", "",
             "## Stages", "", "| Stage | Duration (us) | TC% | DRAM% | Occ% | Bottleneck | Key Issue |",
             "|---|---|---|---|---|---|---|"]
    for _, s in summary.iterrows():
        if s.phase == "other":
            continue
        pc = c[c.phase == s.phase]
        per = f"{1e3 * s.wall_ms / max(1, s.get('steps', 1)):.0f} per step" if s.phase == "decode" else f"{1e3 * s.wall_ms:.0f}"
        if len(pc):
            tc = weighted_mean(pc.sm_pct.where(pc.flops_tensor > 0), pc.share)
            dram = weighted_mean(pc.dram_pct, pc.share)
            occ = weighted_mean(pc.achieved_occupancy_pct, pc.share)
            bott, _ = dominant_class(pc)
            nums = f"{tc:.0f} | {dram:.0f} | {occ:.0f}"
        else:
            bott, nums = "not profiled", "— | — | —"
        o = opps.get(s.phase)
        issue = o.iloc[0].opportunity if o is not None and len(o) else "—"
        lines.append(f"| {s.phase} | {per} | {nums} | {bott} | {issue} |")
    lines.append("")
    for ph, o in opps.items():
        s = summary.set_index("phase").loc[ph]
        pc = c[c.phase == ph]
        bott, frac = dominant_class(pc)  # opps holds only phases with profiled kernels
        idle = 100 * (1 - s.gpu_busy_ms / s.wall_ms)
        lines += [f"## {ph}", "", f"Bottleneck: {bott.capitalize()}", "",
                  f"Root cause: the GPU is idle {idle:.0f} % of {ph} wall time between kernels (measured under the "
                  f"profiler), and the kernels that run are mostly {bott} ({100 * frac:.0f} % of profiled time).", "",
                  "Top 3 Opportunities (ranked by estimated impact)", ""]
        for _, r in o.head(3).iterrows():
            lines.append(f"- {r.opportunity} — est. {r.gain_pct:.0f}% gain — trigger: {r.trigger}")
        lines.append("")
    return "\n".join(lines)


def all_opportunities(run, summary: pd.DataFrame, c: pd.DataFrame, roofs) -> dict[str, pd.DataFrame]:
    """Ranked opportunities for every phase that has profiled kernels."""
    from .timeline import category_shares

    shares = category_shares(run.timeline)
    ratio = run.manifest.get("timeline_info", {}).get("overhead_ratio")
    out = {}
    for ph in c.phase.unique():
        if ph not in set(summary.phase):
            continue
        sh = shares[shares.phase == ph].set_index("category").pct / 100
        out[ph] = opportunities(ph, summary.set_index("phase").loc[ph], c, sh, roofs, ratio)
    return out


def headline(cp: pd.DataFrame, opps: pd.DataFrame | None, phase: str) -> str:
    top, frac = dominant_class(cp)
    first = "" if opps is None or not len(opps) else (f"; first to try: {opps.iloc[0].opportunity.split(':')[0].lower()} "
                                                       f"(est. ≤ {opps.iloc[0].gain_pct:.0f} % of {phase} wall time)")
    return (f"{phase}: {100 * frac:.0f} % of profiled kernel time is {top} "
            f"({(cp['class'] == top).sum()} of {len(cp)} kernels){first}")


def class_prose(cp: pd.DataFrame, rules: Rules, ridge: float, phase: str, cache_control: str) -> str:
    t = cp.groupby("class").share.sum() / cp.share.sum()
    parts = [", ".join(f"**{cls}** {100 * v:.0f} % of profiled time ({(cp['class'] == cls).sum()} kernels)"
                       for cls, v in t.sort_values(ascending=False).items()) + "."]
    disagree = cp[(cp["class"] == "compute-bound") & (cp.roofline_side == "memory")]
    lat = cp[cp["class"] == "latency-bound"]
    if len(lat):
        parts.append(f"The latency-bound kernels run a median {lat.duration_ns.median() / 1e3:.1f} µs with "
                     f"{lat.grid_size.median():.0f} blocks on {int(lat.waves_per_sm.median() * 100)} % of one wave: "
                     "too little work per launch to load either the SMs or the memory system — fusing them into "
                     "their neighbours, not tuning them, is what removes their time.")
    warm = cp[cp.category.isin(["GEMV", "GEMM"]) & (cp["class"] != "memory-bound") & (cp.dram_pct < 5)]
    if len(warm) and cache_control == "none":
        parts.append(f"{len(warm)} of the GEMV/GEMM kernels are not memory-bound by these counters (DRAM "
                     f"{warm.dram_pct.max():.1f} % at most) even though a batch-1 decode GEMV streams its weights once: "
                     "under ncu replay with cache control `none` their weight slices stay in L2, so the counters "
                     "show the L2-resident case. In the decode loop the weights come from DRAM every token.")
    parts.append(f"Roofline check: a kernel with FLOPs is on the memory side when its DRAM intensity is below the "
                 f"bf16 ridge ({ridge:.0f} FLOP/B). "
                 + (f"{len(disagree)} compute-bound kernel(s) sit on the memory side." if len(disagree)
                    else "No kernel's class contradicts its roofline side in a way that matters (compute-bound "
                         "on the memory side)."))
    loc = cp[cp.locality_issue]
    parts.append(f"{len(loc)} kernels ({100 * loc.share.sum() / cp.share.sum():.0f} % of profiled time) have an L2 "
                 f"hit rate below {rules.l2_hit_min_pct:.0f} %.")
    return "\n\n".join(parts)


def wave_prose(w: pd.DataFrame, sm_count: int) -> str:
    under = w[w.waves < 1]
    small = w[~w.meets_4x_sms]
    tw = weighted_mean(w.tail_efficiency_pct, w.share)
    return (f"{len(under)} of {len(w)} kernels launch less than one wave ({100 * under.share.sum() / w.share.sum():.0f} % "
            f"of profiled time): part of the {sm_count} SMs sits idle for the whole kernel. {len(small)} launch fewer "
            f"than 4 × {sm_count} = {4 * sm_count} blocks. Time-weighted tail efficiency is {tw:.0f} %.")


def tile_prose(t: pd.DataFrame, rules: Rules) -> str:
    if t.empty:
        return "No GEMM/GEMV kernel name carries its tile shape."
    fit = (t.smem_stages_bytes <= t.smem_launch_bytes).mean() * 100
    short = t[~t.stages_ok]
    below = t.tile_vs_ridge.max() < 1
    return (f"{len(t)} GEMM/GEMV kernels decode to tiles; their tile intensity is "
            f"{t.tile_intensity.min():.1f}–{t.tile_intensity.max():.1f} FLOP/B, {100 * t.tile_vs_ridge.max():.0f} % of "
            f"the ridge at most" + (": below the ridge, so the tile shape alone keeps them memory-side. " if below else ". ")
            + f"The decoded stages' A+B buffers fit in the launch's shared memory for {fit:.0f} % of them "
            f"(a check that the name was decoded right). Each tile computes for "
            f"{t.t_tile_cycles.min():.0f}–{t.t_tile_cycles.max():.0f} cycles, so covering {rules.mem_latency_cycles:.0f} "
            f"cycles of latency needs S_min = {t.s_min.min()}–{t.s_min.max()} tiles in flight; the kernels use "
            f"{t.stages.min()}–{t.stages.max()} stages, and registers allow {t.regs_fit_blocks.min()}–"
            f"{t.regs_fit_blocks.max()} block(s) per SM. "
            + (f"{len(short)} of {len(t)} have fewer stages than S_min: latency, not bandwidth, bounds them."
               if len(short) else "All have at least S_min stages."))


def kernel_cards(cp: pd.DataFrame, pts: pd.DataFrame) -> dict[str, dict]:
    """Per kernel: the tables the explorer shows (metrics, roofline points, name, class and reason)."""
    cards = {}
    for _, k in cp.sort_values("share", ascending=False).iterrows():
        metrics = pd.DataFrame({"value": [k.duration_ns / 1e3, 100 * k.share, k.sm_pct, k.dram_pct, k.memory_pct,
                                          k.l1_hit_pct, k.l2_hit_pct, k.achieved_occupancy_pct, k.waves_per_sm,
                                          k.registers, k.flops, k.dram_bytes],
                                "unit": ["µs", "% of phase kernel time", "% of peak", "% of peak", "% of peak", "%",
                                         "%", "%", "waves", "registers/thread", "FLOP", "bytes"]},
                               index=["duration", "time share", "SM throughput", "DRAM throughput",
                                      "memory throughput", "L1 hit", "L2 hit", "achieved occupancy", "waves per SM",
                                      "registers", "FLOPs (tensor + CUDA core)", "DRAM bytes"]).rename_axis("metric")
        p = pts[pts.kernel_id == k.kernel_id][["level", "intensity", "flops_per_s", "roof_flops_per_s",
                                                "pct_of_roof", "bound"]]
        cards[f"{k.kernel_id} {k.friendly_name}"] = {
            "class": f"{k['class']}: {k.reason}", "name": k["name"], "metrics": metrics, "roofline": p}
    return cards


def report_for_run(run_dir, rules: Rules = Rules()) -> str | None:
    """`report.md`: the profiler output contract for a run, or None when it has no profiled kernels."""
    from ..devices import lookup
    from ..load.run import load_run
    from .roofline import profiled_kernels, roofs as make_roofs
    from .timeline import phase_summary

    run = load_run(run_dir)
    k = profiled_kernels(run)
    if k.empty or not (k.status == "profiled").any():
        return None
    dev = lookup(run.manifest["device"])
    roofs = make_roofs(dev, run.manifest, k, run.ncu_metrics())
    c = classify(k, dev.ridge("bf16"), rules)
    summary = phase_summary(run.timeline, run.phases)
    return contract_markdown(run, summary, c, all_opportunities(run, summary, c, roofs)) + "\n"
