"""The first page (issue 43 point 1): the index and report.md open with at most five findings of the run, chosen by the
analysis (largest effect first), each one sentence of at most 30 words with its number, its basis and a link that lands
on its evidence; then each phase's bound and the top three levers on one scale."""
import re
import urllib.parse
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _findings(index: str) -> list[tuple[str, str]]:
    """(sentence, href) per finding of the index, the sentence as text."""
    block = re.search(r'<ol class="findings">(.*?)</ol>', index, re.S).group(1)
    out = []
    for li in re.findall(r"<li>(.*?)</li>", block, re.S):
        href = re.search(r'<a href="([^"]+)"', li).group(1)
        text = re.sub(r"<[^>]+>", "", li.split('<span class="basis">')[0])
        out.append((" ".join(text.split()), href))
    return out


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_first_page_opens_with_findings_that_link_to_their_evidence(rendered_book, language):
    import html

    report = rendered_book(language)
    index = (report / "index.html").read_text()
    found = _findings(index)
    assert 1 <= len(found) <= 5
    assert index.index('class="findings"') < index.index("07_summary.html\">")  # before the chapters' table
    for sentence, href in found:
        sentence = html.unescape(sentence)
        if language == "en":
            assert len(sentence.split()) <= 30, sentence
        else:  # by characters: a zh sentence of 30 English words' worth
            assert len(sentence) <= 90, sentence
        assert re.search(r"\d", sentence), sentence  # each states its number
        page, frag = html.unescape(href).split("#")
        ids = set(re.findall(r'id="([^"]+)"', (report / page).read_text()))
        assert frag in ids or urllib.parse.unquote(frag) in ids, (href, language)
    # the bound of each phase and the top three levers follow
    assert index.count("<h3>") >= 2
    # report.md opens with the same findings, after its title line
    md = (report / "report.md").read_text().splitlines()
    head = "## Findings" if language == "en" else "## 发现"
    assert md[2] == head and all(line.startswith(f"{i}. ") for i, line in enumerate(md[4:4 + len(found)], 1))


def test_findings_are_the_analysis_largest_effects_first():
    """On the bundled pair (eager run and its CUDA-graph twin): every finding the run supports, ranked by the share of
    time it is about; the page takes the first five. The graphs finding's gain is the two plain steps' ratio."""
    from kernelbook import notebook as kb
    from kernelbook.analyze import findings as FD
    from kernelbook.analyze import levers as L
    from kernelbook.analyze import summary as S
    from kernelbook.analyze import whatif as W
    from kernelbook.load.twins import twins

    given = kb.open_run(str(REPO / "data" / "runs" / "h100-deepseek-ocr-2"))
    tw = twins(given, open_run=kb.open_run)
    r = tw.eager
    tr, _, roofs, _ = W.for_run(r)
    variants = [(tw.deployed, W.for_run(tw.deployed)[0])]
    limit = S.decode_limit(tr, r, roofs)
    deploy = S.deployed(r, limit, variants)
    tr_dep = variants[0][1]
    lev = L.levers(tw.deployed, tw.eager, tr_dep, W.validation(tr_dep))
    found = FD.findings(r, tw.deployed, limit, deploy, lev)
    effects = [f.effect for f in found]
    assert effects == sorted(effects, reverse=True) and all(0 < e < 1 for e in effects)
    keys = {f.key for f in found}
    assert {"decode_share", "limit", "host", "kernel_class", "graphs", "lever_software", "lever_hardware"} <= keys
    g = next(f for f in found if f.key == "graphs")
    assert g.values["gain"] == pytest.approx(g.values["eager_ms"] / g.values["deployed_ms"])
    assert g.effect == pytest.approx(1 - g.values["deployed_ms"] / g.values["eager_ms"])
    # the eager step is the host's and moves with it: the range over the eager run's plain generates goes beside it
    samples = tw.eager.info.timeline_info.plain_phases["decode"].samples_ms_per_step
    lo, hi = g.values["range"]
    assert len(samples) == 3 and (lo, hi) == pytest.approx((min(samples) / g.values["deployed_ms"],
                                                            max(samples) / g.values["deployed_ms"]))
    assert lo <= g.values["gain"] <= hi and hi > lo
    from kernelbook.narrate import findings as FN
    assert f"({lo:.1f}–{hi:.1f}× across the eager run's timing trials)" in FN.sentence(g)
    # each finding about the run as deployed links to a section that shows its figure: chapter 01 shows the eager run
    # (GEMV 33.9 % of decode kernel time there, 53 % as deployed), so they land on chapter 07's sections of the pair
    by_key = {f.key: f for f in found}
    assert all(f.chapter == "07_summary" for f in found)
    assert by_key["decode_share"].section == by_key["kernel_class"].section == FD.DEPLOYED_SECTION
    assert by_key["limit"].section == by_key["host"].section == by_key["graphs"].section == "Eager against deployed"
    cats = FD.decode_categories(tw.deployed).set_index("category")
    assert cats.loc["GEMV", "decode_kernel_pct"] == pytest.approx(by_key["kernel_class"].values["pct"])
    assert cats.decode_kernel_pct.sum() == pytest.approx(100)
    from kernelbook.narrate import summary as NS
    prose = NS.deployed_decode_prose(tw.deployed)
    assert f"decode takes {by_key['decode_share'].values['pct']:.0f} % of the plain generate" in prose
    assert all(f.run_id == tw.deployed.run_id for f in found)  # conclusions about the run as deployed
    share = next(f for f in found if f.key == "decode_share")  # of the whole plain generate, not the phases' sum
    plain = tw.deployed.info.timeline_info
    decode_ms = plain.plain_phases["decode"].ms_per_step * plain.plain_phases["decode"].steps
    assert share.values["pct"] == pytest.approx(100 * decode_ms / (1e3 * plain.plain_generate.median_s))
    assert share.values["pct"] < 100 * decode_ms / sum(v.ms_per_step * v.steps for v in plain.plain_phases.values())
    hw = next(f for f in found if f.key == "lever_hardware")
    assert hw.values["lever"] != "batch"  # how the step is served, not a change to it
    assert FD.first(found) == found[:5]


def test_the_findings_analysis_writes_no_sentence():
    """Numbers only in analyze.findings: its sentences live in narrate.findings (issue 43 point 2)."""
    src = (REPO / "lib" / "kernelbook" / "analyze" / "findings.py").read_text()
    assert not re.search(r"\b(tr|N_)\(|import display|from \.\.display|i18n", src)


def test_the_graph_run_book_opens_with_the_same_findings(tmp_path, rendered_book):
    """Given the run as deployed (the CUDA-graph variant) instead of the eager run, the book reads the same pair, so its
    first page holds the same findings (issue 43: the bundled book and the graph-run book)."""
    from kernelbook import params as P
    from kernelbook.runner import render_book

    out = render_book(P.validate({"run_dir": str(REPO / "data" / "runs" / "h100-variant-static-graphs")},
                                 consumer="book"), tmp_path / "report", chapters=["07_summary"], log=lambda *_: None)
    graph = _findings((out / "index.html").read_text())
    bundled = _findings((rendered_book("en") / "index.html").read_text())
    assert graph == bundled and len(graph) == 5

