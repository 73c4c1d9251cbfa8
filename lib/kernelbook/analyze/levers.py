"""Software levers beside hardware ones, on one scale: decode ms per token of the run as deployed (issue 41, point 5).

The hardware levers are chapter 06's what-if (`whatif.lever_table` on the deployed run: model predictions, each
with the model's error). The software levers are priced from the deployed run's own tables, by measured kernel time
removed (no model):

- `moe_in_place`: the MoE experts read in place. The compiled step gathers the routed experts' weights into a copy
  every step (Inductor's `triton_poi_fused_clamp_index_view_*` kernels: `aten.index` on the experts' stacked weights)
  and the expert GEMM reads the copy. In place, the gather kernels go (their timeline time per step) and each
  consumer reads the experts' bytes from DRAM itself instead of the copy, part of which the loop finds in L2. The
  added time is the consumer's extra DRAM reads (the bytes the gather read, less the consumer's in-loop DRAM reads:
  ncu's range pass where the consumer, or the eager twin's same kernel, was measured, else the part of the copy
  the gather wrote back to DRAM) at the
  run's measured DRAM bandwidth, added to its time: an upper bound on the cost (the L2 reads they replace took time
  too). With no added time at all (the consumer streams the experts as fast as it reads the copy now) the gain is
  the gather time alone: the two ends are the figure's range.
- `kv_cat`: the KV cache without `torch.cat`. HF's dynamic cache concatenates each layer's K and V with the new
  token's every step (`aten::cat` of [b, h, L, d] and [b, h, 1, d]); a static cache writes the token in place. The
  eager run's cat time per step; the deployed run (static cache) has none: a lever it already pulled.
- `fused_norms`: one kernel per RMSNorm. Eager, a norm is 8 kernels (pow, mean, add, rsqrt, mul, mul, casts). Under
  torch.compile each norm is one reduction kernel (`triton_red_*rsqrt*`), fused with the residual add; a few
  pointwise kernels recompute a norm for a consumer (`triton_poi_*rsqrt*`). The time beyond one launch per norm: on
  the eager run, every norm kernel but the longest of each norm (a fused kernel is assumed to take as long as the
  longest kernel it replaces: one read of the input, one write); on the deployed run, the pointwise recomputes
  (assumed removable whole: an upper bound).

`levers` sets them in one table, ranked by gain; a lever the deployed run already has is listed as such.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
from . import modules as M
from .timeline import phase_kernels

# Inductor names a fused kernel after the aten ops it fused: a gather fuses `index` (not `index_copy`, a cache write)
GATHER = M.GATHER_KERNEL
NORM = re.compile(r"rsqrt")  # RMSNorm's signature op; Inductor's kernel names list it
KV_CAT = re.compile(r"^\[(\d+), (\d+), (\d+), (\d+)\]x\[\1, \2, 1, \4\];?$")  # past [b,h,L,d] ++ new [b,h,1,d]

# the table's words: phrases (English, shown in the reader's language by `narrate.levers`)
ALREADY = phrase("already in the deployed run")
GAIN = phrase("gain")
BASELINE = phrase("baseline")
MEASURED = phrase("measured kernel time removed")
MODEL = phrase("model prediction (chapter 06)")
# the baseline row's two figures: its decode ms/token the measured plain step, its predicted ms/token the model's
BASELINE_PRICED = phrase("measured; predicted ms/token: chapter 06's model as fitted")
SOFTWARE, HARDWARE = phrase("software"), phrase("hardware")
SERVING = phrase("serving")  # the batch lever: how the step is served (chapter 08 measures it), not a change to it


def _steps(k: pd.DataFrame) -> int:
    return max(1, int(k.step.nunique()))


def is_gather(name: str) -> bool:
    """A compiled step's Triton kernel that fused an `aten.index` gather (not an `index_copy` cache write)."""
    return bool(GATHER.search(str(name)))


