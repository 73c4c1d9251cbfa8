"""What a reader sees of tables and figure labels, at the reviewer's 1400 px in headless Chromium and in the
figures the chapters build from the bundled run:

- chapter 02's "Per-kernel metrics" table was forced to the page width by JupyterLab's `table-layout: fixed`:
  211 cells (183 in zh) ran into their neighbours ("5.28 GFLOP" over "0 FLOP", "2823x1x1" over "128x1x1");
- plotly's log axes labelled minor ticks with their leading digit alone ("2" above "10" for 20 ms, "5" under
  "1" for 0.5×) on chapter 06's sensitivity panels and chapter 07's variants chart;
- chapter 03's bins read "1.13e+03–1.41e+03" (GB/s);
- chapter 04's per-kernel panel titles were cut at 28 characters and still ran into the next panel
  ("d004 nvjet GEMM (mixed, 384x8 til")."""
import re

import numpy as np
import pandas as pd
import pytest

from test_browser import browser  # noqa: F401  (the module's headless Chromium, network off, 1400 px wide)

from kernelbook.analyze import histograms as H
from kernelbook.analyze import roofline as R
from kernelbook.devices import lookup
from kernelbook.narrate import histograms as HN
from kernelbook.plots import figures as F

# every table cell whose laid-out text reaches past its own box (into the next cell), with the table's caption
OVERFLOWING_CELLS = """const out = [];
document.querySelectorAll('table.kb').forEach(t => {
  const box = t.closest('.kb-tablebox'), cap = box.previousElementSibling;
  t.querySelectorAll('th, td').forEach(c => {
    const r = c.getBoundingClientRect(), g = document.createRange();
    g.selectNodeContents(c);
    if ([...g.getClientRects()].some(x => x.width > 0 && (x.right > r.right + 0.5 || x.left < r.left - 0.5)))
      out.push([(cap && cap.textContent || '').slice(0, 50), c.textContent.slice(0, 40)]);
  });
});
return out;"""


@pytest.mark.parametrize("language", ["en", "zh"])
def test_no_table_cell_runs_into_its_neighbour_in_chapter_02(browser, rendered_book, language):  # noqa: F811
    """The wide per-kernel table scrolls sideways in its box instead: every cell's text inside the cell."""
    browser.get((rendered_book(language) / "02_ncu.html").as_uri())
    over = browser.execute_script(OVERFLOWING_CELLS)
    assert not over, f"{len(over)} cells overflow, e.g. {over[:5]}"
    # the per-kernel table is wider than the page: it scrolls in its box, the page itself does not
    widths = browser.execute_script("""return [...document.querySelectorAll('.kb-tablebox')].map(
        b => [b.scrollWidth, b.clientWidth]).concat([[document.documentElement.scrollWidth, window.innerWidth]]);""")
    *boxes, (page, window) = widths
    assert any(s > c for s, c in boxes) and page <= window
    # numbers with their units stay on one line; a module path wraps at a readable width, not a fragment a line
    nowrap, module_px = browser.execute_script("""const t = [...document.querySelectorAll('table.kb')].find(
        t => t.querySelector('td.c'));
      const num = t.querySelector('td[data-v]'), mod = t.querySelector('td.c');
      return [getComputedStyle(num).whiteSpace, mod.getBoundingClientRect().width];""")
    assert nowrap == "nowrap" and module_px >= 200


def _number(label: str) -> float:
    """A tick label as the number a reader reads: '20', '0.5', '2k', '1M'."""
    m = re.fullmatch(r"([0-9][0-9,]*(?:\.[0-9]+)?)([kMGT]?)", label)
    assert m, f"tick label {label!r} is not a whole value"
    return float(m.group(1).replace(",", "")) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]


def _log_axes(fig):
    return [a for a in fig.layout if a.startswith(("xaxis", "yaxis")) and fig.layout[a].type == "log"]


def _assert_ticks_read_whole(fig, axes):
    for a in axes:
        ax = fig.layout[a]
        assert ax.tickmode == "array" and ax.tickvals and len(ax.tickvals) == len(ax.ticktext), a
        for v, t in zip(ax.tickvals, ax.ticktext):
            assert _number(t) == pytest.approx(v, rel=1e-6), (a, v, t)


