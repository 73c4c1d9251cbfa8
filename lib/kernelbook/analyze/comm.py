"""Tensor parallelism: each NCCL collective paired across the ranks, its time split into transfer and wait.

A collective ends on every rank at about the same moment (it cannot finish before the last rank has sent
its part), so the rank that launched it last waits least: its kernel time is the transfer itself, and
every other rank's extra kernel time is waiting for that rank (launch skew). Pairing is by order: the
n-th NCCL kernel of a step on one rank is the n-th on every other (ranks issue the same collectives in the
same order). Bytes come from the op's shapes (the tensor the collective reduces or gathers).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contract.kernels import is_nccl

_NAME = re.compile(r"ncclDevKernel_(?P<collective>[A-Za-z]+?)(?:_(?P<reduce>Sum|Prod|Max|Min|PreMulSum|SumPostDiv))?"
                   r"(?:_(?P<dtype>bf16|f16|f32|f64|i8|u8|i32|u32|i64|u64|f8e4m3|f8e5m2))?"
                   r"_(?P<algorithm>RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)"
                   r"_(?P<protocol>LL128|LL|SIMPLE)")
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1, "i32": 4, "u32": 4, "i64": 8, "u64": 8,
               "f8e4m3": 1, "f8e5m2": 1}


def parse_collective(name: str) -> dict:
    """Collective, reduction, dtype, algorithm and protocol from an NCCL kernel's name, e.g.
    `ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)`; fields NCCL leaves out of the name are None."""
    m = _NAME.search(name)
    if m:
        return m.groupdict()
    coll = re.search(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)", name)
    return {"collective": coll.group(1) if coll else "other", "reduce": None, "dtype": None, "algorithm": None,
            "protocol": None}


def _numel(shapes: str | None) -> int | None:
    """Elements of the op's first tensor argument (op_shapes holds one `[d0, d1, ...]` per argument)."""
    if not isinstance(shapes, str) or not shapes.startswith("["):
        return None
    dims = re.findall(r"\d+", shapes.split("]")[0])
    return int(np.prod([int(d) for d in dims])) if dims else None


def bus_factor(collective: str, n: int) -> float:
    """Bytes each rank sends over the link per payload byte, ring algorithms (NCCL's bus-bandwidth
    convention): AllReduce 2(n−1)/n, AllGather and ReduceScatter (n−1)/n of the whole output."""
    return {"AllReduce": 2 * (n - 1) / n, "AllGather": (n - 1) / n, "ReduceScatter": (n - 1) / n}.get(collective, 1.0)


def collectives(ranks_timeline: pd.DataFrame) -> pd.DataFrame:
    """One row per NCCL kernel per rank, paired across ranks by (phase, step, n-th NCCL kernel of the step):
    name fields, payload bytes (the op's tensor; AllGather: the gathered output), start, duration, and the
    pair's transfer (the fastest rank's kernel time), this rank's wait (its time beyond that) and its launch
    skew (start after the pair's earliest start)."""
    k = ranks_timeline[(ranks_timeline.kind == "kernel") & ranks_timeline.name.map(is_nccl)].copy()
    if k.empty:
        return pd.DataFrame(columns=["rank", "phase", "step", "seq", "collective", "dtype", "algorithm", "protocol",
                                     "payload_bytes", "start_ns", "duration_ns", "transfer_ns", "wait_ns", "skew_ns"])
    n = ranks_timeline["rank"].nunique()
    k = k.sort_values(["rank", "start_ns"], kind="stable")
    k["seq"] = k.groupby(["rank", "phase", "step"]).cumcount()
    parsed = pd.DataFrame([parse_collective(x) for x in k.name], index=k.index)
    k = pd.concat([k, parsed], axis=1)
    numel = k.op_shapes.map(_numel) if "op_shapes" in k else pd.Series(np.nan, index=k.index)
    size = k.dtype.map(DTYPE_BYTES).fillna(2)  # bf16 when NCCL does not name it (AllGather moves raw bytes)
    k["payload_bytes"] = numel.astype(float) * size * np.where(k.collective == "AllGather", n, 1)
    g = k.groupby(["phase", "step", "seq"])
    k["ranks_paired"] = g["rank"].transform("nunique")
    k["transfer_ns"] = g["duration_ns"].transform("min")
    k["wait_ns"] = k.duration_ns - k.transfer_ns
    k["skew_ns"] = k.start_ns - g["start_ns"].transform("min")
    cols = ["rank", "phase", "step", "seq", "collective", "reduce", "dtype", "algorithm", "protocol", "payload_bytes",
            "start_ns", "duration_ns", "transfer_ns", "wait_ns", "skew_ns", "ranks_paired"]
    return k[cols].reset_index(drop=True)


