"""JupyterLab for real: `python -m kernelbook lab` (the README command) headless on 127.0.0.1 with a
random port and a token, every chapter opened by a double-click in headless Chromium, Run All, then:
no error output, no console error, every plotly figure drawn (SVG with traces), hover labels that name
the kernel, the explorer's card following the picker, a parameter change re-rendering the chapter,
and saving into the paired .ipynb with the .py unchanged. The server runs on a copy of the chapters
(saving writes beside them) and with its own settings folders, and is stopped at the end.

Set KB_SHOTS=/some/folder to keep screenshots (hover labels in 01 and 04, the explorer in 05)."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import CHAPTERS, FIGURES, REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = os.environ.get("KB_SHOTS")
PLOTLY = "application/vnd.plotly.v1+json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs Chromium and its driver on PATH (Debian: apt-get install chromium chromium-driver)")
    pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[test]')")
    pytest.importorskip("jupyterlab", reason="needs jupyterlab (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    home = tmp / "home"
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
           "PYTHONWARNINGS": "ignore"}
    news = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')  # no "official Jupyter news?" toast over the figures
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "kernelbook", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--expose-app-in-browser",
         *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])],  # CI runs as root
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("jupyter lab did not start:\n" + (tmp / "server.log").read_text()[-3000:])
                time.sleep(0.5)
        yield {"url": url, "token": token, "root": root, "tmp": tmp}
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for a browser online
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
              f"--user-data-dir={lab['tmp'] / 'chromium'}", "--window-size=1500,1100"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_script_timeout(60)
    try:
        driver.get(f"{lab['url']}/?token={lab['token']}")  # the server's default URL: notebooks/
        _wait(driver, lambda: driver.execute_script(
            "return !!(window.jupyterapp && document.querySelector('.jp-DirListing-item'))"), 90, "JupyterLab")
        driver.get_log("browser")  # start clean: what follows is the chapters' doing
        yield driver
    finally:
        driver.quit()


def _wait(driver, cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


WIDGET = "const w = window.jupyterapp.shell.currentWidget;"


def _open(driver, stem):
    """Double-click the chapter's .py in the file browser, as a user does."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    item = _wait(driver, lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, ".jp-DirListing-itemText")
                                  if e.text == f"{stem}.py"], 30, f"{stem}.py in the file browser")[0]
    ActionChains(driver).double_click(item).perform()
    kernel = _wait(driver, lambda: driver.execute_script(WIDGET + """
        if (!w || !w.context || w.context.path !== arguments[0] || !w.content.model) return null;
        const k = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
        return k && k.connectionStatus === 'connected' && k.status === 'idle' ? w.sessionContext.kernelDisplayName : null;
        """, f"notebooks/{stem}.py"), 60, f"{stem} open as a notebook with a live kernel")
    assert not driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"), "a dialog (kernel selection?) opened"
    return kernel


def _run_all(driver):
    driver.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
    state = WIDGET + """
        const busy = [...w.node.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'));
        return !busy && w.sessionContext.session.kernel.status === 'idle';"""
    time.sleep(1)
    _wait(driver, lambda: driver.execute_script(state) and (time.sleep(1.0) or driver.execute_script(state)),
          240, "Run All to finish")


def _outputs(driver):
    return driver.execute_script(WIDGET + """
        const out = [];
        for (const c of w.content.widgets) {
          if (c.model.type !== 'code') continue;
          for (let i = 0; i < c.model.outputs.length; i++) out.push(c.model.outputs.get(i).toJSON());
        }
        return out;""")


def _figure_cells(driver, title=""):
    """Indices of the code cells holding a plotly output (whose title starts with `title`)."""
    return driver.execute_script(WIDGET + """
        const idx = [];
        w.content.widgets.forEach((c, i) => {
          if (c.model.type !== 'code') return;
          for (let j = 0; j < c.model.outputs.length; j++) {
            const d = c.model.outputs.get(j).toJSON().data || {};
            const fig = d['application/vnd.plotly.v1+json'];
            const t = fig && fig.layout && fig.layout.title ? (fig.layout.title.text || '') : '';
            if (fig && t.startsWith(arguments[0])) { idx.push(i); break; }
          }
        });
        return idx;""", title)


