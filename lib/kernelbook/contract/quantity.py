"""One value per quantity (issue 41): a figure the book states in its prose is a named quantity, so that a test can
read every place it is shown and fail when one quantity shows two values, or a ratio does not divide out from the
two figures it is the ratio of.

`Q(value, key)` is a float that formats as its value. Under the book runner (`BookSession.quantity_marks`) it also
marks what it printed with its key, its exact value and, for a ratio, the keys of its numerator and denominator,
in characters of Unicode's private-use area that no text of the book holds:

    U+E000 key U+E003 value U+E003 numerator,denominator [U+E003 scale] U+E001 shown U+E002

(the keys hex-encoded: a run id is untrusted text, and the mark passes through Markdown).

A table shows a quantity too: a cell that holds a Q (an object column: a float column drops the key) is printed
by the display layer and marked with `mark`. A table prints with an engineering prefix where it reads better
(408 µs for the quantity 0.408 ms), so its mark carries the scale between the number printed and the value.

The runner turns each mark into `<span class="kb-q" data-q=key data-v=value data-a=… data-b=… data-s=…>shown
</span>` in the chapter's HTML and the index (`spans`) and strips the marks from everything else it writes
(`plain`): the executed notebooks, report.md, timings.json, a figure's text. A chapter run alone (JupyterLab,
papermill) prints plain numbers.

Keys name the run and the quantity: `<run id>/decode.plain_step_ms`. The same key must always carry the same
value, wherever a chapter prints it (`tests/test_quantities.py`).
"""
from __future__ import annotations

import html
import math
import re

from .session import current

OPEN, SHOWN, CLOSE, SEP = "\ue000", "\ue001", "\ue002", "\ue003"
_MARK = re.compile(f"{OPEN}([^{SHOWN}]*){SHOWN}([^{CLOSE}]*){CLOSE}")
_MARKING: list = [None]  # whether this process marks (read once from the session)


def marking() -> bool:
    """Whether quantities printed in this process carry their marks (a chapter kernel under the book runner)."""
    if _MARKING[0] is None:
        _MARKING[0] = current().quantity_marks
    return _MARKING[0]


class Q(float):
    """A float with a name: `key` (`<run id>/<quantity>`), and for a ratio `of`, the keys of its numerator and
    denominator. Arithmetic on it gives a plain float: a derived figure is a quantity of its own."""

    key: str
    of: tuple[str, str] | None

    def __new__(cls, value, key: str, of: tuple[str, str] | None = None):
        q = super().__new__(cls, value)
        q.key, q.of = key, of
        return q

    def __format__(self, spec: str) -> str:
        shown = float(self).__format__(spec)
        return _marked(self, shown, 1.0) if marking() else shown

    def __repr__(self) -> str:
        return f"Q({float(self)!r}, {self.key!r})"


def _marked(q: Q, shown: str, scale: float) -> str:
    # the key and its sides travel hex-encoded: a run id is untrusted text, and the mark passes through Markdown
    head = f"{_hex(q.key)}{SEP}{float(q)!r}{SEP}{','.join(map(_hex, q.of or ()))}"
    return f"{OPEN}{head}{SEP + repr(scale) if scale != 1.0 else ''}{SHOWN}{shown}{CLOSE}"


def mark(q: Q, shown: str) -> str:
    """`shown`, the text a table printed for the quantity `q`, with q's mark (under the book runner; else as it is,
    and as it is for a NaN, which prints no figure). Where the table printed another prefix of the key's unit (408 µs
    for the quantity `…_ms` 0.408), the power of ten between the two units goes with the mark, so the check reads
    the figure in q's unit; it comes from the units alone, never from the value, so a figure printed ten times off
    still fails the check."""
    if not marking() or q != q:
        return shown
    return _marked(q, shown, unit_scale(q.key, shown))


