"""The range pass (issue 41 point 7): DRAM bytes in the loop, measured with caches flushed as every ncu figure is.

ncu's main pass flushes the caches before each replay pass of each kernel (`--cache-control all`), so a kernel
that reads what the one before it just wrote (within the L2) reads it from DRAM under ncu, not in the loop.
App-range replay (`--replay-mode app-range`) measures everything between a cudaProfilerStart and Stop as one
result; the caches are flushed before the range, not between the kernels inside it. Measured on an H100
(bench/range_replay_probe.py): a 16.8 MB copy alone reads 16.8 MB; the copy and a multiply that reads its output
read 16.85 MB together; the multiply in the loop reads 0.07 MB. Kernel replay mode `range` refuses CUDA-graph
launches (cuGraphLaunch); app-range takes them.

Two kinds of range, each starting cold:
- `step`: one whole decode step (the main pass's profiled step), every kernel of it, eager or graph replay: the
  DRAM bytes the step reads as deployed, against the weights and KV cache it must read (the bytes ledger);
- `pair` and `producer` (eager steps numbered by op call): a profiled kernel's op call with the op call before it,
  and that producer alone. The consumer's reads in the loop are pair − producer. Spans of one step never overlap,
  so the pairs are spread over the decode steps after the profiled one (the same op calls, checked by name).

The range's `gpu__time_duration` spans the host's launches too, so only bytes are kept as in-loop figures.
"""
from __future__ import annotations

import json
import numpy as np
import pandas as pd

RANGE_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "gpu__time_duration.sum")
RANGE_COLUMNS = ["phase", "step", "kind", "first_op", "last_op", "kernel_id", "op_first", "op_last",
                 "dram_read_bytes", "dram_write_bytes", "l2_bytes", "range_ns"]
_METRIC_COLUMNS = {"dram__bytes_read.sum": "dram_read_bytes", "dram__bytes_write.sum": "dram_write_bytes",
                   "lts__t_bytes.sum": "l2_bytes", "gpu__time_duration.sum": "range_ns"}


def plan_ranges(timeline: pd.DataFrame, step: int, reps: pd.DataFrame | None = None, phase: str = "decode"
                ) -> tuple[dict, pd.DataFrame]:
    """({(phase, step): "step" | [(first, last), ...]}, the planned spans: phase, step, kind, first_op, last_op,
    kernel_id). The whole `step` is one range; each profiled kernel of `reps` (representative launches by op call,
    capture.ncu `representative_launches`) in that step whose op call launches only it gets a pair and a producer
    span, in the first later step where neither overlaps a span already there and the op calls are the same."""
    plan = {(phase, step): "step"}
    rows = [{"phase": phase, "step": step, "kind": "step", "first_op": -1, "last_op": -1, "kernel_id": None}]
    if reps is None or reps.empty or "op_index" not in timeline:
        return plan, pd.DataFrame(rows, columns=RANGE_COLUMNS[:6])
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel") & (timeline.op_index >= 0)]
    ops = k.drop_duplicates(["step", "op_index"]).set_index(["step", "op_index"]).op
    here = k[k.step == step]
    per_op = here.groupby("op_index").size()
    later = sorted(s for s in k.step.unique() if s > step)
    taken: dict[int, list] = {}
    for r in reps[(reps.phase == phase) & (reps.step == step)].sort_values("op_index").itertuples():
        c = int(r.op_index)
        before = per_op.index[per_op.index < c]
        if per_op.get(c, 0) != 1 or not len(before):
            continue  # an op call of several kernels: pair − producer would hold them all
        p = int(before.max())
        for kind, first, last in (("pair", p, c), ("producer", p, p)):  # a pair holds its producer: two steps
            for s in later:
                if (ops.get((s, p)) == ops.get((step, p)) and ops.get((s, c)) == ops.get((step, c))
                        and not any(a <= last and first <= b for a, b in taken.get(s, []))):
                    taken.setdefault(s, []).append((first, last))
                    rows.append({"phase": phase, "step": s, "kind": kind, "first_op": first, "last_op": last,
                                 "kernel_id": r.kernel_id})
                    break
    for s, spans in taken.items():
        plan[(phase, int(s))] = sorted(spans)
    return plan, pd.DataFrame(rows, columns=RANGE_COLUMNS[:6])


def ranges_json(plan: dict) -> str:
    """`plan_ranges`'s plan as the worker reads it (capture.ncu_worker `read_ranges`)."""
    return json.dumps({f"{ph}:{st}": (v if v == "step" else [list(x) for x in v]) for (ph, st), v in plan.items()})


def tie_ranges(planned: pd.DataFrame, seen: list[dict], metrics: pd.DataFrame | None) -> tuple[pd.DataFrame, str | None]:
    """The measured ranges (`RANGE_COLUMNS`): the worker's closed ranges (`seen`, in order) tied to the report's
    results (in the same order) and to the planned spans. Error: why nothing could be tied."""
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=RANGE_COLUMNS), "the report holds no range"
    wide = (metrics[metrics.metric.isin(list(_METRIC_COLUMNS))].pivot_table(index="result_id", columns="metric",
                                                                          values="value", aggfunc="first")
            .rename(columns=_METRIC_COLUMNS).sort_index().reset_index(drop=True))
    if len(wide) != len(seen):
        return pd.DataFrame(columns=RANGE_COLUMNS), (f"the report holds {len(wide)} ranges, the worker closed "
                                                     f"{len(seen)}: not tied")
    got = pd.concat([pd.DataFrame(seen).reset_index(drop=True), wide], axis=1)
    # a step range spans several ranges where a vision encode opens more than once; sum what each range read
    got = got.groupby(["phase", "step", "first_op", "last_op"], as_index=False).agg(
        op_first=("op_first", "first"), op_last=("op_last", "first"),
        **{c: (c, "sum") for c in _METRIC_COLUMNS.values() if c in got})
    out = planned.merge(got, on=["phase", "step", "first_op", "last_op"], how="inner")
    for c in RANGE_COLUMNS:
        if c not in out:
            out[c] = np.nan
    return out[RANGE_COLUMNS], None if len(out) else "no closed range matched a planned one"


def consumer_reads(ranges: pd.DataFrame) -> pd.DataFrame:
    """Per consumer kernel: its DRAM reads in the loop, pair − producer (kernel_id, dram_read_bytes_inloop; a
    difference below zero, counter noise, is 0)."""
    if ranges.empty:
        return pd.DataFrame(columns=["kernel_id", "dram_read_bytes_inloop"])
    pr = ranges[ranges.kind.isin(["pair", "producer"])].pivot_table(
        index="kernel_id", columns="kind", values="dram_read_bytes", aggfunc="first")
    if not {"pair", "producer"} <= set(pr.columns):
        return pd.DataFrame(columns=["kernel_id", "dram_read_bytes_inloop"])
    d = (pr["pair"] - pr["producer"]).clip(lower=0.0).dropna()
    return pd.DataFrame({"kernel_id": d.index, "dram_read_bytes_inloop": d.values})

