"""Two runs side by side, in words (chapter 07's comparison section): `analyze.compare`'s phrases in the reader's
language."""
from __future__ import annotations

from ..analyze import compare as D
from . import say


def coverage_words(run) -> str:
    """'ncu decode 19/20, …', or 'no ncu data' (`analyze.compare.coverage_words`), in the reader's language."""
    return say(D.coverage_words(run))
