"""One story across the chapters (issue 28): the numbers every chapter reads about a kernel agree, shares of one
whole sum to 100 %, and the headline's decode step is the plain (unprofiled) one, in the rendered book too."""
import re

import pandas as pd
import pytest

from conftest import REPO, RUN
from kernelbook.contract.quantity import unspanned
from kernelbook.analyze import modules as M
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.contract.manifest import read_manifest
from kernelbook.load.run import load_run


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def test_a_kernel_has_one_category_in_every_chapter(run):
    """Chapters 01-02 read categories from the timeline, 04-05 from the profiled kernels: for each profiled kernel
    the two agree with the category of its launches in that phase."""
    k = R.profiled_kernels(run)
    tl = run.timeline[run.timeline.kind == "kernel"]
    for r in k.itertuples():
        cats = tl[(tl.name == r.name) & (tl.phase == r.phase)].category.unique()
        assert list(cats) == [r.category], (r.kernel_id, cats, r.category)


def test_shares_of_one_whole_sum_to_100(run):
    shares = T.category_shares(run.timeline)
    for ph, g in shares.groupby("phase"):
        assert g.pct.sum() == pytest.approx(100.0, abs=0.01), ph
    types = M.by_module_type(run.timeline)
    for ph, g in types.groupby("phase"):
        assert g.share_pct.sum() == pytest.approx(100.0), ph
    top = T.top_kernels_by_phase(run.timeline, 10_000)
    for ph, g in top.groupby("phase"):
        assert g.time_pct.sum() == pytest.approx(100.0, abs=0.01), ph


def test_the_rendered_headline_uses_the_plain_decode_step(run, rendered_book):
    plain = run.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"]
    graphs = read_manifest(run.path.parent / "h100-variant-static-graphs").timeline_info.plain_phases["decode"]
    html = unspanned((rendered_book("en") / "07_summary.html").read_text())
    # the run as deployed first, the eager loop beside it: both plain steps, neither the profiled one
    assert f"a plain decode step takes {graphs.ms_per_step:.2f} ms" in html
    assert f"HF's eager loop takes {plain:.1f} ms" in html
    ph = T.phase_summary(run.timeline, run.phases).set_index("phase").loc["decode"]
    profiled = ph.wall_ms / ph.steps  # the step under the profiler, 36 ms against the plain 18.5
    assert abs(profiled - plain) > 1 and f"decode step takes {profiled:.1f} ms" not in html


def test_chapter_07s_what_if_line_carries_the_cross_device_error(rendered_book):
    html = unspanned((rendered_book("en") / "07_summary.html").read_text())
    assert "across GPUs (h100-sxm ↔ h200, each fitted on one and predicting the other) device time within" in html


def test_a_measured_gain_across_hosts_says_so_in_the_headline(rendered_book, run):
    """Every bundled variant is measured against the baseline captured beside it in its lease (the graph variant
    against the bundled run itself, captured minutes before it): the headline states its gain plainly. A variant set against a baseline
    of another host (host control names a phase) carries that in the headline."""
    from kernelbook.analyze import summary as S
    from kernelbook.analyze import whatif as W
    from kernelbook.narrate import summary as NS

    html = unspanned((rendered_book("en") / "07_summary.html").read_text())
    assert "faster decode (predicted" in html and "on another host than its baseline" not in html
    tr_, gpu, roofs, _ = W.for_run(run)
    var = load_run(REPO / "data" / "runs" / "h100-variant-static-graphs")
    rows = S.variant_rows(tr_, gpu, run, [(var, W.for_run(var)[0])])
    line = NS.headline(S.phase_table(run), S.decode_limit(tr_, run, roofs), rows, None, {var.run_id})
    assert "faster decode (predicted" in line and "on another host than its baseline" in line


# A time figure (ms, s, µs) and the words that say what it was measured on: the plain generate (no profiler), the
# profiled pass, GPU-busy or kernel time (the GPU's own clock), or a bound derived from bytes and a bandwidth.
TIME_FIGURE = re.compile(r"\d[\d,.]*\s?(ms|s|µs)\b")
BASIS = re.compile(r"plain|no profiler|profiler|profiled|GPU.busy|kernel time|device time|bandwidth|[GT]B/s", re.I)


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in re.split(r";|\n|(?<=\.)\s", text) if TIME_FIGURE.search(c)]


def test_every_time_figure_in_the_headlines_and_prose_says_its_basis(run):
    """Chapter 01 said '21.1 ms per token on the wall clock' (the profiled pass) beside a plain step of 12.4 ms: each
    clause of a headline or a prose paragraph that prints a step or phase time names its basis (plain generate,
    under the profiler, GPU-busy), in chapters 00, 01, 06 and 07 on the bundled run."""
    from kernelbook.narrate import setup as SU
    from kernelbook.narrate import steps as St
    from kernelbook.narrate import timeline as TN
    from kernelbook.analyze import summary as S
    from kernelbook.analyze import whatif as W
    from kernelbook.narrate import summary as NS
    from kernelbook.narrate import modules as MN
    from kernelbook.narrate import whatif as WN
    from kernelbook.devices import lookup

    summary = T.phase_summary(run.timeline, run.phases)
    tr_, gpu, roofs, _ = W.for_run(run)
    limit = S.decode_limit(tr_, run, roofs)
    bw = M.dram_bandwidth(run)
    texts = {
        "00 headline": SU.headline(run, lookup(run.manifest["device"])),
        "01 headline": TN.headline(summary, T.category_shares(run.timeline), run.manifest),
        "01 phases": TN.phase_prose(summary, run.manifest),
        "01 gaps": TN.gap_prose(T.kernel_gaps_us(run.timeline, "decode")),
        "01 steps": St.prose(run) + "\n" + St.check_prose(run),
        "01 modules": MN.modules_prose(M.by_module_type(run.timeline)),
        "01 ledger": MN.ledger_prose(M.bytes_ledger(run.timeline, run.ncu_kernels(), bw[0]),
                                     T.plain_ms_per_step(run.manifest).get("decode"), bw),
        "06 headline": WN.headline(W.validation(tr_), tr_),
        "06 validation": WN.validation_prose(W.validation(tr_), tr_),
        "07 headline": NS.headline(S.phase_table(run), limit, S.variant_rows(tr_, gpu, run, [])),
        "07 limit": NS.limit_prose(limit),
        "07 deployed": NS.deployed_prose(S.deployed(run, limit, []), limit),
    }
    clauses = {name: _clauses(t) for name, t in texts.items()}
    assert len(clauses["01 phases"]) >= 5 and clauses["00 headline"] and clauses["07 headline"]
    unsaid = [f"{name}: {c}" for name, cs in clauses.items() for c in cs if not BASIS.search(c)]
    assert not unsaid, "time figures without their basis:\n" + "\n".join(unsaid)
    plain = run.manifest["timeline_info"]["plain_phases"]["decode"]["ms_per_step"]
    # the launch-bound sentence takes the plain step (18.47 ms), with the profiled one (36.24 ms) beside it
    assert f"kernels in {plain:.2f} ms without the profiler" in texts["01 phases"]
    assert "plain generate" in texts["00 headline"] and "profiled generate call" in texts["07 headline"]
