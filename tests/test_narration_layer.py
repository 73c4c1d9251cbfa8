"""Narration apart from the arithmetic (issue 43 point 2): the analysis modules listed here return numbers, named
quantities and English phrases; their sentences and translated labels live in `narrate/`. A module moves onto the
list when it no longer calls the catalog; the issue ends when every module of analyze/ is on it."""
import re
from pathlib import Path

import pytest

ANALYZE = Path(__file__).resolve().parents[1] / "lib" / "kernelbook" / "analyze"
FREE = ["classify", "comm", "findings", "histograms", "levers", "setup", "steps", "summary", "timeline", "why"]
CATALOG = re.compile(r"\b(tr|N_)\(|from \.\.i18n import|from \.\. import i18n|from \.\.display import|"
                     r"from \.\. import display|import display")


@pytest.mark.parametrize("module", FREE)
def test_the_module_calls_no_catalog_and_no_display(module):
    src = (ANALYZE / f"{module}.py").read_text()
    found = sorted({m.group(0) for m in CATALOG.finditer(src)})
    assert not found, f"analyze/{module}.py: {found}"


def test_the_check_finds_a_catalog_call():
    assert CATALOG.search('x = tr("a")') and CATALOG.search("from ..i18n import tr") and not CATALOG.search("str(x)")
