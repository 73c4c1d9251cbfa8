"""Chapter 07's sentences (and chapter 06's line on a workload as deployed), from `analyze.summary`'s tables and
figures: the headline, the decode step against its limit, eager against deployed, the variants predicted against
measured, which runs the chapter reads, and the comparison's note."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyze.summary import TARGET_PCT, DecodeLimit, step_quantities
from ..contract import quantity
from ..display import phase_label
from ..escape import md, md_code
from ..i18n import N_, tr
from . import say


def _limit_rows(d: DecodeLimit) -> pd.DataFrame:
    """The step's figures as a long table; each value the named quantity the prose prints (`DecodeLimit.q`)."""
    rows = [(tr("weights read per step"), "weight_mb", "MB"), (tr("KV cache read per step"), "kv_mb", "MB"),
            (tr("DRAM bandwidth ({source})", source=say(d.dram_source)), "dram_gbps", "GB/s"),
            (tr("physical limit per step (bytes ÷ bandwidth)"), "limit_ms", "ms"),
            (tr("GPU busy per step (measured)"), "busy_ms", "ms"),
            (tr("wall per step (measured, profiled pass)"), "wall_ms", "ms"),
            (tr("wall per step (measured, plain run)"), "plain_ms", "ms"),
            (tr("GPU busy ÷ limit"), "busy_x", "×"), (tr("wall ÷ limit (profiled pass)"), "wall_x", "×"),
            (tr("wall ÷ limit (plain run)"), "plain_x", "×")]
    out = pd.DataFrame([(label, np.nan, unit) for label, _, unit in rows], columns=["quantity", "value", "unit"])
    out["value"] = quantity.column(d.q(name) for _, name, _ in rows)
    return out


def decode_limit_prose(d: DecodeLimit) -> str:
    return tr("A decode step must read {weights:.0f} MB of weights and {kv:.1f} MB of KV cache; at {bw:,.0f} GB/s "
              "({source}) that takes {limit:.2f} ms. The GPU is busy {busy:.2f} ms per step "
              "({busy_x:.1f}× the limit) and the step takes {wall:.2f} ms of wall time under the profiler "
              "({wall_x:.1f}× the limit): the distance between the last two is host and launch time, the "
              "distance between the first two is kernels that do not stream at full bandwidth.",
              weights=d.q("weight_mb"), kv=d.q("kv_mb"), bw=d.q("dram_gbps"), source=say(d.dram_source),
              limit=d.q("limit_ms"), busy=d.q("busy_ms"), busy_x=d.q("busy_x"), wall=d.q("wall_ms"),
              wall_x=d.q("wall_x"))


def variants_prose(rows: pd.DataFrame, controls: dict[str, pd.DataFrame], left_out: list[str] = ()) -> str:
    """What the predicted-vs-measured table says (with each variant's what-if lever), where it cannot be
    trusted, and which given runs are not variants of this one."""
    out = []
    for v, g in rows.groupby("variant", sort=False):
        d = g[g.phase == "decode"]
        if d.empty:
            continue
        r = d.iloc[0]
        if r.predicted_gain == r.predicted_gain:
            out.append(tr("**{v}** — what-if lever: {lever}.", v=md(say(v)), lever=md(say(r.lever))))
            # decode always; prefill where the lever changes it (batch), not where it predicts no change
            for x in g[(g.phase == "decode") | (g.predicted_gain != 1.0)].itertuples():
                verdict = (tr("within the {tol:.0f} % target", tol=TARGET_PCT) if abs(x.gain_error_pct) <= TARGET_PCT
                           else tr("outside the {tol:.0f} % target", tol=TARGET_PCT))
                vals = dict(p=x.predicted_gain, m=x.measured_gain, e=x.gain_error_pct, verdict=verdict)
                out.append(tr("  Decode predicted {p:.1f}× faster, measured {m:.1f}× ({e:+.0f} %, {verdict}).", **vals)
                           if x.phase == "decode" else
                           tr("  Prefill predicted {p:.2f}× the baseline's speed per call, measured {m:.2f}× "
                              "({e:+.0f} %, {verdict}).", **vals))
        else:
            out.append(tr("**{v}**: measured {m:.2f}× on decode; no prediction: {why}.", v=md(say(v)),
                          m=r.measured_gain,
                          why=md(say(r.why_no_prediction))))
        c = controls.get(r.run)
        if c is not None and len(c):
            cells = ", ".join(f"{phase_label(x.phase)} {x.wall_ratio:.2f}×" for x in c.itertuples())
            out.append(tr("  Host control: phases this variant does not change ran at a different wall time "
                          "({cells}) with the same GPU-busy time, so the two captures ran on hosts of "
                          "different speed; host-bound figures between them carry that factor.", cells=cells))
    out += [tr("Left out: {why}.", why=md(say(w))) for w in left_out]
    return "\n\n".join(out)


