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

Numbers, tables and English phrases (`contract.phrase`) only: the chapter's sentences on them, and the tables in the
reader's language, are `narrate.why`'s.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
from .classify import class_phrase
from .histograms import weighted_mean

STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$")
NOT_A_STALL = "selected"

# reason (the metric's middle) → how a reader names it (a catalog key): what the warp waits on, so the fix can be read
# off
STALLS = {
    "long_scoreboard": phrase("long scoreboard: waiting on global/local memory loads (L1TEX)"),
    "short_scoreboard": phrase("short scoreboard: waiting on shared memory or special-math results (MIO)"),
    "wait": phrase("wait: fixed latency between dependent instructions"),
    "math_pipe_throttle": phrase("math pipe throttle: the math pipe it needs is busy"),
    "mio_throttle": phrase("MIO throttle: shared-memory / special-instruction queue full"),
    "lg_throttle": phrase("LG throttle: global/local memory instruction queue full"),
    "tex_throttle": phrase("TEX throttle: texture / L1TEX queue full"),
    "barrier": phrase("barrier: waiting for the block's other warps (__syncthreads)"),
    "membar": phrase("memory barrier: waiting on a memory fence"),
    "branch_resolving": phrase("branch resolving: waiting for a branch target"),
    "dispatch_stall": phrase("dispatch stall: the picked instruction could not be dispatched"),
    "drain": phrase("drain: waiting at exit for its stores to drain"),
    "gmma": phrase("GMMA: waiting on a warpgroup matrix multiply (wgmma)"),
    "imc_miss": phrase("IMC miss: immediate-constant cache miss"),
    "no_instruction": phrase("no instruction: instruction cache miss or fetch after a jump"),
    "not_selected": phrase("not selected: ready, but another warp issued"),
    "sleeping": phrase("sleeping: warp put to sleep (nanosleep / yield)"),
    "misc": phrase("misc: other reasons"),
    "selected": phrase("selected: issuing (not a stall)"),
}

OCCUPANCY_LIMITS = {  # ncu's resident-blocks-per-SM limit → what a reader calls it
    "launch__occupancy_limit_registers": phrase("registers"),
    "launch__occupancy_limit_shared_mem": phrase("shared memory"),
    "launch__occupancy_limit_blocks": phrase("blocks per SM"),
    "launch__occupancy_limit_warps": phrase("warps"),
    "launch__occupancy_limit_barriers": phrase("barriers"),
}

COMMA, SEMICOLON = phrase(", "), phrase("; ")  # a list's separators, in the reader's language


def listed(items, sep=COMMA):
    """`items` (phrases or plain text) one after another with `sep` (a phrase) between them: one phrase, empty
    without items."""
    parts = []
    for x in items:
        parts += [sep, x] if parts else [x]
    return joined(*parts)


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


_STALL_PHRASES = {str(p): p for p in STALLS.values()}


def top_stalls_wide(top: pd.DataFrame) -> pd.DataFrame:
    """`top_stalls` as one row per kernel for reading: `stall_1`…`stall_n`, each 'reason — 62 %' (an English
    phrase, `narrate.why.top_stalls_wide` shows it in the reader's language)."""
    rows = []
    for kid, g in top.groupby("kernel_id", sort=False):
        r = {"kernel_id": kid, "friendly_name": g.friendly_name.iloc[0], "class": g["class"].iloc[0],
             "share": g.share.iloc[0]}
        for _, x in g.iterrows():
            r[f"stall_{x['rank']}"] = phrase("{stall} — {pct:.0f} %", stall=_STALL_PHRASES.get(x.stall, x.stall),
                                             pct=x.stall_share_pct)
        rows.append(r)
    out = pd.DataFrame(rows)
    for c in [c for c in out if c.startswith("stall_")]:  # the cells' phrases kept
        out[c] = phrase_column((r.get(c, np.nan) for r in rows), out.index)
    return out


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
    `limits_occupancy` is False where theoretical occupancy is already 100 %. `limiter` is an English phrase
    (`narrate.why.occupancy` shows it in the reader's language)."""
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
            row["limiter"] = listed(OCCUPANCY_LIMITS[mm] for mm in OCCUPANCY_LIMITS if have.get(mm) == low)
            row["blocks_per_sm"] = low
        else:
            row["limiter"], row["blocks_per_sm"] = None, np.nan
        row["theoretical_occupancy_pct"] = x.theoretical_occupancy_pct
        row["achieved_occupancy_pct"] = x.achieved_occupancy_pct
        row["occupancy_gap_pct"] = x.theoretical_occupancy_pct - x.achieved_occupancy_pct
        row["limits_occupancy"] = bool(x.theoretical_occupancy_pct < 100)
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["limiter"] = phrase_column((r["limiter"] for r in rows), out.index)  # the phrases kept
    return out


def occupancy_figures(occ: pd.DataFrame) -> dict | None:
    """What the occupancy table (`occupancy`) says (`narrate.why.occupancy_prose`); None where ncu recorded no
    occupancy limits. The kernels whose launch caps their occupancy (`capped`) of all (`of`) and their share of
    profiled time (`pct`, %); what caps them (`by`: (limiter phrase, % of profiled time), largest first); the
    time-weighted gap between theoretical and achieved occupancy (`gap`, points)."""
    if occ.empty or occ.limiter.isna().all():
        return None
    capped = occ[occ.limits_occupancy & occ.limiter.notna()]
    total = occ.share.sum()
    named = {str(v): v for v in capped.limiter}  # the limiters' phrases, by their English text
    by = capped.groupby("limiter").share.sum().sort_values(ascending=False) if len(capped) else pd.Series(dtype=float)
    return {"capped": len(capped), "of": len(occ), "pct": 100 * capped.share.sum() / total,
            "by": [(named.get(str(w), w), 100 * v / total) for w, v in by.items()],
            "gap": weighted_mean(occ.occupancy_gap_pct, occ.share)}


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
    `far_max_us` the longest of them; `near` those above the maximum within it), and what `narrate.why.clock_prose`
    sets beside them. Clocks in MHz, durations in µs."""
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
    # what the prose sets beside them: the GPC maximum over the device's (%), the shortest launch in cycles at the
    # maximum clock and the median SM − GPC difference as a share of them (%), the readings above the maximum within
    # the slack (`near`), and the slack in %
    short_cycles = out["shortest_us"] * boost_mhz
    out.update(gpc_over_pct=100 * (out["gpc_max_mhz"] / boost_mhz - 1), shortest_cycles=short_cycles,
               diff_median_pct_of_shortest=100 * out["diff_median_cycles"] / short_cycles,
               near=out["above"] - out["far"], slack_pct=100 * CLOCK_SLACK)
    return out


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
    (≤ 39 %)'; the estimate is % of the kernel's time). None when the run has no rule results. The supported classes
    and the advice are English phrases (`narrate.why.nvidia_rules` shows them in the reader's language)."""
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
                     "nvidia_supports": listed(class_phrase(s) for s in supports) if supports else None,
                     "agrees": (x["class"] in supports) if supports else None,
                     "nvidia_advice": listed((phrase("{title} (≤ {pct:.0f} %)", title=t, pct=p) if p is not None
                                              else str(t) for t, p in advice), SEMICOLON) or None})
    out = pd.DataFrame(rows)
    for c in ("nvidia_supports", "nvidia_advice"):  # the cells' phrases kept
        if len(out):
            out[c] = phrase_column((r[c] for r in rows), out.index)
    return out


