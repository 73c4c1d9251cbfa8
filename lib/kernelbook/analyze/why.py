"""Why a kernel is slow, read from counters the ncu tables already hold: where its warps stall, what
caps its occupancy, the SM clock it ran at, and NVIDIA's own rule verdicts beside the book's class.

Inputs are the run's long metric table (`result_id`, `metric`, `unit`, `value`), chapter 05's classified
kernels (`classify.classify`: `kernel_id`, `friendly_name`, `class`, `share`, `result_id`, ...) and, for
the rules, `ncu/results.parquet`. Everything returns DataFrames with units in the column names.

Warp stalls: ncu's `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` is the number of
cycles a warp spends stalled on <reason> per instruction issued (NVIDIA's CPIStall rule words it so:
"each warp spends 4.7 cycles being stalled waiting for ... L1TEX"). A reason's share is its cycles over
the sum of all reasons but `selected` (the cycle in which the warp issues: not a stall). Stalls cost time
only when the scheduler has no other warp to issue; a kernel that issues on most cycles hides them.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ..escape import md
from ..i18n import N_, text, tr
from .histograms import weighted_mean

STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$")
NOT_A_STALL = "selected"

# reason (the metric's middle) → how a reader names it: what the warp waits on, so the fix can be read off
STALLS = {
    "long_scoreboard": N_("long scoreboard: waiting on global/local memory loads (L1TEX)"),
    "short_scoreboard": N_("short scoreboard: waiting on shared memory or special-math results (MIO)"),
    "wait": N_("wait: fixed latency between dependent instructions"),
    "math_pipe_throttle": N_("math pipe throttle: the math pipe it needs is busy"),
    "mio_throttle": N_("MIO throttle: shared-memory / special-instruction queue full"),
    "lg_throttle": N_("LG throttle: global/local memory instruction queue full"),
    "tex_throttle": N_("TEX throttle: texture / L1TEX queue full"),
    "barrier": N_("barrier: waiting for the block's other warps (__syncthreads)"),
    "membar": N_("memory barrier: waiting on a memory fence"),
    "branch_resolving": N_("branch resolving: waiting for a branch target"),
    "dispatch_stall": N_("dispatch stall: the picked instruction could not be dispatched"),
    "drain": N_("drain: waiting at exit for its stores to drain"),
    "gmma": N_("GMMA: waiting on a warpgroup matrix multiply (wgmma)"),
    "imc_miss": N_("IMC miss: immediate-constant cache miss"),
    "no_instruction": N_("no instruction: instruction cache miss or fetch after a jump"),
    "not_selected": N_("not selected: ready, but another warp issued"),
    "sleeping": N_("sleeping: warp put to sleep (nanosleep / yield)"),
    "misc": N_("misc: other reasons"),
    "selected": N_("selected: issuing (not a stall)"),
}

OCCUPANCY_LIMITS = {  # ncu's resident-blocks-per-SM limit → what a reader calls it
    "launch__occupancy_limit_registers": N_("registers"),
    "launch__occupancy_limit_shared_mem": N_("shared memory"),
    "launch__occupancy_limit_blocks": N_("blocks per SM"),
    "launch__occupancy_limit_warps": N_("warps"),
    "launch__occupancy_limit_barriers": N_("barriers"),
}

SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
GPC_CLOCK = "gpc__cycles_elapsed.avg.per_second"
DURATION = "gpu__time_duration.sum"


def stall_label(reason: str) -> str:
    """A stall reason as a catalog key (English); unknown reasons keep ncu's name with spaces."""
    return STALLS.get(reason, reason.replace("_", " "))


def stalls(metrics: pd.DataFrame) -> pd.DataFrame:
    """Long table, one row per result and stall reason: `result_id`, `reason` (ncu's name), `stall` (the
    reader's words, a catalog key), `cycles_per_instruction` (cycles a warp spends stalled on it per issued
    instruction) and `stall_share_pct` (% of the result's stall cycles; `selected` is not a stall and has none)."""
    m = metrics[metrics.metric.str.match(STALL_METRIC.pattern)]
    if m.empty:
        return pd.DataFrame(columns=["result_id", "reason", "stall", "cycles_per_instruction", "stall_share_pct"])
    out = pd.DataFrame({"result_id": m.result_id.astype(int).values,
                        "reason": m.metric.str.extract(STALL_METRIC.pattern, expand=False).values,
                        "cycles_per_instruction": m.value.astype(float).values})
    out = out.groupby(["result_id", "reason"], as_index=False).cycles_per_instruction.first()
    stalled = out.cycles_per_instruction.where(out.reason != NOT_A_STALL)
    total = stalled.groupby(out.result_id).transform("sum")
    out["stall_share_pct"] = (100 * stalled / total.where(total > 0))
    out.insert(2, "stall", out.reason.map(stall_label))
    return out


