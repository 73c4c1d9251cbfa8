"""Every chapter of the rendered bundled report, en and zh, opened in headless Chromium (Debian's
`chromium` driven by `chromedriver`) from file://, with the network off: the page makes no request
outside file:// (none over the network), the browser console has no error, and every plotly figure drew (an SVG with marks).

Set KB_SHOTS=/some/folder to keep a screenshot of each page (CJK glyphs need fonts-noto-cjk)."""
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import CHAPTERS, FIGURES, REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = os.environ.get("KB_SHOTS")

# per plotly div: whether its SVG holds drawn marks (a trace path with a non-empty outline)
DRAWN = """return [...document.querySelectorAll('.js-plotly-plot')].map(d =>
  [...d.querySelectorAll('svg.main-svg g.trace path')].some(p => (p.getAttribute('d') || '').length > 2));"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs Chromium and its driver on PATH (Debian: apt-get install chromium chromium-driver)")
    pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[test]')")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for a browser online
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
              "--allow-file-access-from-files", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        driver.get("about:blank")  # the browser's own start-up pages load before this; drain their logs
        driver.get_log("browser"), driver.get_log("performance")
        yield driver
    finally:
        driver.quit()


def _requests(driver) -> list[str]:
    import json

    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("stem", CHAPTERS)
def test_chapter_opens_offline_without_errors_and_every_figure_draws(browser, rendered_book, language, stem):
    report = rendered_book(language)
    browser.get_log("browser"), _requests(browser)  # start clean: what follows is this page's doing
    browser.get((report / f"{stem}.html").as_uri())
    expected = FIGURES[stem]
    deadline = time.time() + 30
    while True:
        drawn = browser.execute_script(DRAWN)
        if (len(drawn) >= expected and all(drawn)) or time.time() > deadline:
            break
        time.sleep(0.3)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / f"{language}-{stem}.png"))
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    # a request over the network (the browser's own chrome:// pages are not the report's doing)
    outside = [u for u in _requests(browser) if re.match(r"(https?|wss?|ftp)://", u)]
    assert not errors, f"console errors: {errors[:5]}"
    assert not outside, f"requests outside file://: {outside[:5]}"
    assert len(drawn) == expected, f"{len(drawn)} plotly figures on the page, expected {expected}"
    assert all(drawn), f"figures without drawn marks: {[i for i, d in enumerate(drawn) if not d]}"
    lang = browser.execute_script("return document.documentElement.lang")
    assert lang == {"en": "en", "zh": "zh-CN"}[language]
    assert "Traceback" not in browser.find_element("tag name", "body").text
    assert browser.execute_script(NO_UPLOAD) == [True] * expected


# per plotly div, as plotly.js holds it after drawing: no "Share chart..." upload in its config, and a
# mode bar (drawn with the plot) of local tools only
NO_UPLOAD = """return [...document.querySelectorAll('.js-plotly-plot')].map(d =>
  d._context.showSendToCloud === false && d.querySelectorAll('.modebar-btn').length > 0 &&
  !d.querySelector('.modebar-btn[data-title^="Share"]'));"""


def test_a_papermill_output_converted_by_nbconvert_draws_every_figure_offline(browser, tmp_path):
    """The standard tools alone: papermill runs a chapter, plain `jupyter nbconvert --to html` converts
    it, and the page, opened offline, draws each figure (no kernelbook runner, no plotly.min.js beside it)."""
    import subprocess
    import sys

    bin_ = Path(sys.executable).parent
    src = tmp_path / "04_roofline.ipynb"
    subprocess.run([str(bin_ / "jupytext"), "--to", "ipynb", "-o", str(src), str(REPO / "notebooks" / "04_roofline.py")],
                   check=True, capture_output=True)
    out = tmp_path / "out.ipynb"
    subprocess.run([str(bin_ / "papermill"), str(src), str(out), "-p", "phase", "prefill", "--cwd", str(REPO)],
                   check=True, capture_output=True, timeout=300)
    subprocess.run([str(bin_ / "jupyter"), "nbconvert", "--to", "html", str(out)], check=True, capture_output=True,
                   timeout=300)
    browser.get_log("browser")
    browser.get((tmp_path / "out.html").as_uri())
    deadline = time.time() + 30
    while True:
        drawn = browser.execute_script(DRAWN)
        if (len(drawn) >= FIGURES["04_roofline"] and all(drawn)) or time.time() > deadline:
            break
        time.sleep(0.3)
    assert len(drawn) == FIGURES["04_roofline"] and all(drawn), drawn
    assert browser.execute_script(NO_UPLOAD) == [True] * FIGURES["04_roofline"]
    page = browser.find_element("tag name", "body").text
    assert "<plotly figure:" not in page and "Traceback" not in page


SORT_CHECK = """const t = [...document.querySelectorAll('table.kb')].find(
    t => t.tBodies[0].rows.length > 12 && t.querySelector('td[data-v]'));
