"""The book on a run whose strings are hostile (issue 31): a copy of the bundled run, and of two of its
variants, with HTML, script, Markdown and control characters in every string a reader sees
(`untrusted.PAYLOAD`). Every page opens in headless Chromium: no injected element or script exists, no
alert fires, and the payloads show as text."""
import re
import sys
from pathlib import Path

import pytest

from conftest import CHAPTERS, REPO
from test_browser import browser  # noqa: F401  (the headless Chromium fixture)
from untrusted import PAYLOAD, hostile_run

RUNS = REPO / "data" / "runs"

# run inside each page: what the payloads managed to do there
PROBE = r"""return {
  pwned: window.__kbpwned || 0,
  alerts: window.__kbalerts || 0,
  injected: document.querySelectorAll('#kbinjected, img[src="x"], img[src$="x.png"]').length,
  scripts: [...document.scripts].filter(s => s.textContent.trim().startsWith('window.__kbpwned')).length,
  handlers: [...document.querySelectorAll('[onerror]')].length,
  links: [...document.querySelectorAll('a[href]')].filter(a => /^\s*javascript:/i.test(a.getAttribute('href'))).length,
  headings: [...document.querySelectorAll('h1,h2,h3,h4,h5,h6')].filter(h => h.textContent.includes('Heading')).length,
  text: document.body.textContent,
};"""
# alert() counted instead of opened, before any script of the page runs
COUNT_ALERTS = "window.alert = () => { window.__kbalerts = (window.__kbalerts || 0) + 1; };"


@pytest.fixture(scope="module")
def hostile_book(tmp_path_factory):
    from kernelbook import params as P
    from kernelbook.runner import render_book

    base = tmp_path_factory.mktemp("hostile")
    run = hostile_run(RUNS / "h100-deepseek-ocr-2", base)
    variants = [hostile_run(RUNS / v, base, f"{v}<b>") for v in ("h100-variant-batch8", "h100-variant-eager-attention")]
    params = P.validate({"run_dir": str(run), "variant_runs": [str(v) for v in variants], "capture": "never"},
                        consumer="book")
    return render_book(params, base / "report", log=lambda *_: None)


def test_the_payload_holds_what_it_should():
    assert "<script>" in PAYLOAD and "](javascript:" in PAYLOAD and "\n# " in PAYLOAD and "\x00" in PAYLOAD


@pytest.mark.parametrize("stem", ["index", *CHAPTERS])
def test_hostile_strings_show_as_text_and_run_nothing(browser, hostile_book, stem):  # noqa: F811
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": COUNT_ALERTS})
    browser.get((hostile_book / f"{stem}.html").as_uri())
    got = browser.execute_script(PROBE)
    text = got.pop("text")
    assert got == {"pwned": 0, "alerts": 0, "injected": 0, "scripts": 0, "handlers": 0, "links": 0,
                   "headings": 0}, f"{stem}: the payload acted: {got}"
    source = (hostile_book / f"{stem}.html").read_text()
    if "kbpwned" in source.replace("\\u003c", "<"):  # a payload reached this page: the reader sees it as text,
        # on the page or in a figure's hover text (escaped for plotly, which shows entities as characters)
        in_figure = re.search(r'"(hovertext|customdata)":\[\[?"[^"]*kbpwned', source)
        assert "kbpwned" in text or in_figure, f"{stem}: payload not shown as text"
    assert "Traceback" not in text


def test_report_md_escapes_hostile_strings(hostile_book):
    """report.md is Markdown: a hostile name is text there too (no raw HTML, link, image or heading)."""
    md = (hostile_book / "report.md").read_text()
    assert "kbpwned" in md  # the names are there...
    assert "<img" not in md and "<script" not in md  # ...with HTML escaped
    assert "](javascript:" not in md and "![img]" not in md
    assert not re.search(r"^# Heading", md, re.M)
    assert "\x00" not in md and "\x1b" not in md