def top_stalls(c: pd.DataFrame, metrics: pd.DataFrame, n: int = 3) -> pd.DataFrame:
    """Per classified kernel (rows of `c` with a `result_id`), its `n` largest stall reasons: `kernel_id`,
    `friendly_name`, `class`, `share` (of phase kernel time), `rank` (1 = largest), `stall`,
    `cycles_per_instruction`, `stall_share_pct`."""
    s = stalls(metrics)
    s = s[s.reason != NOT_A_STALL].dropna(subset=["stall_share_pct"])
    k = c.dropna(subset=["result_id"]).assign(result_id=lambda d: d.result_id.astype(int))
    j = k[["kernel_id", "friendly_name", "class", "share", "result_id"]].merge(s, on="result_id")
    j = j.sort_values(["share", "kernel_id", "stall_share_pct"], ascending=[False, True, False])
    j["rank"] = j.groupby("kernel_id").cumcount() + 1
    return j[j["rank"] <= n].drop(columns=["reason", "result_id"]).reset_index(drop=True)


def top_stalls_wide(top: pd.DataFrame) -> pd.DataFrame:
    """`top_stalls` as one row per kernel for reading: `stall_1`…`stall_n`, each 'reason — 62 %'."""
    rows = []
    for kid, g in top.groupby("kernel_id", sort=False):
        r = {"kernel_id": kid, "friendly_name": g.friendly_name.iloc[0], "class": g["class"].iloc[0],
             "share": g.share.iloc[0]}
        for _, x in g.iterrows():
            r[f"stall_{x['rank']}"] = tr("{stall} — {pct:.0f} %", stall=text(x.stall), pct=x.stall_share_pct)
        rows.append(r)
    return pd.DataFrame(rows)


def class_stalls(c: pd.DataFrame, metrics: pd.DataFrame, n: int = 3) -> pd.DataFrame:
    """Per bottleneck class, its `n` largest stall reasons weighted by time: each kernel's stall shares
    weighted by its share of phase kernel time. `class`, `kernels`, `rank`, `stall`, `stall_share_pct` (time-
    weighted % of the class's stall cycles)."""
    s = stalls(metrics)
    s = s[s.reason != NOT_A_STALL].dropna(subset=["stall_share_pct"])
    k = c.dropna(subset=["result_id"]).assign(result_id=lambda d: d.result_id.astype(int))
    j = k[["kernel_id", "class", "share", "result_id"]].merge(s, on="result_id")
    rows = []
    for cls, g in j.groupby("class"):
        w = g.drop_duplicates("kernel_id").set_index("kernel_id").share
        per = (g.assign(w=g.share * g.stall_share_pct).groupby("stall").w.sum() / w.sum()).sort_values(ascending=False)
        for i, (stall, v) in enumerate(per.head(n).items(), 1):
            rows.append({"class": cls, "kernels": len(w), "rank": i, "stall": stall, "stall_share_pct": v})
    return pd.DataFrame(rows)