def verdicts(nv: pd.DataFrame | None) -> dict | None:
    """How NVIDIA's verdicts (`nvidia_rules`) and the book's classes agree (`narrate.why.rules_prose`); None when
    the run predates the rules column. The kernels with a verdict (`judged`), those whose class it supports
    (`agree`) and the rows where they differ (`differ`)."""
    if nv is None:
        return None
    judged = nv[nv.agrees.notna()]
    differ = judged[judged.agrees == False]  # noqa: E712 (an object column of True / False / None)
    return {"judged": len(judged), "agree": len(judged) - len(differ), "differ": differ}


def kernel_why(c: pd.DataFrame, metrics: pd.DataFrame, boost_mhz: float,
               results: pd.DataFrame | None = None, n: int = 3) -> dict[str, pd.DataFrame]:
    """kernel_id → the explorer card's "why" table (long: `metric`, `value`, `unit`): top stalls, the
    occupancy limiter with theoretical and achieved occupancy, the SM and GPC clock against the device's
    maximum, and NVIDIA's verdict where the run has rule results. Its metric names and words are English phrases
    (`narrate.why.kernel_why` shows them in the reader's language)."""
    top = top_stalls(c, metrics, n)
    occ = occupancy(c, metrics).set_index("kernel_id")
    clk = clocks(c, metrics, boost_mhz).set_index("kernel_id")
    nv = nvidia_rules(c, results)
    nv = nv.set_index("kernel_id") if nv is not None else None
    out = {}
    for kid in c.kernel_id:
        rows = [(phrase("stall {rank}: {stall}", rank=int(x["rank"]), stall=_STALL_PHRASES.get(x.stall, x.stall)),
                 x.stall_share_pct, phrase("% of stall cycles")) for _, x in top[top.kernel_id == kid].iterrows()]
        if kid in occ.index:
            o = occ.loc[kid]
            rows += [(phrase("occupancy limited by"), o.limiter if isinstance(o.limiter, str) else "—", ""),
                     (phrase("resident blocks per SM"), o.blocks_per_sm, "count"),
                     (phrase("theoretical occupancy"), o.theoretical_occupancy_pct, "%"),
                     (phrase("achieved occupancy"), o.achieved_occupancy_pct, "%")]
        if kid in clk.index:
            k = clk.loc[kid]
            rows += [(phrase("SM clock (ncu SM counter)"), k.sm_clock_mhz, "MHz"),
                     (phrase("GPC clock (the SMs' clock domain)"), k.gpc_clock_mhz, "MHz"),
                     (phrase("device maximum SM clock"), k.boost_mhz, "MHz")]
        if nv is not None and kid in nv.index:
            v = nv.loc[kid]
            rows += [(phrase("NVIDIA's bottleneck verdict"), v.nvidia_verdict or "—", ""),
                     (phrase("NVIDIA's advice (est. speedup)"), v.nvidia_advice or "—", "")]
        out[kid] = pd.DataFrame({name: phrase_column(r[i] for r in rows)  # object columns: the phrases kept
                                 for i, name in enumerate(["metric", "value", "unit"])})
    return out


def _wide(metrics: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    m = metrics[metrics.metric.isin(names)]
    w = m.pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")
    w.index = w.index.astype(int)
    return w