def _show_cell(driver, i):
    """Scroll cell `i` into view (the notebook renders cells near the viewport) and return its plot."""
    driver.execute_script(WIDGET + "w.content.scrollToItem(arguments[0], 'start');", i)
    return _wait(driver, lambda: driver.execute_script(
        WIDGET + "return w.content.widgets[arguments[0]].node.querySelector('.js-plotly-plot');", i),
        20, f"cell {i}'s figure to draw")


def _drawn_figures(driver):
    """Per plotly output: how many traces its SVG holds once its cell is on screen."""
    drawn = []
    for i in _figure_cells(driver):
        plot = _show_cell(driver, i)
        time.sleep(0.3)
        drawn.append(driver.execute_script("return arguments[0].querySelectorAll('svg.main-svg g.trace').length;", plot))
    return drawn


def _console_errors(driver):
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _close(driver):
    driver.execute_script(WIDGET + "w.sessionContext.shutdown().then(() => w.dispose());")
    time.sleep(1)


def _hover(driver, title, stem, name):
    """Move the mouse onto the biggest marker or bar of the figure titled `title`; the hover label."""
    from selenium.webdriver.common.action_chains import ActionChains

    cells = _figure_cells(driver, title)
    assert cells, f"no figure titled {title!r}"
    plot = _show_cell(driver, cells[0])
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", plot)
    time.sleep(0.5)
    pts = driver.execute_script("""
        const pts = [...arguments[0].querySelectorAll('.scatterlayer path.point, .barlayer g.point path')];
        const area = e => { const r = e.getBoundingClientRect(); return r.width * r.height; };
        return pts.sort((a, b) => area(b) - area(a));""", plot)
    assert pts, f"figure {title!r} drew no points"
    ActionChains(driver).move_to_element(pts[0]).perform()
    text = _wait(driver, lambda: driver.execute_script(
        "const h = arguments[0].querySelector('.hoverlayer .hovertext'); return h && h.textContent;", plot),
        10, f"a hover label on {title!r}")
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"{stem}-{name}.png"))
    return text


def _set_parameters(driver, assignments: dict):
    """Edit the `parameters` cell as a user would before Run All (replace the assigned values)."""
    driver.execute_script(WIDGET + """
        const cell = w.content.widgets.find(c => (c.model.getMetadata('tags') || []).includes('parameters'));
        let src = cell.model.sharedModel.getSource();
        for (const [k, v] of Object.entries(arguments[0]))
          src = src.replace(new RegExp('^(' + k + ':[^=]*= )[^#\\\\n]*?(\\\\s*#|$)', 'm'), '$1' + v + '$2');
        cell.model.sharedModel.setSource(src);""", assignments)


@pytest.mark.parametrize("stem", CHAPTERS)
def test_chapter_in_jupyterlab(lab, browser, stem):
    driver = browser
    assert _open(driver, stem).startswith("Python 3")
    _run_all(driver)
    outputs = _outputs(driver)
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors[0]["traceback"][-3:]
    figures = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert len(figures) == FIGURES[stem]
    drawn = _drawn_figures(driver)
    assert len(drawn) == FIGURES[stem] and all(n > 0 for n in drawn), drawn
    if stem == "01_timeline":
        label = _hover(driver, "Top kernels per phase", stem, "hover-top-kernels")
        assert "launches" in label and "% of phase kernel time" in label and "ms total" in label, label
        driver.execute_script("window.jupyterapp.commands.execute('docmanager:save');")
        ipynb = lab["root"] / "notebooks" / f"{stem}.ipynb"
        _wait(driver, lambda: ipynb.exists() and PLOTLY in ipynb.read_text(), 30, "the paired .ipynb")
        # jupytext rewrites the .py after the .ipynb: read it once the save has finished (an empty or half-written
        # file is the write in progress, not a change)
        py, want = lab["root"] / "notebooks" / f"{stem}.py", (REPO / "notebooks" / f"{stem}.py").read_text()
        try:
            _wait(driver, lambda: py.read_text() == want, 15, "the paired .py")
        except AssertionError:
            assert py.read_text() == want
    if stem == "04_roofline":
        label = _hover(driver, "Physical roofline", stem, "hover-roofline")
        assert "FLOP/s" in label and "% of roof" in label and "µs" in label, label
        before = json.dumps(figures)
        _set_parameters(driver, {"phase": '"prefill"'})
        _run_all(driver)
        after = _outputs(driver)
        assert not [o for o in after if o["output_type"] == "error"]
        assert json.dumps([o for o in after if PLOTLY in o.get("data", {})]) != before  # re-rendered on prefill
        assert all(n > 0 for n in _drawn_figures(driver))
    if stem == "03_histograms":
        # the bundled run's ncu stage profiled vision encode too: the chapter draws that phase
        _set_parameters(driver, {"phase": '"vision_encode"'})
        _run_all(driver)
        after = _outputs(driver)
        assert not [o for o in after if o["output_type"] == "error"]
        assert len([o for o in after if PLOTLY in o.get("data", {})]) == FIGURES[stem]
        assert all(n > 0 for n in _drawn_figures(driver))
        # a committed run whose ncu stage profiled decode and prefill only: the phase it lacks stops with the note
        _set_parameters(driver, {"run_dir": '"data/runs/h100-long-generation-2048"'})
        _run_all(driver)
        [err] = [o for o in _outputs(driver) if o["output_type"] == "error"]
        assert err["ename"] == "ChapterStop" and "it profiled decode (20 kernels) and prefill" in err["evalue"]
        assert "no ncu counters for 'vision_encode'" in err["evalue"]
        assert "Traceback" not in driver.execute_script(WIDGET + "return w.node.textContent;")
    if stem == "05_classification":
        _explorer(driver, stem)
        _table_sorts_and_kernel_link_is_inert(driver)
    assert not _console_errors(driver)
    _close(driver)


