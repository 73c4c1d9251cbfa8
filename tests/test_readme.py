"""The README is a user guide: short, the two commands on its first screen, and every relative link in it, in
bench/README.md and in docs/*.md pointing at a file that exists (and, into a markdown file, at a heading it has)."""
import re
from pathlib import Path

import pytest

from conftest import REPO

README = REPO / "README.md"
DOCS = [README, REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`[^`\n]*`")


def _links(path: Path) -> list[str]:
    return [m.group(1) for line in path.read_text(encoding="utf-8").splitlines()
            for m in LINK.finditer(CODE.sub("", line))]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    heads = [ln.lstrip("#").strip() for ln in path.read_text(encoding="utf-8").splitlines() if re.match(r"#{1,6} ", ln)]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 130


def test_the_two_commands_are_on_the_first_screen():
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    assert "bash scripts/render.sh" in first and "bash scripts/test.sh" in first


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_resolves(doc):
    links = [u for u in _links(doc) if not re.match(r"[a-z][a-z0-9+.-]*:", u)]
    assert doc != README or links  # the README links its docs
    bad = []
    for url in links:
        target, _, anchor = url.partition("#")
        file = (doc.parent / target).resolve() if target else doc
        if not file.exists():
            bad.append(f"{url}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            bad.append(f"{url}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not bad, bad
