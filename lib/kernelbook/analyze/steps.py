"""Decode step by step: time against position (KV length), from every plain step and the profiled steps.

A capture times every step of its plain generates (`steps.parquet`: trial, phase, step, wall_ms). The
profiled pass records every step, or, for a long generation, windows of steps (contract.sampling); its
per-step wall and GPU-busy time come from the phase ranges and the kernels inside them. These functions
put the two side by side, check that the profiled steps stand for the whole decode, and find the kernels
whose time grows with the KV length.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dataclasses import dataclass

from .timeline import busy_ns, step_wall_ns


def plain_steps(run) -> pd.DataFrame | None:
    """Plain wall ms per decode step (median over the timing trials), or None for a run captured before
    steps were timed. Columns: step, wall_ms."""
    s = run.steps()
    if s is None:
        return None
    s = s[s.phase == "decode"]
    return s.groupby("step", as_index=False)["wall_ms"].median() if len(s) else None


def profiled_steps(run) -> pd.DataFrame:
    """Per profiled decode step: wall ms (its phase range, under the profiler, until its last kernel ends where that
    is later: a CUDA graph's replay outlives the host range that launched it, `timeline.phase_wall_ns`) and GPU-busy
    ms (union of its kernels' intervals). Columns: step, wall_ms, busy_ms, kernels."""
    walls = step_wall_ns(run.phases[run.phases.phase == "decode"], run.timeline)
    k = run.timeline[(run.timeline.phase == "decode")]
    rows = []
    for step, g in k.groupby("step"):
        wall = walls.get(("decode", step), 0)
        rows.append({"step": int(step), "wall_ms": wall / 1e6,
                     "busy_ms": busy_ns(g.start_ns.to_numpy(), g.end_ns.to_numpy()) / 1e6,
                     "kernels": int((g.kind == "kernel").sum())})
    return pd.DataFrame(rows, columns=["step", "wall_ms", "busy_ms", "kernels"])


def context_tokens(run) -> int:
    """Tokens in the KV cache at decode step 1 (the prompt, image tokens included)."""
    return run.info.timeline_info.prompt_tokens


# the figure's series, in English: `narrate.steps.step_curve` shows them in the reader's language
CURVE_SERIES = ("plain wall", "profiled wall", "GPU-busy (profiled)")


def step_curve(run) -> pd.DataFrame:
    """Long format for the figure: step, kv_tokens, series (`CURVE_SERIES`: plain wall / profiled wall / GPU-busy),
    ms."""
    ctx = context_tokens(run)
    parts = []
    plain = plain_steps(run)
    if plain is not None:
        parts.append(plain.assign(series=CURVE_SERIES[0], ms=plain.wall_ms))
    prof = profiled_steps(run)
    parts.append(prof.assign(series=CURVE_SERIES[1], ms=prof.wall_ms))
    parts.append(prof.assign(series=CURVE_SERIES[2], ms=prof.busy_ms))
    out = pd.concat([p[["step", "series", "ms"]] for p in parts], ignore_index=True)
    return out.assign(kv_tokens=ctx + out.step)[["step", "kv_tokens", "series", "ms"]]


def agreement(plain_ms: dict, sampled_steps: list) -> dict:
    """Do the profiled steps stand for the whole decode? `plain_ms`: plain wall ms per decode step (every step
    of a plain generate). The profiled steps' mean plain time × the number of steps, against the plain
    total: the chapter's 10 % check."""
    steps = [s for s in sampled_steps if s in plain_ms]
    total = float(sum(plain_ms.values()))
    est = sum(plain_ms[s] for s in steps) / max(1, len(steps)) * len(plain_ms)
    return {"plain_total_ms": total, "sampled_estimate_ms": est, "sampled_steps": len(steps),
            "error_pct": 100 * (est - total) / total if total else float("nan")}


CHECK_PCT = 10.0  # the profiled steps stand for the decode when their estimate is within this of the plain total


# the check's rows, in English: the display layer shows a text cell that is a catalog key in the reader's language
# (the keys are declared in `narrate.steps`)
CHECK_ROWS = ("decode steps (plain generate)", "decode steps profiled", "plain decode total",
              "estimate from the profiled steps", "difference")


def step_check(run) -> pd.DataFrame:
    """The agreement check as a table (quantity: `CHECK_ROWS`, value, unit); empty for a run without plain step
    times."""
    plain = plain_steps(run)
    if plain is None:
        return pd.DataFrame(columns=["quantity", "value", "unit"])
    prof = profiled_steps(run)
    a = agreement(dict(zip(plain.step, plain.wall_ms)), prof.step.tolist())
    rows = [
        (CHECK_ROWS[0], len(plain), "count"),
        (CHECK_ROWS[1], a["sampled_steps"], "count"),
        (CHECK_ROWS[2], a["plain_total_ms"], "ms"),
        (CHECK_ROWS[3], a["sampled_estimate_ms"], "ms"),
        (CHECK_ROWS[4], a["error_pct"], "%"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value", "unit"])


def check(run) -> dict | None:
    """`agreement` of the run's plain and profiled steps, with `ok`: within `CHECK_PCT`, and `every_step`: every
    plain step was profiled; None without plain step times."""
    plain = plain_steps(run)
    if plain is None:
        return None
    a = agreement(dict(zip(plain.step, plain.wall_ms)), profiled_steps(run).step.tolist())
    # every step profiled: the estimate is the plain total itself, a check that cannot fail
    return {**a, "ok": abs(a["error_pct"]) <= CHECK_PCT, "every_step": a["sampled_steps"] >= len(plain)}


GROWTH_MIN_PCT = 5.0  # a kernel "grows with position" when its time per step grew by this much or more
GROWTH_MIN_SPAN = 8   # positions the profiled decode steps must span to show growth at all


def _growth_steps(timeline: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The decode kernels and their profiled steps, sorted; None for the steps when they span too few positions."""
    k = timeline[(timeline.phase == "decode") & (timeline.kind == "kernel")]
    steps = np.sort(k.step.unique())
    return k, (steps if len(steps) >= 2 and steps[-1] - steps[0] >= GROWTH_MIN_SPAN else None)


def growing_kernels(timeline: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Decode kernels whose time per step grows with position: per kernel (short name, category), its time per
    step in the first and the last profiled step-window (a tenth of the profiled steps, at least one step each
    end) and the change; the `top` largest growths in absolute µs among those that grew by `GROWTH_MIN_PCT` or
    more (smaller changes are run-to-run noise: the bundled 64-token run's largest was 3.8 %). Empty when none
    grew so, or the profiled steps span less than 8 positions (`narrate.steps.growth_note` says which)."""
    cols = ["kernel", "category", "first_us", "last_us", "change_us", "change_pct"]
    k, steps = _growth_steps(timeline)
    if steps is None:
        return pd.DataFrame(columns=cols)
    n = max(1, len(steps) // 10)
    first, last = set(steps[:n]), set(steps[-n:])
    per = k.groupby(["short_name", "category", "step"])["duration_ns"].sum().reset_index()
    a = per[per.step.isin(first)].groupby(["short_name", "category"])["duration_ns"].sum() / n / 1e3
    b = per[per.step.isin(last)].groupby(["short_name", "category"])["duration_ns"].sum() / n / 1e3
    d = pd.concat([a.rename("first_us"), b.rename("last_us")], axis=1).fillna(0.0).reset_index()
    d["change_us"] = d.last_us - d.first_us
    d["change_pct"] = 100 * d.change_us / d.first_us.replace(0, np.nan)
    d = d[d.change_pct >= GROWTH_MIN_PCT]
    d = d.rename(columns={"short_name": "kernel"}).sort_values("change_us", ascending=False).head(top)
    return d[cols].reset_index(drop=True)


def growth_span(timeline: pd.DataFrame) -> tuple[int, int] | None:
    """The first and last profiled decode step `growing_kernels` compares; None when they span too few positions."""
    _, steps = _growth_steps(timeline)
    return None if steps is None else (int(steps[0]), int(steps[-1]))


def curve_figures(run) -> dict | None:
    """What the curve says (None for a run without plain step times): decode steps, the KV cache at the first and
    the last, the plain step's median over the first and the last tenth of the steps (ms) and their change (%), the
    profiled steps (and the windows they sit in, None when every step was profiled), their median GPU-busy ms per
    step and its share of their wall time under the profiler (%)."""
    plain, prof = plain_steps(run), profiled_steps(run)
    if plain is None:
        return None
    q = max(1, len(plain) // 10)
    head, tail = plain.wall_ms.iloc[:q].median(), plain.wall_ms.iloc[-q:].median()
    ctx = context_tokens(run)
    sampling = run.info.timeline_info.sampling
    return {"n": len(plain), "a": ctx + 1, "b": ctx + len(plain), "head": head, "tail": tail,
            "chg": 100 * (tail - head) / head, "profiled": len(prof),
            "windows": len(sampling["windows"]) if sampling else None, "busy": prof.busy_ms.median(),
            "share": 100 * prof.busy_ms.sum() / max(1e-9, prof.wall_ms.sum())}


@dataclass(frozen=True)
class NodeGaps:
    """The gaps between consecutive nodes of one CUDA-graph replay (kernels, memcpy and memset nodes of one step,
    in start order): the graph's own dispatch on the device, not launch overhead and not the host's loop."""

    ms_per_step: float   # their sum per step
    median_us: float     # the median gap
    nodes_per_step: float
    steps: int


def graph_node_gaps(timeline: pd.DataFrame, phase: str = "decode") -> NodeGaps | None:
    """`NodeGaps` of `phase`, or None where its launches are not graph replays (the timeline's `graph` column)."""
    if "graph" not in timeline:
        return None
    t = timeline[(timeline.phase == phase) & timeline.kind.isin(["kernel", "memcpy", "memset"])]
    t = t.sort_values("start_ns", kind="stable")
    g = t["graph"].fillna(False).astype(bool).to_numpy()
    if t.empty or not g.mean() > 0.5:
        return None
    step = t["step"].fillna(-1).to_numpy()
    start, end = t.start_ns.to_numpy(dtype=float), t.end_ns.to_numpy(dtype=float)
    gap = np.clip(start - np.r_[np.nan, np.maximum.accumulate(end)[:-1]], 0, None)
    node = np.r_[False, step[1:] == step[:-1]] & g & np.r_[False, g[:-1]]
    if not node.any():
        return None
    n = int(t.loc[g, "step"].nunique())
    return NodeGaps(float(gap[node].sum()) / 1e6 / n, float(np.median(gap[node])) / 1e3,
                    float((g & (t.kind == "kernel").to_numpy()).sum()) / n, n)
