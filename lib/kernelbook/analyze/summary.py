"""Chapter 07: the book in one page, and the optimization loop (variants: predicted against measured).

- `phase_table`: where the generate call's time goes, per phase (profiled pass), beside GPU-busy time.
- `decode_limit`: one decode step against its physical limit: the weight and KV-cache bytes a step must
  read ÷ the measured DRAM copy bandwidth, and the measured step as a multiple of it.
- `variant_rows`: for each variant run (a run whose capture parameters carry a `variant` label), the
  gain chapter 06's what-if model predicts from the baseline beside the gain measured, and the error.
  Like for like: both sides are the profiled pass's wall time per step (the what-if replays the
  baseline's own recorded host gaps, `host_scale=1`), so the profiler's overhead cancels in the ratio;
  the plain (unprofiled) generate time of each run is shown beside it.
- `host_control`: a phase a variant does not change (same kernels, GPU-busy time within 3 %) whose wall
  time changed anyway says the two captures ran on hosts of different speed; host-bound gains across
  the two runs then carry that factor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contract import quantity
from ..contract.quantity import Q
from ..contract.phrase import column as phrase_column
from ..contract.phrase import joined, phrase
from . import whatif as W
from .timeline import PHASE_ORDER, phase_summary
from ..escape import md

GRAPH_HOST_US = 2.0  # host time per launch under CUDA graphs, as chapter 06 assumes
SAME_BUSY = 0.03     # GPU-busy times within 3 %: the phase's device work did not change
TARGET_PCT = 25.0    # the target for the error of a predicted gain
HOST_DIFFERS = 0.10  # its wall time moved by more than 10 %: the hosts differ


def phase_table(run) -> pd.DataFrame:
    """Per phase: steps, wall ms (all steps), share of the phases' wall, GPU-busy ms, busy % of wall."""
    s = phase_summary(run.timeline, run.phases)
    s = s[s.phase.isin(PHASE_ORDER[:3])].copy()
    total = s.wall_ms.sum()
    out = pd.DataFrame({"phase": s.phase, "steps": s.steps.clip(lower=1), "wall_ms": s.wall_ms,
                        "share_pct": 100 * s.wall_ms / total, "gpu_busy_ms": s.gpu_busy_ms,
                        "busy_pct": 100 * s.gpu_busy_ms / s.wall_ms}).reset_index(drop=True)
    sampling = run.info.timeline_info.sampling
    if sampling:  # a sampled long generation: the profiled pass recorded windows of its decode steps only
        out.attrs["decode_steps"] = (sampling.get("profiled_decode_steps"), sampling.get("decode_steps"))
    return out


@dataclass
class DecodeLimit:
    weight_bytes: float      # per decode step (all GEMM/GEMV weight operands)
    kv_bytes: float          # per decode step (attention operands: the KV cache read)
    dram_bytes_per_s: float  # measured DRAM copy bandwidth (read + write)
    dram_source: str
    batch: int
    limit_ms: float          # (weights + KV) ÷ bandwidth, per step
    wall_ms: float           # measured wall per step (profiled pass)
    busy_ms: float           # measured GPU-busy per step
    plain_ms: float | None = None  # measured wall per step of the plain (unprofiled) run, where timed
    run_id: str = ""               # the run measured: the quantities' keys name it (contract.quantity)
    # a MoE whose batch's selections repeat experts: (tokens, experts, weight bytes one copy per selection, the
    # distinct experts its routers picked per call as the capture's routing pass recorded them, None: not recorded,
    # the bound min(tokens·k, experts) taken)
    experts_once: tuple | None = None

    def q(self, name: str) -> Q:
        """One of the step's figures as a named quantity: limit_ms, busy_ms, wall_ms, plain_ms, weight_mb, kv_mb,
        dram_gbps, and the multiples busy_x, wall_x, plain_x (each ÷ the limit)."""
        base = {"limit_ms": ("decode.limit_ms", self.limit_ms), "busy_ms": ("decode.gpu_busy_step_ms", self.busy_ms),
                "wall_ms": ("decode.profiled_step_ms", self.wall_ms),
                "plain_ms": ("decode.plain_step_ms", self.plain_ms or None),
                "weight_mb": ("decode.weight_mb_per_step", self.weight_bytes / 1e6),
                "kv_mb": ("decode.kv_mb_per_step", self.kv_bytes / 1e6),
                "dram_gbps": ("dram_gbps_measured", self.dram_bytes_per_s / 1e9)}
        if name in base:
            return quantity.q(self.run_id, *base[name])
        return x_limit(self.q(name.removesuffix("_x") + "_ms"), self.q("limit_ms"))

    @property
    def step_ms(self) -> float:
        """The decode step as a reader should take it: the plain run's, else the profiled pass's."""
        return self.plain_ms if self.plain_ms else self.wall_ms

    @property
    def step_multiple(self) -> float:
        return self.step_ms / self.limit_ms

    @property
    def wall_multiple(self) -> float:
        return self.wall_ms / self.limit_ms

    @property
    def busy_multiple(self) -> float:
        return self.busy_ms / self.limit_ms