def gather_kernels(run, twin=None) -> pd.DataFrame:
    """Per gather kernel of the run's decode (`is_gather`): launches and µs per step (timeline), its module
    (`modules.attributed_modules`), the consumer it feeds (the next launch of that module: name, op shapes, µs per
    launch), ncu's DRAM reads and writes of the gather and the consumer's in-loop DRAM reads (bytes per launch, NaN
    where not profiled), and the eager twin's `aten::index` shapes in the same module (the weights it gathers from)."""
    cols = ["name", "launches_per_step", "us_per_step", "module", "module_type", "consumer", "consumer_shapes",
            "consumer_us", "gather_read_bytes", "gather_write_bytes", "consumer_read_bytes_inloop", "consumer_kernel_id",
            "eager_index_shapes"]
    k = phase_kernels(run.timeline, "decode")
    g = k[k.name.map(is_gather)]
    if g.empty:
        return pd.DataFrame(columns=cols)
    att = M.attributed_modules(k)
    prof = run.ncu_kernels()
    prof = prof[prof.phase == "decode"] if prof is not None and len(prof) else None
    steps = _steps(k)
    eager_idx = {}
    if twin is not None:
        e = phase_kernels(twin.timeline, "decode")
        e = e[(e.op == "aten::index") & e.module.notna()]
        eager_idx = e.assign(layerless=e.module.str.replace(r"\.\d+\.", ".N.", regex=True)).groupby(
            "layerless").op_shapes.agg(lambda s: sorted({x.strip(";") for x in s.dropna()}))
    rows = []
    for name, gk in g.groupby("name", sort=False):
        a = att.loc[gk.index]
        module = a.module.mode().iloc[0] if a.module.notna().any() else None
        cons = a.consumer.mode().iloc[0] if a.consumer.notna().any() else None
        cons_shapes = a.consumer_shapes.mode().iloc[0] if a.consumer_shapes.notna().any() else None
        cons_rows = k[(k.name == cons) & (k.op_shapes == cons_shapes)] if cons is not None else k.iloc[:0]
        pr = prof[prof.name == name] if prof is not None else None
        # a run captured before ncu's reads and writes were kept apart has neither: the detail says so (NaN)
        gr = float(pr.dram_read_bytes.iloc[0]) if pr is not None and len(pr) and "dram_read_bytes" in pr else np.nan
        gw = float(pr.dram_write_bytes.iloc[0]) if pr is not None and len(pr) and "dram_write_bytes" in pr else np.nan
        cr, cid = np.nan, None
        if prof is not None and cons is not None and len(cons_rows):
            # the consumer's profiled launch: same kernel and grid as its launches in this module
            grid = str(cons_rows.grid.mode().iloc[0]).replace("x", ",")
            pc = prof[(prof.name == cons) & (_grids(prof.grid) == grid)]
            if len(pc) and "dram_read_bytes_inloop" in pc:
                cr, cid = float(pc.dram_read_bytes_inloop.iloc[0]), pc.kernel_id.iloc[0]
            if not cr == cr and twin is not None:
                # a graph step's consumer cannot be measured apart from its producer (one graph launch): the eager
                # twin's range pass measured the same kernel after the same gather (aten::index)
                cr, cid = _twin_inloop(twin, cons, grid)
        layerless = re.sub(r"\.\d+\.", ".N.", module) if module else None
        rows.append({"name": name, "launches_per_step": len(gk) / steps, "us_per_step": gk.duration_ns.sum() / 1e3 / steps,
                     "module": module, "module_type": M.module_type(module, a.module_class.dropna().iloc[0]
                                                                    if a.module_class.notna().any() else None)
                     if module else None,
                     "consumer": cons, "consumer_shapes": cons_shapes,
                     "consumer_us": cons_rows.duration_ns.mean() / 1e3 if len(cons_rows) else np.nan,
                     "gather_read_bytes": gr, "gather_write_bytes": gw, "consumer_read_bytes_inloop": cr,
                     "consumer_kernel_id": cid,
                     "eager_index_shapes": _source_of(eager_idx.get(layerless, []) if layerless else [], cons_shapes)})
    return pd.DataFrame(rows, columns=cols)


def _grids(grid: pd.Series) -> pd.Series:
    """ncu's grids ('(4, 5, 1)') in one spelling with the timeline's (`4x5x1` → '4,5,1')."""
    return grid.astype(str).str.replace(r"[()\s]", "", regex=True).str.replace("x", ",")


