"""Narration apart from the arithmetic (issue 43 point 2): every module of analyze/ returns numbers, named quantities
and English phrases; their sentences and translated labels live in `narrate/`. A module added to analyze/ is checked
too: none may call the catalog or import display."""
import re
from pathlib import Path

import pytest

ANALYZE = Path(__file__).resolve().parents[1] / "lib" / "kernelbook" / "analyze"
FREE = sorted(p.stem for p in ANALYZE.glob("*.py") if p.stem != "__init__")
CATALOG = re.compile(r"\b(tr|N_)\(|from \.\.i18n import|from \.\. import i18n|from \.\.display import|"
                     r"from \.\. import display|import display")


@pytest.mark.parametrize("module", FREE)
def test_the_module_calls_no_catalog_and_no_display(module):
    src = (ANALYZE / f"{module}.py").read_text()
    found = sorted({m.group(0) for m in CATALOG.finditer(src)})
    assert not found, f"analyze/{module}.py: {found}"


def test_the_check_finds_a_catalog_call():
    assert CATALOG.search('x = tr("a")') and CATALOG.search("from ..i18n import tr") and not CATALOG.search("str(x)")


def test_every_module_of_analyze_is_checked():
    assert len(FREE) >= 17 and {"whatif", "classify", "ncu_report", "provenance"} <= set(FREE)
