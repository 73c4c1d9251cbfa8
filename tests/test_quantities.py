"""One value per quantity (issue 41 point 2): the figures a chapter prints are named quantities, and across the
rendered bundled book and the graph run's book one quantity never shows two values, and a ratio divides out from
the two figures it is the ratio of."""
import re
from pathlib import Path

import pandas as pd
import pytest

from kernelbook import display
from kernelbook import params as P
from kernelbook.contract import quantity
from kernelbook.contract.quantity import Q, ratio
from kernelbook.runner import render_book

REPO = Path(__file__).resolve().parents[1]
GRAPH_RUN = "data/runs/h100-variant-static-graphs"
MARKS = (quantity.OPEN, quantity.SHOWN, quantity.CLOSE, quantity.SEP)


@pytest.fixture
def marking():
    saved = quantity._MARKING[0]
    quantity._MARKING[0] = True
    yield
    quantity._MARKING[0] = saved


def test_a_quantity_prints_as_a_plain_number_outside_the_book_runner():
    saved = quantity._MARKING[0]
    quantity._MARKING[0] = False
    try:
        assert f"{Q(2.2399, 'r/decode.plain_step_ms'):.2f} ms" == "2.24 ms"
    finally:
        quantity._MARKING[0] = saved


def test_a_mark_becomes_a_span_in_text_and_is_stripped_in_attributes_and_scripts(marking):
    a, b = Q(2.2399, "r/a"), Q(0.41, "r/b")
    text = f"{a:.2f} ms, {ratio(a, b, 'r/a_x_b'):.1f}×"
    assert quantity.plain(text) == "2.24 ms, 5.5×"
    page = quantity.spans(f'<p title="{text}">{text}</p><script>var s = "{text}";</script>')
    assert '<p title="2.24 ms, 5.5×">' in page and 'var s = "2.24 ms, 5.5×";' in page
    assert quantity.shown(page) == [
        ("r/a", 2.2399, None, "2.24", 1.0), ("r/a_x_b", 2.2399 / 0.41, ("r/a", "r/b"), "5.5", 1.0)]
    assert not any(m in page for m in MARKS)


def test_the_check_fails_on_two_values_a_misprint_and_a_ratio_that_does_not_divide_out(marking):
    a, b = Q(2.2399, "r/a"), Q(0.41, "r/b")
    good = quantity.spans(f"{a:.2f} over {b:.2f} is {ratio(a, b, 'r/x'):.1f}")
    assert quantity.check({"one": good, "two": good}) == []
    other = quantity.spans(f"{Q(2.18, 'r/a'):.2f}")
    assert any("shows two values" in p for p in quantity.check({"one": good, "two": other}))
    misprint = good.replace(">2.24<", ">2.42<")
    assert any("printed '2.42'" in p for p in quantity.check({"one": misprint}))
    wrong = quantity.spans(f"{a:.2f} over {b:.2f} is {Q(9.4, 'r/x', ('r/a', 'r/b')):.1f}")
    assert any("is not r/a ÷ r/b" in p for p in quantity.check({"one": wrong}))


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return render_book(P.validate({"run_dir": GRAPH_RUN}, consumer="book"),
                       tmp_path_factory.mktemp("graph-book") / "report", log=lambda *_: None)


def _pages(out: Path) -> dict[str, str]:
    return {f"{out.name}:{p.stem}": p.read_text(encoding="utf-8") for p in sorted(out.glob("*.html"))}


def test_one_value_per_quantity_across_the_bundled_and_the_graph_book(rendered_book, graph_book):
    pages = {**{f"bundled:{k}": v for k, v in _pages(rendered_book("en")).items()},
             **{f"graph:{k}": v for k, v in _pages(graph_book).items()}}
    assert quantity.check(pages) == []
    keys = {}
    for name, page in pages.items():
        for key, *_ in quantity.shown(page):
            keys.setdefault(key, set()).add(name.split(":")[-1])
    # not vacuous: the deployed decode step is named in the chapters that state it, with its multiple of the limit
    deployed = "h100-variant-static-graphs/decode.plain_step_ms"
    assert {"07_summary", "06_npu", "index"} <= keys.get(deployed, set()), keys.get(deployed)
    assert "h100-variant-static-graphs/decode.plain_step_ms_x_limit" in keys
    assert "h100-deepseek-ocr-2/decode.plain_step_ms" in keys and len(keys) >= 12, sorted(keys)


def test_no_mark_is_left_in_what_the_book_writes(rendered_book):
    out = rendered_book("en")
    for p in sorted(out.iterdir()):
        if p.suffix in (".html", ".md", ".ipynb", ".json"):
            text = p.read_text(encoding="utf-8")
            assert not any(m in text for m in MARKS), p.name


def test_a_hostile_run_id_in_a_key_stays_text(marking):
    key = 'r<img src=x onerror=alert(1)>,"_x_/a'
    page = quantity.spans(f"<p>{Q(1.5, key):.1f} ms</p>")
    assert "<img" not in page and quantity.shown(page) == [(key, 1.5, None, "1.5", 1.0)]