def headline_parts(phases: pd.DataFrame, limit: DecodeLimit | None, rows: pd.DataFrame,
                   deploy: pd.DataFrame | None = None, other_host: set = frozenset()) -> list[str]:
    """The chapter's line in parts: the biggest phase, decode against its limit (the plain eager step and, with a
    deployment-shaped variant, the step as deployed, first), the best measured variant. `other_host`: the runs whose
    host differs from their baseline's (`host_control` names a phase): their measured gain says so."""
    top = phases.sort_values("wall_ms", ascending=False).iloc[0]
    recorded, of = phases.attrs.get("decode_steps", (None, None))
    out = [tr("{phase} holds {share:.0f} % of the profiled generate call's phase time", phase=phase_label(top.phase),
              share=top.share_pct)
           + (tr(" (the profiler recorded {n} of its {total:,} decode steps)", n=recorded, total=of)
              if top.phase == "decode" and recorded and of and recorded < of else "")]
    if _deployed_first(limit, deploy):
        # the run as deployed first: the book's conclusions are about it; HF's eager loop beside it
        g, e = step_quantities(deploy, 1), step_quantities(deploy, 0)
        out.insert(0, tr("as deployed (CUDA graphs, {run}) a plain decode step takes {wall:.2f} ms, {x:.1f}× the "
                         "{limit:.2f} ms its weight and KV bytes need at measured DRAM bandwidth; HF's eager loop "
                         "takes {eager:.1f} ms ({ex:.0f}×)", run=deploy.run.iloc[1], wall=g["plain"],
                         x=g["plain_x"], limit=g["limit"], eager=e["plain"], ex=e["plain_x"]))
        out[0] = out[0][:1].upper() + out[0][1:]
    elif limit is not None and deploy is not None and len(deploy) and deploy.plain_ms.iloc[0] == deploy.plain_ms.iloc[0]:
        e = step_quantities(deploy, 0)
        if deploy.attrs.get("graphs", [False])[0]:  # a graph run alone: its step as deployed, never "eager"
            out.append(tr("a plain decode step as CUDA graphs takes {wall:.2f} ms, {x:.1f}× the {limit:.2f} ms its "
                          "weight and KV bytes need at measured DRAM bandwidth", wall=e["plain"], x=e["plain_x"],
                          limit=e["limit"]))
        else:
            out.append(tr("a plain eager decode step takes {wall:.1f} ms, {x:.0f}× the {limit:.2f} ms its weight and "
                          "KV bytes need at measured DRAM bandwidth", wall=e["plain"], x=e["plain_x"],
                          limit=e["limit"]))
    elif limit is not None and limit.plain_ms:
        out.append(tr("a plain eager decode step takes {wall:.1f} ms, {x:.0f}× the {limit:.2f} ms its weight and KV "
                      "bytes need at measured DRAM bandwidth", wall=limit.q("plain_ms"), x=limit.q("plain_x"),
                      limit=limit.q("limit_ms")))
    elif limit is not None:  # a run captured before plain phases were timed: its profiled step, said so
        out.append(tr("a decode step takes {wall:.1f} ms under the profiler (the run has no plain step timing), "
                      "{x:.0f}× the {limit:.2f} ms its weight and KV bytes need at measured DRAM bandwidth",
                      wall=limit.q("wall_ms"), x=limit.q("wall_x"), limit=limit.q("limit_ms")))
    d = rows[rows.phase == "decode"] if len(rows) else rows
    if len(d):
        best = d.sort_values("measured_gain", ascending=False).iloc[0]
        pred = (tr(" (predicted {p:.1f}×)", p=best.predicted_gain) if best.predicted_gain == best.predicted_gain
                else "")
        out.append(tr("{v} measured {m:.1f}× faster decode{pred}", v=md(say(best.variant)), m=best.measured_gain,
                      pred=pred)
                   + (tr(", on another host than its baseline (see the host control below)")
                      if best.run in other_host else ""))
    return out


def headline(phases: pd.DataFrame, limit: DecodeLimit | None, rows: pd.DataFrame,
             deploy: pd.DataFrame | None = None, other_host: set = frozenset()) -> str:
    """The chapter's one line (`opening`'s answer)."""
    return opening(phases, limit, rows, deploy, other_host)[0]