def decode_limit(tr_: W.Trace, run, roofs) -> DecodeLimit | None:
    """The decode step against the bytes it must move; None when the run has no decode phase."""
    if "decode" not in set(tr_.measured.phase):
        return None
    w = tr_.work[tr_.work.phase == "decode"]
    steps = max(1, tr_.steps["decode"])
    kv = float((w.dram_bytes * w.launches)[w.category == "attention"].sum() / steps)
    measured = {k: v for k, v in roofs.measured.items() if k.startswith("DRAM")}
    if measured:
        (src, bw), = measured.items()
        src = phrase("measured device-to-device copy")
    else:
        bw, src = roofs.bandwidth["dram"], phrase("spec sheet")
    m = tr_.measured.set_index("phase").loc["decode"]
    # each expert once, however many tokens chose it: the experts the routers picked, or at most all of them
    weights, distinct, router = W.weights_each_once(tr_, run.info.timeline_info.moe_routing)
    per_choice = W.active_weight_bytes(tr_)
    batch = run.info.workload.batch_size
    return DecodeLimit(weights, kv, bw, src, batch, 1e3 * (weights + kv) / bw, float(m.wall_ms_per_step),
                       float(m.busy_ms_per_step), plain_ms_per_step(run, "decode"), run.run_id,
                       (*router, per_choice, distinct) if router and per_choice > weights else None)


# --- variants ------------------------------------------------------------------------------------

VARIANT_KEYS = ("cache_implementation", "compile_decode", "batch_size", "attn_implementation")


def changed_params(base: dict, variant: dict) -> dict:
    """The capture parameters a variant changed (workload keys only; ncu selection and labels aside)."""
    from ..params import CAPTURE, SCHEMA

    skip = {"variant", "ncu_top_n", "ncu_phases", "ncu_step", "ncu_inloop", "clock_control", "cache_control",
            "ncu_timeout_s", "capture_timeout_s", "timing_trials", "measure_peaks"}  # how it was measured, not what ran
    # a key one run's manifest lacks (captured before the key existed) had its schema default
    defaults = {k: p.default for k, p in SCHEMA.items() if CAPTURE in p.feeds}
    base, variant = {**defaults, **base}, {**defaults, **variant}
    return {k: variant.get(k) for k in sorted(set(base) | set(variant))
            if k not in skip and base.get(k) != variant.get(k)}




def variants_of(base_run, runs: list) -> tuple[list, list[str]]:
    """The runs that are variants of `base_run` (same model, weights, dtype and GPU model; a variant changes
    how it runs, not what), and a sentence for each run left out. Chapter 07's default variants belong to
    the bundled run: given another run_dir, they are left out with the reason, not set against it."""
    base = base_run.info
    kept, out = [], []
    for run in runs:
        info = run.info
        differs = info.workload.differs(base.workload)
        if info.device != base.device:
            differs.append("device")
        levers = lever_groups(changed_params(base.params, info.params))
        if differs:
            out.append(phrase("{run} is not a variant of {base}: it differs in {keys}", run=run.run_id,
                              base=base_run.run_id, keys=", ".join(differs)))
        elif len(levers) > 1:  # e.g. a batch-32 graph run beside an eager batch-1 run: which change did what?
            out.append(phrase("{run} is not a variant of {base}: it changes more than one thing ({keys}), and a "
                              "variant changes one", run=run.run_id, base=base_run.run_id, keys=", ".join(levers)))
        else:
            kept.append(run)
    return kept, out