# the bundled run's eager decode step and its limit (ms), as chapter 07 states them
STEP, LIMIT = 12.087985666666675, 0.40823


def test_a_table_cell_that_holds_a_quantity_is_marked_and_checked_beside_the_prose(marking):
    """A cell holding a Q prints as its column prints (an engineering prefix where the column takes one: 408 µs) and
    carries the quantity's mark, with the scale between the number printed and the value."""
    step, limit = Q(STEP, "r/decode.plain_step_ms"), Q(LIMIT, "r/decode.limit_ms")
    x = ratio(step, limit, "r/decode.plain_step_ms_x_limit")
    frame = pd.DataFrame({"run": ["r"], "plain_ms": quantity.column([step]), "limit_ms": quantity.column([limit]),
                          "plain_x": quantity.column([x])})
    page = quantity.spans(display.table(frame).html)
    assert quantity.shown(page) == [("r/decode.plain_step_ms", STEP, None, "12.1 ms", 1.0),
                                    ("r/decode.limit_ms", LIMIT, None, "408 µs", 1000.0),
                                    ("r/decode.plain_step_ms_x_limit", STEP / LIMIT,
                                     ("r/decode.plain_step_ms", "r/decode.limit_ms"), "29.6", 1.0)]
    assert len(re.findall(r'<td data-v="[^"]*"><span class="kb-q"', page)) == 3  # in the cells, not an attribute
    prose = quantity.spans(f"<p>a plain step takes {step:.1f} ms, {x:.0f}× the {limit:.2f} ms limit</p>")
    assert quantity.check({"table": page, "prose": prose}) == []
    # the same quantity with another value in a cell, or a ratio cell that is not its sides divided, fails
    other = display.table(frame.assign(plain_ms=quantity.column([Q(11.9, "r/decode.plain_step_ms")])))
    assert any("r/decode.plain_step_ms shows two values" in p
               for p in quantity.check({"prose": prose, "table": quantity.spans(other.html)}))
    off = display.table(frame.assign(plain_x=quantity.column([Q(31.0, x.key, x.of)])))
    assert any("is not r/decode.plain_step_ms ÷ r/decode.limit_ms" in p
               for p in quantity.check({"table": quantity.spans(off.html)}))


def test_a_long_tables_values_are_marked_in_their_rows_unit(marking):
    """A long table (value, unit) prints each value in its row's unit (2.99 TB/s for 2,991 GB/s): its mark says so."""
    bw = Q(2991.4, "r/dram_gbps_measured")
    long = pd.DataFrame({"quantity": ["DRAM bandwidth", "limit"],
                         "value": quantity.column([bw, Q(LIMIT, "r/decode.limit_ms")]), "unit": ["GB/s", "ms"]})
    page = quantity.spans(display.table(long).html)
    assert [(k, t, s) for k, _, _, t, s in quantity.shown(page)] == [("r/dram_gbps_measured", "2.99 TB/s", 0.001),
                                                                     ("r/decode.limit_ms", "408 µs", 1000.0)]
    assert quantity.check({"table": page, "prose": quantity.spans(f"{bw:,.0f} GB/s")}) == []
    # the scale comes from the units, never the value: a figure printed ten times off still fails
    tenfold = quantity.spans(quantity.mark(Q(LIMIT, "r/decode.limit_ms"), f"{10 * LIMIT:.2f} ms"))
    assert any("printed" in p for p in quantity.check({"table": tenfold}))


def test_chapter_07s_tables_show_the_prose_quantities_and_a_wrong_cell_fails(rendered_book):
    page = (rendered_book("en") / "07_summary.html").read_text(encoding="utf-8")
    in_cells = set(re.findall(r'<td[^>]*><span class="kb-q" data-q="([^"]*)"', page))
    # the limit table, eager against deployed, the variants and the comparison of two runs
    eager, deployed = "h100-deepseek-ocr-2", "h100-variant-static-graphs"
    assert {f"{eager}/decode.limit_ms", f"{eager}/dram_gbps_measured", f"{eager}/decode.profiled_step_ms",
            f"{deployed}/decode.plain_step_ms", f"{deployed}/decode.gpu_busy_step_ms",
            f"{deployed}/decode.plain_step_ms_x_limit", f"{deployed}/decode.measured_gain",
            f"{deployed}/decode.predicted_gain"} <= in_cells, sorted(in_cells)
    assert quantity.check({"07": page}) == []
    key = "h100-variant-static-graphs/decode.plain_step_ms"
    cell = re.search(rf'<td[^>]*><span class="kb-q" data-q="{re.escape(key)}" data-v="([^"]*)"', page)
    wrong = page[:cell.start(1)] + repr(float(cell.group(1)) * 1.01) + page[cell.end(1):]
    assert any(p.startswith(f"{key} shows two values") for p in quantity.check({"07": wrong}))