def opening(phases: pd.DataFrame, limit: DecodeLimit | None, rows: pd.DataFrame,
            deploy: pd.DataFrame | None = None, other_host: set = frozenset()) -> tuple[str, str]:
    """(the chapter's answer, what follows it) from `headline_parts`: with a deployment-shaped variant the answer is
    the step as deployed against its limit, HF's eager loop beside it, and the biggest phase and the best measured
    variant follow; otherwise the answer holds every part and nothing follows."""
    parts = headline_parts(phases, limit, rows, deploy, other_host)
    if not _deployed_first(limit, deploy):
        return tr("; ").join(parts) + tr("."), ""
    rest = tr("; ").join(parts[1:]) + tr(".") if len(parts) > 1 else ""
    return parts[0] + tr("."), rest[:1].upper() + rest[1:]


def _deployed_first(limit, deploy) -> bool:
    return (limit is not None and deploy is not None and len(deploy) > 1
            and deploy.plain_ms.iloc[0] == deploy.plain_ms.iloc[0])


def twins_note(tw, base) -> str:
    """Which runs chapter 07 (and 06) read: the eager run `base` and its run as deployed, found from whichever
    run the book was given (`load.twins`), or why there is none."""
    from ..load.twins import FOUND_HOST, FOUND_NAMED, FOUND_SIBLING

    how = {FOUND_HOST: N_("captured beside it on one host"), FOUND_NAMED: N_("named by deployed_run"),
           FOUND_SIBLING: N_("a run of the same workload in the same folder, captured on another host")}
    if tw.deployed is None:
        return tr("No run of this workload as deployed (decode as CUDA graphs: a static cache and a compiled step) "
                  "lies beside {run}: the conclusions below are about HF's eager loop, which no serving stack runs. "
                  "Capture one with `cache_implementation: static` (params/variant-static-graphs.yaml).",
                  run=md(base.run_id))
    if tw.eager is None:
        return tr("{dep} decoded as CUDA graphs; no eager run of the same workload lies beside it, so nothing shows "
                  "what HF's eager loop adds.", dep=md(tw.deployed.run_id))
    given = tw.given.run_id
    return tr("The book's run is {given}. This chapter reads the workload as deployed, {dep} (decode as CUDA graphs), "
              "and the eager run {eager} beside it ({how}): the conclusions are the deployed run's, the eager run "
              "shows what HF's eager loop adds, whichever of the two the book was given.", given=md(given),
              dep=md(tw.deployed.run_id), eager=md(tw.eager.run_id), how=tr(how.get(tw.found, tw.found or "")))


def deployed_missing(run, deployed_run: str) -> str:
    if run.info.workload.graph_decode:
        return tr("{r} itself decoded as CUDA graphs, as serving stacks run decode: the figures of this chapter are the "
                  "step as deployed ({d} is another workload and is not set beside it).", r=md(run.run_id),
                  d=md(deployed_run) if deployed_run else "deployed_run")
    if not deployed_run:
        return tr("No deployed_run given: the figures of this chapter are eager HF generate's.")
    return tr("{d} is not this workload run as CUDA graphs (a static-cache variant of {r}); the chapter shows the "
              "eager run only.", d=md(deployed_run), r=md(run.run_id))


def as_deployed_headline(deployed_line: str, dep, eager, eager_line: str) -> str:
    """Chapter 06's line on a workload with a run as deployed: that run's model check first (the book's subject),
    then the eager run's, as what HF's eager loop adds (`classify.deployed_beside_eager`, chapter 05's too)."""
    from .classify import deployed_beside_eager

    return deployed_beside_eager(dep, deployed_line, eager, eager_line)


