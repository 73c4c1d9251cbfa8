"""Two runs side by side (`python -m kernelbook diff A B`, and the comparison section of the summary).

Per phase: wall and GPU-busy time per step, per-category shares; per kernel: matched by identity that
survives template-parameter and tile changes (the aten op that launched it and its kernel family, e.g.
`aten::mm` → `nvjet GEMM`, whatever the tile), with time per step and, where both runs profiled it,
ncu metric deltas; kernels only in one run; ncu coverage on each side. A kernel launched from a
torch.compile'd graph (CUDA graph replay: the profiler names the graph call, not the aten op) matches
the other run's kernels of its family whatever their ops. All times per step in µs/ms as the column
names say; B − A deltas, and B ÷ A ratios. Before any number, `pairing` says whether the two runs ran the
same work (`WORKLOAD_KEYS`), the same work set up differently (`SETUP_KEYS`, the GPU), or one is a labelled
variant of the other; a phase or kernel one run lacks is shown as absent, never as a number.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.manifest import Workload
from ..contract.phrase import column as phrase_column
from ..contract.phrase import phrase
from .timeline import PHASE_ORDER, category_shares, phase_summary

METRICS = ("duration_ns", "sm_pct", "dram_pct", "memory_pct", "achieved_occupancy_pct", "dram_bytes")
# each metric as the reader reads it (a phrase), its unit and the factor from the ncu table's column to it
METRIC_SHOWN = {"duration_ns": (phrase("duration"), "µs", 1e-3), "sm_pct": (phrase("SM throughput"), "% of peak", 1.0),
                "dram_pct": (phrase("DRAM throughput"), "% of peak", 1.0),
                "memory_pct": (phrase("memory throughput"), "% of peak", 1.0),
                "achieved_occupancy_pct": (phrase("achieved occupancy"), "% of warps", 1.0),
                "dram_bytes": (phrase("DRAM bytes"), "bytes", 1.0)}
_TILE = re.compile(r",?\s*\d+x\d+(x\d+)?\s*tile")
COMPILED = "compiled graph"
_COMPILED_OP = re.compile(r"CompiledFxGraph|Torch-Compiled Region|CompiledFunction|cudaGraphLaunch")


def family(friendly_name: str | None) -> str:
    """A kernel's family: its friendly name without tile sizes ('nvjet GEMM (mixed, 64x8 tile)' →
    'nvjet GEMM (mixed)'), so a re-tuned GEMM still matches its counterpart."""
    f = _TILE.sub("", friendly_name or "?")
    return re.sub(r"\(\s*\)", "", f).replace("( ", "(").strip()


NAMED = ("wall_ms_per_step", "gpu_busy_ms_per_step")  # per step of a phase: the run's named quantities
_NAME = {"wall_ms_per_step": "profiled_step_ms", "gpu_busy_ms_per_step": "gpu_busy_step_ms"}


def phases(a, b) -> pd.DataFrame:
    """Per phase: wall and GPU-busy ms per step, launches per step, in A and B, with B ÷ A. The per-step times of
    the three phases are each run's named quantities (`contract.quantity`: the profiled step and its GPU-busy time,
    as chapters 01, 05 and 07 print them), their ratios B ÷ A of those."""
    rows = []
    sa, sb = (phase_summary(r.timeline, r.phases).set_index("phase") for r in (a, b))
    for ph in [p for p in PHASE_ORDER if p in sa.index or p in sb.index]:
        row = {"phase": ph}
        for tag, s, run in (("a", sa, a), ("b", sb, b)):
            if ph in s.index:
                steps = max(1, int(s.loc[ph, "steps"]))
                row[f"wall_ms_per_step_{tag}"] = s.loc[ph, "wall_ms"] / steps
                row[f"gpu_busy_ms_per_step_{tag}"] = s.loc[ph, "gpu_busy_ms"] / steps
                row[f"launches_per_step_{tag}"] = s.loc[ph, "launches_per_step"]
                if ph in PHASE_ORDER[:3]:  # "other" has no steps: its time is not per step of anything
                    for c in NAMED:
                        row[f"{c}_{tag}"] = quantity.q(run.run_id, f"{ph}.{_NAME[c]}", row[f"{c}_{tag}"])
            else:
                row.update({f"{c}_{tag}": np.nan for c in ("wall_ms_per_step", "gpu_busy_ms_per_step",
                                                           "launches_per_step")})
        for c, r in (("wall_ms_per_step", "wall_ratio"), ("gpu_busy_ms_per_step", "gpu_busy_ratio")):
            x, y = row[f"{c}_b"], row[f"{c}_a"]
            row[r] = (quantity.ratio(x, y, f"{x.key}_over/{a.run_id}") if isinstance(x, quantity.Q)
                      and isinstance(y, quantity.Q) else x / y)
        rows.append(row)
    out = pd.DataFrame(rows)
    for c in [f"{c}_{t}" for c in NAMED for t in "ab"] + ["wall_ratio", "gpu_busy_ratio"]:
        if c in out:
            out[c] = quantity.column((r[c] for r in rows), out.index)
    return out


def categories(a, b) -> pd.DataFrame:
    """Per phase and category: share of kernel time (%) in A and B and the change in points."""
    ca = category_shares(a.timeline).rename(columns={"pct": "pct_a"})
    cb = category_shares(b.timeline).rename(columns={"pct": "pct_b"})
    m = ca.merge(cb, on=["phase", "category"], how="outer").fillna({"pct_a": 0.0, "pct_b": 0.0})
    m["change_pts"] = m.pct_b - m.pct_a
    m = m[m.phase.isin(PHASE_ORDER[:3])]
    return m.sort_values(["phase", "pct_a"], ascending=[True, False]).reset_index(drop=True)


def op_label(op: str | None) -> str:
    """The aten op that launched a kernel; `compiled graph` for a launch from a torch.compile'd graph
    (its profiler name carries a per-compile hash that no other run shares)."""
    if op is None or op != op:
        return "-"
    return COMPILED if _COMPILED_OP.search(op) else op


def _by_value(column: pd.Series, f) -> pd.Series:
    """`column.map(f)` computed once per distinct value (a timeline repeats a few hundred names 50 k times)."""
    values = pd.unique(column)
    return column.map(dict(zip(values, map(f, values))))


def _per_step(run) -> pd.DataFrame:
    tl = run.timeline[(run.timeline.kind == "kernel") & run.timeline.phase.isin(PHASE_ORDER[:3])]
    steps = run.phases.groupby("phase")["step"].nunique()
    tl = tl.assign(family=_by_value(tl.friendly_name, family), op=_by_value(tl.op, op_label))
    g = tl.groupby(["phase", "op", "family"]).agg(total_ns=("duration_ns", "sum"), launches=("duration_ns", "size"),
                                                  names=("name", "nunique"), name=("name", "first"))
    g = g.reset_index()
    n = g.phase.map(steps).fillna(1).clip(lower=1)
    g["us_per_step"] = g.total_ns / n / 1e3
    g["launches_per_step"] = g.launches / n
    return g.drop(columns=["total_ns", "launches"])


def kernels(a, b, phase: str | None = None) -> pd.DataFrame:
    """Kernel families matched across the runs by (phase, aten op, family): µs per step in A and B,
    the change, and `only_in` ('A' / 'B') for those one run lacks; sorted by the larger time. Families
    left unmatched where one side launched them from a compiled graph are matched by (phase, family)
    alone, the other side's ops summed (`op` then reads 'aten::mm, aten::bmm → compiled graph')."""
    ka, kb = _per_step(a), _per_step(b)
    m = ka.merge(kb, on=["phase", "op", "family"], how="outer", suffixes=("_a", "_b"))
    m = _match_compiled(m)
    m["only_in"] = np.where(m.us_per_step_a.isna(), "B", np.where(m.us_per_step_b.isna(), "A", ""))
    m[["us_per_step_a", "us_per_step_b"]] = m[["us_per_step_a", "us_per_step_b"]].fillna(0.0)
    m["change_us_per_step"] = m.us_per_step_b - m.us_per_step_a
    m["ratio"] = m.us_per_step_b / m.us_per_step_a.replace(0, np.nan)
    if phase:
        m = m[m.phase == phase]
    m["_order"] = m[["us_per_step_a", "us_per_step_b"]].max(axis=1)
    m = m.sort_values(["phase", "_order"], ascending=[True, False]).drop(columns="_order")
    return m.reset_index(drop=True)