# the units a key may name (its last tokens: `decode.limit_ms`, `decode.weight_mb_per_step`, `dram_gbps_measured`)
# and a table may print, by dimension, each as a multiple of the family's base
_UNITS = {
    "time": {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0},
    "bytes": {"b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12},
    "rate": {"kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12},
}
_PRINTED_UNIT = re.compile(r"\d\s*([a-zA-Zµ]+(?:/s)?)\b")


def _unit(token: str) -> tuple[str, float] | None:
    t = token.lower()
    for family, units in _UNITS.items():
        if t in units:
            return family, units[t]
    return None


def unit_scale(key: str, shown: str) -> float:
    """The power of ten between the number `shown` prints and the value of the quantity `key`, from the unit printed
    after the number and the unit the key names; 1 where either names none or they measure different things."""
    m = _PRINTED_UNIT.search(shown)
    printed = _unit(m.group(1)) if m else None
    named = next((u for t in reversed(re.split(r"[._]", key.rsplit("/", 1)[-1])) if (u := _unit(t))), None)
    if printed is None or named is None or printed[0] != named[0]:
        return 1.0
    return 10.0 ** round(math.log10(named[1] / printed[1]))


def column(values, index=None):
    """Quantities as a DataFrame column that keeps them: object dtype (pandas makes a float column of Q values a
    column of plain floats, without their keys). Arithmetic on its cells still gives floats."""
    import pandas as pd

    return pd.Series(list(values), index=index, dtype=object)


def ratio(num: Q, den: Q, key: str) -> Q:
    """`num` ÷ `den` as the quantity `key`, which remembers the two it divides; ÷ 0 gives ±inf (0 ÷ 0 NaN), as the
    arrays these figures come from divide."""
    n, d = float(num), float(den)
    value = n / d if d else (math.copysign(math.inf, n) * math.copysign(1.0, d) if n else math.nan)
    return Q(value, key, (num.key, den.key))


def plain(text):
    """`text` with every mark removed, the figures as printed (strings only; anything else is returned as is)."""
    if not isinstance(text, str) or OPEN not in text:
        return text
    return _MARK.sub(lambda m: m.group(2), text)


def _hex(text: str) -> str:
    return text.encode("utf-8").hex()


def _unhex(text: str) -> str:
    return bytes.fromhex(text).decode("utf-8")


def _span(m: re.Match) -> str:
    key, value, of, *scale = m.group(1).split(SEP)
    attrs = f' data-q="{html.escape(_unhex(key))}" data-v="{html.escape(value)}"'
    if of:
        a, b = (html.escape(_unhex(k)) for k in of.split(","))
        attrs += f' data-a="{a}" data-b="{b}"'
    if scale:
        attrs += f' data-s="{html.escape(scale[0])}"'
    return f'<span class="kb-q"{attrs}>{m.group(2)}</span>'


_TAG = re.compile(r"(<[^>]*>)")
_RAW = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)  # its text is code, not markup


def spans(body: str) -> str:
    """A chapter's HTML with each mark in its text turned into a `kb-q` span; marks inside a tag (an attribute) or
    inside a script or style element are stripped, so no markup lands where it would not be markup."""
    if OPEN not in body:
        return body
    out, last = [], 0
    for m in _RAW.finditer(body):
        out += [_text_spans(body[last:m.start()]), plain(m.group(0))]
        last = m.end()
    return "".join(out + [_text_spans(body[last:])])


def _text_spans(chunk: str) -> str:
    return "".join(plain(piece) if piece.startswith("<") else _MARK.sub(_span, piece) for piece in _TAG.split(chunk))


def plain_tree(obj):
    """`obj` (a notebook, an output's data: dicts, lists, strings) with every mark removed from its strings."""
    if isinstance(obj, str):
        return plain(obj)
    if isinstance(obj, dict):
        for k in obj:
            obj[k] = plain_tree(obj[k])
        return obj
    if isinstance(obj, list):
        return [plain_tree(v) for v in obj]
    return obj


def q(run_id: str, name: str, value) -> Q:
    """The quantity `name` of the run `run_id` (`<run id>/<name>`), NaN where the run has no such figure."""
    return Q(float("nan") if value is None else value, f"{run_id}/{name}")


# --- the one-value check: what a rendered book shows of each quantity ---------------------------------------------

_SPAN = re.compile(r'<span class="kb-q" data-q="([^"]*)" data-v="([^"]*)"(?: data-a="([^"]*)" data-b="([^"]*)")?'
                   r'(?: data-s="([^"]*)")?>([^<]*)</span>')
_NUMBER = re.compile(r"[+\-−]?\d[\d,]*(?:\.(\d+))?")


def shown(page: str) -> list[tuple[str, float, tuple[str, str] | None, str, float]]:
    """Every quantity a chapter's HTML shows: (key, exact value, the keys of a ratio's two sides, text printed, the
    scale of its printed number: 1000 where a table printed 408 µs for the quantity 0.408 ms)."""
    out = []
    for key, value, a, b, scale, text in _SPAN.findall(page):
        out.append((html.unescape(key), float(value), (html.unescape(a), html.unescape(b)) if a else None,
                    html.unescape(text), float(scale) if scale else 1.0))
    return out


def _printed(text: str, scale: float = 1.0) -> tuple[float, float] | None:
    """The number printed and half its last digit (the rounding it may carry), each ÷ `scale` (in the quantity's
    unit); None when nothing numeric shows."""
    m = _NUMBER.search(text)
    if not m:
        return None
    digits = len(m.group(1) or "")
    return float(m.group(0).replace(",", "").replace("−", "-")) / scale, 0.5 * 10.0 ** -digits / scale


def check(pages: dict[str, str]) -> list[str]:
    """What breaks "one value per quantity" across `pages` (name → a chapter's HTML): a key shown with two values,
    a figure printed that does not round from its value, a ratio whose value is not its two sides divided, or one
    whose printed figure does not divide out from its two sides as printed beside it (within their roundings)."""
    problems, seen, first_shown = [], {}, {}
    for name, page in pages.items():
        for key, value, of, text, scale in shown(page):
            if value != value:  # NaN: the run has no such figure; nothing printed to check
                continue
            if key in seen and abs(seen[key][0] - value) > 1e-9 * max(1.0, abs(value)):
                problems.append(f"{key} shows two values: {seen[key][0]!r} ({seen[key][1]}) and {value!r} ({name})")
            seen.setdefault(key, (value, name))
            p = _printed(text, scale)
            if p is not None and abs(p[0] - value) > p[1] * (1 + 1e-6) + 1e-12:
                problems.append(f"{key} printed {text!r} in {name} for the value {value!r}")
            if p is not None:
                first_shown.setdefault((name, key), p)
    for name, page in pages.items():
        for key, value, of, text, scale in shown(page):
            if not of or value != value or any(k not in seen for k in of):
                continue
            a, b = seen[of[0]][0], seen[of[1]][0]
            if abs(value - a / b) > 1e-9 * max(1.0, abs(value)):
                problems.append(f"{key} = {value!r} is not {of[0]} ÷ {of[1]} = {a / b!r}")
            r, pa, pb = _printed(text, scale), first_shown.get((name, of[0])), first_shown.get((name, of[1]))
            if r is None or pa is None or pb is None or not pb[0]:
                continue
            q = pa[0] / pb[0]
            slack = r[1] + abs(q) * (pa[1] / abs(pa[0]) + pb[1] / abs(pb[0])) if pa[0] else r[1]
            if abs(r[0] - q) > slack * (1 + 1e-6):
                problems.append(f"{key} printed {text!r} in {name}, but its sides as printed there divide to {q:.4g}")
    return problems


def unspanned(page: str) -> str:
    """A chapter's HTML with each `kb-q` span replaced by the figure it shows: the text as a reader reads it."""
    return _SPAN.sub(lambda m: m.group(6), page)