def deployed_prose(table: pd.DataFrame, limit: DecodeLimit | None) -> str:
    if len(table) and table.attrs.get("graphs", [False])[0] and (len(table) < 2 or limit is None):
        return tr("This run decoded as CUDA graphs, as serving stacks run decode: the figures above are the step as "
                  "deployed. No eager run of the same workload is among variant_runs to show what HF's eager loop "
                  "adds.")
    if len(table) < 2 or limit is None:
        return tr("No deployment-shaped variant (decode as CUDA graphs) is among variant_runs: the figures above are "
                  "eager HF generate's, which no serving stack runs.")
    e, g = step_quantities(table, 0), step_quantities(table, 1)
    rid = table.attrs["run_ids"][0]
    return tr("Eager, a plain decode step takes {e:.2f} ms, {ex:.1f}× its {lim:.2f} ms limit; as deployed ({g_run}, "
              "CUDA graphs) it takes {g:.2f} ms, {gx:.1f}× the limit, of which the GPU is busy {gb:.2f} ms "
              "({gbx:.1f}×). Under graphs what remains is kernel work, which is where the hardware question lies.",
              e=e["plain"], ex=e["plain_x"], lim=e["limit"], g_run=table.run.iloc[1], g=g["plain"], gx=g["plain_x"],
              gb=g["busy"], gbx=g["busy_x"]) + (
        tr(" The compiled step's kernels are busy {gb:.2f} ms against eager's {eb:.2f} ms (fused by torch.compile): "
           "graphs cut more than launch overhead, so their gain can pass the launch-overhead bound of chapter 05 "
           "(the eager plain step ÷ its GPU-busy time, {bound:.1f}×).", gb=g["busy"], eb=e["busy"],
           bound=quantity.ratio(e["plain"], e["busy"], f"{rid}/decode.plain_over_gpu_busy"))
        if g["busy"] < 0.95 * e["busy"] else "")


def deployed_decode_prose(dep) -> str:
    """The run as deployed's own decode (`analyze.findings.decode_share`): its share of the plain generate, before
    the table of its decode kernel time by category (`decode_categories`); what to say where there is no such run."""
    from ..analyze.findings import decode_share

    if dep is None:
        return tr("No run of this workload as deployed sits beside this one: the first page's findings are this run's, "
                  "and chapter 01 shows their figures.")
    ds = decode_share(dep)
    if ds is None:
        return tr("As deployed ({run}): its plain decode was not timed; its kernel time by category follows.",
                  run=md(dep.run_id))
    return tr("As deployed ({run}), decode takes {pct:.0f} % of the plain generate: {decode:.0f} of {whole:.0f} ms, "
              "{steps} steps. Its decode kernel time by category:", run=md(dep.run_id), pct=100 * ds["share"],
              decode=ds["decode_ms"], whole=ds["whole_ms"], steps=ds["steps"])


def limit_table(limit: DecodeLimit | None) -> pd.DataFrame:
    return _limit_rows(limit) if limit is not None else pd.DataFrame(columns=["quantity", "value", "unit"])


def limit_prose(limit: DecodeLimit | None) -> str:
    if limit is None:
        return tr("The run has no decode phase.")
    if limit.experts_once is None:
        return decode_limit_prose(limit)
    tokens, experts, per_choice, distinct = limit.experts_once
    if distinct is not None:
        return decode_limit_prose(limit) + " " + tr(
            "The weights count each expert the batch's routers picked once: {d:.1f} of the MoE's {experts} experts per "
            "layer on average (the capture's routing pass recorded them) for {tokens} tokens, where a copy per choice "
            "would be {copies:,.0f} MB.", d=distinct, experts=experts, tokens=tokens, copies=per_choice / 1e6)
    return decode_limit_prose(limit) + " " + tr(
        "The weights count each of the MoE's {experts} experts at most once: the batch's {tokens} tokens choose more "
        "experts than there are, and a copy per choice would be {copies:,.0f} MB, more than the step must move.",
        experts=experts, tokens=tokens, copies=per_choice / 1e6)


def comparison_note(pair: tuple | None) -> str:
    from .compare import coverage_words

    if pair is None:
        return tr("No `baseline_run` given and no variant run to compare with.")
    a, b = pair
    return tr("A = `{a}` ({ca}), B = `{b}` ({cb}); ratios are B ÷ A.", a=md_code(a.run_id), ca=md(coverage_words(a)),
              b=md_code(b.run_id), cb=md(coverage_words(b)))


def contract(run, k: pd.DataFrame, roofs) -> tuple[pd.DataFrame, str]:
    """The profiler output contract (`report.md`) as chapter 07 shows it (`analyze.summary.contract`): its Stages
    table as a frame (bound and key issue per phase, the key issue in the reader's language) and, as Markdown, what
    its cells and classes mean and its per-phase sections (root cause, top 3 opportunities); a phrase in its place
    where the run has no ncu counters."""
    import re

    from ..analyze.summary import contract as parts_of
    from ..contract.phrase import Phrase
    from . import classify as NC

    stages, parts = parts_of(run, k, roofs)
    if isinstance(parts, Phrase):
        return stages, parts
    summary, c, opps, rows = parts
    text = NC.contract_legend(run.manifest, summary, rows) + "\n\n" + NC.contract_sections(summary, c, opps,
                                                                                           run.manifest)
    return NC.stages(stages), re.sub(r"^## ", "#### ", text, flags=re.M)
