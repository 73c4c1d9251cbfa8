"""Chapter 07's levers on one scale in words, from `analyze.levers`' table (its cells English phrases): the table in
the reader's language and what it says."""
from __future__ import annotations

import pandas as pd

from ..analyze.levers import ALREADY, BASELINE, GAIN, HARDWARE, SOFTWARE, TEXT
from ..contract.phrase import Phrase
from ..escape import md
from ..i18n import tr
from . import said, say

def table(lev: pd.DataFrame) -> pd.DataFrame:
    """`levers.levers`' table (or `levers.empty()`) with its text cells in the reader's language."""
    return said(lev, TEXT)


def _named(v):
    """A cell the analysis named as a phrase, in the reader's language; any other as the what-if wrote it."""
    return say(v) if isinstance(v, Phrase) else v


def levers_prose(table: pd.DataFrame, deployed) -> str:
    """What the levers table says: the best software and hardware levers on the deployed step."""
    if table is None or table.empty:
        return ""
    g = table[table.status == GAIN]
    sw, hw = g[g.kind == SOFTWARE], g[g.kind == HARDWARE]
    base = table[table.status == BASELINE].iloc[0]
    out = [tr("On the deployed decode step ({run}, plain step measured at {ms:.2f} ms per token):",
              run=md(deployed.run_id), ms=base["decode ms/token"])]
    if len(sw):
        s = sw.iloc[0]
        out.append(tr("the best software lever, {lever}, takes it to {ms:.2f} ms ({pct:+.1f} %) from measured kernel "
                      "time alone, before any hardware change;", lever=say(s.lever), ms=s["decode ms/token"],
                      pct=s["change %"]))
    if len(hw):
        h = hw.iloc[0]  # the batch lever's kind is serving: not among them
        out.append(tr("the best hardware lever at batch 1, {lever} ({setting}), {pct:+.1f} % by the model, against "
                      "its own {fitted:.2f} ms as fitted ({err}).", lever=say(h.lever), setting=_named(h.setting),
                      pct=h["change %"], fitted=base["predicted ms/token"], err=_named(h["model error"])))
    pulled = table[table.status == ALREADY]
    if len(pulled):
        out.append(tr("Already in the deployed run, so not proposed: {levers}.",
                      levers=tr(", ").join(say(x) for x in pulled.lever)))
    return " ".join(out)