def lever_groups(changed: dict) -> list[str]:
    """The levers a set of changed capture parameters pulls (`VARIANT_KEYS`; a static cache and a compiled step are
    one lever, CUDA graphs), sorted."""
    return sorted({"CUDA graphs" if k in ("cache_implementation", "compile_decode") else k
                   for k in changed if k in VARIANT_KEYS})


def trace_of(run, variants: list) -> "W.Trace | None":
    """Chapter 06's model of `run` (None for no run): the one already built among `variants` ((run, trace) pairs)
    when `run` is one of them, else built now. Chapter 07's run as deployed is usually one of its variants."""
    if run is None:
        return None
    return next((t for v, t in variants if v.path == run.path), None) or W.for_run(run)[0]


@dataclass
class Lever:
    """What chapter 06's model changes to predict a variant, or why it cannot."""
    label: str
    design: dict | None   # Design fields changed for the decode phase (None: no prediction)
    batch: int = 1
    why_not: str = ""


def lever(changed: dict) -> Lever:
    """The what-if change that stands for a variant's parameter change."""
    unknown = [k for k in changed if k not in VARIANT_KEYS]
    if unknown:
        return Lever(", ".join(f"{k}={changed[k]}" for k in changed), None,
                     why_not=phrase("the what-if model has no lever for {keys}", keys=", ".join(unknown)))
    if "attn_implementation" in changed:
        return Lever(phrase("attention implementation {impl}", impl=changed["attn_implementation"]), None,
                     why_not=phrase("the what-if model prices attention by its work (FLOPs and bytes), which "
                                    "does not depend on the implementation"))
    design, label = {}, []
    if changed.get("cache_implementation") == "static" and changed.get("compile_decode", True) is not False:
        design.update(launch_overhead_us=GRAPH_HOST_US, fuse_elementwise=True)
        label.append(phrase("decode step as one CUDA graph ({us:g} µs per launch) with elementwise ops fused",
                            us=GRAPH_HOST_US))
    batch = int(changed.get("batch_size", 1))
    if batch > 1:
        label.append(phrase("batch {n}", n=batch))
    if not design and batch == 1:
        return Lever(", ".join(f"{k}={v}" for k, v in changed.items()), None,
                     why_not=phrase("no what-if lever for this change"))
    return Lever(joined(*label, sep="; "), design, batch)


def plain_ms_per_step(run, phase: str) -> float | None:
    """Plain (unprofiled) wall ms per step of `phase`, when the capture timed it (`plain_phases`)."""
    from .timeline import plain_ms_per_step as plain

    return plain(run.manifest).get(phase)


VARIANT_COLUMNS = ["variant", "run", "phase", "unit", "basis", "lever", "baseline_ms", "predicted_ms", "measured_ms",
                   "predicted_gain", "measured_gain", "gain_error_pct", "why_no_prediction"]


