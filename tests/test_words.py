"""A word budget (issue 43 point 3): what a reader sees of each chapter, counted in a real browser on the bundled
book. Visible prose is the page's rendered text (`innerText`: a folded section, a kernel card and the rows a long
table pages away are not rendered) without its tables and figures: a chapter shows at most 1,500 words, chapter 07
at most 1,200, the whole book (the index and every chapter; the glossary is a reference page) at most 12,000. In zh
characters are counted (CJK characters and Latin words, one each) against twice those budgets."""
import re

import pytest

from conftest import CHAPTERS
from test_browser import browser  # noqa: F401  (the module's headless Chromium, network off)

VISIBLE_PROSE = """document.querySelectorAll('.js-plotly-plot, .kb-tablebox, table.kb, details[id^="kernel-"], script, style')
  .forEach(e => e.remove());
return document.body.innerText;"""
BUDGET = {"en": 1500, "zh": 3000}
SUMMARY = {"en": 1200, "zh": 2400}
BOOK = {"en": 12000, "zh": 24000}


def count(text: str, language: str) -> int:
    if language == "en":
        return len(text.split())
    return len(re.findall(r"[\u3000-\u9fff\uff00-\uffef]", text)) + len(re.findall(r"[A-Za-z0-9][\w.%/-]*", text))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_each_chapter_and_the_whole_book_keep_their_word_budget(browser, rendered_book, language):  # noqa: F811
    report = rendered_book(language)
    words = {}
    for stem in [*CHAPTERS, "index"]:
        browser.get((report / f"{stem}.html").as_uri())
        words[stem] = count(browser.execute_script(VISIBLE_PROSE), language)
    over = {s: n for s, n in words.items() if n > (SUMMARY if s == "07_summary" else BUDGET)[language]}
    assert not over, (over, words)
    assert sum(words.values()) <= BOOK[language], words
    assert min(words.values()) > 50  # the count reads the pages (an empty page would pass any budget)


def test_the_count_fails_a_page_over_its_budget():
    """The count itself: 1,501 words are over a chapter's budget, 1,500 are not; zh counts characters."""
    assert count("word " * 1501, "en") > BUDGET["en"] >= count("word " * 1500, "en")
    assert count("解码步耗时 2.05 ms", "zh") == 5 + 2


def opening(nb: dict) -> str:
    """What a chapter opens with: the sentence under its title (the question it answers) and its one-line summary
    (the answer, `kb.summary`), as the executed notebook holds them."""
    first = "".join(nb["cells"][0]["source"]).split("\n", 1)[1]
    answer = [("".join(o["data"]["text/markdown"])) for c in nb["cells"] for o in c.get("outputs", [])
              if o.get("metadata", {}).get("kb-summary")]
    return " ".join([first.strip(), *answer]).replace("**", "")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_each_chapter_opens_with_its_question_and_answer_in_60_words(rendered_book, language):
    """Issue 43 point 3: a chapter opens with what it answers and its answer in at most 60 words (zh: 120
    characters), on the bundled book."""
    import json

    report = rendered_book(language)
    words = {}
    for stem in CHAPTERS:
        text = opening(json.loads((report / f"{stem}.ipynb").read_text()))
        words[stem] = count(text, language)
        assert "?" in text or "？" in text, (stem, text)  # the question
    assert all(8 < n <= (60 if language == "en" else 120) for n in words.values()), words
