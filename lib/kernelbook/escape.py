"""Text from a run, made safe for where the book shows it: one function per target.

A run directory is data: kernel and op names come from whatever code ran on the GPU (Triton names a
kernel after a user function), and a trace or manifest can be edited before it is handed over. Every
string read from a run (kernel/op names, shapes, model id, prompt, parameters, manifest text, notes,
variant labels, the run folder's name) goes through the function for its target where it enters that
target, and nowhere else:

- `md`: Markdown text (a chapter's `kb.md` / `kb.summary`, report.md). HTML and entities show as
  written, Markdown punctuation is backslash-escaped, so a name can open no link, image, heading, list,
  table cell, emphasis or math.
- `md_code`: text inside a code span a template writes around it (`` `{command}` ``): a name, a path.
- `md_block`: the body of a fenced code block in Markdown; `md_fence` wraps text in a fence it cannot close.
- `html`: HTML text or a quoted attribute value (the display layer's tables, the index, notes).
- `plot`: text plotly.js draws (trace names, hover text, category labels): plotly renders a subset of HTML
  tags and entities in them, so they are entity-escaped.
- `terminal`: a line printed to a terminal (the `diff` command), where escape sequences would act.

Control characters (C0, DEL, C1) never reach any target: each shows as its Unicode control picture
(␀ ␛ ␍ ␊ …), so a name stays on one line and a reader still sees that they were there.

The zh catalog's templates are trusted text of this repository; the values `tr` formats into them are
escaped by the caller for the template's target before they go in (never a run's string as a template).
"""
from __future__ import annotations

import html as _html
import re

# C0 controls and DEL → their Unicode control pictures (U+2400..U+2421); C1 controls → U+FFFD
_CONTROL = {**{i: 0x2400 + i for i in range(0x20)}, 0x7F: 0x2421, **{i: 0xFFFD for i in range(0x80, 0xA0)}}
# U+2028/2029 end a line for some readers; bidi overrides reorder what a reader sees
_CONTROL.update({0x2028: 0x2424, 0x2029: 0x2424, **{c: 0xFFFD for c in (0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                                                                     0x2066, 0x2067, 0x2068, 0x2069)}})
# Markdown punctuation that can start or end a construct anywhere in a line (CommonMark backslash escapes);
# `$` opens math in JupyterLab
_MD_INLINE = re.compile(r"([\\`*_{}\[\]()#!|~$])")
# constructs a value could open at the start of a line or cell: list items, block quotes, setext lines
_MD_START = re.compile(r"^(\s*)([-+=>]|\d+[.)])")


def text(v) -> str:
    """`v` as one line of plain text: control characters shown as control pictures."""
    return str(v).translate(_CONTROL)


def md(v) -> str:
    """`v` as Markdown text that renders exactly as `v` reads."""
    s = _html.escape(text(v), quote=False)  # & < > as entities: no HTML tag, no entity of the run's own
    s = _MD_INLINE.sub(r"\\\1", s)
    return _MD_START.sub(lambda m: m.group(1) + "\\" + m.group(2) if len(m.group(2)) == 1
                         else m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], s)


def md_code(v) -> str:
    """`v` as the inside of a code span a template writes around it (`` `{name}` ``): inside a code span
    HTML and Markdown are literal, so only a backtick could end it early; it shows as ˋ (U+02CB)."""
    return text(v).replace("`", "\u02cb")


def md_block(v) -> str:
    """`v` (several lines) as the body of a fenced code block: its lines kept, other controls shown."""
    return "\n".join(text(line) for line in str(v).split("\n"))


def md_fence(body: str, info: str = "") -> str:
    """`body` (already `md_block` text) in a fenced code block that no line of it can close."""
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def html(v) -> str:
    """`v` as HTML text or as the value of a quoted attribute."""
    return _html.escape(text(v), quote=True)


def plot(v) -> str:
    """`v` as text plotly.js draws (it reads `<b>`, `<br>`, `<a href>` and entities in labels)."""
    return _html.escape(text(v), quote=True)


def terminal(v) -> str:
    """`v` as text printed to a terminal: no escape sequence, carriage return or bell acts; lines kept."""
    return "\n".join(text(line) for line in str(v).split("\n"))


def plain(markdown: str) -> str:
    """What a reader reads of Markdown text `md` wrote: backslash escapes and entities undone, emphasis
    markers dropped (the index lists a chapter's summary line as plain text, then escapes it for HTML)."""
    s = markdown.replace("**", "")
    s = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", s)
    return _html.unescape(s)