def variant_rows(base_tr: W.Trace, gpu: W.Design, base_run, variants: list[tuple]) -> pd.DataFrame:
    """One row per (variant, phase) for decode (ms per token) and prefill (ms per call): baseline
    measured, predicted, variant measured (per token = per step ÷ batch), predicted and measured gains
    (baseline ÷ variant), error of the predicted gain in %. `variants`: (run, Trace).

    Basis: where both captures timed their plain generate calls per phase (`plain_phases`), measured
    times are those and the model predicts a plain run (host gaps ÷ the profiler's overhead ratio);
    otherwise both sides are the profiled pass's wall time and the model replays the recorded gaps."""
    base_m = base_tr.measured.set_index("phase")

    refs: dict = {}  # the model's own baseline replay, per host scale: computed once for all variants
    rows = []
    for run, vtr in variants:
        p = run.info.params
        twin, one_host = _twin(run, base_run)  # measured gains: plain runs of one host where the capture kept one
        lv = lever(changed_params(base_run.info.params, p))
        changed = gpu.with_(**lv.design) if lv.design is not None else None
        preds: dict = {}  # this variant's prediction, per host scale
        vm = vtr.measured.set_index("phase")
        vb = run.info.workload.batch_size
        bb = base_run.info.workload.batch_size
        for ph, unit in (("decode", "ms/token"), ("prefill", "ms/call")):
            if ph not in base_m.index or ph not in vm.index:
                continue
            plain = plain_ms_per_step(twin, ph) is not None and plain_ms_per_step(run, ph) is not None
            scale = None if plain else 1.0
            per = (lambda x, b: x / b) if ph == "decode" else (lambda x, b: x)
            # named as what they are: a run's plain (or profiled) step, or per token where a decode step holds more
            base_ms = _per_step(plain_ms_per_step(twin, ph) if plain else base_m.loc[ph, "wall_ms_per_step"], bb,
                                twin if plain else base_run, ph, plain)
            var_ms = _per_step(plain_ms_per_step(run, ph) if plain else vm.loc[ph, "wall_ms_per_step"], vb, run, ph,
                               plain)
            if lv.design is not None and (ph == "decode" or lv.batch > 1):
                # the graph lever applies to the decode step only (prefill stays eager in the variant);
                # the model's own baseline replay is the reference, so its bias cancels in the ratio
                if scale not in refs:
                    refs[scale] = W.predict(base_tr, gpu, host_scale=scale).set_index("phase")
                if scale not in preds:
                    preds[scale] = W.predict(base_tr, changed, batch=lv.batch, host_scale=scale).set_index("phase")
                ref, pred = refs[scale], preds[scale]
                pred_ms = per(pred.loc[ph, "wall_ms_per_step"], lv.batch)
                pred_gain = per(ref.loc[ph, "wall_ms_per_step"], bb) / pred_ms
            elif lv.design is not None:
                pred_ms, pred_gain = float(base_ms), 1.0
            else:
                pred_ms = pred_gain = np.nan
            gain = quantity.ratio(base_ms, var_ms, f"{run.run_id}/{ph}.measured_gain")
            pred_gain = quantity.q(run.run_id, f"{ph}.predicted_gain", pred_gain)
            rows.append({"variant": variant_label(run), "run": run.run_id, "phase": ph, "unit": unit,
                         "basis": joined(phrase("plain runs") if plain else phrase("profiled pass"),
                                         phrase(", same host: {run}", run=twin.run_id) if one_host else ""),
                         "lever": lv.label, "baseline_ms": base_ms, "predicted_ms": pred_ms, "measured_ms": var_ms,
                         "predicted_gain": pred_gain, "measured_gain": gain,
                         "gain_error_pct": 100 * (pred_gain - gain) / gain, "why_no_prediction": lv.why_not})
    out = pd.DataFrame(rows, columns=VARIANT_COLUMNS)
    for c in ("baseline_ms", "measured_ms", "predicted_gain", "measured_gain"):
        out[c] = quantity.column((r[c] for r in rows), out.index)
    for c in ("basis", "lever", "why_no_prediction"):  # phrases: `narrate.summary` shows them in the reader's language
        out[c] = phrase_column((r[c] for r in rows), out.index)
    return out


def _per_step(ms: float, batch: int, run, phase: str, plain: bool) -> Q:
    """A measured decode time per token (per step ÷ batch) or prefill time per call as the named quantity it is:
    the run's plain (else profiled) step where one step answers one prompt, else its time per token."""
    basis = "plain" if plain else "profiled"
    per = "token" if phase == "decode" and batch > 1 else "step"
    return quantity.q(run.run_id, f"{phase}.{basis}_{per}_ms", ms / batch if phase == "decode" else ms)


# The variant labels of the bundled variants (params/variant-*.yaml `variant`), phrases shown in the narrative
# language; any other label as written.
VARIANT_LABELS = (phrase("static cache + CUDA graphs"), phrase("batch 8"), phrase("eager attention"))


def variant_label(run) -> str:
    """A variant run's label (its params' `variant`, else its run id): the known one's phrase (`VARIANT_LABELS`)."""
    label = run.info.workload.variant or run.run_id
    return next((v for v in VARIANT_LABELS if v == label), label)


def host_baseline(run, base_run):
    """The run a variant's measured gain is taken against: the baseline captured beside it in the same lease (its
    manifest's `host_baseline`, a sibling run directory, or `base_run` itself when that is the one it names) when
    there is one, else `base_run`. Plain generate is host-bound, and the host's speed differs between leases (1.02 s
    against 1.49 s for the same bundled run), so a variant set against a baseline captured on another host measures
    the hosts, not the change."""
    return _twin(run, base_run)[0]


