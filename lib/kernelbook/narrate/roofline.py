"""Chapter 04's sentences, from `analyze.roofline`: what the rooflines say, the notes on the roofs and on the points
(padding, near-empty kernels, bypassed levels), and its tables' words in the reader's language."""
from __future__ import annotations

import pandas as pd

from ..analyze import roofline as R
from ..display import eng, phase_label
from ..escape import md
from ..i18n import tr
from . import said

TEXT = ("roof", "source", "likely_cause", "work_basis")  # the tables' cells that are phrases or catalog keys


def table(t: pd.DataFrame) -> pd.DataFrame:
    """One of `analyze.roofline`'s tables (`Roofs.table`, `above_roof_causes`, `useful_work`) with its words in the
    reader's language."""
    return said(t, TEXT) if len(t) else t  # an empty one as it is: no column of its own dtype


def roof_notes(r: R.Roofs) -> list[str]:
    """What the roofs table cannot say: an L2 roof estimated from the run's counters, and a missing L1 roof."""
    notes = []
    if "l2" in r.estimated_from:
        kid, pct = r.estimated_from["l2"]
        notes.append(tr("The L2 roof ({tbps:.1f} TB/s) is estimated from {kernel}, the kernel that loads L2 most "
                        "({pct:.0f} % of peak): its L2 bytes/s ÷ that percentage. This capture predates the L2 "
                        "peak counter; newer captures read the roof from ncu directly.", tbps=r.bandwidth["l2"] / 1e12,
                        kernel=md(kid), pct=pct))
    if "l1" not in r.bandwidth:
        notes.append(tr("No L1 roof: this capture lacks ncu's L1 peak counter, and L1 throughput % mixes shared-memory "
                        "and texture traffic, so bytes ÷ % is not a bandwidth. L1 points are drawn without a roof."))
    return notes


def useful_note(u: pd.DataFrame, phase: str) -> str:
    """What the points' FLOPs are (`analyze.roofline.padded`); empty when every kernel's counted FLOPs are its useful
    work."""
    f = R.padded(u, phase)
    if f is None:
        return ""
    return tr("The points are drawn with the FLOPs ncu counted, which include the MMA tile's padding: for {n} {phase} "
              "kernels ({kernels}) that is {lo:.2f}–{hi:.2f}× the useful work of their shapes (2·M·N·K, or attention's "
              "4·B·H·Sq·Sk·D). The table below gives both; the hollow markers in the physical roofline are the useful "
              "work at DRAM.", n=len(f["kernels"]), phase=phase_label(phase),
              kernels=", ".join(md(x) for x in f["kernels"]), lo=f["lo"], hi=f["hi"])


def near_empty_note(kernels: pd.DataFrame, phase: str) -> str:
    """One sentence naming the near-empty kernels of `phase` whose L2 and L1 points are artifacts
    (`analyze.roofline.near_empty`)."""
    f = R.near_empty(kernels, phase)
    if f is None:
        return ""
    return tr("{n} {phase} kernels ({kernels}) read at most {dram} from DRAM, yet ncu counts {lo}–{hi} at L2 for each, against a "
              "floor of {floor} that every profiled launch shows: their L2 count is the floor, not their traffic, and "
              "their L1 count a handful of sectors. Their L2 and L1 points are drawn grey and marked as artifacts in "
              "the table; only their DRAM point describes the kernel.", n=len(f["kernels"]), phase=phase_label(phase),
              kernels=", ".join(md(x) for x in f["kernels"]), dram=eng(f["dram_bytes"], "B"),
              lo=eng(f["l2_min_bytes"], "B"), hi=eng(f["l2_max_bytes"], "B"), floor=eng(f["floor_bytes"], "B"))


def bypass_note(kernels: pd.DataFrame, phase: str) -> str:
    """One sentence per level point left out of the rooflines (`analyze.roofline.bypassed_levels`), with its bytes;
    empty when none is."""
    b = R.bypassed_levels(kernels, phase)
    return "\n".join(tr("- {kernel} {name}: no {level} point — {level} counted {level_bytes} against {dram_bytes} from "
                        "DRAM, so its loads went around {level} (asynchronous copies into shared memory) and "
                        "FLOPs ÷ those bytes would be an artifact.", kernel=md(r.kernel_id), name=md(r.friendly_name),
                        level=r.level, level_bytes=eng(r.level_bytes, "B"), dram_bytes=eng(r.dram_bytes, "B"))
                     for r in b.itertuples())


def prose(p: pd.DataFrame, bw_only: pd.DataFrame, r: R.Roofs, phase: str = "decode") -> str:
    """What the rooflines say (`analyze.roofline.figures`): time-weighted % of roof, how many points are
    memory-side; paragraphs apart by a blank line, the first the chapter's summary."""
    f = R.figures(p, bw_only, phase)
    if not f["points"]:
        return tr("No profiled kernel issues FLOPs, so no roofline points can be drawn.")
    name = phase_label(phase)
    if not f["dram"]:
        return tr("No profiled {phase} kernel has DRAM bytes and FLOPs.", phase=name)
    top = f["largest"]
    parts = [tr("In {phase}, the {n} profiled kernels with FLOPs reach on average **{wmean:.1f} %** of their DRAM "
                "roof, weighted by time ({median:.1f} % unweighted median); {n_memory} of them sit left of the ridge "
                "(memory side at DRAM intensity).", phase=name, n=f["n"], wmean=f["wmean"], median=f["median"],
                n_memory=f["n_memory"]),
             tr("The largest by time, {kernel} ({share:.1f} % of {phase} kernel time), reaches {pct:.1f} % of its roof "
                "at {intensity:,.1f} FLOP/B.", kernel=md(top["name"]), share=top["share"], phase=name,
                pct=top["pct"], intensity=top["intensity"])]
    b = f["bandwidth_only"]
    if b:
        values = dict(n=b["n"], share=b["share"], phase=name, median=b["median"])
        parts.append(
            tr("One profiled kernel issues no FLOPs (copies, gathers, casts; {share:.1f} % of {phase} kernel "
               "time): it appears in the table of bandwidth-only kernels, at {median:.1f} % of the DRAM roof.",
               **values) if b["n"] == 1 else
            tr("{n} profiled kernels issue no FLOPs (copies, gathers, casts; {share:.1f} % of {phase} kernel "
               "time): they appear in the table of bandwidth-only kernels, at a median {median:.1f} % of the "
               "DRAM roof.", **values))
    n_above, tol = f["n_above"], f["tol"]
    if n_above == 0:
        parts.append(tr("No point lies more than {tol:.0f} % above its roof.", tol=tol))
    elif n_above == 1:
        parts.append(tr("One point lies more than {tol:.0f} % above its roof and is listed with the likely cause "
                        "below.", tol=tol))
    else:
        parts.append(tr("{n} points lie more than {tol:.0f} % above their roof and are listed with the likely cause "
                        "below.", n=n_above, tol=tol))
    return "\n\n".join(parts)
