"""Narration: the sentences a chapter writes from the numbers `analyze` returns, in the book's language (en, zh).
Nothing here computes a figure the analysis does not hand it."""
from __future__ import annotations

from ..contract.phrase import Phrase
from ..i18n import text, tr


def say(v):
    """A phrase the analysis named (`contract.phrase`) in the reader's language; other text through the catalog
    (a label that is a catalog key); anything else as it is."""
    if isinstance(v, Phrase):
        return tr(v.template, **{k: say(x) if isinstance(x, Phrase) else x for k, x in v.values.items()})
    return text(v) if isinstance(v, str) else v


def said(df, columns):
    """`df` with the text cells of `columns` in the reader's language (`say`), its other cells (numbers, named
    quantities) untouched."""
    out = df.copy()
    for c in columns:
        if c in out:
            out[c] = [say(v) for v in out[c]]
    return out
