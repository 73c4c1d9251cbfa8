"""Chapter 06's sentences about the what-if model, from `analyze.whatif`'s numbers and phrases: the headline, the
fit's notes, the validation and the cross-device check in words, the design and lever tables and the sensitivity
curves' labels in the reader's language, the notes under the curves and the nine areas' recommendations."""
from __future__ import annotations

import pandas as pd

from ..analyze import whatif as W
from ..display import phase_label, phase_list
from ..escape import md
from ..i18n import tr
from . import said, say


def unmodellable(run) -> str | None:
    """Why chapter 06 (and 07) cannot model `run` (`analyze.whatif.unmodellable`), None when they can."""
    backend = W.unmodellable(run)
    if backend is None:
        return None
    return tr("**No aten op shapes in {run}'s timeline**: the what-if prices each launch by the work its op's "
              "shapes imply, and this run's timeline ({backend} backend) records its kernels without the op calls "
              "that launched them. Capture the workload with `timeline_backend: torch` (the default) for this "
              "chapter; the other chapters read this run as it is.", run=md(run.run_id), backend=md(backend))


def line_note(trace: W.Trace) -> str:
    """One sentence on the classes whose launches that do work are fitted as a line with an intercept
    (`analyze.whatif.line_classes`); empty where none is."""
    c = W.line_classes(trace)
    if not len(c):
        return ""
    return tr("In {classes}, a launch that does work pays a fixed cost above the class's floor (the intercept of "
              "a robust line through its launches: DRAM latency before a stream reaches its rate), then b × "
              "ideal; a launch that does none (a helper) pays the floor L.", classes=tr(", ").join(
                  f"{r['class']} ({r.work_latency_us:.1f} µs)" for _, r in c.iterrows()))


def issue_note(trace: W.Trace) -> str:
    """One sentence on the generic elementwise path's issue term as the fit found it (`analyze.whatif.issue_term`)."""
    f = W.issue_term(trace)
    if f is None:
        return tr("No launch of PyTorch's generic (strided/broadcast) elementwise path iterates 2²⁰ elements or "
                  "more in this run, so no issue term is fitted: such launches are priced by their bytes.")
    return tr(
        "PyTorch's generic (strided/broadcast) elementwise path computes every operand's offset per element, so its "
        "large launches are bound by what they issue, not by their bytes: fitted on its {rows} launch shapes of "
        "2²⁰ elements or more ({share:.1f} % of kernel time), it issues {k:.0f} vector operations per element, "
        "{rate:.0f} G elements/s on this GPU. A launch on that path takes at least elements × {k:.0f} ÷ vector "
        "FLOP/s; the launches bound by it are left out of the fit of b.", **f)


def headline(val: pd.DataFrame, trace: W.Trace) -> str:
    """Held-out errors per phase, and whether the decode step is the host's or the device's
    (`analyze.whatif.decode_reading`: under half of the predicted decode wall on the device, host-bound, no
    hardware knob moves it; CUDA graphs, where the device is busy most of the step, are device-bound)."""
    errs = tr(", ").join(f"{phase_label(r.phase)} {r.device_error_pct:+.0f} %" for r in val.itertuples())
    reading = W.decode_reading(val, trace)
    if reading == "graph":
        q = W.replay_quantities(trace)
        return tr("Model vs this run, each phase held out of the fit (device time): {errors}; decode runs as "
                  "CUDA graphs: of the plain step, measured at {step:.2f} ms, the replay's kernels are {busy:.2f} ms "
                  "GPU-busy with {node:.2f} ms of node gaps (median {gap:.2f} µs), and {host:.2f} ms is host time "
                  "between replays (generate's loop, one term per step, not per launch), so the hardware knobs below "
                  "move the rest", errors=errs, step=q["step"], busy=q["busy"], node=q["node"], gap=q["gap"],
                  host=q["host"])
    if reading == "device":
        return tr("Model vs this run, each phase held out of the fit (device time): {errors}; decode is "
                  "device-bound here (the device busy {share:.0f} % of the predicted step, {host_us:.1f} µs of "
                  "plain wall per launch, no profiler), so the hardware knobs below move it",
                  errors=errs, share=val.set_index("phase").loc["decode", "predicted_device_share_pct"],
                  host_us=W.host_time_per_launch_us(trace))
    return tr("Model vs this run, each phase held out of the fit (device time): {errors}; decode is host-bound "
              "({host_us:.1f} µs of plain wall per launch, no profiler), so no hardware knob moves it until "
              "launches are batched: the hardware what-ifs below are taken with launches issued as a graph, "
              "their eager figures beside",
              errors=errs, host_us=W.host_time_per_launch_us(trace))


