"""One value per quantity (issue 41): a figure the book states in its prose is a named quantity, so that a test can
read every place it is shown and fail when one quantity shows two values, or a ratio does not divide out from the
two figures it is the ratio of.

`Q(value, key)` is a float that formats as its value. Under the book runner (`BookSession.quantity_marks`) it also
marks what it printed with its key, its exact value and, for a ratio, the keys of its numerator and denominator,
in characters of Unicode's private-use area that no text of the book holds:

    U+E000 key U+E003 value U+E003 numerator,denominator U+E001 shown U+E002

(the keys hex-encoded: a run id is untrusted text, and the mark passes through Markdown).

The runner turns each mark into `<span class="kb-q" data-q=key data-v=value data-a=… data-b=…>shown</span>` in the
chapter's HTML (`spans`) and strips the marks from everything else it writes (`plain`): the executed notebooks,
the index, report.md, a figure's text. A chapter run alone (JupyterLab, papermill) prints plain numbers.

Keys name the run and the quantity: `<run id>/decode.plain_step_ms`. The same key must always carry the same
value, wherever a chapter prints it (`tests/test_quantities.py`).
"""
from __future__ import annotations

import html
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
        if not marking():
            return shown
        # the key and its sides travel hex-encoded: a run id is untrusted text, and the mark passes through Markdown
        return (f"{OPEN}{_hex(self.key)}{SEP}{float(self)!r}{SEP}{','.join(map(_hex, self.of or ()))}{SHOWN}{shown}"
                f"{CLOSE}")

    def __repr__(self) -> str:
        return f"Q({float(self)!r}, {self.key!r})"


def ratio(num: Q, den: Q, key: str) -> Q:
    """`num` ÷ `den` as the quantity `key`, which remembers the two it divides."""
    return Q(float(num) / float(den), key, (num.key, den.key))


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
    key, value, of = m.group(1).split(SEP)
    attrs = f' data-q="{html.escape(_unhex(key))}" data-v="{html.escape(value)}"'
    if of:
        a, b = (html.escape(_unhex(k)) for k in of.split(","))
        attrs += f' data-a="{a}" data-b="{b}"'
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

_SPAN = re.compile(r'<span class="kb-q" data-q="([^"]*)" data-v="([^"]*)"(?: data-a="([^"]*)" data-b="([^"]*)")?>([^<]*)</span>')
_NUMBER = re.compile(r"[+\-−]?\d[\d,]*(?:\.(\d+))?")


def shown(page: str) -> list[tuple[str, float, tuple[str, str] | None, str]]:
    """Every quantity a chapter's HTML shows: (key, exact value, the keys of a ratio's two sides, text printed)."""
    out = []
    for key, value, a, b, text in _SPAN.findall(page):
        out.append((html.unescape(key), float(value), (html.unescape(a), html.unescape(b)) if a else None,
                    html.unescape(text)))
    return out


def _printed(text: str) -> tuple[float, float] | None:
    """The number printed and half its last digit (the rounding it may carry); None when nothing numeric shows."""
    m = _NUMBER.search(text)
    if not m:
        return None
    digits = len(m.group(1) or "")
    return float(m.group(0).replace(",", "").replace("−", "-")), 0.5 * 10.0 ** -digits


def check(pages: dict[str, str]) -> list[str]:
    """What breaks "one value per quantity" across `pages` (name → a chapter's HTML): a key shown with two values,
    a figure printed that does not round from its value, a ratio whose value is not its two sides divided, or one
    whose printed figure does not divide out from its two sides as printed beside it (within their roundings)."""
    problems, seen, first_shown = [], {}, {}
    for name, page in pages.items():
        for key, value, of, text in shown(page):
            if value != value:  # NaN: the run has no such figure; nothing printed to check
                continue
            if key in seen and abs(seen[key][0] - value) > 1e-9 * max(1.0, abs(value)):
                problems.append(f"{key} shows two values: {seen[key][0]!r} ({seen[key][1]}) and {value!r} ({name})")
            seen.setdefault(key, (value, name))
            p = _printed(text)
            if p is not None and abs(p[0] - value) > p[1] * (1 + 1e-6) + 1e-12:
                problems.append(f"{key} printed {text!r} in {name} for the value {value!r}")
            if p is not None:
                first_shown.setdefault((name, key), p)
    for name, page in pages.items():
        for key, value, of, text in shown(page):
            if not of or value != value or any(k not in seen for k in of):
                continue
            a, b = seen[of[0]][0], seen[of[1]][0]
            if abs(value - a / b) > 1e-9 * max(1.0, abs(value)):
                problems.append(f"{key} = {value!r} is not {of[0]} ÷ {of[1]} = {a / b!r}")
            r, pa, pb = _printed(text), first_shown.get((name, of[0])), first_shown.get((name, of[1]))
            if r is None or pa is None or pb is None or not pb[0]:
                continue
            q = pa[0] / pb[0]
            slack = r[1] + abs(q) * (pa[1] / abs(pa[0]) + pb[1] / abs(pb[0])) if pa[0] else r[1]
            if abs(r[0] - q) > slack * (1 + 1e-6):
                problems.append(f"{key} printed {text!r} in {name}, but its sides as printed there divide to {q:.4g}")
    return problems


def unspanned(page: str) -> str:
    """A chapter's HTML with each `kb-q` span replaced by the figure it shows: the text as a reader reads it."""
    return _SPAN.sub(lambda m: m.group(5), page)