def test_log_axes_label_every_tick_with_its_whole_value():
    """Chapter 06's decode panel (2–22 ms over 400–20,000 GB/s) and chapter 07's gains (0.3–12×): each tick a
    whole value, the minor ones included, and no two labels closer than a tenth of the range."""
    x = np.geomspace(400, 20000, 40)
    sens = pd.concat([pd.DataFrame({"sweep": "DRAM bandwidth (GB/s)", "phase": ph, "dispatch": d, "x": x,
                                    "ms": f * (2 + 20000 / x / (1 if d == "eager" else 10))})
                      for ph, f in (("decode", 1.0), ("prefill", 4.0)) for d in ("eager", "graph")])
    knees = pd.DataFrame({"sweep": "DRAM bandwidth (GB/s)", "phase": ["decode", "prefill"] * 2,
                          "dispatch": ["eager"] * 2 + ["graph"] * 2, "knee_x": np.nan})
    fig = F.sensitivity_grid(sens, knees)
    axes = _log_axes(fig)
    assert len(axes) == 4
    _assert_ticks_read_whole(fig, axes)
    decode_y = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext))
    assert decode_y[20.0] == "20" and decode_y[10.0] == "10" and fig.layout.xaxis.ticktext[
        list(fig.layout.xaxis.tickvals).index(2000.0)] == "2k"

    rows = pd.DataFrame({"variant": ["static cache", "static cache", "batch 8", "eager attention"],
                         "phase": ["decode", "prefill", "prefill", "decode"],
                         "predicted_gain": [11.0, 1.0, 0.4, np.nan], "measured_gain": [8.6, 0.7, 0.35, 0.75]})
    fig = F.variant_gains(rows)
    _assert_ticks_read_whole(fig, ["yaxis"])
    shown = [t for v, t in zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext) if 0.35 <= v <= 11]
    assert "0.5" in shown and "1" in shown and "10" in shown and "5" in shown


def test_log_ticks_pick_a_readable_density():
    for lo, hi, want in ((2, 22, ["2", "3", "5", "7", "10", "20"]), (0.35, 11, ["0.5", "1", "2", "5", "10"]),
                         (400, 20000, ["500", "1k", "2k", "5k", "10k", "20k"]), (9, 25, ["9", "10", "15", "20", "25"])):
        t = F.log_ticks([lo, hi])
        assert [s for v, s in zip(t["tickvals"], t["ticktext"]) if lo <= v <= hi] == want
    assert F.log_ticks([9.5, 11]) == {} and F.log_ticks([]) == {}  # plotly's own (whole-number) ticks


@pytest.fixture(scope="module")
def k(run):
    return R.profiled_kernels(run)


def test_histogram_bins_read_as_plain_numbers(k):
    """Chapter 03's DRAM GB/s bins: '1,130–1,410', never '1.13e+03–1.41e+03'; percent bins stay '0–10'."""
    d = k[k.phase == "decode"]
    fig = F.histogram_grid(HN.shown(H.histogram_table(d)), HN.captions(H.captions(d)))
    labels = [x for t in fig.data for x in t.x]
    assert not [x for x in labels if "e+" in x or "e-" in x]
    assert "0–10" in labels and any(re.fullmatch(r"\d,\d{3}–\d,\d{3}", x) for x in labels)
    assert H.bin_labels([1125.2, 0.0], [1406.5, 2.7183]) == ["1,130–1,410", "0–2.72"]


def test_per_kernel_roofline_titles_fit_their_panel(run, k):
    """Chapter 04's small multiples: each title whole in at most two lines of 28 characters (a longer one ends
    in '…'), broken before the parenthesis: 'd004 nvjet GEMM<br>(mixed, 384x8 tile)'."""
    roofs = R.roofs(lookup(run.manifest["device"]), run.manifest, k, run.ncu_metrics())
    fig = F.roofline_small_multiples(R.points(k, roofs), roofs, "decode")
    titles = [a.text for a in fig.layout.annotations]
    assert titles and all(len(line) <= 28 for t in titles for line in t.split("<br>")), titles
    assert "d004 nvjet GEMM<br>(mixed, 384x8 tile)" in titles
    long = F.panel_title("d008 cuDNN SDPA Flash Forward (FP16/BF16) over a very long tail of words")
    assert long.count("<br>") == 1 and long.endswith("…") and max(len(x) for x in long.split("<br>")) <= 28
    assert F.panel_title("d001 <b>x</b>") == "d001 &lt;b&gt;x&lt;/b&gt;"  # run text drawn as text
