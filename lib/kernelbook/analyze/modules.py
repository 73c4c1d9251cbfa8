"""Kernels in the model's terms: the module that launched each kernel (its path and class, recorded by the
capture's shapes pass, see capture.phases), its type (attention, MoE experts, norm, ...) and its layer.

A run captured before module attribution has no `module` column: `has_modules` says so, and the tables are
empty. Pure functions over the timeline; the chapters render what they return, and `narrate.modules` says what
the tables and the ledger mean.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract.names import PROJECTOR_ATTRS, VISION_ATTRS, VISION_CLASS_WORDS
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase

# in the order a reader meets them in a decoder layer; "residual" is a layer's own work between its submodules
# (the residual adds), "outside layers" work of the model's own forwards outside every layer (masks, positions,
# slicing the logits), "other" a module no rule names, "compiled step (fused)" a CUDA-graph node Inductor fused
# from several modules' ops (it has no eager twin in the shapes pass)
# (phrases: English the tables hold and compare, shown in the reader's language)
MODULE_TYPES = (phrase("vision tower"), phrase("projector"), phrase("embedding"), phrase("norm"), phrase("attention"),
                phrase("rotary embedding"), phrase("dense MLP"), phrase("MoE router"), phrase("MoE dispatch"),
                phrase("MoE experts"), phrase("MoE shared experts"), phrase("residual"), phrase("lm_head"),
                phrase("other"), phrase("outside layers"), phrase("compiled step (fused)"))
_TYPE = {str(t): t for t in MODULE_TYPES}  # a module type's name → its phrase
_LAYER = re.compile(r"\.(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")


def module_type(path: str | None, cls: str | None = None) -> str:
    """The type of the module at `path` (innermost module of a launch) with class `cls`: the innermost part of
    the path that names a type, read from the inside out (a vision tower's attention is attention: the phase
    says it is the vision encode's); a part of a vision tower or projector that names none is `vision tower` /
    `projector`."""
    if not isinstance(path, str) or path == "":
        return "outside layers"
    parts = path.split(".")
    cls = cls if isinstance(cls, str) else ""
    if "Norm" in cls:
        return "norm"
    if "Rotary" in cls:
        return "rotary embedding"
    for i in range(len(parts) - 1, -1, -1):
        p = parts[i].lower()
        innermost = i == len(parts) - 1
        if p == "lm_head":
            return "lm_head"
        if p in ("shared_experts", "shared_expert"):
            return "MoE shared experts"
        if p.endswith("experts"):
            return "MoE experts"
        if p in ("gate", "router"):
            return "MoE router"
        if "rotary" in p:
            return "rotary embedding"
        if "attn" in p or "attention" in p:
            return "attention"
        if "norm" in p or p.startswith("ln"):
            return "norm"
        if "embed" in p or p == "wte":
            return "embedding"
        if p in ("mlp", "feed_forward", "ffn", "block_sparse_moe", "moe"):
            return "MoE dispatch" if innermost and re.search(r"moe|sparse", cls, re.I) else "dense MLP"
    if parts[-1].isdigit():
        return "residual"
    if len(parts) <= 2 and cls.endswith("Model"):  # model, model.language_model
        return "outside layers"
    if _in_vision(parts) or any(w in cls for w in VISION_CLASS_WORDS):
        return "vision tower"
    if any(p in PROJECTOR_ATTRS for p in parts):
        return "projector"
    return "other"


def _in_vision(parts: list[str]) -> bool:
    return any(p in VISION_ATTRS or any(w in p for w in ("vision", "visual", "image_encoder")) for p in parts)


def layer_of(path: str | None) -> int | None:
    """The decoder layer index in `path` (`...layers.7.mlp` -> 7), None outside a numbered layer or in a vision
    tower (whose layers are the encoder's, not the decoder's)."""
    if not isinstance(path, str) or _in_vision(path.split(".")) or any(p in PROJECTOR_ATTRS for p in path.split(".")):
        return None
    m = _LAYER.search(path)
    return int(m.group(1)) if m else None


def has_modules(timeline: pd.DataFrame) -> bool:
    return "module" in timeline and bool(timeline["module"].notna().any())


def with_module_types(kernels: pd.DataFrame) -> pd.DataFrame:
    """`kernels` with `module_type` and `layer` (from `module`, `module_class`); unchanged without modules."""
    if "module" not in kernels:
        return kernels
    cls = kernels["module_class"] if "module_class" in kernels else pd.Series(None, index=kernels.index, dtype=object)
    # once per distinct (module, class) pair, not per row: a long decode has 10^5 rows and a few hundred pairs
    pairs = pd.DataFrame({"m": kernels["module"].astype(object), "c": cls.astype(object)}, index=kernels.index)
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(pairs))
    types = np.array([module_type(*_none(u)) for u in uniques] + [module_type(None, None)], dtype=object)
    layers = pd.array([layer_of(_none(u)[0]) for u in uniques] + [None], dtype="Int64")
    return kernels.assign(module_type=types[codes], layer=layers[codes])


def _none(pair: tuple) -> tuple:
    """A (module, class) pair with pandas' missing values as None."""
    return tuple(None if v is None or (isinstance(v, float) and v != v) else v for v in pair)


def by_module_type(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per phase and module type: kernel time per step (µs), launches per step and the share of the phase's
    kernel time (%), over the steps that recorded modules (the shapes pass's steps). Long format."""
    k = _attributed(timeline)
    if k.empty:
        return pd.DataFrame(columns=["phase", "module_type", "us_per_step", "launches_per_step", "share_pct"])
    steps = k.groupby("phase")["step"].nunique()
    g = k.groupby(["phase", "module_type"], observed=True).agg(ns=("duration_ns", "sum"), n=("name", "size"))
    g = g.reset_index()
    g["us_per_step"] = g["ns"] / 1e3 / g["phase"].map(steps)
    g["launches_per_step"] = g["n"] / g["phase"].map(steps)
    g["share_pct"] = 100 * g["ns"] / g.groupby("phase")["ns"].transform("sum")
    g["module_type"] = pd.Categorical(g["module_type"], MODULE_TYPES, ordered=True)
    return (g.sort_values(["phase", "us_per_step"], ascending=[True, False])
             .drop(columns=["ns", "n"]).reset_index(drop=True))


def by_layer(timeline: pd.DataFrame, phase: str = "decode") -> pd.DataFrame:
    """Per decoder layer of `phase` and module type: kernel time per step (µs). Long format."""
    k = _attributed(timeline)
    k = k[(k.phase == phase) & k["layer"].notna()]
    if k.empty:
        return pd.DataFrame(columns=["layer", "module_type", "us_per_step"])
    steps = k["step"].nunique()
    g = k.groupby(["layer", "module_type"]).duration_ns.sum().reset_index()
    g["us_per_step"] = g.pop("duration_ns") / 1e3 / steps
    return g.sort_values(["layer", "us_per_step"], ascending=[True, False]).reset_index(drop=True)


def _attributed(timeline: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the steps whose launches carry modules (kernels of those steps launched outside every
    submodule are `top level`)."""
    if not has_modules(timeline):
        return timeline.iloc[0:0].assign(module_type=None, layer=None)
    k = timeline[(timeline.kind == "kernel") & timeline.phase.isin(["vision_encode", "prefill", "decode"])]
    recorded = k[k["module"].notna()][["phase", "step"]].drop_duplicates()
    k = k.merge(recorded, on=["phase", "step"])
    if "graph" in k and len(k):  # a compiled step's gather kernel: the module of the expert GEMM it feeds
        att = attributed_modules(k)
        k = k.assign(module=att.module, module_class=att.module_class)
    k = with_module_types(k)
    if "graph" in k:  # a CUDA-graph node with no eager twin (Inductor's fused kernels) has no module of its own
        fused = k["graph"].fillna(False).astype(bool) & k["module"].isna()
        k.loc[fused, "module_type"] = "compiled step (fused)"
    return k


# Inductor names a fused kernel after the aten ops it fused: a gather fuses `index` (`index_copy` is a cache write)
GATHER_KERNEL = re.compile(r"^triton_\w*?fused\w*?_index(?!_copy)(?:_|$)")


def attributed_modules(kernels: pd.DataFrame) -> pd.DataFrame:
    """`module` and `module_class` of each kernel row (same index), with a compiled step's gather kernels attributed:
    a CUDA-graph node that fused an `aten.index` gather (`triton_*fused*_index*`, not `index_copy`) and has no module
    of its own takes the module of the launch it feeds, the next launch of its step that has a module, where that
    module is MoE experts (the expert GEMM that reads the gathered weights: the eager twin runs the same `aten::index`
    in that module, right before the same `aten::bmm`). `consumer`, `consumer_shapes`: that launch's kernel name and
    op shapes (None for rows not attributed this way)."""
    cols = ["module", "module_class", "consumer", "consumer_shapes"]
    out = pd.DataFrame({"module": kernels["module"].astype(object),
                        "module_class": (kernels["module_class"] if "module_class" in kernels
                                         else pd.Series(None, index=kernels.index)).astype(object),
                        "consumer": None, "consumer_shapes": None}, index=kernels.index)[cols]
    if "graph" not in kernels or not len(kernels):
        return out
    gather = (kernels["graph"].fillna(False).astype(bool) & kernels["module"].isna()
              & kernels["name"].astype(str).str.contains(GATHER_KERNEL))
    if not gather.any():
        return out
    order = kernels.sort_values(["phase", "step", "start_ns"], kind="stable")
    has = order["module"].notna()
    # the next launch with a module, within the same phase and step: backward fill over the launches after each row
    nxt = order[["module", "module_class", "name", "op_shapes"]].where(has)
    nxt = nxt.groupby([order["phase"], order["step"]], sort=False).bfill()
    nxt = nxt.reindex(kernels.index)
    ok = gather & nxt["module"].notna()
    ok &= pd.Series([module_type(m, c) == "MoE experts" if o else False
                     for m, c, o in zip(nxt["module"], nxt["module_class"], ok)], index=kernels.index)
    out.loc[ok, "module"] = nxt.loc[ok, "module"]
    out.loc[ok, "module_class"] = nxt.loc[ok, "module_class"]
    out.loc[ok, "consumer"] = nxt.loc[ok, "name"]
    out.loc[ok, "consumer_shapes"] = nxt.loc[ok, "op_shapes"]
    return out


MIN_FLOOR_BYTES = 1e6  # must-move bytes per step below which a module's DRAM floor is not shown


def bytes_ledger(timeline: pd.DataFrame, kernels: pd.DataFrame | None, dram_bytes_per_s: float,
                 phase: str = "decode") -> pd.DataFrame:
    """One step of `phase`, per module type: kernel time (µs), launches, the bytes it must move and the bytes
    its kernels moved (MB per step), the share of the moved bytes that ncu measured, and the time those must-move
    bytes take at `dram_bytes_per_s` (the module's floor, µs) with the kernel time's multiple of it. Averaged over
    the steps that recorded modules. See LEDGER_NOTE."""
    from . import whatif as W

    need = {"name", "phase", "status", "dram_bytes"}
    if kernels is not None and not need <= set(kernels.columns):  # a capture stopped before ncu wrote counters
        kernels = None
    k = _attributed(timeline)
    k = k[k.phase == phase]
    cols = ["module_type", "launches_per_step", "kernel_us", "must_bytes", "moved_bytes", "moved_ncu_pct", "floor_us",
            "time_over_floor"]
    if k.empty:
        return pd.DataFrame(columns=cols)
    work = W.work_table(timeline[timeline.phase == phase], kernels)
    key = ["name", "op_shapes", "grid"]
    k = k.assign(op_shapes=k.op_shapes.fillna(""), grid=k.grid.fillna("").astype(str))
    w = work[key + ["category", "weight_bytes", "dram_bytes", "flops_tensor"]].drop_duplicates(key)
    k = k.merge(w.rename(columns={"category": "_cat"}), on=key, how="left")
    att = k["_cat"] == "attention"
    k["must"] = k.weight_bytes.fillna(0.0) + k.dram_bytes.where(att, 0.0).fillna(0.0)
    k["moved"], k["from_ncu"] = k.dram_bytes.fillna(0.0), False
    if kernels is not None and len(kernels):
        prof = kernels[(kernels.phase == phase) & (kernels.status == "profiled") & kernels.dram_bytes.notna()]
        # the profiled launch's own shapes (its step and op call in the timeline): a launch of the same kernel and
        # grid with other shapes (a shared expert's up and down projections) moves other bytes, so it keeps the
        # bytes its shapes imply instead of the profiled launch's counter
        shapes = _profiled_shapes(timeline[timeline.phase == phase], prof)
        # where the run measured the loop (ncu's range pass, capture.ncu_ranges), a profiled kernel moved its in-loop
        # DRAM reads: what it fetched from DRAM after its producer's launch. Reads, not reads + writes: its own output
        # is written back later, under another launch; reads belong to the kernel that issued them
        inloop = inloop_basis(prof)

        def moved(r) -> float:
            v = r.get("dram_read_bytes_inloop") if inloop else None
            return float(v) if v is not None and v == v else float(r.dram_bytes)

        ncu = {(r["name"], _grid(r.get("grid")), shapes.get(i)): moved(r) for i, r in prof.iterrows()}
        hit = [ncu.get((n, g, sh), ncu.get((n, g, None))) for n, g, sh in zip(k["name"], k["grid"], k["op_shapes"])]
        got = pd.Series([h is not None for h in hit], index=k.index)
        k.loc[got, "moved"] = [h for h in hit if h is not None]
        k["from_ncu"] = got
    steps = max(1, k.step.nunique())
    k["ncu"] = k.moved.where(k.from_ncu, 0.0)
    g = k.groupby("module_type").agg(launches=("name", "size"), ns=("duration_ns", "sum"), must=("must", "sum"),
                                     moved=("moved", "sum"), ncu=("ncu", "sum")).reset_index()
    g = pd.concat([g, g.drop(columns="module_type").sum().to_frame().T.assign(module_type="step")],
                  ignore_index=True)
    out = pd.DataFrame({"module_type": g.module_type, "launches_per_step": g.launches / steps,
                        "kernel_us": g.ns / 1e3 / steps, "must_bytes": g.must / steps, "moved_bytes": g.moved / steps,
                        "moved_ncu_pct": 100 * g.ncu / g.moved.where(g.moved > 0)})
    # a floor only where the module must move bytes worth a bound: under 1 MB per step (no weights or KV cache, a
    # rotary table's 128 B) it would be picoseconds, and the kernel time's multiple of it a meaningless 10^5
    out["floor_us"] = (out.must_bytes / dram_bytes_per_s * 1e6).where(out.must_bytes >= MIN_FLOOR_BYTES)
    out["time_over_floor"] = out.kernel_us / out.floor_us
    body = out[out.module_type != "step"].sort_values("kernel_us", ascending=False)
    out = pd.concat([body, out[out.module_type == "step"]], ignore_index=True)[cols]
    prof = kernels[(kernels.phase == phase) & (kernels.status == "profiled")] if kernels is not None else None
    out.attrs["moved_basis"] = "inloop_reads" if prof is not None and inloop_basis(prof) else "cold"
    return out


def step_measured(ranges: pd.DataFrame | None, phase: str = "decode") -> dict | None:
    """The DRAM bytes one whole step of `phase` read and wrote in the loop, measured by the range pass as one range
    (capture.ncu_ranges: caches flushed before the step, not between its kernels): {"step", "read_bytes",
    "write_bytes"}; None where the run has no such range."""
    if ranges is None or ranges.empty:
        return None
    s = ranges[(ranges.kind == "step") & (ranges.phase == phase) & ranges.dram_read_bytes.notna()]
    if s.empty:
        return None
    return {"step": int(s.step.iloc[0]), "read_bytes": float(s.dram_read_bytes.iloc[0]),
            "write_bytes": float(s.dram_write_bytes.iloc[0])}


def inloop_basis(prof: pd.DataFrame) -> bool:
    """Whether the ledger's moved bytes of profiled kernels are their in-loop DRAM reads: the run's kernel table has
    the in-loop pass's `dram_read_bytes_inloop` for some of `prof`."""
    return "dram_read_bytes_inloop" in prof and bool(prof.dram_read_bytes_inloop.notna().any())


def _profiled_shapes(timeline: pd.DataFrame, prof: pd.DataFrame) -> dict:
    """Per profiled kernel row (its index): the op shapes of the launch ncu profiled, found by its step, op call and
    name in the timeline; rows without a step or op call (graph nodes, older captures) are left out (None)."""
    if not {"profiled_step", "op_index"} <= set(prof.columns) or "op_index" not in timeline:
        return {}
    t = timeline.assign(op_shapes=timeline.op_shapes.fillna("")).drop_duplicates(["step", "op_index", "name"])
    p = prof[["profiled_step", "op_index", "name"]].dropna().reset_index()
    hit = p.merge(t[["step", "op_index", "name", "op_shapes"]], left_on=["profiled_step", "op_index", "name"],
                  right_on=["step", "op_index", "name"])
    return dict(zip(hit["index"], hit.op_shapes))


def _grid(g) -> str:
    """ncu's grid string in the timeline's form (`4x5x1`)."""
    return "" if g is None or (isinstance(g, float)) else str(g).replace(",", "x").replace(" ", "").strip("()[]")


def dram_bandwidth(run) -> tuple[float, str]:
    """(bytes/s, source: a phrase) for the floors: the run's measured device-to-device copy, else the device's spec."""
    mp = run.info.measured_peaks
    if mp and mp.d2d_copy_gbps:
        return mp.d2d_copy_gbps * 1e9, phrase("measured device-to-device copy")
    from ..devices import UnknownDeviceError, lookup

    try:
        return lookup(run.info.device or "").dram_bytes_per_s, phrase("spec sheet")
    except UnknownDeviceError:
        return float("nan"), phrase("unknown")


def run_ledger(run) -> tuple[pd.DataFrame, dict | None]:
    """A run's bytes ledger of one decode step and what it says (chapters 01 and 07, `narrate.modules`): the floors at
    the run's DRAM bandwidth (`dram_bandwidth`), the step against the plain generate's (`ledger_reading`)."""
    bw = dram_bandwidth(run)
    ledger = bytes_ledger(run.timeline, run.ncu_kernels(), bw[0])
    return ledger, ledger_reading(ledger, run.info.plain_ms_per_step().get("decode"), bw,
                                  step_measured(run.ncu_ranges()))


# the measured step's reads within this fraction of its must-move bytes: it reads what it must, once
STEP_READS_TOLERANCE = 0.10
EXCESS_SHOWN = 0.05  # a module's moved bytes beyond its must-move ones, as a fraction of the step's, worth naming


def ledger_reading(ledger: pd.DataFrame, plain_step_ms: float | None, bw: tuple[float, str],
                   measured: dict | None = None) -> dict | None:
    """What the ledger says about the distance between the step and its limit, module by module (None for an empty
    ledger: a run captured before module attribution). MB, µs, ms and % as the keys say: the step's must-move and
    moved bytes, its floor at `bw` (bytes/s, source) and its kernel time; `measured` (`step_measured`): the whole
    step's DRAM reads and writes in the loop, set against the bytes it must move (`reads`: 'once' within
    STEP_READS_TOLERANCE, else 'more' or 'less', by `reads_pct`); `inloop`: the moved bytes of profiled kernels are
    their in-loop reads; `excess`: the module type that moved most beyond its must-move bytes, where that is over
    EXCESS_SHOWN of the step's; `slowest`: the module type with the most kernel time; `host`: the plain step's time
    that is not kernel time."""
    if ledger.empty:
        return None
    step = ledger[ledger.module_type == "step"].iloc[0]
    body = ledger[ledger.module_type != "step"]
    excess = (body.moved_bytes - body.must_bytes).fillna(0.0)
    worst = body.loc[excess.idxmax()]
    slow = body.loc[body.kernel_us.idxmax()]
    out = {"must_mb": step.must_bytes / 1e6, "floor_us": step.floor_us, "bw_tbps": bw[0] / 1e12, "source": bw[1],
           "moved_mb": step.moved_bytes / 1e6, "moved_ratio": step.moved_bytes / max(step.must_bytes, 1.0),
           "kernel_us": step.kernel_us, "time_over_floor": step.time_over_floor, "measured": None,
           "inloop": ledger.attrs.get("moved_basis") == "inloop_reads", "excess": None,
           "slowest": {"module": _TYPE.get(slow.module_type, slow.module_type), "us": slow.kernel_us,
                       "launches": slow.launches_per_step}, "host": None}
    if measured:
        ratio = measured["read_bytes"] / max(step.must_bytes, 1.0)
        out["measured"] = {"step": measured["step"], "read_mb": measured["read_bytes"] / 1e6, "ratio": ratio,
                           "reads": ("once" if abs(ratio - 1) <= STEP_READS_TOLERANCE else
                                     "more" if ratio > 1 else "less"),
                           "reads_pct": 100 * (ratio - 1) if ratio > 1 else 100 * (1 - ratio),
                           "write_mb": measured["write_bytes"] / 1e6,
                           "total_mb": (measured["read_bytes"] + measured["write_bytes"]) / 1e6}
    if excess.max() > EXCESS_SHOWN * step.must_bytes:
        out["excess"] = {"module": _TYPE.get(worst.module_type, worst.module_type), "moved_mb": worst.moved_bytes / 1e6,
                         "must_mb": worst.must_bytes / 1e6, "extra_mb": (worst.moved_bytes - worst.must_bytes) / 1e6}
    if plain_step_ms:
        out["host"] = {"plain_ms": plain_step_ms, "host_ms": plain_step_ms - step.kernel_us / 1e3,
                       "pct": 100 * (1 - step.kernel_us / 1e3 / plain_step_ms)}
    return out


def leading_types(types: pd.DataFrame, n: int = 2) -> list[tuple[str, list[tuple[str, float]]]]:
    """Per phase of `by_module_type`'s table (its order): the `n` module types with the most kernel time, each with
    its share of the phase's kernel time (%)."""
    out = []
    for ph, g in types.groupby("phase", sort=False):
        top = g.sort_values("us_per_step", ascending=False).head(n)
        out.append((ph, [(_TYPE.get(t, t), p) for t, p in zip(top.module_type, top.share_pct)]))
    return out


def kernel_modules(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Each ncu kernel's modules: `module`, the one that launched its profiled launch (phase, `profiled_step`,
    `op_index`; else the module of most of its launches), and `module_types`, the module types of all its launches
    in the phase by share of its time ("attention 62 %, MoE shared experts 38 %", a phrase). Empty without module
    attribution."""
    cols = ["phase", "kernel_id", "module", "module_types"]
    if kernels is None or not len(kernels) or not has_modules(timeline):
        return pd.DataFrame(columns=cols)
    k = _attributed(timeline)
    k = k[k.module.notna()]
    by_kernel = k.groupby(["phase", "name"], sort=False).indices  # one pass over the timeline, not one per kernel
    rows = []
    for r in kernels.itertuples():
        pos = by_kernel.get((r.phase, r.name))
        if pos is None:
            continue
        mine = k.iloc[pos]
        step, op = getattr(r, "profiled_step", None), getattr(r, "op_index", None)
        at = mine[(mine.step == step) & (mine.op_index == op)] if pd.notna(step) and pd.notna(op) else mine.iloc[:0]
        module = (at if len(at) else mine).groupby("module").size().idxmax()
        share = mine.groupby("module_type").duration_ns.sum().sort_values(ascending=False)
        share = 100 * share / share.sum()
        types = joined(*(joined(_TYPE.get(t, t), f" {v:.0f} %") for t, v in share.items() if v >= 0.5), sep=", ")
        rows.append((r.phase, r.kernel_id, module, types))
    out = pd.DataFrame(rows, columns=cols)
    out["module_types"] = phrase_column((r[3] for r in rows), out.index)  # the phrases kept
    return out


def with_kernel_modules(table: pd.DataFrame, kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """`table` (rows with kernel_id, and phase where it has one) with `module_types` and `module` beside the kernel,
    when the run has module attribution; unchanged otherwise."""
    km = kernel_modules(kernels, timeline)
    if km.empty or "kernel_id" not in table:
        return table
    out = table.merge(km, on=["phase", "kernel_id"], how="left") if "phase" in table else table.merge(
        km.drop(columns="phase").drop_duplicates("kernel_id"), on="kernel_id", how="left")
    out.index = table.index
    cols = list(table.columns)
    at = cols.index("friendly_name") + 1 if "friendly_name" in cols else 1
    return out[cols[:at] + ["module_types", "module"] + cols[at:]]
