"""The serving study read together (issue 42): per point of the grid (batch sizes, decode as CUDA graphs), the decode
step (plain and GPU-busy), tokens per second, each kernel class's share, the profiled kernels' arithmetic intensity
against the ridge, the bytes each token costs, and the what-if fitted on the first point predicting the others.
Numbers only: the chapter narrates them."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..load.study import StudyPoint, StudyRuns
from ..contract.phrase import column as phrase_column
from ..contract.phrase import phrase
from . import roofline as R
from . import timeline as T
from . import whatif as W


def _decode_summary(run) -> pd.Series:
    """The decode row of chapter 01's phase table (`timeline.phase_summary`): steps, GPU-busy time (kernels, copies
    and memsets on the GPU's own timeline), launches per step; the same figures every chapter prints."""
    return T.phase_summary(run.timeline, run.phases).set_index("phase").loc["decode"]


def batch_of(p: StudyPoint) -> int:
    return int(p.run.info.workload.batch_size) if p.run is not None else int(p.values.get("batch_size", 1))


def decode_table(st: StudyRuns) -> pd.DataFrame:
    """Per point holding a run: batch, decode steps recorded, the plain step (ms: the capture timed every step of
    generates without the profiler), the GPU-busy time per step (the step's kernels, from the GPU's own timeline, not
    the host's phase range, which under CUDA graphs ends before the GPU's work: `_decode_summary`), the host's share of the plain step
    (plain − busy), kernel launches per step and tokens per second (batch ÷ plain step)."""
    rows = []
    for p in st.held:
        r, d = p.run, _decode_summary(p.run)
        n = max(1, int(d.steps))
        plain = r.info.plain_ms_per_step().get("decode", np.nan)
        busy = d.gpu_busy_ms / n
        b = batch_of(p)
        axis = {} if st.axis == "batch_size" else {st.axis: p.values.get(st.axis)}  # batch_size is `batch`
        first, steady = first_and_steady(r)
        rows.append({**axis, "batch": b, "steps": n, "plain_step_ms": plain,
                     "busy_step_ms": busy, "host_step_ms": plain - busy, "busy_pct": 100 * busy / plain,
                     "launches_per_step": d.launches_per_step, "tokens_per_s": 1e3 * b / plain,
                     "busy_per_token_ms": busy / b, "first_step_ms": first, "steady_step_ms": steady})
    return pd.DataFrame(rows)


def first_and_steady(run) -> tuple[float, float]:
    """The plain generates' first decode step and their steady step (ms; each the median over the generates, the
    steady step the mean of every decode step after the first): HF's generate pays a one-off host cost in its first
    decode step at batch > 1 (45.6 ms against 6.1 ms a step after it at batch 8 on the H100, its GPU work that of any
    other step), which a serving loop pays once per request, not per step. NaN for a run without timed steps."""
    s = run.steps()
    if s is None or s.empty:
        return np.nan, np.nan
    d = s[s.phase == "decode"]
    if d.empty:
        return np.nan, np.nan
    first = d.groupby("trial").step.transform("min") == d.step
    return (float(d[first].groupby("trial").wall_ms.sum().median()),
            float(d[~first].groupby("trial").wall_ms.mean().median()) if (~first).any() else np.nan)