def _twin_inloop(twin, name: str, grid: str) -> tuple[float, str | None]:
    """(DRAM reads in the loop per launch, "<twin run id>/<kernel id>") of the eager twin's profiled decode kernel
    `name` on `grid`, measured by its range pass; (NaN, None) where it has none."""
    tk = twin.ncu_kernels()
    if tk is None or "dram_read_bytes_inloop" not in tk:
        return np.nan, None
    tk = tk[(tk.phase == "decode") & (tk.name == name) & tk.dram_read_bytes_inloop.notna()
            & (_grids(tk.grid) == grid)]
    return (float(tk.dram_read_bytes_inloop.iloc[0]), f"{twin.run_id}/{tk.kernel_id.iloc[0]}") if len(tk) else (
        np.nan, None)


def _source_of(index_shapes: list[str], consumer_shapes) -> str:
    """The eager twin's `aten::index` source tensor (E×N×K, all experts) whose rows the consumer's first operand
    (k×N×K, the routed experts) takes: the one with the same N×K."""
    if not isinstance(consumer_shapes, str):
        return ""
    nk = consumer_shapes.split(";")[0].split("x")[1:]
    hit = [s for s in index_shapes if s.split("x")[1:] == nk]
    return hit[0] if hit else ""


@dataclass
class SoftwareLever:
    """One software lever's price on a decode step (µs per step): `saving_us` the figure, `low_us`/`high_us` its
    range (equal where the figure is a plain sum of measured time), `present`: the deployed run already has it."""
    lever: str
    setting: str
    saving_us: float
    low_us: float
    high_us: float
    present: bool
    basis: str
    note: str


def moe_in_place(run, twin=None) -> SoftwareLever | None:
    """The MoE experts read in place (see the module docstring); None when the run has no gather kernel."""
    g = gather_kernels(run, twin)
    if g.empty:
        return None
    bw, bw_source = M.dram_bandwidth(run)  # this run's own: another capture of the GPU measures its own copy
    removed = float(g.us_per_step.sum())
    # the consumer's DRAM reads now: ncu's range pass where it (or the eager twin's same kernel) was measured, else
    # what the gather wrote back to DRAM
    now = g.consumer_read_bytes_inloop.fillna(g.gather_write_bytes)
    extra = ((g.gather_read_bytes - now).clip(lower=0) * g.launches_per_step).sum()
    added = float(extra / bw * 1e6)
    # plain text: the note is a table cell, which the display escapes (Markdown escapes would show as backslashes)
    shapes = "; ".join(r.consumer_shapes for r in g.itertuples() if isinstance(r.consumer_shapes, str))
    src = joined(*(phrase("{k} of {src}", k=r.consumer_shapes.split("x")[0], src=r.eager_index_shapes)
                   for r in g.itertuples() if r.eager_index_shapes), sep=", ")
    k = phase_kernels(run.timeline, "decode")
    busy = float(k.duration_ns.sum()) / 1e3 / _steps(k)
    note = joined(
        phrase("gather kernels {n:.0f} per step, {us:.0f} µs per step (timeline, {pct:.0f} % of GPU-busy), in {module}",
               n=g.launches_per_step.sum(), us=removed, pct=100 * removed / busy,
               module=re.sub(r"\.\d+\.", ".N.", g.module.dropna().iloc[0]) if g.module.notna().any() else "-"),
        phrase(" (the eager twin's aten::index there gathers the routed experts: {src})", src=src) if src else "",
        phrase("; in place the expert "
               "GEMMs ({shapes}) read {extra:.0f} MB more per step from DRAM: +{added:.0f} µs at {bw:,.0f} GB/s "
               "({source}, run {run}; an upper bound); range: the gather time alone ({removed:.0f} µs) to that less the "
               "added reads", shapes=shapes, extra=extra / 1e6, added=added, bw=bw / 1e9, source=bw_source,
               run=run.run_id, removed=removed))
    return SoftwareLever(phrase("MoE experts read in place (no gather copy)"),
                         phrase("{n:.0f} gather kernels per step removed", n=g.launches_per_step.sum()),
                         removed - added, removed - added, removed, False, MEASURED, note)


def is_kv_cat(op: str, shapes) -> bool:
    """`aten::cat` of a layer's past K or V [b, h, L, d] with the new token's [b, h, 1, d]: a dynamic cache update."""
    m = KV_CAT.match(shapes.strip()) if op == "aten::cat" and isinstance(shapes, str) else None
    return bool(m) and int(m.group(3)) > 1  # [b,h,1,d] ++ [b,h,1,d] is rotate_half's cat, not a cache