def same_host(run, base_run) -> bool:
    """Whether `run` is measured against a baseline captured beside it on one host (`host_baseline` names `base_run`
    itself or a sibling run that is there), not merely against `base_run` of whatever lease."""
    return _twin(run, base_run)[1]


def _twin(run, base_run) -> tuple:
    from ..load.run import load_run

    name = run.info.host_baseline
    if not name:
        return base_run, False
    if name == base_run.run_id:
        return base_run, True
    path = run.path.parent / name
    return (load_run(path), True) if path.is_dir() else (base_run, False)


def plain_generate(base_run, variants: list) -> pd.DataFrame:
    """Each run's plain (unprofiled) generate call: median seconds over its timing trials, the run it is set
    against (the baseline captured on the variant's host where it kept one, `host_baseline`) with that run's
    seconds, the speed-up (against ÷ variant, per call) and the speed-up per prompt (a batch-8 call answers 8)."""
    def med(r):
        t = r.info.timeline_info.plain_generate
        return np.nan if t is None or t.median_s is None else t.median_s

    def prompts(r):
        return r.info.workload.batch_size

    b = med(base_run)
    rows = [{"run": base_run.run_id, "variant": phrase("baseline"), "prompts_per_call": prompts(base_run),
             "plain_generate_s": b, "against_run": "", "against_s": np.nan, "speedup": 1.0,
             "per_prompt_speedup": 1.0}]
    for run, _ in variants:
        v, twin = med(run), host_baseline(run, base_run)
        against = med(twin)
        speedup = against / v
        rows.append({"run": run.run_id, "variant": variant_label(run),
                     "prompts_per_call": prompts(run), "plain_generate_s": v, "against_run": twin.run_id,
                     "against_s": against, "speedup": speedup,
                     "per_prompt_speedup": speedup * prompts(run) / prompts(twin)})
    return pd.DataFrame(rows)


def host_control(base_run, run) -> pd.DataFrame:
    """Phases whose device work did not change (GPU busy within 3 %) but whose wall time moved by more
    than 10 %: the two captures' hosts differ by that factor (`wall_ratio`). Empty for a variant measured
    against the baseline captured beside it (`host_baseline`): one lease, one host, so a phase that moved
    with the same GPU work moved by the variant's own host work (a static cache's prefill), not the host's."""
    from .compare import phases

    cols = ["phase", "wall_ms_per_step_a", "wall_ms_per_step_b", "wall_ratio", "gpu_busy_ratio"]
    if same_host(run, base_run):
        return pd.DataFrame(columns=cols)
    ph = phases(base_run, run)
    same = (ph.gpu_busy_ratio - 1).abs() <= SAME_BUSY
    moved = (ph.wall_ratio - 1).abs() > HOST_DIFFERS
    return ph[same & moved][cols]


def _plain_decode_ms(run) -> float:
    """Plain (unprofiled) wall ms per decode step, NaN for a run captured before plain phases were timed."""
    ms = plain_ms_per_step(run, "decode")
    return float("nan") if ms is None else ms


def _graph_decode(run) -> bool:
    """Whether the run's decode steps ran as CUDA graphs (static cache, compiled step)."""
    return run.info.workload.graph_decode


def _how_decode_ran(run) -> str:
    if _graph_decode(run):
        return phrase("CUDA graphs (static cache, compiled step)")
    static = run.info.workload.static_cache
    return phrase("eager (static cache)") if static else phrase("eager (dynamic cache)")


