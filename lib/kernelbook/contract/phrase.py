"""A phrase the analysis names (issue 43 point 2): what a table cell or a label says, kept apart from the language it
is shown in. `phrase(template, **values)` is the English text (a `str`: the analysis compares, sorts and tests it as
such) that also carries its catalog template and its values, so the narration layer shows it in the reader's
language (`narrate.say`). The template is a catalog key like a `tr` literal (`tests/test_i18n.py` reads `phrase`
calls as it reads `tr` and `N_`); a phrase among the values is shown in the reader's language too."""
from __future__ import annotations

import re

# as i18n.tr: a percentage that rounds to zero prints without a minus sign ('+0 %', never '-0 %')
_NEGATIVE_ZERO = re.compile(r"(?<![\w.])-(0(?:\.0+)?)(?=\s?%)")


class Phrase(str):
    """English text with the catalog template and values it was formatted from."""
    template: str
    values: dict

    def __new__(cls, template: str, values: dict):
        self = super().__new__(cls, _NEGATIVE_ZERO.sub(r"+\1", template.format(**values)))
        self.template, self.values = template, values
        return self

    def __reduce__(self):  # pickled and copied with its template and values
        return Phrase, (self.template, self.values)


def phrase(template: str, **values) -> Phrase:
    """`template` (English, `{name:fmt}` placeholders) formatted with `values`, keeping both for its translation."""
    return Phrase(template, values)


def joined(*parts, sep: str = "") -> Phrase:
    """`parts` (phrases or plain text; empty ones left out) one after another, `sep` between them: one phrase that
    shows each part in the reader's language; a `sep` that is a phrase (`phrase(", ")`) is shown in it too."""
    parts = [p for p in parts if p]
    if isinstance(sep, Phrase):
        return Phrase("{sep}".join(f"{{p{i}}}" for i in range(len(parts))),
                      {"sep": sep, **{f"p{i}": p for i, p in enumerate(parts)}})
    template = sep.replace("{", "{{").replace("}", "}}").join(f"{{p{i}}}" for i in range(len(parts)))
    return Phrase(template, {f"p{i}": p for i, p in enumerate(parts)})


def column(values, index=None):
    """`values` as a table column that keeps its phrases (an object column: pandas would make a column of text its
    string dtype, which holds plain `str`)."""
    import pandas as pd

    return pd.Series(list(values), index=index, dtype=object)
