"""One story across the chapters (issue 28): the numbers every chapter reads about a kernel agree, shares of one
whole sum to 100 %, and the headline's decode step is the plain (unprofiled) one, in the rendered book too."""
import pandas as pd
import pytest

from conftest import RUN
from kernelbook.analyze import modules as M
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
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
    html = (rendered_book("en") / "07_summary.html").read_text()
    assert f"a plain eager decode step takes {plain:.1f} ms" in html
    ph = T.phase_summary(run.timeline, run.phases).set_index("phase").loc["decode"]
    profiled = ph.wall_ms / ph.steps  # the step under the profiler, 36 ms against the plain 18.5
    assert abs(profiled - plain) > 1 and f"decode step takes {profiled:.1f} ms" not in html


def test_chapter_07s_what_if_line_carries_the_cross_device_error(rendered_book):
    html = (rendered_book("en") / "07_summary.html").read_text()
    assert "across GPUs (h100-sxm ↔ h200, each fitted on one and predicting the other) device time within" in html


def test_a_measured_gain_across_hosts_says_so_in_the_headline(rendered_book):
    """The graph variant ran on another host than the re-captured bundled run (host control: vision encode and
    prefill 1.29x and 1.51x the wall time for the same GPU work): the headline's measured gain says so."""
    html = (rendered_book("en") / "07_summary.html").read_text()
    assert "faster decode (predicted" in html and "on another host than its baseline" in html