def _match_compiled(m: pd.DataFrame) -> pd.DataFrame:
    only_a, only_b = m.us_per_step_b.isna(), m.us_per_step_a.isna()
    graph = m.op == COMPILED
    pairs = []
    for (ph, fam), g in m[only_a | only_b].groupby(["phase", "family"]):
        ga, gb = g[g.us_per_step_b.isna()], g[g.us_per_step_a.isna()]
        if ga.empty or gb.empty or not (graph[ga.index].any() or graph[gb.index].any()):
            continue
        ops = lambda x: ", ".join(sorted(set(x.op)))  # noqa: E731
        row = {"phase": ph, "family": fam, "op": f"{ops(ga)} → {ops(gb)}"}
        for tag, side in (("a", ga), ("b", gb)):
            row[f"us_per_step_{tag}"] = side[f"us_per_step_{tag}"].sum()
            row[f"launches_per_step_{tag}"] = side[f"launches_per_step_{tag}"].sum()
            row[f"names_{tag}"] = side[f"names_{tag}"].sum()
            row[f"name_{tag}"] = side[f"name_{tag}"].iloc[0]
        pairs.append((ga.index.union(gb.index), row))
    if not pairs:
        return m
    drop = pd.Index([]).append([ix for ix, _ in pairs])
    return pd.concat([m.drop(index=drop), pd.DataFrame([r for _, r in pairs])], ignore_index=True)


