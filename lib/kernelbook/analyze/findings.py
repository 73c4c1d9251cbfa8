"""The run's findings, chosen by the analysis: each a figure of the run with the share of time it is about (its
effect), the basis of its numbers and the chapter section that holds the evidence. The first page of the book (the
index) and report.md open with the largest five; `narrate.findings` words them. Numbers only: no sentence here.

Effects are shares of the time the reader pays for: of the plain generate (decode's share of it), or of the plain
decode step of the run as deployed (what the limit, the host, a kernel class or a lever takes of it; where no run
of the workload was captured as deployed, of the eager run's step)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..contract import quantity
from ..contract.quantity import q

MAX_FINDINGS = 5


@dataclass(frozen=True)
class Finding:
    key: str                 # which finding: `narrate.findings` words it by this key
    effect: float            # the share of time it is about, 0..1: the page lists the largest first
    values: dict = field(default_factory=dict)  # the numbers the sentence prints (named quantities) and its labels
    run_id: str = ""         # the run the numbers are of
    basis: str = ""          # plain | GPU-busy | model: what the times are
    chapter: str = ""        # the chapter holding the evidence (stem)
    section: str = ""        # its heading (English: the catalog key; the link's anchor is made in the reader's language)


DEPLOYED_SECTION = "The run as deployed"  # chapter 07's section of the deployed run's own decode figures


def decode_kernel_classes(run) -> pd.Series:
    """Decode kernel time per step by class (category), ms, largest first."""
    t = run.timeline
    k = t[(t.kind == "kernel") & (t.phase == "decode")]
    steps = max(1, k.step.nunique())
    return (k.groupby("category").duration_ns.sum() / steps / 1e6).sort_values(ascending=False)


def decode_categories(run) -> pd.DataFrame:
    """`decode_kernel_classes` as a table: category, kernel ms per decode step, % of decode kernel time."""
    cls = decode_kernel_classes(run)
    return pd.DataFrame({"category": cls.index, "decode_step_kernel_ms": cls.to_numpy(),
                         "decode_kernel_pct": (100 * cls / cls.sum()).to_numpy()})


def decode_share(run) -> dict | None:
    """Decode's share of the run's plain generate (`share`, 0-1), with the decode ms (`decode_ms`), the whole
    generate's (`whole_ms`) and the steps (`steps`); None where the plain decode was not timed. The whole is the plain
    generate call where it was timed: the phase ranges leave out what generate does outside the model's forwards (as
    deployed on the H100, about 150 of its 411 ms), which a share of their sum hands to them."""
    plain = run.info.timeline_info.plain_phases
    total = {ph: v.ms_per_step * v.steps for ph, v in plain.items() if v.ms_per_step and v.steps}
    if not total.get("decode"):
        return None
    gen = run.info.timeline_info.plain_generate
    whole = max(1e3 * gen.median_s if gen is not None and gen.median_s else 0.0, sum(total.values()))
    return {"share": total["decode"] / whole, "decode_ms": total["decode"], "whole_ms": whole,
            "steps": plain["decode"].steps}


def findings(eager, deployed, limit, deploy: pd.DataFrame, lev: pd.DataFrame | None) -> list[Finding]:
    """Every finding the run supports, largest effect first. `eager`/`deployed`: the workload's eager run and its run
    as deployed (CUDA graphs; None where not captured); `limit`: `summary.decode_limit`; `deploy`: `summary.deployed`
    (plain and busy step per run against the limit); `lev`: `levers.levers` (None without a deployed run)."""
    from .summary import step_quantities

    out: list[Finding] = []
    main = deployed if deployed is not None else eager
    rid = main.run_id
    graphs = deployed is not None
    # each finding links to the section that shows its figure: chapter 01's of the eager run, chapter 07's of the run
    # as deployed where the findings are about it
    where = {"share": ("07_summary", DEPLOYED_SECTION) if graphs else
             ("01_timeline", "Phases: wall time, GPU-busy time, idle share"),
             "limit": ("07_summary", "Eager against deployed") if graphs else
             ("07_summary", "The decode step against its physical limit"),
             "host": ("07_summary", "Eager against deployed") if graphs else
             ("07_summary", "Where the distance from the limit goes"),
             "classes": ("07_summary", DEPLOYED_SECTION) if graphs else
             ("01_timeline", "Categories per phase, and decode against the reference report")}
    ds = decode_share(main)
    if ds is not None:
        out.append(Finding("decode_share", ds["share"], {
            "pct": q(rid, "decode.plain_share_pct", 100 * ds["share"]), "steps": ds["steps"]}, rid, "plain",
            *where["share"]))
    ids = deploy.attrs.get("run_ids", [])
    if limit is not None and rid in ids:
        row = step_quantities(deploy, ids.index(rid))
        step, busy = row["plain"], row["busy"]
        if step == step and step > 0:
            out.append(Finding("limit", 1 - row["limit"] / step, {
                "step_ms": step, "x": row["plain_x"], "limit_ms": row["limit"], "graphs": graphs}, rid, "plain",
                *where["limit"]))
            if busy == busy and step > busy:
                out.append(Finding("host", (step - busy) / step, {
                    "pct": q(rid, "decode.host_share_pct", 100 * (step - busy) / step),
                    "host_ms": q(rid, "decode.host_step_ms", step - busy), "step_ms": step, "graphs": graphs},
                    rid, "plain against GPU-busy", *where["host"]))
            cls = decode_kernel_classes(main)
            if len(cls):
                top = str(cls.index[0])
                out.append(Finding("kernel_class", float(cls.iloc[0]) / step, {
                    "cls": top, "pct": q(rid, f"decode.class_share_pct.{top}", 100 * cls.iloc[0] / cls.sum()),
                    "ms": q(rid, f"decode.class_ms_per_step.{top}", float(cls.iloc[0]))}, rid, "GPU-busy",
                    *where["classes"]))
    if graphs and eager.run_id in ids and deployed.run_id in ids:
        e, d = (step_quantities(deploy, ids.index(x))["plain"] for x in (eager.run_id, deployed.run_id))
        if e == e and d == d and d > 0:
            # the eager step is the host's: its plain generates spread with the host's speed (16-30 % on the lent
            # H100s), and the gain with them; the range over them goes beside the median's
            dec = eager.info.timeline_info.plain_phases.get("decode")
            samples = dec.samples_ms_per_step if dec is not None else ()
            out.append(Finding("graphs", 1 - d / e, {
                "eager_ms": e, "deployed_ms": d, "gain": quantity.ratio(e, d, f"{rid}/decode.graph_gain"),
                "eager": eager.run_id,
                "range": (min(samples) / d, max(samples) / d) if len(samples) > 1 else None},
                rid, "plain", "07_summary", "Eager against deployed"))
    if lev is not None and not lev.empty:
        for kind in ("software", "hardware"):
            best = _levers(lev, kind).sort_values("change %")
            if len(best):
                b = best.iloc[0]
                out.append(Finding(f"lever_{kind}", -float(b["change %"]) / 100, {
                    "lever": b.lever, "setting": b.setting,
                    "pct": q(rid, f"decode.lever_change_pct.{b.lever}.{b.setting}", -float(b["change %"])),
                    "error": b["model error"]}, rid,
                    "measured kernel time" if kind == "software" else "model", "07_summary", "Levers on one scale"))
    return sorted(out, key=lambda f: -f.effect)


def first(found: list[Finding], n: int = MAX_FINDINGS) -> list[Finding]:
    """The page's findings: the largest `n` effects."""
    return found[:n]


def _levers(lev: pd.DataFrame, kind: str | None = None) -> pd.DataFrame:
    """The levers that change the deployed step (status gain), batch left out: a batch is how the step is served, not
    a change to it (chapter 08 measures it over batch sizes; the what-if's batch lever is its weakest)."""
    from .levers import gains

    return gains(lev, kind, batch=False)


def top_levers(lev: pd.DataFrame | None, n: int = 3) -> pd.DataFrame:
    """The top `n` levers on one scale (software and hardware, the deployed step's ms per token), largest gain first,
    one setting per lever."""
    if lev is None or lev.empty:
        return pd.DataFrame(columns=["lever", "kind", "setting", "decode ms/token", "change %", "how priced",
                                     "model error"])
    g = _levers(lev).sort_values("change %").drop_duplicates("lever")
    return g.head(n)[["lever", "kind", "setting", "decode ms/token", "change %", "how priced", "model error"]]