def per_rank(coll: pd.DataFrame, ranks_timeline: pd.DataFrame, ranks_phases: pd.DataFrame) -> pd.DataFrame:
    """Per rank and phase, per step: collectives, NCCL kernel ms, its transfer and wait ms, NCCL share of
    the rank's kernel time, GPU span ms (the phase's first kernel start to its last kernel end, ÷ steps:
    kernels attributed to a step by their launch run past its host range while the rank waits), and the
    median launch skew (µs)."""
    k = ranks_timeline[ranks_timeline.kind == "kernel"]
    rows = []
    for (rank, ph), c in coll.groupby(["rank", "phase"]):
        steps = max(1, ranks_phases[(ranks_phases["rank"] == rank) & (ranks_phases.phase == ph)].step.nunique())
        kp = k[(k["rank"] == rank) & (k.phase == ph)]
        kt = kp.duration_ns.sum()
        rows.append({"gpu_rank": rank, "phase": ph, "steps": steps, "collectives_per_step": len(c) / steps,
                     "nccl_ms_per_step": c.duration_ns.sum() / steps / 1e6,
                     "transfer_ms_per_step": c.transfer_ns.sum() / steps / 1e6,
                     "wait_ms_per_step": c.wait_ns.sum() / steps / 1e6,
                     "nccl_pct_of_kernel_time": 100 * c.duration_ns.sum() / kt if kt else np.nan,
                     "gpu_span_ms_per_step": (kp.end_ns.max() - kp.start_ns.min()) / steps / 1e6,
                     "median_skew_us": c.skew_ns.median() / 1e3})
    return pd.DataFrame(rows)


def link_check(coll: pd.DataFrame, n: int, link_gbps: float | None) -> pd.DataFrame:
    """Per collective kind (decode and prefill): median payload, the bytes each rank sends (bus factor),
    the time those bytes need at the link's datasheet bandwidth, and the measured transfer (median of the
    paired fastest-rank kernel): what is left is the collective's fixed latency, not bandwidth."""
    rows = []
    for (ph, cname), c in coll[coll["rank"] == coll["rank"].min()].groupby(["phase", "collective"]):
        payload = c.payload_bytes.median()
        bus = payload * bus_factor(cname, n)
        rows.append({"phase": ph, "collective": cname, "count": len(c), "payload_bytes": payload, "bus_bytes": bus,
                     "link_time_us": bus / (link_gbps * 1e9) * 1e6 if link_gbps else np.nan,
                     "transfer_us": c.transfer_ns.median() / 1e3,
                     "wait_us_median_all_ranks": coll[(coll.phase == ph) & (coll.collective == cname)]
                     .wait_ns.median() / 1e3})
    out = pd.DataFrame(rows)
    if len(out):
        out["transfer_over_link_time"] = out.transfer_us / out.link_time_us
    return out


def link_step_ms(sec) -> float:
    """The link model's collective time per decode step: every collective's bytes per rank ÷ the link's
    datasheet bandwidth (NaN without a bandwidth in devices.yaml)."""
    if not sec.link_gbps:
        return np.nan
    c = sec.coll[(sec.coll.phase == "decode") & (sec.coll["rank"] == sec.coll["rank"].min())]
    bus = (c.payload_bytes * c.collective.map(lambda x: bus_factor(x, sec.n))).sum()
    return bus / (sec.link_gbps * 1e9) * 1e3 / max(1, c.step.nunique())


