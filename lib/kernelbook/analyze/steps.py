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

from ..i18n import tr
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


def step_curve(run) -> pd.DataFrame:
    """Long format for the figure: step, kv_tokens, series (plain wall / profiled wall / GPU-busy), ms."""
    ctx = context_tokens(run)
    parts = []
    plain = plain_steps(run)
    if plain is not None:
        parts.append(plain.assign(series=tr("plain wall"), ms=plain.wall_ms))
    prof = profiled_steps(run)
    parts.append(prof.assign(series=tr("profiled wall"), ms=prof.wall_ms))
    parts.append(prof.assign(series=tr("GPU-busy (profiled)"), ms=prof.busy_ms))
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


def step_check(run) -> pd.DataFrame:
    """The agreement check as a table (quantity, value, unit); empty for a run without plain step times."""
    plain = plain_steps(run)
    if plain is None:
        return pd.DataFrame(columns=["quantity", "value", "unit"])
    prof = profiled_steps(run)
    a = agreement(dict(zip(plain.step, plain.wall_ms)), prof.step.tolist())
    rows = [
        (tr("decode steps (plain generate)"), len(plain), "count"),
        (tr("decode steps profiled"), a["sampled_steps"], "count"),
        (tr("plain decode total"), a["plain_total_ms"], "ms"),
        (tr("estimate from the profiled steps"), a["sampled_estimate_ms"], "ms"),
        (tr("difference"), a["error_pct"], "%"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value", "unit"])


def check_prose(run) -> str:
    """The verdict of `step_check` in a sentence (empty without plain step times)."""
    plain = plain_steps(run)
    if plain is None:
        return ""
    a = agreement(dict(zip(plain.step, plain.wall_ms)), profiled_steps(run).step.tolist())
    ok = abs(a["error_pct"]) <= CHECK_PCT
    return (tr("The profiled steps stand for the whole decode: their estimate is {e:+.1f} % from the plain total "
               "(within {p:.0f} %).", e=a["error_pct"], p=CHECK_PCT) if ok else
            tr("The profiled steps do not stand for the whole decode: their estimate is {e:+.1f} % from the plain "
               "total (more than {p:.0f} %); sample more windows (sample_every) before reading decode figures as the "
               "generation's.", e=a["error_pct"], p=CHECK_PCT))


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
    grew so, or the profiled steps span less than 8 positions (`growth_note` says which)."""
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


def growth_note(timeline: pd.DataFrame) -> str:
    """Why `growing_kernels` is empty for this timeline."""
    _, steps = _growth_steps(timeline)
    if steps is None:
        return tr("The profiled decode steps span too few positions to see growth.")
    return tr("No decode kernel's time per step grew by {pct:.0f} % or more between the first and the last profiled "
              "steps (positions {a} to {b}): over this span the KV cache's growth is within run-to-run noise.",
              pct=GROWTH_MIN_PCT, a=int(steps[0]), b=int(steps[-1]))


def prose(run) -> str:
    """What the curve says: the plain decode step at the start, middle and end, and the profiled steps'
    GPU-busy time against their wall time."""
    plain, prof = plain_steps(run), profiled_steps(run)
    if plain is None:
        return tr("This run did not time its plain decode steps one by one (captured before steps.parquet); the "
                  "figure shows the profiled steps only.")
    q = max(1, len(plain) // 10)
    head, tail = plain.wall_ms.iloc[:q].median(), plain.wall_ms.iloc[-q:].median()
    ctx = context_tokens(run)
    sampling = run.info.timeline_info.sampling
    what = (tr("the profiler recorded {n} of {total} decode steps in {w} windows", n=len(prof),
               total=len(plain), w=len(sampling["windows"])) if sampling else
            tr("the profiler recorded every decode step"))
    return tr("Over {n} decode steps (KV cache {a:,} → {b:,} tokens) a plain step took {head:.2f} ms at the start "
              "and {tail:.2f} ms at the end ({chg:+.0f} %); {what}, whose GPU-busy time is {busy:.2f} ms per step "
              "({share:.0f} % of their wall time under the profiler).",
              n=len(plain), a=ctx + 1, b=ctx + len(plain), head=head, tail=tail, chg=100 * (tail - head) / head,
              what=what, busy=prof.busy_ms.median(),
              share=100 * prof.busy_ms.sum() / max(1e-9, prof.wall_ms.sum()))


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