def kv_cat_us(run) -> float:
    """µs per decode step of the KV-cache concatenations (`is_kv_cat`); 0 where there are none."""
    k = phase_kernels(run.timeline, "decode")
    cat = k[[is_kv_cat(o, s) for o, s in zip(k.op, k.op_shapes)]]
    return float(cat.duration_ns.sum() / 1e3 / _steps(k))


def kv_cat(deployed, eager) -> SoftwareLever:
    """The KV cache without `torch.cat`: the eager run's cat time per step; the deployed run's own (none under a
    static cache), and whether it already has the lever."""
    dep = kv_cat_us(deployed)
    eg = kv_cat_us(eager) if eager is not None else np.nan
    present = dep == 0.0 and deployed.info.workload.static_cache
    note = phrase("eager (dynamic cache): {eager:.0f} µs per step of cat kernels; as deployed (static cache): "
                  "{dep:.0f} µs", eager=eg, dep=dep)
    return SoftwareLever(phrase("KV cache without torch.cat (static cache)"), phrase("K and V written in place"),
                         dep, dep, dep, present, MEASURED, note)


def norm_excess_us(run) -> tuple[float, int, int]:
    """(µs per decode step of norm kernels beyond one launch per norm, norm launches per step, norms per step).
    With modules (an eager run): every kernel of a norm module but its longest. Without (a compiled step's Triton
    kernels): the RMSNorm kernels (`rsqrt` in the name) that are not reductions, i.e. pointwise recomputes beyond
    the one reduction kernel per norm."""
    k = phase_kernels(run.timeline, "decode")
    steps = _steps(k)
    mk = M.with_module_types(k[k.module.notna()]) if M.has_modules(k) else k.iloc[:0]
    norms = mk[mk.get("module_type", pd.Series(dtype=object)) == "norm"] if len(mk) else mk
    if len(norms):
        per = norms.groupby(["step", "module"]).duration_ns
        excess = float((per.sum() - per.max()).sum())
        return excess / 1e3 / steps, round(len(norms) / steps), round(norms.groupby(["step", "module"]).ngroups / steps)
    n = k[k.name.str.contains(NORM)]
    red = n.name.str.startswith("triton_red")
    return (float(n[~red].duration_ns.sum()) / 1e3 / steps, round(len(n) / steps), round(int(red.sum()) / steps))


def fused_norms(deployed, eager) -> SoftwareLever:
    dep, launches, norms = norm_excess_us(deployed)
    e = norm_excess_us(eager) if eager is not None else (np.nan, 0, 0)
    note = phrase("eager: {el} norm kernels per step for {en} norms, {eus:.0f} µs beyond one per norm; as deployed: "
                  "{dl} norm kernels for {dn} norms (one reduction each, fused with the residual add), {dus:.1f} µs of "
                  "pointwise recomputes beyond them, taken as removable whole (an upper bound)", el=e[1], en=e[2],
                  eus=e[0], dl=launches, dn=norms, dus=dep)
    return SoftwareLever(phrase("fused norms (one kernel per RMSNorm)"),
                         phrase("norm recomputes folded into the norm's kernel"), dep, dep, dep, False, MEASURED, note)


# columns named by catalog keys (shown in the book's language)
COLUMNS = [phrase("lever"), phrase("kind"), phrase("setting"), phrase("status"), phrase("decode ms/token"),
           phrase("change %"), phrase("predicted ms/token"), phrase("how priced"), phrase("model error"),
           phrase("detail")]