def against_one_gpu(tp_run, one_run) -> pd.DataFrame:
    """Decode and prefill of the TP run (every rank) beside the one-GPU twin: wall ms per token (the plain
    calls' phase timings where both captures have them, else the profiled pass), the ratio, and per token
    the TP ranks' NCCL transfer and wait."""
    from .summary import plain_ms_per_step as plain
    from .timeline import phase_summary

    def profiled(run, ph):
        s = phase_summary(run.timeline, run.phases).set_index("phase").loc[ph]
        return s.wall_ms / max(1, s.steps)

    coll = collectives(tp_run.ranks_timeline)
    pr = per_rank(coll, tp_run.ranks_timeline, tp_run.ranks_phases).set_index(["gpu_rank", "phase"])
    rows = []
    for ph in ("prefill", "decode"):
        b = tp_run.info.workload.batch_size if ph == "decode" else 1
        one, tp = plain(one_run, ph), plain(tp_run, ph)
        basis = "plain runs"
        if one is None or tp is None:
            basis = "profiled pass"
            one, tp = profiled(one_run, ph), profiled(tp_run, ph)
        row = {"phase": ph, "unit": "ms/token" if ph == "decode" else "ms/call", "basis": basis,
               "one_gpu_ms": one / b, "tp_ms": tp / b, "tp_over_one_gpu": tp / one}
        here = [r for r in tp_run.ranks if (r, ph) in pr.index]
        if here:  # the transfer is the pair's, the same on every rank; the wait differs per rank
            row["transfer_ms"] = pr.loc[(here[0], ph), "transfer_ms_per_step"] / b
            row["wait_ms_max"] = max(pr.loc[(r, ph), "wait_ms_per_step"] for r in here) / b
        rows.append(row)
    return pd.DataFrame(rows)


def category_deltas(tp_run, one_run, phase: str = "decode") -> pd.DataFrame:
    """Per kernel category, GPU ms per step on the one GPU and on each TP rank (long: one row per category
    and rank), and the change from the one GPU."""
    def per_cat(tl, phases):
        k = tl[(tl.kind == "kernel") & (tl.phase == phase)]
        steps = max(1, phases[phases.phase == phase].step.nunique())
        return k.groupby("category").duration_ns.sum() / steps / 1e6

    one = per_cat(one_run.timeline, one_run.phases)
    rows = []
    for r in tp_run.ranks:
        t = tp_run.ranks_timeline[tp_run.ranks_timeline["rank"] == r]
        p = tp_run.ranks_phases[tp_run.ranks_phases["rank"] == r]
        tp = per_cat(t, p)
        for cat in one.index.union(tp.index):
            a, b = float(one.get(cat, 0.0)), float(tp.get(cat, 0.0))
            rows.append({"category": cat, "gpu_rank": r, "one_gpu_ms": a, "tp_ms": b, "change_ms": b - a})
    out = pd.DataFrame(rows)
    return out.sort_values(["gpu_rank", "one_gpu_ms", "tp_ms"], ascending=[True, False, False]).reset_index(drop=True)


@dataclass
class Section:
    """What the timeline chapter shows of a tensor-parallel run (None fields: not a TP run / no twin)."""
    n: int
    coll: pd.DataFrame
    ranks: pd.DataFrame
    link: pd.DataFrame
    link_gbps: float | None
    against: pd.DataFrame | None
    categories: pd.DataFrame | None


def section(run, one_run=None) -> Section | None:
    """The tensor-parallel section of a run (None for a one-GPU run): collectives paired across ranks, per
    rank transfer and wait, the link check against devices.yaml, and the one-GPU twin when given."""
    if run.ranks_timeline is None:
        return None
    from ..devices import UnknownDeviceError, lookup

    try:
        link = lookup(run.gpu_name).link_gbps
    except UnknownDeviceError:
        link = None
    n = len(run.ranks)
    coll = collectives(run.ranks_timeline)
    return Section(n, coll, per_rank(coll, run.ranks_timeline, run.ranks_phases), link_check(coll, n, link), link,
                   against_one_gpu(run, one_run) if one_run is not None else None,
                   category_deltas(run, one_run) if one_run is not None else None)
