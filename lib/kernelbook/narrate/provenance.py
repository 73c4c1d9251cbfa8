"""How a run's data were taken, in words (chapters 00, 01 and 02): `analyze.provenance`'s tables in the reader's
language, the texts the capture stored in English, and the capture chapter's own decision."""
from __future__ import annotations

import pandas as pd

from ..analyze import provenance as V
from ..contract.phrase import Phrase
from ..escape import md
from ..i18n import tr
from . import said, say

TEXT = ("step", "item", "value")  # the tables' cells that are phrases or catalog keys


def table(t: pd.DataFrame) -> pd.DataFrame:
    """One of `analyze.provenance`'s tables (`steps`, `versions`, `timeline_account`, `ncu_account`) with its words
    in the reader's language."""
    return said(t, TEXT) if len(t) else t  # an empty one as it is: no column of its own dtype


def stored(value):
    """A text the capture stored in the manifest (English) in the reader's language: a known form through the catalog
    (`analyze.provenance.stored`), anything else as written."""
    shown = V.stored(value)
    return say(shown) if isinstance(shown, Phrase) else value


def decision(took: dict, part: str) -> str:
    """The capture chapter's own decision for this rendering, as one sentence."""
    done = tr(" ({part} captured in {seconds:.1f} s).", part=part, seconds=took["wall_s"]) if took.get("captured") \
        else tr(".")
    return tr("This rendering: {why}{done}", why=md(took["why"]), done=done)