def metrics(a, b) -> pd.DataFrame:
    """ncu metrics of kernels profiled in both runs, matched like `kernels` (first profiled kernel of
    each (phase, op, family)): A, B and B − A per metric with its unit (`METRIC_SHOWN`), long format."""
    def prof(run):
        k = run.ncu_kernels()
        if k is None or "status" not in k:
            return pd.DataFrame()
        k = k[k.status == "profiled"]
        ident = run.timeline.drop_duplicates("name").set_index("name")[["friendly_name", "op"]]
        k = k.drop(columns=[c for c in ("friendly_name", "op") if c in k]).join(ident, on="name")
        k = k.assign(family=k.friendly_name.map(family), op=k.op.fillna("-"))
        return k.drop_duplicates(["phase", "op", "family"])

    pa, pb = prof(a), prof(b)
    if pa.empty or pb.empty:
        return pd.DataFrame(columns=["phase", "op", "family", "metric", "unit", "a", "b", "change"])
    m = pa.merge(pb, on=["phase", "op", "family"], suffixes=("_a", "_b"))
    rows = []
    for _, r in m.iterrows():
        for c in METRICS:
            if f"{c}_a" in r and f"{c}_b" in r:
                label, unit, f = METRIC_SHOWN[c]
                a, b = r[f"{c}_a"] * f, r[f"{c}_b"] * f
                rows.append({"phase": r.phase, "op": r.op, "family": r.family, "metric": label, "unit": unit,
                             "a": a, "b": b, "change": b - a})
    out = pd.DataFrame(rows)
    if rows:
        out["metric"] = phrase_column((r["metric"] for r in rows), out.index)  # the phrases kept
    return out


def coverage(run) -> str:
    """'decode 19/20, prefill 20/20': profiled of selected kernels per phase; empty without an ncu stage."""
    k = run.ncu_kernels()
    if k is None or "status" not in k:
        return ""
    parts = [f"{ph} {int((g.status == 'profiled').sum())}/{len(g)}" for ph, g in k.groupby("phase")]
    return ", ".join(parts)


def coverage_words(run) -> str:
    """'ncu decode 19/20, …', or 'no ncu data' (once: the caller's own 'ncu' wrapped it as 'ncu no ncu data'): a
    phrase."""
    c = coverage(run)
    return phrase("ncu {coverage}", coverage=c) if c else phrase("no ncu data")


# What the model computes: runs that differ in one of these ran different work, and their times differ for that
# reason first (whatif.WORKLOAD_KEYS is stricter: a cross-device twin must also share its setup)
WORKLOAD_KEYS = ("model", "weights", "dtype", "batch_size", "prompt", "prompt_tokens", "max_new_tokens",
                 "no_repeat_ngram_size", "crop_mode", "base_size", "omnidocbench_dir", "omnidocbench_subset", "seed")
# How it computes it: the levers a variant pulls (summary.VARIANT_KEYS) and the GPUs the model is split over
SETUP_KEYS = ("attn_implementation", "cache_implementation", "compile_decode", "tensor_parallel")
SAME_MODEL = Workload.SAME  # a variant keeps these