def deployed(run, limit: DecodeLimit | None, variants: list) -> pd.DataFrame:
    """The decode step against its physical limit for this run and each deployment-shaped variant (a decode
    step run as CUDA graphs): plain wall and GPU-busy per step, each ÷ the limit. The limit is this run's (the
    same model and context: the bytes a step must move do not depend on how it is launched). Empty without a
    decode phase."""
    cols = ["run", "decode", "steps", "plain_ms", "busy_ms", "limit_ms", "plain_x", "busy_x"]
    if limit is None:
        return pd.DataFrame(columns=cols)
    rows = [(run, limit.busy_ms)]
    for v, tv in variants:
        # the same work at the same batch only: the limit is this run's, per step of its batch
        same_batch = v.info.workload.batch_size == run.info.workload.batch_size
        if _graph_decode(v) and same_batch and "decode" in set(tv.measured.phase):
            rows.append((v, float(tv.measured.set_index("phase").loc["decode", "busy_ms_per_step"])))
    out = []
    lim = limit.q("limit_ms")
    for r_, busy in rows:
        decode = r_.info.timeline_info.plain_phases.get("decode")
        steps = decode.steps if decode else None
        # each figure the named quantity the prose prints from this row (`step_quantities`): one value, one place
        plain = quantity.q(r_.run_id, "decode.plain_step_ms", _plain_decode_ms(r_))
        busy = quantity.q(r_.run_id, "decode.gpu_busy_step_ms", busy)
        out.append({"run": md(r_.run_id), "decode": _how_decode_ran(r_), "steps": steps, "plain_ms": plain,
                    "busy_ms": busy, "limit_ms": lim, "plain_x": x_limit(plain, lim), "busy_x": x_limit(busy, lim)})
    table = pd.DataFrame(out, columns=cols)
    for c in ("plain_ms", "busy_ms", "limit_ms", "plain_x", "busy_x"):
        table[c] = quantity.column(o[c] for o in out)
    table.attrs["run_ids"] = [r_.run_id for r_, _ in rows]
    table.attrs["graphs"] = [_graph_decode(r_) for r_, _ in rows]  # how each decoded: the headline's words
    return table


def step_quantities(table: pd.DataFrame, i: int) -> dict[str, Q]:
    """Row `i` of `deployed`'s table, the named quantities its cells hold: plain and busy (ms per step), the
    limit, and each step ÷ the limit."""
    r = table.iloc[i]
    return {"plain": r.plain_ms, "busy": r.busy_ms, "limit": r.limit_ms, "plain_x": r.plain_x, "busy_x": r.busy_x}


def x_limit(step: Q, limit: Q) -> Q:
    """A step's multiple of the decode limit, as the quantity `<step's key>_x_limit`."""
    return quantity.ratio(step, limit, f"{step.key}_x_limit")


def contract(run, k: pd.DataFrame, roofs) -> tuple[pd.DataFrame, tuple | str]:
    """The profiler output contract (`report.md`) as chapter 07 shows it: its Stages table as a frame
    (bound and key issue per phase; the key issue an English phrase) and what `narrate.summary.contract` writes
    around it, what its cells and classes mean and its per-phase sections: (the phase summary, the classes, the
    opportunities per phase, the Stages rows), or a phrase saying why there is none."""
    from . import classify as C

    if not len(k):
        return (pd.DataFrame(), phrase("The run has no ncu counters: bounds and opportunities need chapter 02's "
                                       "capture."))
    c = C.classify(k, roofs.ridge())  # the bf16 ridge on the roofs chapters 04 and 05 draw
    summary = phase_summary(run.timeline, run.phases)
    opps = C.all_opportunities(run, summary, c, roofs)
    header = [x.strip() for x in C.CONTRACT_HEADER.strip("|").split("|")]
    rows = C.contract_stage_rows(summary, c, opps, run.manifest)
    stages = pd.DataFrame(rows, columns=header)
    stages["Key Issue"] = phrase_column((r[-1] for r in rows), stages.index)  # the key issues' phrases kept
    return stages, (summary, c, opps, rows)


def comparison_pair(baseline_run, run, variants: list) -> tuple | None:
    """(A, B) for the comparison section: `baseline_run` against this run when given, else this run
    against its first variant, else None."""
    if baseline_run is not None:
        return baseline_run, run
    return (run, variants[0][0]) if variants else None


def comparison(pair: tuple | None) -> dict[str, pd.DataFrame]:
    """Chapter 07's comparison section: `diff A B` as tables (empty ones without a pair)."""
    from . import compare as D

    if pair is None:
        return {k: pd.DataFrame() for k in ("phases", "categories", "kernels", "metrics")}
    a, b = pair
    kern = D.kernels(a, b).groupby("phase", sort=False).head(12)
    return {"phases": D.phases(a, b), "categories": D.categories(a, b),
            "kernels": kern[["phase", "op", "family", "us_per_step_a", "us_per_step_b", "change_us_per_step", "ratio",
                             "only_in"]],
            "metrics": D.metrics(a, b)}