def answer(val: pd.DataFrame, trace: W.Trace, xd: pd.DataFrame | None = None) -> str:
    """Chapter 06's answer in one sentence: how far the model is trusted (each phase held out of the fit, and across
    GPUs where the workload ran on another) and what of the decode step hardware can move (`decode_reading`)."""
    b = W.cross_device_bounds(xd) if xd is not None else None
    out = tr("Held out of its fit, the model predicts each phase's device time within {pct:.0f} %",
             pct=W.worst_held_out_pct(val))
    if b is not None:
        out += tr(" ({across:.0f} % across {pair})", across=b["pct"], pair=tr(" ↔ ").join(b["pair"]))
    reading = W.decode_reading(val, trace)
    if reading == "graph":
        q = W.replay_quantities(trace)
        return out + tr("; {busy:.2f} ms of the measured {step:.2f} ms decode step is kernel work hardware can "
                        "move.", busy=q["busy"], step=q["step"])
    if reading == "device":
        return out + tr("; decode is device-bound, so hardware moves it.")
    return out + tr("; decode is host-bound, so no hardware moves it until launches are batched.")


def cross_device_headline(xd: pd.DataFrame) -> str:
    """Chapter 06's line for the cross-device check: the worst device-time and gain errors of both directions
    (`analyze.whatif.cross_device_bounds`)."""
    b = W.cross_device_bounds(xd)
    if b is None:
        return ""
    return tr("; across GPUs ({pair}, each fitted on one and predicting the other) device time within "
              "{pct:.0f} % and gain within {gain:.2f}× in every phase", pair=tr(" ↔ ").join(b["pair"]),
              pct=b["pct"], gain=b["gain"])


def validation_prose(val: pd.DataFrame, trace: W.Trace) -> str:
    """Each phase held out of the fit, in words (`analyze.whatif.validation` and its `validation_checks`)."""
    v = val.set_index("phase")
    checks = W.validation_checks(val)
    out = []
    for ph, r in v.iterrows():
        values = dict(phase=phase_label(ph), fitted_on=phase_list(r.calibrated_on), predicted=r.predicted_device_ms,
                      busy=r.busy_ms_per_step, error=r.device_error_pct, wall_predicted=r.predicted_wall_ms,
                      wall=r.wall_ms_per_step, wall_error=r.wall_error_pct, share=r.predicted_device_share_pct,
                      scaled=r.scaled_time_pct)
        out.append(tr(
            "- **{phase}** (fitted on {fitted_on}): device time {predicted:.2f} ms predicted vs GPU-busy {busy:.2f} ms "
            "({error:+.0f} %, within the 25 % target); wall under the profiler {wall_predicted:.2f} vs {wall:.2f} ms "
            "({wall_error:+.1f} %), "
            "the device busy {share:.0f} % of it; {scaled:.1f} % of its kernel time is in kernels whose work is scaled "
            "from their category (no shapes, not profiled).", **values) if checks.loc[ph, "within_target"] else tr(
            "- **{phase}** (fitted on {fitted_on}): device time {predicted:.2f} ms predicted vs GPU-busy {busy:.2f} ms "
            "({error:+.0f} %, outside the 25 % target); wall under the profiler {wall_predicted:.2f} vs {wall:.2f} ms "
            "({wall_error:+.1f} %), the device busy {share:.0f} % of it; {scaled:.1f} % of its kernel time is in kernels whose work is "
            "scaled from their category (no shapes, not profiled).", **values))
    host_bound = checks.index[checks.host_bound].tolist()
    out.append(tr("The replay keeps the run's own host gaps, so the wall column tests the device model only "
                  "through the time the device adds to the host's{host_bound}. The device column is the test of "
                  "the model; the per-class table below says which kernels carry its error.",
                  host_bound=tr("; in {phases} the device is busy under half the wall, so its wall error "
                                "stays small whatever the device error",
                                phases=tr(", ").join(map(phase_label, host_bound)))
                  if host_bound else ""))
    return "\n".join(out)


