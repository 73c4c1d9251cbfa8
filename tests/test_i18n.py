"""The narrative language: one catalog per language (`lib/kernelbook/locale/<code>.yaml`), keyed by the
English text. Every `tr("...")` literal in lib/ and notebooks/, every label of the display layer's
registries and every markdown cell of every chapter must have a zh entry with the same placeholders."""
import ast
import string
from pathlib import Path

import pytest

from conftest import REPO
from kernelbook import i18n

# calls whose first argument is a catalog key: tr(template, ...), N_(label), Col(label, kind)
KEY_CALLS = {"tr", "N_", "Col"}
SOURCES = sorted((REPO / "lib" / "kernelbook").rglob("*.py")) + sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def code_keys() -> tuple[dict[str, str], list[str]]:
    """Every literal first argument of a key call (→ where it is), and the calls that pass an f-string
    (a template must be a literal: its numbers go in as values)."""
    keys, fstrings = {}, []
    for path in SOURCES:
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and _called(node) in KEY_CALLS and node.args):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                keys.setdefault(arg.value, f"{where}:{node.lineno}")
            elif isinstance(arg, ast.JoinedStr):
                fstrings.append(f"{where}:{node.lineno}")
    return keys, fstrings


def markdown_keys() -> dict[str, str]:
    import jupytext

    keys = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        for i, cell in enumerate(jupytext.read(path).cells):
            if cell.cell_type == "markdown":
                keys.setdefault(cell.source.strip(), f"{path.relative_to(REPO)} markdown cell {i}")
    return keys


def registry_keys() -> dict[str, str]:
    """Labels kept in tables (not literal tr calls): parameter meanings shown by chapter 00."""
    from kernelbook import params as P

    return {spec.doc: f"params.SCHEMA[{k!r}].doc" for k, spec in P.SCHEMA.items()}


def all_keys() -> dict[str, str]:
    return {**registry_keys(), **markdown_keys(), **code_keys()[0]}


def fields(template: str) -> set[tuple[str, str]]:
    return {(name, spec or "") for _, name, spec, _ in string.Formatter().parse(template) if name is not None}


def test_templates_are_literals():
    assert code_keys()[1] == [], "tr()/N_() given an f-string: pass the numbers as values instead"


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_has_every_string(code):
    cat = i18n.catalog(code)
    missing = {k: where for k, where in all_keys().items() if k not in cat}
    assert not missing, f"{len(missing)} string(s) without a {code} entry in locale/{code}.yaml:\n" + "\n".join(
        f"  {where}: {k!r}" for k, where in sorted(missing.items(), key=lambda kv: kv[1]))


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_placeholders_match(code):
    """A translation formats with exactly the values its English template takes, with the same formats."""
    bad = [f"{k!r}: en {sorted(fields(k))} vs {code} {sorted(fields(v))}"
           for k, v in i18n.catalog(code).items() if fields(k) != fields(v)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_has_no_stale_entries(code):
    """Every entry is still used: an English text that changed leaves its old entry behind."""
    used = all_keys()
    stale = [k for k in i18n.catalog(code) if k not in used]
    assert not stale, f"{len(stale)} entries of locale/{code}.yaml no longer used:\n" + "\n".join(map(repr, stale))


def test_tr_formats_numbers_into_either_language():
    i18n.catalog.cache_clear()
    with i18n.in_language("zh"):
        assert i18n.language() == "zh"
        zh = i18n.tr("Not shown: {note}", note="x")
    assert i18n.language() == "en" and i18n.tr("Not shown: {note}", note="x") == "Not shown: x"
    assert zh != "Not shown: x" and zh.endswith("x")
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        i18n.use_language("fr")