@dataclass
class Pairing:
    """What two runs share. `workload` and `setup`: the parameters that differ, key → (A's value, B's value);
    `variants`: each run's variant label (None: not a variant); `gpus`: (A's, B's) GPU name when they differ."""
    workload: dict
    setup: dict
    variants: tuple
    gpus: tuple | None

    @property
    def kind(self) -> str:
        """'variant': the runs carry different variant labels, keep model, weights and dtype, and change one
        thing: their setup alone, or one workload parameter (batch 8); 'different': another workload;
        'setup': the same workload set up differently or on another GPU; 'same': neither."""
        va, vb = self.variants
        if va != vb and not any(k in self.workload for k in SAME_MODEL) and (
                (self.setup and not self.workload) or (not self.setup and len(self.workload) <= 1)):
            return "variant"
        if self.workload:
            return "different"
        return "setup" if self.setup or self.gpus else "same"


def pairing(a, b) -> Pairing:
    """The capture parameters two runs differ in (`Pairing`); a key a manifest lacks (captured before the key
    existed) had its schema default."""
    from ..params import CAPTURE, SCHEMA

    defaults = {k: p.default for k, p in SCHEMA.items() if CAPTURE in p.feeds}
    pa = {**defaults, **a.info.params}
    pb = {**defaults, **b.info.params}

    def differ(keys):
        return {k: (pa.get(k), pb.get(k)) for k in keys if pa.get(k) != pb.get(k)}

    gpus = (a.gpu_name, b.gpu_name) if a.gpu_name != b.gpu_name else None
    return Pairing(differ(WORKLOAD_KEYS), differ(SETUP_KEYS), (pa.get("variant"), pb.get("variant")), gpus)


def _value(v, width: int = 40) -> str:
    """A parameter's value as the params file writes it (null, true), cut to `width` characters."""
    s = "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    return s if len(s) <= width else s[:width - 1] + "…"


def _changes(d: dict) -> str:
    return ", ".join(f"{k} {_value(x)} → {_value(y)}" for k, (x, y) in d.items())


def pairing_sentence(p: Pairing) -> str:
    """One sentence on what the two runs share, for the top of the report."""
    gpu = f"GPU {_value(p.gpus[0])} → {_value(p.gpus[1])}" if p.gpus else ""
    if p.kind == "variant":
        va, vb = (f"'{_value(v)}'" if v is not None else None for v in p.variants)
        who = (f"B is variant {vb} of A" if va is None else f"A is variant {va} of B" if vb is None
               else f"A and B are variants {va} and {vb} of one workload")
        what = "; ".join(x for x in (_changes({**p.setup, **p.workload}), gpu) if x)
        return f"{who}: {what or 'no capture parameter differs'}."
    if p.kind == "different":
        also = "; ".join(x for x in (_changes(p.setup), gpu) if x)
        return (f"Different workloads: {_changes(p.workload)}{f' (set up differently too: {also})' if also else ''}"
                " — the times below compare different work, not one change.")
    if p.kind == "setup" and not p.setup:
        return f"Same workload and setup on another GPU: {gpu}."
    if p.kind == "setup":
        return f"Same workload, set up differently: {'; '.join(x for x in (_changes(p.setup), gpu) if x)}."
    return "Same workload and setup on the same GPU model: the differences below are the runs' own."


def _finite(x) -> bool:
    try:
        return math.isfinite(x)
    except TypeError:
        return False


def _cell(x, fmt: str, width: int, unit: str = "") -> str:
    """`x` formatted, or '—' in the same width where the run has no such number (absent, no wall time)."""
    if _finite(x):
        return f"{x:{width}{fmt}}{unit}"
    return f"{'—':>{width}}{' ' * len(unit)}"