TEXT = ("lever", "kind", "setting", "status", "how priced", "model error", "detail")  # cells that are phrases


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def levers(deployed, eager, tr_dep, val_dep) -> pd.DataFrame:
    """Software and hardware levers on one scale: decode ms per token of the deployed run's plain step. A software
    lever's figure is the measured plain step less its measured saving; a hardware lever's is the what-if's change
    (`whatif.lever_table` on the deployed run, `predicted ms/token` its own figure, `model error` its error) applied to
    the measured step. Ranked by gain (most first); levers the deployed run already has after them, then the run as
    deployed itself (`baseline`). `change %`: against the measured plain step (software) or the model as fitted
    (hardware), which is the same fraction of either."""
    from . import whatif as W

    # the deployed step, named as what it is (the plain run's, else the profiled step ÷ the profiler's overhead):
    # the table's rows that stand at it and the prose print this one quantity
    timed = deployed.info.plain_ms_per_step().get("decode")
    plain = (quantity.q(deployed.run_id, "decode.plain_step_ms", timed) if timed else quantity.q(
        deployed.run_id, "decode.plain_step_estimate_ms",
        tr_dep.measured.set_index("phase").loc["decode", "wall_ms_per_step"] / tr_dep.overhead_ratio))
    rows = []
    for lv in (moe_in_place(deployed, eager), kv_cat(deployed, eager), fused_norms(deployed, eager)):
        if lv is None:
            continue
        ms = plain if lv.present else plain - lv.saving_us / 1e3
        err = "" if lv.low_us == lv.high_us or lv.present else phrase(
            "range {lo:+.1f} to {hi:+.1f} %", lo=-100 * lv.high_us / 1e3 / plain, hi=-100 * lv.low_us / 1e3 / plain)
        rows.append({"lever": lv.lever, "kind": SOFTWARE, "setting": lv.setting,
                     "status": ALREADY if lv.present else GAIN, "decode ms/token": ms,
                     "change %": 0.0 if lv.present else 100 * (ms - plain) / plain, "predicted ms/token": np.nan,
                     "how priced": lv.basis, "model error": err, "detail": lv.note})
    hw = W.lever_table(tr_dep, tr_dep.gpu, val=val_dep)
    for _, r in hw[hw.lever != "as fitted"].iterrows():
        ch = float(r["change %"])
        rows.append({"lever": r.lever, "kind": SERVING if r.lever == "batch" else HARDWARE, "setting": r.setting,
                     "status": GAIN, "decode ms/token": plain * (1 + ch / 100), "change %": ch,
                     "predicted ms/token": r["decode ms/token"], "how priced": MODEL, "model error": r["model error"],
                     "detail": ""})
    rows.append({"lever": phrase("CUDA graphs (compiled decode step)"), "kind": SOFTWARE,
                 "setting": phrase("decode replayed as CUDA graphs"), "status": ALREADY,
                 "decode ms/token": plain, "change %": 0.0, "predicted ms/token": np.nan, "how priced": MEASURED,
                 "model error": "",
                 "detail": phrase("eager plain step {e:.2f} ms", e=quantity.q(
                     eager.run_id, "decode.plain_step_ms", eager.info.plain_ms_per_step().get("decode")))
                 if eager is not None else ""})
    out = pd.DataFrame(rows, columns=COLUMNS)
    for c in TEXT:  # the cells' phrases kept (`narrate.levers` shows them in the reader's language)
        out[c] = phrase_column((r[c] for r in rows), out.index)
    out["decode ms/token"] = quantity.column(r["decode ms/token"] for r in rows)  # keeps the quantities' names
    gain = out.status == GAIN
    fitted = hw[hw.lever == "as fitted"].iloc[0]
    row = {"lever": phrase("the run as deployed"), "kind": "", "setting": phrase("plain step, measured"),
           "status": BASELINE, "decode ms/token": plain, "change %": 0.0,
           "predicted ms/token": fitted["decode ms/token"], "how priced": BASELINE_PRICED,
           "model error": fitted["model error"], "detail": ""}
    base = pd.DataFrame([row], columns=COLUMNS)
    base["decode ms/token"] = quantity.column([plain])
    for c in TEXT:  # from the row: the frame keeps text, not the phrases (the model error's values)
        base[c] = phrase_column([row[c]], base.index)
    return pd.concat([out[gain].sort_values("change %", kind="stable"), out[~gain], base], ignore_index=True)


def gains(table: pd.DataFrame, kind: str | None = None, batch: bool = True) -> pd.DataFrame:
    """The rows of `levers`' table that change the deployed step (its cells are English phrases, `narrate.levers`
    shows them in the reader's language), of one `kind` (software | hardware | serving) where given, without the
    serving lever (the batch) where `batch` is False."""
    g = table[table.status == GAIN]
    if kind is not None:
        g = g[g.kind == kind]
    return g if batch else g[g.kind != SERVING]

