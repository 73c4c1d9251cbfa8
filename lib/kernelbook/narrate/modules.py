"""Kernels in the model's terms, in words (chapters 01, 02, 05 and 07): what the tables by module type say, the
bytes ledger's reading, and the module types beside each ncu kernel in the reader's language."""
from __future__ import annotations

import pandas as pd

from ..analyze import modules as M
from ..analyze import ncu_report
from ..display import phase_label
from ..i18n import N_, tr
from . import said, say

LEDGER_NOTE = N_("must move: the weights a module's matrix products read (2 bytes per weight element, from each "
                 "launch's shapes) and the KV cache its attention reads (q, k, v and the output, from the shapes); "
                 "activations between modules are left out (they are small at batch 1). moved: ncu's DRAM bytes where "
                 "the launch is the profiled kernel's configuration, else the bytes the op's shapes imply.")


def run_ledger(run) -> tuple[pd.DataFrame, str]:
    """A run's bytes ledger of one decode step (`analyze.modules.run_ledger`) and what it says."""
    ledger, reading = M.run_ledger(run)
    return ledger, reading_prose(reading)


def ledger_prose(ledger: pd.DataFrame, plain_step_ms: float | None, bw: tuple[float, str],
                 measured: dict | None = None) -> str:
    """What `ledger` says about the distance between the step and its limit (`analyze.modules.ledger_reading`)."""
    return reading_prose(M.ledger_reading(ledger, plain_step_ms, bw, measured))


def reading_prose(f: dict | None) -> str:
    """`analyze.modules.ledger_reading`'s figures as sentences."""
    if f is None:
        return tr("This run was captured before kernels were tied to modules, so there is no bytes ledger: "
                  "re-capture it to get one.")
    out = [tr("One decode step's kernels must move {must:.0f} MB (weights and the KV cache they read): {floor:.0f} µs "
              "at {bw:.2f} TB/s ({src}). They moved {moved:.0f} MB ({ratio:.1f}× that) in {kernel:.0f} µs of kernel "
              "time, {over:.1f}× the floor.", must=f["must_mb"], floor=f["floor_us"], bw=f["bw_tbps"],
              src=say(f["source"]), moved=f["moved_mb"], ratio=f["moved_ratio"], kernel=f["kernel_us"],
              over=f["time_over_floor"])]
    m = f["measured"]
    if m:
        verdict = (tr("it reads what it must, about once") if m["reads"] == "once" else
                   tr("{pct:.0f} % more than it must: bytes read twice or beyond weights and KV cache",
                      pct=m["reads_pct"]) if m["reads"] == "more" else
                   tr("{pct:.0f} % less than the ledger's must-move bytes: part of them stayed in L2 between steps",
                      pct=m["reads_pct"]))
        out.append(tr("Measured as one range (ncu's range pass: decode step {n} whole, caches flushed before it, not "
                      "between its kernels), the step read {read:.0f} MB from DRAM, {ratio:.2f}× the {must:.0f} MB it "
                      "must move ({verdict}), and wrote {write:.0f} MB, which the must-move bytes do not hold (a decode "
                      "step must write only its new KV-cache entries and activations): {total:.0f} MB of DRAM traffic "
                      "in all, against the {moved:.0f} MB summed kernel by kernel above.", n=m["step"],
                      read=m["read_mb"], ratio=m["ratio"], must=f["must_mb"], verdict=verdict, write=m["write_mb"],
                      total=m["total_mb"], moved=f["moved_mb"]))
    if f["inloop"]:
        out.append(tr("Moved bytes of profiled kernels are their DRAM reads measured in the loop ({how}): what each "
                      "fetched from DRAM after the launch before it, not the flushed-cache figure chapters 04 and 05 "
                      "use. Reads only: a kernel's output reaches DRAM later, under another launch.",
                      how=say(ncu_report.INLOOP_HOW)))
    x = f["excess"]
    if x:
        out.append(tr("The largest excess is in {module}: {moved:.0f} MB moved against {must:.0f} MB it must move "
                      "(+{extra:.0f} MB per step).", module=say(x["module"]), moved=x["moved_mb"], must=x["must_mb"],
                      extra=x["extra_mb"]))
    s = f["slowest"]
    out.append(tr("The most kernel time is in {module}: {us:.0f} µs per step over {n:.0f} launches.",
                  module=say(s["module"]), us=s["us"], n=s["launches"]))
    h = f["host"]
    if h:
        out.append(tr("The plain step takes {plain:.2f} ms, so {host:.2f} ms of it ({pct:.0f} %) is not kernel time: "
                      "the host between launches, which no module's bytes explain.", plain=h["plain_ms"],
                      host=h["host_ms"], pct=h["pct"]))
    return " ".join(out)


def modules_prose(types: pd.DataFrame) -> str:
    """What `analyze.modules.by_module_type`'s table says: the two module types with the most kernel time per phase."""
    if types.empty:
        return tr("This run was captured before kernels were tied to modules (the capture's shapes pass records them "
                  "now); re-capture it for the tables by module type and layer.")
    out = []
    for ph, top in M.leading_types(types):
        out.append(tr("{phase}: {first} {p1:.0f} %, {second} {p2:.0f} % of kernel time.", phase=phase_label(ph),
                      first=say(top[0][0]), p1=top[0][1], second=say(top[1][0]) if len(top) > 1 else "-",
                      p2=top[1][1] if len(top) > 1 else 0.0))
    return " ".join(out)


def with_kernel_modules(table: pd.DataFrame, kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """`analyze.modules.with_kernel_modules` with the module types in the reader's language."""
    out = M.with_kernel_modules(table, kernels, timeline)
    return said(out, ["module_types"]) if len(out) else out