def cross_device_prose(xd: pd.DataFrame) -> str:
    """One line per direction (device-time error per phase, gain predicted vs measured) and where the class rows
    miss, against the issue's targets (`analyze.whatif.cross_device_checks`)."""
    t, tg = W.CROSS_TARGET_PCT, W.CROSS_TARGET_GAIN
    directions, worst = W.cross_device_checks(xd, t, tg)
    out = []
    for fa, pb, g, ok in directions:
        parts = tr(", ").join(tr("{phase} {error:+.0f} % (gain {pg:.2f}× predicted, {mg:.2f}× measured)",
                                 phase=phase_label(r.phase), error=r.error_pct, pg=r.predicted_gain,
                                 mg=r.measured_gain) for r in g.itertuples())
        out.append((tr("- Fitted on {a}, predicting {b}: {parts}; within the targets (±{t:.0f} %, ±{tg:.2f}×).",
                       a=fa, b=pb, parts=parts, t=t, tg=tg) if ok else
                    tr("- Fitted on {a}, predicting {b}: {parts}; outside the targets (±{t:.0f} %, ±{tg:.2f}×).",
                       a=fa, b=pb, parts=parts, t=t, tg=tg)))
    if worst is not None:
        out.append(tr(
            "Per class the errors are larger ({cls} in {phase}, fitted on {a}: {error:+.0f} %): one latency and "
            "slowdown per class misses single kernels on the fitting GPU already, and the phase totals are "
            "where those misses cancel. The gains per class follow the measured ones more closely than the "
            "times do.", cls=worst["class"], phase=phase_label(worst.phase), a=worst.fitted_on, error=worst.error_pct))
    return "\n".join(out)


def cross_run_note(run, other) -> str:
    """Why `other` cannot serve as run's cross-device check ('' when it can: `analyze.whatif.cross_run_problem`)."""
    why = W.cross_run_problem(run, other)
    if why == "none":
        return tr("No cross_run given: the model is checked on this run's GPU only.")
    if why == "workload":
        return tr("{other} is not this workload ({keys} differ): no cross-device check.", other=md(other.run_id),
                  keys=", ".join(W.workload_differs(run, other)))
    if why == "device":
        return tr("{other} ran on this run's GPU ({device}): no cross-device check.", other=md(other.run_id),
                  device=md(run.info.device))
    return ""


def design_table(table: pd.DataFrame) -> pd.DataFrame:
    """`analyze.whatif.design_table` with its text cells in the reader's language."""
    return said(table, W.DESIGN_TEXT)


def design_headers() -> dict[str, str]:
    """Headers of `design_table` that differ from the lever table's same column: there "decode ms/token as deployed"
    is the deployed run's own model, here each design's prediction of the deployed run's launches."""
    return {"decode ms/token as deployed": tr("Decode ms/token, the run as deployed on this design")}


def deployed_note(f: dict) -> str:
    """The deployed run's decode step as the chapter shows it three times (`analyze.whatif.deployed_step_figures`):
    measured, its model as fitted (the levers' baseline) and predicted on this run's GPU as a design, and why the last
    two differ (this run's kernel floor scales the deployed run's fitted latencies)."""
    out = tr("The run as deployed, three figures for its decode step: ")
    if f["measured"] is not None:
        out += tr("its plain step measured {measured:.2f} ms; ", measured=f["measured"])
    out += tr("its model as fitted predicts {fitted:.2f} ms per token (the levers' baseline below); on {design} in "
              "the table above, {here:.2f} ms, its fitted latencies scaled by this run's kernel floor over its own "
              "({floor:.2f} ÷ {floor_dep:.2f} µs).", fitted=f["as_fitted"], design=say(f["design"]),
              here=f["on_this_gpu"], floor=f["floor_us"], floor_dep=f["floor_us_deployed"])
    return out


def lever_table(table: pd.DataFrame) -> pd.DataFrame:
    """`analyze.whatif.lever_table` with its text cells in the reader's language."""
    return said(table, W.LEVER_TEXT)


def sensitivity(sens: pd.DataFrame) -> pd.DataFrame:
    """`analyze.whatif.sensitivity_both`'s curves with their dispatch labels (the figure's legend) in the reader's
    language."""
    return said(sens, ["dispatch"])


def sensitivity_note(xerr: pd.DataFrame | None, env: dict | None) -> str:
    """What the sensitivity curves' numbers carry: the cross-device error per phase, and which stretch of
    which panel the check covered."""
    if xerr is None or env is None:
        return tr("No other GPU was checked (cross_run): the curves carry the held-out errors above only.")
    errs = tr(", ").join(tr("{phase} ±{pct:.0f} % (gain ±{gain:.2f}×)", phase=phase_label(r.phase),
                            pct=r.device_error_pct, gain=r.gain_error) for r in xerr.itertuples())
    lo, hi = env["dram_gbps"]
    return tr("Read each curve with the cross-device error of its phase's device time: {errs}. The check covers "
              "the DRAM bandwidth panel from {lo:,.0f} to {hi:,.0f} GB/s (the two GPUs' DRAM roofs, as chapter 04 "
              "takes them) only; far lower bandwidth (where latency-bound kernels turn bandwidth-bound, which the "
              "fixed share φ does not follow), any other matrix peak (both GPUs have {tf:g} TFLOP/s), on-chip memory "
              "beyond {sram:,.0f} MiB, batches above 1 and fused graphs lie outside what was validated.", errs=errs,
              lo=lo, hi=hi, tf=min(env["matrix_tflops"]), sram=env["sram_mb"][1])