def occupancy(c: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: resident blocks per SM each resource allows (ncu's `launch__occupancy_limit_*`), the
    `limiter` (the resource(s) with the fewest blocks: what caps occupancy), `blocks_per_sm`, theoretical and
    achieved occupancy (% of the SM's warp slots) and `occupancy_gap_pct` (theoretical − achieved: warps
    the launch allows but the SM did not keep resident, from a tail, imbalance or too few blocks).
    `limits_occupancy` is False where theoretical occupancy is already 100 %."""
    m = metrics[metrics.metric.isin(OCCUPANCY_LIMITS)]
    lim = m.pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")
    k = c.dropna(subset=["result_id"])
    rows = []
    for _, x in k.iterrows():
        rid = int(x.result_id)
        row = {"kernel_id": x.kernel_id, "friendly_name": x.friendly_name, "class": x["class"], "share": x.share}
        have = lim.loc[rid].dropna() if rid in lim.index else pd.Series(dtype=float)
        for metric, name in OCCUPANCY_LIMITS.items():
            row[f"{metric.rsplit('_limit_', 1)[1]}_blocks"] = have.get(metric, np.nan)
        if len(have):
            low = have.min()
            row["limiter"] = tr(", ").join(text(OCCUPANCY_LIMITS[mm]) for mm in OCCUPANCY_LIMITS if have.get(mm) == low)
            row["blocks_per_sm"] = low
        else:
            row["limiter"], row["blocks_per_sm"] = None, np.nan
        row["theoretical_occupancy_pct"] = x.theoretical_occupancy_pct
        row["achieved_occupancy_pct"] = x.achieved_occupancy_pct
        row["occupancy_gap_pct"] = x.theoretical_occupancy_pct - x.achieved_occupancy_pct
        row["limits_occupancy"] = bool(x.theoretical_occupancy_pct < 100)
        rows.append(row)
    return pd.DataFrame(rows)


def occupancy_prose(occ: pd.DataFrame) -> str:
    """Which resource caps occupancy, by share of profiled time, and the achieved-vs-theoretical gap."""
    if occ.empty or occ.limiter.isna().all():
        return tr("ncu recorded no occupancy limits for these kernels.")
    capped = occ[occ.limits_occupancy & occ.limiter.notna()]
    total = occ.share.sum()
    parts = [tr("{n} of {total} kernels ({pct:.0f} % of profiled time) cannot reach full occupancy by their launch "
                "alone.", n=len(capped), total=len(occ), pct=100 * capped.share.sum() / total)]
    if len(capped):
        by = capped.groupby("limiter").share.sum().sort_values(ascending=False)
        parts.append(tr("What caps them: {list}.", list=tr(", ").join(
            tr("{what} ({pct:.0f} % of profiled time)", what=w, pct=100 * v / total) for w, v in by.items())))
    gap = weighted_mean(occ.occupancy_gap_pct, occ.share)
    parts.append(tr("Achieved occupancy trails theoretical by {gap:.0f} points (time-weighted): warps the launch "
                    "allows that the SM did not keep resident, because the grid is smaller than the GPU or its last "
                    "wave runs part-empty.", gap=gap))
    return " ".join(parts)


def clocks(c: pd.DataFrame, metrics: pd.DataFrame, boost_mhz: float) -> pd.DataFrame:
    """Per kernel: `duration_us`, ncu's SM clock reading (`sm_clock_mhz`: SM cycles elapsed ÷ duration),
    the GPC clock reading (`gpc_clock_mhz`: the clock domain of the SMs, counted by the GPC units), the
    device's maximum SM clock (`boost_mhz`), `sm_vs_boost_pct` (reading ÷ maximum) and
    `sm_minus_gpc_cycles` (how many cycles more the SM count holds than the GPC count over the kernel)."""
    w = _wide(metrics, [SM_CLOCK, GPC_CLOCK, DURATION])
    k = c.dropna(subset=["result_id"])
    rows = []
    for _, x in k.iterrows():
        r = w.loc[int(x.result_id)] if int(x.result_id) in w.index else pd.Series(dtype=float)
        sm, gpc, dur = r.get(SM_CLOCK, np.nan), r.get(GPC_CLOCK, np.nan), r.get(DURATION, np.nan)
        rows.append({"kernel_id": x.kernel_id, "friendly_name": x.friendly_name, "duration_us": dur / 1e3,
                     "sm_clock_mhz": sm / 1e6, "gpc_clock_mhz": gpc / 1e6, "boost_mhz": boost_mhz,
                     "sm_vs_boost_pct": 100 * sm / 1e6 / boost_mhz, "sm_minus_gpc_cycles": (sm - gpc) * dur * 1e-9})
    return pd.DataFrame(rows)


# An SM clock reading within this fraction of the highest GPC clock reading (or of the device's maximum, whichever is
# higher) is the clock itself read by another counter: on the bundled H100 run long launches (up to 1.27 ms) read
# 1991–1995 MHz on both counters, 0.7 % over the devices table's 1980 MHz. Readings further above are counting error
# of short launches (a few hundred cycles over a few thousand).
CLOCK_SLACK = 0.005


def clock_summary(metrics: pd.DataFrame, boost_mhz: float) -> dict:
    """Every result of the run: the SM clock readings' range, how many exceed the device's maximum SM
    clock and how long those kernels last (`above`, `above_max_us`), the GPC clock readings' maximum, the SM − GPC
    cycle difference (median, range), and the readings beyond what any clock counter reached (`far`: more than
    `CLOCK_SLACK` above the highest GPC reading or the maximum, whichever is higher; `far_mhz` that level,
    `far_max_us` the longest of them). Clocks in MHz, durations in µs."""
    w = _wide(metrics, [SM_CLOCK, GPC_CLOCK, DURATION]).dropna(subset=[SM_CLOCK])
    sm = w[SM_CLOCK] / 1e6
    above = w[sm > boost_mhz]
    out = {"results": len(w), "sm_min_mhz": sm.min(), "sm_max_mhz": sm.max(), "above": len(above),
           "above_max_us": above[DURATION].max() / 1e3 if len(above) else np.nan, "boost_mhz": boost_mhz,
           "gpc_max_mhz": np.nan, "diff_median_cycles": np.nan, "diff_min_cycles": np.nan,
           "diff_max_cycles": np.nan, "shortest_us": w[DURATION].min() / 1e3, "slow": 0, "slow_min_mhz": np.nan}
    if GPC_CLOCK in w and w[GPC_CLOCK].notna().any():
        diff = (w[SM_CLOCK] - w[GPC_CLOCK]) * w[DURATION] * 1e-9
        slow = w[(w[GPC_CLOCK] < 0.95e6 * boost_mhz) & (w[SM_CLOCK] < 0.95e6 * boost_mhz)]
        out.update(gpc_max_mhz=w[GPC_CLOCK].max() / 1e6, diff_median_cycles=diff.median(),
                   diff_min_cycles=diff.min(), diff_max_cycles=diff.max(), slow=len(slow),
                   slow_min_mhz=slow[GPC_CLOCK].min() / 1e6 if len(slow) else np.nan)
    level = max(boost_mhz, out["gpc_max_mhz"] if out["gpc_max_mhz"] == out["gpc_max_mhz"] else boost_mhz)
    far = w[sm > level * (1 + CLOCK_SLACK)]
    out.update(far=len(far), far_mhz=level * (1 + CLOCK_SLACK),
               far_max_us=far[DURATION].max() / 1e3 if len(far) else np.nan)
    return out


def clock_prose(s: dict, device: str, clock_control: str) -> str:
    """What the SM clock reading means, with this run's numbers (see `clock_summary`)."""
    parts = [tr("ncu's SM clock is `sm__cycles_elapsed.avg.per_second`: the cycles the SMs counted during the "
                "kernel divided by its duration (`gpu__time_duration`). ncu ran with `--clock-control {cc}`{how}. "
                "Over this run's {n} profiled launches it reads {lo:.0f}–{hi:.0f} MHz; {above} are above the "
                "{device}'s maximum SM clock of {boost:.0f} MHz (the devices table).", cc=clock_control,
                how=tr(", so the GPU set its own clock (boost)") if clock_control == "none" else
                tr(", so ncu fixed the clock at the base clock"), n=s["results"], lo=s["sm_min_mhz"],
                hi=s["sm_max_mhz"], above=s["above"], device=md(device), boost=s["boost_mhz"])]
    if s["above"] and s["gpc_max_mhz"] == s["gpc_max_mhz"]:
        parts.append(tr("Those readings are not the SMs running faster than their maximum: the same launches' GPC "
                        "clock (`gpc__cycles_elapsed.avg.per_second`, the clock domain the SMs run in) never reads "
                        "above {gpc:.0f} MHz, {over:.1f} % over the maximum. The SM cycle count differs from the GPC "
                        "count by a median {med:.0f} cycles ({lo:.0f} to {hi:.0f}): on the shortest launch ({short:.1f} µs, "
                        "about {short_cycles:.0f} cycles) the median alone is {short_pct:.0f} % of the reading.",
                        gpc=s["gpc_max_mhz"], over=100 * (s["gpc_max_mhz"] / s["boost_mhz"] - 1),
                        med=s["diff_median_cycles"], lo=s["diff_min_cycles"], hi=s["diff_max_cycles"],
                        short=s["shortest_us"], short_cycles=s["shortest_us"] * s["boost_mhz"],
                        short_pct=100 * s["diff_median_cycles"] / (s["shortest_us"] * s["boost_mhz"])))
        far = s.get("far", s["above"])
        if far:
            parts.append(tr("The {far} launches reading more than {slack:.1f} % above the highest GPC reading (above "
                            "{level:.0f} MHz) all last {us:.1f} µs or less.", far=far, slack=100 * CLOCK_SLACK,
                            level=s.get("far_mhz", s["gpc_max_mhz"]), us=s.get("far_max_us", s["above_max_us"])))
        if far < s["above"]:
            parts.append(tr("The other {n} read within that, as the GPC clock itself did (the longest lasts {us:.1f} "
                            "µs): there the clock itself ran that little above the devices table's maximum.",
                            n=s["above"] - far, us=s["above_max_us"]))
        parts.append(tr("Read the GPC clock as the clock the kernel ran at, and the SM reading of a kernel of a few µs "
                        "as good to a few per cent."))
    elif s["above"]:
        parts.append(tr("This run has no GPC clock reading to check them against; the launches reading above the "
                        "maximum all last {us:.1f} µs or less, where a few hundred cycles of counting error are "
                        "several per cent.", us=s["above_max_us"]))
    if s["slow"]:
        parts.append(tr("{n} launches ran below 95 % of the maximum by both counters (down to {mhz:.0f} MHz): there "
                        "the GPU did lower its clock, as it may under power or thermal limits when clocks are not "
                        "locked.", n=s["slow"], mhz=s["slow_min_mhz"]))
    return " ".join(parts)


# --- NVIDIA's rules beside the book's classes ------------------------------------------------------
# (rule, title) → the book classes the verdict supports. SOLBottleneck is ncu's own bottleneck verdict
# (thresholds 60 % and 80 % of peak, ± 10 points for "balanced"; the book's are its parameters), and is the
# one compared with the class; the launch and occupancy rules say the GPU is underfilled, which is what the
# book calls latency-bound.
RULE_CLASSES = {
    ("SOLBottleneck", "High Memory Throughput"): ("memory-bound",),
    ("SOLBottleneck", "High Compute Throughput"): ("compute-bound",),
    ("SOLBottleneck", "High Throughput"): ("memory-bound", "compute-bound"),
    ("SOLBottleneck", "Balanced Throughput"): ("balanced",),
    ("SOLBottleneck", "Latency Issue"): ("latency-bound",),
    ("SOLBottleneck", "Small Grid"): ("latency-bound",),
    ("LaunchConfiguration", "Small Grid"): ("latency-bound",),
    ("LaunchConfiguration", "Tail Effect"): ("latency-bound",),
    ("CPIStall", "Long Scoreboard Stalls"): ("memory-bound", "latency-bound"),
}
VERDICT_RULE = "SOLBottleneck"


def parse_rules(results: pd.DataFrame | None) -> dict[int, list[dict]] | None:
    """result_id → NVIDIA's rule results (the `rules` JSON column of ncu/results.parquet); None when the
    run's results predate that column."""
    if results is None or "rules" not in results:
        return None
    out = {}
    for rid, raw in zip(results.result_id, results.rules):
        try:
            out[int(rid)] = json.loads(raw) if isinstance(raw, str) and raw else []
        except ValueError:
            out[int(rid)] = []
    return out


def nvidia_rules(c: pd.DataFrame, results: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per kernel: the book's `class`, NVIDIA's bottleneck verdict (`nvidia_verdict`, the SOLBottleneck
    title), the classes it supports, `agrees` (the book's class is one of them; None without a verdict),
    and `nvidia_advice`: NVIDIA's optimization rules for it, largest estimated speedup first ('Small Grid
    (≤ 39 %)'; the estimate is % of the kernel's time). None when the run has no rule results."""
    rules = parse_rules(results)
    if rules is None:
        return None
    rows = []
    for _, x in c.dropna(subset=["result_id"]).iterrows():
        rs = rules.get(int(x.result_id), [])
        verdict = next((r.get("title") for r in rs if r.get("rule") == VERDICT_RULE and r.get("title")), None)
        supports = RULE_CLASSES.get((VERDICT_RULE, verdict))
        advice = sorted(((r.get("title") or r.get("name") or r.get("rule"), r.get("speedup_pct"))
                         for r in rs if r.get("type") == "optimization" and r.get("rule") != VERDICT_RULE),
                        key=lambda a: -(a[1] or 0))
        rows.append({"kernel_id": x.kernel_id, "friendly_name": x.friendly_name, "class": x["class"],
                     "nvidia_verdict": verdict,
                     "nvidia_supports": tr(", ").join(text(s) for s in supports) if supports else None,
                     "agrees": (x["class"] in supports) if supports else None,
                     "nvidia_advice": tr("; ").join(
                         tr("{title} (≤ {pct:.0f} %)", title=t, pct=p) if p is not None else str(t)
                         for t, p in advice) or None})
    return pd.DataFrame(rows)


NO_RULES = N_("This run's ncu tables predate the rules column (NVIDIA's own rule results per kernel, kept by "
              "captures made since), so NVIDIA's verdicts cannot be set beside the book's classes here.")


def rules_prose(nv: pd.DataFrame | None) -> str:
    """Empty when the run predates the rules column (the table says so in its one line, `NO_RULES`); else
    how often NVIDIA's verdict and the book's class agree, the kernels where they differ, and the mapping."""
    if nv is None:
        return ""
    judged = nv[nv.agrees.notna()]
    if judged.empty:
        out = tr("NVIDIA's rules gave no bottleneck verdict for these kernels.")
    else:
        differ = judged[judged.agrees == False]  # noqa: E712 (an object column of True / False / None)
        out = tr("NVIDIA's bottleneck verdict agrees with the book's class for {n} of {total} kernels.",
                 n=len(judged) - len(differ), total=len(judged))
        if len(differ):
            out += " " + tr("They differ on: {list}.", list=tr("; ").join(
                tr("{kernel}: NVIDIA says “{verdict}”, the book says {cls}", kernel=md(f"{k.kernel_id} {k.friendly_name}"),
                   verdict=md(k.nvidia_verdict), cls=text(k["class"])) for _, k in differ.iterrows()))
            out += " " + tr("ncu calls a kernel latency-bound (or small-grid, under one wave) when both sides are below "
                            "60 % of peak and names a side only when it leads by 10 points; the book's thresholds are "
                            "this chapter's parameters.")
    mapping = tr("; ").join(tr("{rule} “{title}” → {classes}", rule=r, title=t, classes=tr(", ").join(text(x) for x in c))
                            for (r, t), c in RULE_CLASSES.items())
    return out + "\n\n" + tr("Which book class each NVIDIA verdict supports: {mapping}.", mapping=mapping)


def kernel_why(c: pd.DataFrame, metrics: pd.DataFrame, boost_mhz: float,
               results: pd.DataFrame | None = None, n: int = 3) -> dict[str, pd.DataFrame]:
    """kernel_id → the explorer card's "why" table (long: `metric`, `value`, `unit`): top stalls, the
    occupancy limiter with theoretical and achieved occupancy, the SM and GPC clock against the device's
    maximum, and NVIDIA's verdict where the run has rule results."""
    top = top_stalls(c, metrics, n)
    occ = occupancy(c, metrics).set_index("kernel_id")
    clk = clocks(c, metrics, boost_mhz).set_index("kernel_id")
    nv = nvidia_rules(c, results)
    nv = nv.set_index("kernel_id") if nv is not None else None
    out = {}
    for kid in c.kernel_id:
        rows = [(tr("stall {rank}: {stall}", rank=int(x["rank"]), stall=text(x.stall)), x.stall_share_pct,
                 tr("% of stall cycles")) for _, x in top[top.kernel_id == kid].iterrows()]
        if kid in occ.index:
            o = occ.loc[kid]
            rows += [(tr("occupancy limited by"), o.limiter if isinstance(o.limiter, str) else "—", ""),
                     (tr("resident blocks per SM"), o.blocks_per_sm, "count"),
                     (tr("theoretical occupancy"), o.theoretical_occupancy_pct, "%"),
                     (tr("achieved occupancy"), o.achieved_occupancy_pct, "%")]
        if kid in clk.index:
            k = clk.loc[kid]
            rows += [(tr("SM clock (ncu SM counter)"), k.sm_clock_mhz, "MHz"),
                     (tr("GPC clock (the SMs' clock domain)"), k.gpc_clock_mhz, "MHz"),
                     (tr("device maximum SM clock"), k.boost_mhz, "MHz")]
        if nv is not None and kid in nv.index:
            v = nv.loc[kid]
            rows += [(tr("NVIDIA's bottleneck verdict"), v.nvidia_verdict or "—", ""),
                     (tr("NVIDIA's advice (est. speedup)"), v.nvidia_advice or "—", "")]
        out[kid] = pd.DataFrame(rows, columns=["metric", "value", "unit"])
    return out


def _wide(metrics: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    m = metrics[metrics.metric.isin(names)]
    w = m.pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")
    w.index = w.index.astype(int)
    return w