const i = t.querySelector('td[data-v]').cellIndex, h = t.tHead.rows[0].cells[i];
const col = () => [...t.tBodies[0].rows].map(r => r.cells[i].getAttribute('data-v')).filter(x => x !== null).map(Number);
h.click(); const up = col(); h.click(); const down = col();
const f = t.closest('.kb-tablebox').previousElementSibling, first = t.tBodies[0].rows[0].cells[0].textContent;
f.value = first; f.dispatchEvent(new Event('input'));
const shown = [...t.tBodies[0].rows].filter(r => r.style.display !== 'none').length;
return [up, down, f.className, f.placeholder, shown, t.tBodies[0].rows.length];"""


@pytest.mark.parametrize("language", ["en", "zh"])
def test_tables_sort_by_the_value_behind_a_cell_and_filter(browser, rendered_book, language):
    """A click on a header sorts by the number behind each cell (so 1.44 GB sorts above 514 MB), a second click
    reverses; a long table has a filter box that hides the rows without its text."""
    browser.get_log("browser")  # start clean: what follows is this page's doing
    browser.get((rendered_book(language) / "01_timeline.html").as_uri())
    up, down, cls, placeholder, shown, total = browser.execute_script(SORT_CHECK)
    assert len(up) > 12 and up == sorted(up) and down == sorted(down, reverse=True)
    assert cls == "kb-filter" and placeholder == {"en": "filter rows", "zh": "筛选行"}[language]
    assert 0 < shown < total
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


# the card a chapter-05 address names: whether it is a <details> that is open, and its box against the viewport
CARD_STATE = """const c = document.getElementById(arguments[0]); if (!c) return null;
const r = c.getBoundingClientRect();
return [c.tagName, c.open, r.top, r.bottom, window.innerHeight, location.hash];"""


def _in_view(state) -> bool:
    tag, is_open, top, bottom, height, _ = state
    return tag == "DETAILS" and is_open and top < height and bottom > 0 and -1 <= top


def test_a_kernel_id_opens_its_card_in_chapter_05(browser, rendered_book):
    """A kernel id in chapter 02's tables links to its card in chapter 05: the click opens 05 with that card's
    <details> open and scrolled into view (a prefill id too: every profiled kernel has a card). Inside chapter 05
    a click on an id opens the card on the same page. The tables still sort with the links in them."""
    from selenium.webdriver.common.by import By

    report = rendered_book("en")
    browser.get_log("browser")  # start clean: what follows is these pages' doing
    browser.get((report / "02_ncu.html").as_uri())
    links = browser.find_elements(By.CSS_SELECTOR, "table.kb a.kb-k")
    cards = {a.get_attribute("data-card") for a in links}
    # 20 vision encode + 20 prefill + 20 decode ids (the run's 60 profiled kernels), each linked
    assert len(cards) == 60 and {"kernel-v000", "kernel-p012", "kernel-d004"} <= cards
    link = next(a for a in links if a.get_attribute("textContent") == "p012")
    # a long table shows its first 10 rows; the reader opens the rest with the button under it
    more = link.find_element(By.XPATH, "ancestor::div[contains(@class,'kb-tablebox')]/following-sibling::button[1]")
    if not link.is_displayed():
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", more)
        more.click()
    assert link.is_displayed()
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
    link.click()
    deadline = time.time() + 20
    while not browser.current_url.endswith("05_classification.html#kernel-p012") and time.time() < deadline:
        time.sleep(0.2)
    assert browser.current_url.endswith("05_classification.html#kernel-p012"), browser.current_url
    time.sleep(1.0)  # the page's load event re-opens and re-scrolls to the card
    state = browser.execute_script(CARD_STATE, "kernel-p012")
    assert state is not None and _in_view(state), state
    assert browser.execute_script("return document.getElementById('kernel-d000').open") is False  # only that one
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / "en-05-card-p012.png"))
    # inside chapter 05: an id in the class table opens its card on this page, no reload
    browser.execute_script("window.scrollTo(0, 0); window.__same = 1;")
    link = browser.find_element(By.CSS_SELECTOR, "table.kb a.kb-k[data-card='kernel-d004']")
    if not link.is_displayed():  # on a long table's later rows: open them first
        browser.execute_script("arguments[0].click();", link.find_element(
            By.XPATH, "ancestor::div[contains(@class,'kb-tablebox')]/following-sibling::button[1]"))
    link.click()
    time.sleep(0.5)
    state = browser.execute_script(CARD_STATE, "kernel-d004")
    assert _in_view(state) and state[5] == "#kernel-d004", state
    assert browser.execute_script("return window.__same") == 1  # the same page: no navigation
    # a header click still sorts a table whose first column holds the links
    order = browser.execute_script("""const t = document.querySelector('table.kb a.kb-k').closest('table');
        const ids = () => [...t.tBodies[0].rows].map(r => r.cells[0].textContent);
        const before = ids(); t.tHead.rows[0].cells[0].click(); const up = ids(); t.tHead.rows[0].cells[0].click();
        return [before, up, ids(), t.querySelectorAll('a.kb-k').length];""")
    before, up, down, n_links = order
    assert up == sorted(before) and down == sorted(before, reverse=True) and n_links == len(before)
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_each_finding_on_the_first_page_lands_on_its_evidence(browser, rendered_book, language):
    """A click on a finding's link on the index opens the chapter scrolled to the section that holds its evidence
    (the heading is the page's :target and in view), in either language (issue 43 point 1)."""
    from selenium.webdriver.common.by import By

    report = rendered_book(language)
    browser.get((report / "index.html").as_uri())
    n = len(browser.find_elements(By.CSS_SELECTOR, "ol.findings li a"))
    assert 1 <= n <= 5
    for i in range(n):
        browser.get((report / "index.html").as_uri())
        link = browser.find_elements(By.CSS_SELECTOR, "ol.findings li a")[i]
        want = link.get_attribute("href")
        link.click()
        deadline = time.time() + 20
        while browser.current_url != want and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        state = browser.execute_script(
            "const t = document.querySelector(':target'); if (!t) return null;"
            "const r = t.getBoundingClientRect(); return [t.tagName, r.top, window.innerHeight];")
        assert state is not None, want
        tag, top, height = state
        assert tag in ("H2", "H3") and -1 <= top < height, (want, state)


def test_a_long_table_shows_its_first_ten_rows_and_a_button_for_the_rest(browser, rendered_book):
    """Issue 43 point 3 (long tables paged): a table of more than 12 rows shows its first 10 as sorted; the button
    under it shows all N and back; a filter shows every matching row, paged or not."""
    browser.get((rendered_book("en") / "01_timeline.html").as_uri())
    shown, total, label, after, label2, back = browser.execute_script("""
      const t = [...document.querySelectorAll('table.kb')].find(t => t.tBodies[0].rows.length > 12);
      const vis = () => [...t.tBodies[0].rows].filter(r => r.offsetParent !== null).length;
      const b = t.closest('.kb-tablebox').nextElementSibling;
      const s = vis(), l = b.textContent; b.click(); const a = vis(), l2 = b.textContent; b.click();
      return [s, t.tBodies[0].rows.length, l, a, l2, vis()];""")
    assert shown == 10 < total and label == f"show all {total} rows"
    assert after == total and label2 == "show the first 10 rows" and back == 10