def _explorer(driver, stem):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    select = _wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output .widget-dropdown select"),
                   20, "the kernel picker")[0]
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", select)
    card = lambda: driver.execute_script(  # noqa: E731 - the card is the HTML widget beside the picker
        "return arguments[0].closest('.widget-vbox').querySelector('.widget-html').textContent;", select)
    first = card()
    pick = Select(select)
    pick.select_by_index(3)
    _wait(driver, lambda: card() != first and "µs" in card(), 20, "the explorer card to change")
    assert "µs" in card() and "% of peak" in card()  # the new card holds its metric table
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        time.sleep(0.5)
        driver.save_screenshot(str(Path(SHOTS) / f"{stem}-explorer.png"))


# in a code cell's output: the first table of the display layer with numbers behind its cells and a kernel id link
SORT_IN_LAB = WIDGET + """
    const cell = w.content.widgets[arguments[0]];
    const t = [...cell.node.querySelectorAll('.jp-OutputArea-output table.kb')].find(
        t => t.tBodies[0].rows.length > 3 && t.querySelector('td[data-v]') && t.querySelector('a.kb-k'));
    if (!t) return null;
    const i = t.querySelector('td[data-v]').cellIndex, h = t.tHead.rows[0].cells[i];
    const col = () => [...t.tBodies[0].rows].map(r => r.cells[i].getAttribute('data-v')).filter(x => x !== null).map(Number);
    const before = col(); h.click(); const up = col(); h.click(); const down = col();
    return [before, up, down];"""


def _table_sorts_and_kernel_link_is_inert(driver):
    """A trusted output's table sorts in JupyterLab (a header click orders the rows by the number behind each cell,
    a second click reverses); a kernel id links to chapter 05's card in the shared HTML, and here a click on it
    neither navigates nor asks the server for a file that is not there (no console error)."""
    from selenium.webdriver.common.by import By

    cells = driver.execute_script(WIDGET + """return w.content.widgets.map((c, i) => c.model.type === 'code' &&
        [...Array(c.model.outputs.length).keys()].some(j => {
          const h = (c.model.outputs.get(j).toJSON().data || {})['text/html'];
          const s = Array.isArray(h) ? h.join('') : (h || '');
          return s.includes('class="kb-k"') && s.includes('data-v=');
        }) ? i : -1).filter(i => i >= 0);""")
    assert cells, "no output table with kernel links and numbers"
    driver.execute_script(WIDGET + "w.content.scrollToItem(arguments[0], 'start');", cells[0])
    before, up, down = _wait(driver, lambda: driver.execute_script(SORT_IN_LAB, cells[0]), 20, "the table to render")
    assert up == sorted(before) and down == sorted(before, reverse=True) and up != down, (before, up, down)
    url = driver.current_url
    link = driver.execute_script(WIDGET + "return w.content.widgets[arguments[0]].node.querySelector('a.kb-k');",
                                 cells[0])
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
    link.click()
    time.sleep(1.5)
    assert driver.current_url == url and not driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog")
    assert not _console_errors(driver)