def sensitivity_errors(trace: W.Trace, val: pd.DataFrame, deployed: W.Trace | None = None,
                       dep_val: pd.DataFrame | None = None) -> str:
    """The model errors the sensitivity curves' decode figures carry (`analyze.whatif.model_error` on each run
    drawn), and the levers no run checked: a stated kernel floor or efficiency, weights kept in SRAM and weight
    precision move the model beyond anything the runs measured."""
    parts = [tr("this run: {err}", err=say(W.model_error(val, tr=trace)))]
    if deployed is not None and dep_val is not None:
        parts.append(tr("as deployed: {err}", err=say(W.model_error(dep_val, tr=deployed))))
    return tr("Decode device time error of the model on each run drawn ({parts}). The kernel-floor, efficiency, "
              "SRAM and weight-precision panels move the model beyond anything measured: no run had another "
              "kernel floor, kernels at peak, weights kept on chip or fp8/int4 weights, so those curves say what "
              "the model implies, not what was checked.", parts=tr("; ").join(parts))


def _pct(v: float) -> str:
    return tr("n/a (no ncu counters)") if v != v else tr("{pct:.0f} %", pct=v)


def recommendations(trace: W.Trace, d: W.Design, kernels: pd.DataFrame, shares: pd.DataFrame,
                    graph_host_us: float = 2.0, xerr: pd.DataFrame | None = None,
                    env: dict | None = None) -> pd.DataFrame:
    """The reference report's nine areas, each with evidence from this run and a what-if number
    (`analyze.whatif.recommendation_figures`). On an eager run each what-if sentence says the launches were issued
    as a graph and gives the same change at the run's eager host gaps beside; on a run whose decode already ran as
    CUDA graphs nothing proposes graphs or cutting launch overhead: what is left between its kernels is named
    instead. `uncertainty`: the fit's error on decode, the cross-device error of decode and the ways the what-if's
    design lies outside what that check covered. Evidence, what-if and uncertainty are sentences in the reader's
    language; area, confidence and the reference claim are catalog keys (English in the frame, translated where
    shown)."""
    f = W.recommendation_figures(trace, d, kernels, shares, graph_host_us, xerr, env)
    no_claim = tr("the data cannot support a claim")
    if f["graph"]:
        q = f["replay"]
        matrix_if = tr("half the matrix TFLOP/s, decode as run (CUDA graphs): decode/token {decode:+.0f} %, "
                       "prefill {prefill:+.0f} %", decode=f["half_matrix"], prefill=f["half_matrix_prefill"])
        dram_if = tr("decode as run (CUDA graphs): at 2.5 TB/s decode time per token changes by {at_2_5:+.0f} %, "
                     "at 8 TB/s {at_8:+.0f} %", at_2_5=f["dram_2_5"], at_8=f["dram_8"])
        fuse_if = tr(
            "fusing those chains: decode/token {fused:+.0f} %. Decode already runs as CUDA graphs: no launch overhead "
            "is left to cut; between its kernels are {node:.2f} ms of node gaps per step (median {gap:.2f} µs), and "
            "between replays {host:.2f} ms of host time per step ({share:.0f} % of the plain {step:.2f} ms step: HF "
            "generate's loop), which no hardware lever moves", fused=f["fused"], node=q["node"], gap=q["gap"],
            host=q["host"], share=q["host_share_pct"], step=q["step"])
    else:
        matrix_if = tr(
            "half the matrix TFLOP/s, launches issued as a graph ({graph_us:g} µs each): decode/token "
            "{decode:+.0f} %, prefill {prefill:+.0f} %; at the run's eager host gaps decode/token {eager:+.0f} %",
            graph_us=f["graph_host_us"], decode=f["half_matrix"], prefill=f["half_matrix_prefill"],
            eager=f["half_matrix_eager"])
        dram_if = tr(
            "launches issued as a graph ({graph_us:g} µs each): at 2.5 TB/s decode time per token changes by "
            "{at_2_5:+.0f} %, at 8 TB/s {at_8:+.0f} %; at the run's eager host gaps {eager_2_5:+.0f} % and "
            "{eager_8:+.0f} %", graph_us=f["graph_host_us"], at_2_5=f["dram_2_5"], at_8=f["dram_8"],
            eager_2_5=f["dram_2_5_eager"], eager_8=f["dram_8_eager"])
        fuse_if = tr("fusing those chains: decode/token {fused:+.0f} %; eager dispatch (the run's host gaps, "
                     "{host_us:.1f} µs per launch) vs graph ({graph_us:g} µs): {graph:+.0f} %",
                     fused=f["fused"], host_us=f["host_us"], graph_us=f["graph_host_us"], graph=f["graph_dispatch"])
    w_tp = f["tensor_pipe_pct"]
    rows = [
        (tr("tensor-core kernels keep the tensor pipe {tp} active (time-weighted) in decode", tp=_pct(w_tp))
         if w_tp == w_tp else
         tr("tensor-core kernels run at {sm} SM throughput (time-weighted) in decode", sm=_pct(f["sm_pct"])),
         matrix_if),
        (tr("decode matrix products read {gb:.2f} GB of weights per token", gb=f["weights_gb"]), dram_if),
        (tr("decode L2 hit {hit} (time-weighted, ncu replay); one token's weights are {mib:,.0f} MiB",
            hit=_pct(f["l2_hit_pct"]), mib=f["weights_mib"]),
         tr("an on-chip SRAM that keeps the hottest weights: {half:,.0f} MiB (half of them) decode/token "
            "{change_half:+.0f} %, {sram:,.0f} MiB (all) {change:+.0f} %", half=f["half_sram_mib"],
            change_half=f["half_sram"], sram=f["sram_mib"], change=f["all_sram"])),
        (tr("GEMV is {gemv:.0f} % of decode kernel time; counted tensor FLOPs are {lo:.0f}–{hi:.0f}× 2·M·N·K "
            "(MMA tiles pad the token dimension)", gemv=f["gemv_pct"], lo=f["pad_lo"], hi=f["pad_hi"]),
         tr("batch 8 instead of 1: decode per token {change:+.0f} % (weights read once for 8 tokens)",
            change=f["batch_8"])),
        (tr("elementwise + copy/cast + reduction = {fusible:.0f} % of decode kernel time, in ~{launches} "
            "launches per token", fusible=f["fusible_pct"], launches=f["launches"]), fuse_if),
        (tr("copy/cast kernels take {pct:.0f} % of decode kernel time; decode reads {gb:.2f} GB of bf16 weights "
            "per token", pct=f["copy_pct"], gb=f["weights_gb"]),
         tr("weights in fp8 ({fp8:.2f} GB per token): decode/token {c8:+.0f} %; in int4 ({int4:.2f} GB): "
            "{c4:+.0f} % (weight bytes only: activations and KV cache unchanged, compute stays bf16, "
            "dequantisation not priced)", fp8=f["fp8_gb"], int4=f["int4_gb"], c8=f["fp8"], c4=f["int4"])),
        (tr("achieved occupancy {occ} (time-weighted); {under} of profiled decode time in kernels under one wave",
            occ=_pct(f["occupancy_pct"]), under=_pct(f["under_wave_pct"])),
         tr("not a what-if: fewer SMs would not slow kernels that fill less than one wave, but the model has "
            "no SM count")),
        (tr("communication kernels: {pct:.1f} % of decode kernel time (a multi-GPU run)", pct=f["comm_pct"])
         if f["comm_pct"] else
         tr("communication kernels: {pct:.1f} % of decode kernel time (a single-GPU run)", pct=f["comm_pct"]),
         no_claim),
        (tr("no power or energy counters were captured"), no_claim),
    ]
    out = pd.DataFrame([(e, w, c) for (e, w), c in zip(rows, f["confidence"])],
                       columns=["evidence (this run)", "what-if", "confidence"])
    e = f["across"]
    unc = []
    for why in f["outside"]:
        if why is None:
            unc.append("")
            continue
        err = (tr("decode device time ±{pct:.0f} %, gain ±{gain:.2f}× across GPUs", pct=e.device_error_pct,
                  gain=e.gain_error) if e is not None else tr("not checked on another GPU"))
        unc.append(tr("decode {held}; ", held=say(f["held"])) + err
                   + (tr("; outside what was checked: {why}", why=tr(", ").join(map(say, why))) if why and
                      e is not None else tr("; within what was checked") if e is not None else ""))
    out["uncertainty"] = unc
    out.insert(0, "area", W.AREAS)
    out["reference report"] = out.area.map(W.REFERENCE_CLAIMS)
    return out
