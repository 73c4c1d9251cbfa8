"""The narrative language of the book: every sentence a chapter writes goes through `tr`.

`tr(template, **values)` takes the English text, with `{name}` / `{name:fmt}` placeholders, looks it
up in the catalog of the current language and formats it with `values`: numbers are computed once and
formatted into either language. English is the identity (the template is its own key). The template
is always formatted, so a literal brace is written doubled (`{{`), as in `str.format`.

Catalogs are one YAML file per language in `locale/` (`zh.yaml`): English template → translated
template with the same placeholders. A template missing from the catalog renders in English;
`tests/test_i18n.py` fails on every `tr("...")` literal, markdown cell and label registry entry that
has no entry, and on placeholders that differ.

The current language is per process (a chapter's kernel): `use_language(code)` sets it, `language()`
reads it; `in_language(code)` sets it for a block (the book runner writes the index and report.md so).
The book runner also translates the chapters' markdown cells (headings and prose) through the same
catalog before it executes them (`translate_markdown`), so the notebooks stay plain English jupytext.
"""
from __future__ import annotations

import re

from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import yaml

LANGUAGES = ("en", "zh")
LOCALE = Path(__file__).resolve().parent / "locale"
HTML_LANG = {"en": "en", "zh": "zh-CN"}

_current = "en"


def use_language(code: str) -> None:
    """Set the narrative language of this process (a chapter's kernel calls it through `kb.setup`)."""
    global _current
    if code not in LANGUAGES:
        raise ValueError(f"unknown language {code!r}; languages: {', '.join(LANGUAGES)}")
    _current = code


def language() -> str:
    return _current


@contextmanager
def in_language(code: str):
    """`use_language(code)` for a block, then the previous language again."""
    before = _current
    use_language(code)
    try:
        yield
    finally:
        use_language(before)


@lru_cache(maxsize=None)
def catalog(code: str) -> dict[str, str]:
    """English template → template in `code` (empty for English)."""
    if code == "en":
        return {}
    path = LOCALE / f"{code}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of English template → translation")
    return {str(k): str(v) for k, v in data.items()}


def text(template: str) -> str:
    """`template` in the current language, unformatted (a markdown cell, a label)."""
    if _current == "en":
        return template
    return catalog(_current).get(template, template)


# a signed percentage that rounds to zero ('{x:+.0f} %' of -0.2): printed '-0 %', it reads as a loss that is not there
_NEGATIVE_ZERO = re.compile(r"(?<![\w.])-(0(?:\.0+)?)(?=\s?%)")


def tr(template: str, **values) -> str:
    """`template` (English, with `{name:fmt}` placeholders) in the current language, formatted with
    `values`. English is the identity; a template without a catalog entry stays English. A percentage that
    rounds to zero prints without a minus sign ('+0 %', never '-0 %')."""
    return _NEGATIVE_ZERO.sub(r"+\1", text(template).format(**values))


def N_(template: str) -> str:
    """Marks a literal as a catalog key where it is declared (a table of labels) and returns it
    unchanged; it is translated where it is shown, with `text` or `tr`."""
    return template


def heading(text: str, code: str | None = None) -> str:
    """A chapter section's heading as the reader's language shows it: the first line of the translated markdown cell
    that opens with that heading (`## text` or `### text`); `text` itself in English or where no cell opens with it."""
    code = code or _current
    if code == "en":
        return text
    for key, value in catalog(code).items():
        first = key.split("\n", 1)[0]
        if first.lstrip("#").strip() == text and first.startswith("#"):
            return str(value).split("\n", 1)[0].lstrip("#").strip()
    return text


def translate_markdown(source: str, code: str | None = None) -> str:
    """A chapter's markdown cell in `code` (default: the current language): the catalog entry whose key
    is the cell's English source, with surrounding blank lines ignored; the source itself otherwise."""
    code = code or _current
    if code == "en":
        return source
    return catalog(code).get(source.strip(), source)