def class_table(st: StudyRuns) -> pd.DataFrame:
    """Per point and kernel class (the timeline's work category): decode kernel ms per step and share (%) of the
    step's kernel time."""
    out = []
    for p in st.held:
        k = T.phase_kernels(p.run.timeline, "decode")
        n = max(1, int(_decode_summary(p.run).steps))
        ms = k.groupby("category").duration_ns.sum() / 1e6 / n
        out.append(pd.DataFrame({"batch": batch_of(p), "class": ms.index, "ms_per_step": ms.to_numpy(),
                                 "share_pct": 100 * ms.to_numpy() / ms.sum()}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        columns=["batch", "class", "ms_per_step", "share_pct"])


def kernel_table(st: StudyRuns) -> pd.DataFrame:
    """Per point, its ncu-profiled decode kernels: friendly name and class, share of the step's kernel time (the
    timeline's), ncu's duration, FLOPs (tensor and CUDA-core, as counted: MMA padding included) and DRAM bytes per
    launch, arithmetic intensity (FLOP per DRAM byte), the % of the DRAM roof it reached, the ridge of its compute
    roof (FLOP/byte where that roof meets DRAM's), and the roof that binds it at peak (the side of the ridge it sits
    on: a kernel far below both roofs, e.g. at 2 % of DRAM's, is bound by neither but by its latency)."""
    out = []
    for p in st.held:
        k = R.profiled_kernels(p.run)
        if k.empty:
            continue
        k = k[k.phase == "decode"]
        _, _, roofs = R.for_run(p.run, k)
        for _, row in k.iterrows():
            label, peak = roofs.compute_for(row)
            ridge = peak / roofs.bandwidth["dram"]
            ai = row.flops / row.dram_bytes if row.dram_bytes else np.nan
            out.append({"batch": batch_of(p), "kernel": row.friendly_name,
                        "class": row.category, "share_pct": 100 * row.share, "duration_us": row.duration_ns / 1e3,
                        "flops": row.flops, "dram_mb": row.dram_bytes / 1e6, "intensity": ai,
                        "dram_roof_pct": 100 * row.dram_bytes / (row.duration_ns * 1e-9) / roofs.bandwidth["dram"],
                        "roof": label, "ridge": ridge,
                        "binds": phrase("compute roof") if ai == ai and ai >= ridge else phrase("DRAM roof")})
    t = pd.DataFrame(out)
    if out:
        t["binds"] = phrase_column((r["binds"] for r in out), t.index)  # the phrases kept
    return t


def turn_table(kt: pd.DataFrame) -> pd.DataFrame:
    """Per kernel class among the profiled kernels and batch: its arithmetic intensity and its kernels' ridge, each
    weighted by the kernels' time, the one as a % of the other (100 %: where its compute roof takes over from DRAM),
    and the first batch at which it reaches the ridge (NaN: not within the study's batches)."""
    cols = ["class", "batch", "intensity", "ridge", "of_ridge_pct", "turns_at"]
    w = kt[kt.intensity.notna() & (kt.share_pct > 0)] if not kt.empty else kt
    if w.empty:
        return pd.DataFrame(columns=cols)
    g = w.groupby(["class", "batch"]).apply(
        lambda d: pd.Series({"intensity": np.average(d.intensity, weights=d.share_pct),
                             "ridge": np.average(d.ridge, weights=d.share_pct)}), include_groups=False).reset_index()
    g["of_ridge_pct"] = 100 * g.intensity / g.ridge
    turns = g[g.of_ridge_pct >= 100].groupby("class").batch.min()
    return g.assign(turns_at=g["class"].map(turns))[cols]


def bytes_table(st: StudyRuns, traces: dict[int, W.Trace]) -> pd.DataFrame:
    """Per point: DRAM bytes one decode step moves by the shapes of its launches (weights, as each launch reads
    its operand: a MoE step that gathers each token's experts reads them once per gather) and per token (÷ batch),
    beside the weights it must move, each once (`whatif.weights_each_once`: the experts the routers picked where the
    capture recorded them, else at most all of them) and how the experts were counted (a phrase; empty for a model
    without a router)."""
    rows = []
    for p in st.held:
        tr = traces.get(p.index)
        if tr is None:
            continue
        w = tr.work[tr.work.phase == "decode"]
        n = tr.steps.get("decode", 1)
        b = batch_of(p)
        total = float((w.dram_bytes * w.launches).sum()) / n
        weights = float((w.weight_bytes * w.launches).sum()) / n
        once, distinct, router = W.weights_each_once(tr, p.run.info.timeline_info.moe_routing)
        counted = ("" if router is None else phrase("not recorded: at most min(tokens × top-k, {e}) a layer", e=router[1])
                   if distinct is None else phrase("{d:.1f} of {e} experts a layer (recorded)", d=distinct, e=router[1]))
        rows.append({"batch": b, "step_mb": total / 1e6, "weight_mb": weights / 1e6,
                     "other_mb": (total - weights) / 1e6, "per_token_mb": total / b / 1e6,
                     "must_weight_mb": once / 1e6, "experts_counted": counted})
    t = pd.DataFrame(rows)
    if rows:
        t["experts_counted"] = phrase_column((r["experts_counted"] for r in rows), t.index)
    return t


def traces_of(st: StudyRuns) -> dict[int, W.Trace]:
    """The what-if's trace of each point that can be modelled (`whatif.unmodellable`), by point index."""
    return {p.index: W.for_run(p.run)[0] for p in st.held if W.unmodellable(p.run) is None}


def whatif_table(st: StudyRuns, traces: dict[int, W.Trace]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The what-if fitted on the study's first point (the smallest batch) predicting each point by its batch lever:
    (per point: predicted decode device ms and plain step ms against the measured GPU-busy, plain step and steady
    step (`first_and_steady`), errors in %; per point and kernel class: predicted against measured ms per step)."""
    held = [p for p in st.held if p.index in traces]
    if not held:
        return pd.DataFrame(), pd.DataFrame()
    base = min(held, key=batch_of)
    tr0, b0 = traces[base.index], batch_of(base)
    dt = decode_table(st).set_index("batch")
    rows, cls = [], []
    for p in held:
        b = batch_of(p)
        scale = b / b0
        pr = W.predict(tr0, tr0.gpu, batch=scale).set_index("phase").loc["decode"]
        m = dt.loc[b]
        rows.append({"batch": b, "fitted_at": b0, "predicted_device_ms": pr.device_ms_per_step,
                     "busy_step_ms": m.busy_step_ms,
                     "device_error_pct": 100 * (pr.device_ms_per_step - m.busy_step_ms) / m.busy_step_ms,
                     "predicted_step_ms": pr.wall_ms_per_step, "plain_step_ms": m.plain_step_ms,
                     "step_error_pct": 100 * (pr.wall_ms_per_step - m.plain_step_ms) / m.plain_step_ms,
                     "steady_step_ms": m.steady_step_ms,
                     "steady_error_pct": 100 * (pr.wall_ms_per_step - m.steady_step_ms) / m.steady_step_ms})
        t_s, _ = W.launch_time_s(tr0.work, tr0.gpu, tr0.calib, tr0.gpu, scale)
        pred = W.class_ms(tr0, t_s).loc["decode"]
        meas = W.class_ms(traces[p.index]).loc["decode"]
        both = pd.concat([pred.rename("predicted_ms"), meas.rename("measured_ms")], axis=1).fillna(0.0)
        cls.append(both.reset_index(names="class").assign(batch=b))
    per_class = pd.concat(cls, ignore_index=True)
    per_class["error_ms"] = per_class.predicted_ms - per_class.measured_ms
    return pd.DataFrame(rows), per_class[["batch", "class", "predicted_ms", "measured_ms", "error_ms"]]


def points_table(st: StudyRuns) -> pd.DataFrame:
    """The study's points as its manifest records them: grid values, status, capture seconds, and where any point
    has them, its reason and the GPU it ran on (a study run side by side)."""
    t = pd.DataFrame([{**p.values, "status": p.status, "capture_s": p.seconds, "reason": p.note or p.reason,
                       "gpu": p.gpu} for p in st.points])
    return t.drop(columns=[c for c in ("reason", "gpu") if not t[c].fillna("").astype(str).str.len().any()])


def by_batch(t: pd.DataFrame, value: str, unit: str) -> pd.DataFrame:
    """`t` (class, batch, value) as one row per class and one column per batch, named `batch_<b>_<unit>`."""
    piv = t.pivot_table(index="class", columns="batch", values=value, aggfunc="sum").fillna(0.0)
    piv.columns = [f"batch_{int(b)}_{unit}" for b in piv.columns]
    return piv.reset_index()


def roofs_of(st: StudyRuns):
    """The roofs of the study's first point holding a run (one GPU for the whole study)."""
    p = st.held[0]
    return R.for_run(p.run)[2]


def host_growth(st: StudyRuns | None, run) -> "W.HostGrowth | None":
    """What a study measured of a graph run's host time between replays per decode step, batch by batch
    (`whatif.HostGrowth`; the steady step less the replay's device span), for `run`'s batch lever: None where there is no study, `run` did not decode as CUDA graphs,
    or the study's points are not its work on its GPU (model, weights, dtype, ranks, GPU; the tokens may differ: the
    host's per-step work does not depend on the context) or do not span two batches."""
    if st is None or run is None or not run.info.workload.graph_decode:
        return None
    me = run.info
    keys = ("model", "weights", "dtype", "tensor_parallel")

    def same(p: StudyPoint) -> bool:
        w = p.run.info
        return (w.workload.graph_decode and all(getattr(w.workload, k) == getattr(me.workload, k) for k in keys)
                and w.gpu_name == me.gpu_name and (w.device or None) == (me.device or None))

    pts = sorted((p for p in st.held if same(p) and W.unmodellable(p.run) is None), key=batch_of)
    per_batch, steady_at = {}, {}
    for p in pts:
        tr = W.for_run(p.run)[0]
        if tr.host is not None and tr.host.graph and tr.host.between_replays_ms == tr.host.between_replays_ms:
            # on the steady step's basis (`first_and_steady`): the first decode step's one-off host cost at batch > 1
            # is HF generate's, paid once per request, not the serving loop's per step
            steady = first_and_steady(p.run)[1]
            per_batch.setdefault(batch_of(p), steady - tr.host.span_ms if steady == steady
                                 else tr.host.between_replays_ms)
            steady_at.setdefault(batch_of(p), steady)
    if len(per_batch) < 2:
        return None
    b = sorted(per_batch)
    return W.HostGrowth(tuple(b), tuple(per_batch[x] for x in b), st.study_id, tuple(steady_at[x] for x in b))


def with_host_growth(tr: "W.Trace | None", run, st: StudyRuns | None) -> "W.Trace | None":
    """`tr` (the what-if's trace of `run`) carrying the study's `host_growth` for its batch lever, where the study
    measured it for this run's work; `tr` itself otherwise."""
    from dataclasses import replace

    g = host_growth(st, run) if tr is not None else None
    return replace(tr, host_growth=g) if g is not None else tr
