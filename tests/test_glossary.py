"""The book's one glossary (issue 43, point 3): glossary.html beside the index in the book's language, linked from
the index and from the top of every chapter; every entry defined in English and in Chinese; every symbol the
chapters write (φ, b, L, S_min, any Greek letter or subscripted letter) defined in it."""
import re
from html.parser import HTMLParser

import pytest

from conftest import CHAPTERS
from kernelbook import glossary as G
from kernelbook import i18n
from test_i18n import CJK, visible_text

LINK_TEXT = {"en": "Glossary", "zh": "术语表"}
# how the chapters write a symbol: a Greek letter, a letter with a subscript (S_min), or the what-if's L and b
# (device time of a launch = L + b × ideal), each a word of its own
SYMBOL_PATTERNS = [r"[\u0370-\u03ff]", r"\b[A-Za-z]_[a-z]+\b", r"\bL\b", r"\bb\b"]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if a.get("id"):
            self.ids.add(a["id"])


def links(html: str) -> _Links:
    p = _Links()
    p.feed(html)
    return p


@pytest.fixture(scope="module", params=["en", "zh"])
def book(request, rendered_book):
    return request.param, rendered_book(request.param)


def test_glossary_page_is_written_in_the_book_s_language(book):
    language, out = book
    page = (out / G.FILE).read_text(encoding="utf-8")
    assert f'<html lang="{i18n.HTML_LANG[language]}"' in page and LINK_TEXT[language] in page
    found = links(page)
    assert {e.anchor for e in G.ENTRIES} <= found.ids  # every entry has its anchor
    for e in G.ENTRIES:
        with i18n.in_language(language):
            assert G.escape.html(G.definition(e, G.values())) in page, e.key
    # each entry's chapter is a link that resolves
    for href in found.hrefs:
        assert (out / href.split("#")[0]).exists(), href
    assert all(f"{e.chapter}.html" in found.hrefs for e in G.ENTRIES)
    if language == "zh":
        assert len(CJK.findall(visible_text(page))) > 2000 and "Glossary" not in visible_text(page)


@pytest.mark.parametrize("page", ["index"] + CHAPTERS)
def test_index_and_every_chapter_link_to_the_glossary(book, page):
    language, out = book
    html = (out / f"{page}.html").read_text(encoding="utf-8")
    nav = re.search(r'<nav class="kb-glossary-link"[^>]*><a href="([^"]+)">([^<]+)</a></nav>', html)
    assert nav, f"{page}: no glossary link"
    assert nav.group(2) == LINK_TEXT[language]
    assert (out / nav.group(1)).is_file() and nav.group(1) == G.FILE
    # near the top: right under the index's title, first inside a chapter's <main>
    if page == "index":
        assert html.find("</h1>") < nav.start() < html.find("<h2")
    else:
        assert html.find("<main>") < nav.start() < html.find("<main>") + 20


def test_every_chapter_file_of_the_book_links_to_the_glossary(book):
    _, out = book
    pages = sorted(out.glob("0*.html"))
    assert [p.stem for p in pages] == CHAPTERS
    for p in pages:
        assert f'href="{G.FILE}"' in p.read_text(encoding="utf-8"), p.name


def test_every_entry_has_a_chinese_definition():
    cat = i18n.catalog("zh")
    vals = G.values()
    for e in G.ENTRIES:
        assert e.term in cat and e.definition in cat, e.key
        en = G.definition(e, vals)
        with i18n.in_language("zh"):
            zh, term = G.definition(e, vals), G.term(e)
        assert zh != en and CJK.search(zh), e.key
        assert CJK.search(term), e.key
    assert len({e.key for e in G.ENTRIES}) == len(G.ENTRIES)  # one anchor per entry


def test_glossary_covers_the_issue_s_terms():
    keys = {e.key for e in G.ENTRIES}
    assert {"plain-generate", "profiled-pass", "gpu-busy", "host-time", "decode-step", "prefill", "vision-encode",
            "physical-limit", "roofline", "intensity", "ridge", "dram-roof", "tensor-flops", "memory-bound",
            "compute-bound", "latency-bound", "balanced", "waves", "tile-intensity", "littles-law", "occupancy",
            "held-out", "phi", "slowdown-b", "latency-l", "s-min", "cuda-graphs", "eager", "in-loop-bytes",
            "cache-control", "bytes-ledger", "levers"} <= keys
    assert set(G.SYMBOLS) == {"φ", "b", "L", "S_min"}


def test_every_symbol_the_chapters_write_is_in_the_glossary(book):
    """A symbol a chapter writes (in its visible text) that the glossary does not define fails here; the glossary
    page itself shows each one."""
    language, out = book
    shown = set()
    for stem in CHAPTERS:
        text = visible_text((out / f"{stem}.html").read_text(encoding="utf-8"))
        for pattern in SYMBOL_PATTERNS:
            shown |= set(re.findall(pattern, text))
    undefined = shown - set(G.SYMBOLS)
    assert not undefined, f"symbols in the {language} chapters without a glossary entry: {sorted(undefined)}"
    assert {"φ", "b", "L", "S_min"} <= shown  # not vacuous: the what-if's and chapter 05's symbols are there
    page = (out / G.FILE).read_text(encoding="utf-8")
    for s in shown:
        assert f'<code>{G.escape.html(s)}</code>' in page, s