def text_report(a, b, top: int = 12) -> str:
    """The plain-text comparison `python -m kernelbook diff` prints: first what the runs share (`pairing`),
    then per phase, per category and per kernel family; '—' where a run has no such phase, time or kernel."""
    def params(r):
        p = r.info.params
        keys = ("model", "batch_size", "max_new_tokens", "variant", "attn_implementation", "cache_control")
        return ", ".join(f"{k}={_value(p[k], 80)}" for k in keys if k in p)

    out = [pairing_sentence(pairing(a, b)), "",
           f"A: {a.run_id} ({a.gpu_name}; {params(a)}; {coverage_words(a)})",
           f"B: {b.run_id} ({b.gpu_name}; {params(b)}; {coverage_words(b)})", ""]
    ph = phases(a, b)
    absent = {}  # phase → 'A' / 'B', the run without it
    out.append("Per phase, per step          wall A      wall B   B/A    GPU busy A  GPU busy B   B/A   launches A→B")
    for r in ph.itertuples():
        # a phase a run lacks has no GPU-busy time at all (a phase it holds has one, 0 without kernels)
        lacks = [t for t, v in (("A", r.gpu_busy_ms_per_step_a), ("B", r.gpu_busy_ms_per_step_b)) if not _finite(v)]
        words = []
        if lacks:
            absent[r.phase] = lacks[0]
            words.append(f"absent in {lacks[0]}")
        untimed = [t for t, w, v in (("A", r.wall_ms_per_step_a, r.gpu_busy_ms_per_step_a),
                                     ("B", r.wall_ms_per_step_b, r.gpu_busy_ms_per_step_b))
                   if _finite(v) and not _finite(w)]
        if untimed:  # `other`: generate's own work between forwards, no range of its own and no steps
            words.append(f"no phase range in {' and '.join(untimed)}: no wall time, GPU busy is the whole run's")
        out.append(f"  {r.phase:<22} {_cell(r.wall_ms_per_step_a, '.2f', 9, ' ms')} "
                   f"{_cell(r.wall_ms_per_step_b, '.2f', 9, ' ms')} {_cell(r.wall_ratio, '.2f', 5)}"
                   f"  {_cell(r.gpu_busy_ms_per_step_a, '.2f', 9, ' ms')} "
                   f"{_cell(r.gpu_busy_ms_per_step_b, '.2f', 9, ' ms')} {_cell(r.gpu_busy_ratio, '.2f', 5)}"
                   f"   {_cell(r.launches_per_step_a, '.0f', 6)} → {_cell(r.launches_per_step_b, '.0f', 0)}"
                   + (f"   {'; '.join(words)}" if words else ""))
    out += ["", "Category shares of kernel time (%), A → B"]
    for p, g in categories(a, b).groupby("phase", sort=False):
        if p in absent:  # its shares in the other run alone, not set against a 0 % that was never measured
            has = "B" if absent[p] == "A" else "A"
            col = "pct_b" if has == "B" else "pct_a"
            cells = [f"{r.category} {getattr(r, col):.1f}" for r in g.sort_values(col, ascending=False).head(6)
                     .itertuples()]
            out.append(f"  {p}: absent in {absent[p]}; {has}: " + "; ".join(cells))
            continue
        cells = [f"{r.category} {r.pct_a:.1f}→{r.pct_b:.1f}" for r in g.head(6).itertuples()]
        out.append(f"  {p}: " + "; ".join(cells))
    k = kernels(a, b)
    for p in [x for x in PHASE_ORDER[:3] if x in set(k.phase)]:
        g = k[k.phase == p]
        note = f"; absent in {absent[p]}" if p in absent else ""
        out += ["", f"{p}: kernels matched by aten op and family (µs per step, A → B{note})"]
        for r in g.head(top).itertuples():
            tag = f"  [only in {r.only_in}]" if r.only_in else ""
            ua = r.us_per_step_a if r.only_in != "B" else math.nan  # a kernel one run lacks: '—', not 0.0
            ub = r.us_per_step_b if r.only_in != "A" else math.nan
            out.append(f"  {_cell(ua, '.1f', 10)} → {_cell(ub, '.1f', 10)}  {r.op:<32} {r.family}{tag}")
        added, removed = (g.only_in == "B").sum(), (g.only_in == "A").sum()
        out.append(f"  ({len(g)} families; {added} only in B, {removed} only in A)")
    mt = metrics(a, b)
    if len(mt):
        out += ["", "ncu metrics of kernels profiled in both (A → B)"]
        for (p, op, fam), g in mt.groupby(["phase", "op", "family"], sort=False):
            cells = []
            for r in g.itertuples():
                cells.append(f"{r.metric} {_cell(r.a, '.3g', 0)}→{_cell(r.b, '.3g', 0)}")
            out.append(f"  {p} {op} {fam}: " + "; ".join(cells))
    return "\n".join(out)
