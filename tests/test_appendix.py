"""Chapter 01's appendix names every kernel any chapter shows (issue 43): a reader who meets a friendly name
('d004 nvjet GEMM (mixed, 384x8 tile)' or 'Direct Copy (BF16)') in any chapter's table finds its full kernel
name there, phase by phase, each phase under its own fold."""
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from kernelbook import params as P
from kernelbook.analyze.timeline import shown_kernels

KID = re.compile(r"^([vpd]\d{3}) (.+)$")
# chapters whose kernel tables show another run's kernels: 08 reads the serving study's runs
OTHER_RUNS = {"08_serving"}


def _kernel(text: str) -> tuple[str | None, str]:
    """A kernel cell's (kernel id or None, friendly name)."""
    text = " ".join(text.split())
    m = KID.match(text)
    return (m.group(1), m.group(2)) if m else (None, text)


def shown_names(report: Path) -> set[tuple[str, str | None, str]]:
    """(chapter, kernel id or None, friendly name) of every kernel cell of the book's tables outside the appendix:
    each column headed 'Kernel' of a table.kb, and chapter 05's kernel cards (the appendix's own rows count too: they
    are in it by definition)."""
    out = set()
    for page in sorted(report.glob("[0-9][0-9]_*.html")):
        if page.stem in OTHER_RUNS:
            continue
        soup = BeautifulSoup(page.read_text(), "html.parser")
        for t in soup.select("table.kb"):
            heads = [th.get_text(strip=True) for th in t.select("thead th")]
            for i, h in enumerate(heads):
                if h != "Kernel":
                    continue
                for tr in t.select("tbody tr"):
                    tds = tr.find_all("td", recursive=False)
                    if i < len(tds) and tds[i].get_text(strip=True) not in ("", "—"):
                        out.add((page.stem, *_kernel(tds[i].get_text())))
        for card in soup.select("details[id^=kernel-] > summary > b"):
            out.add((page.stem, *_kernel(card.get_text())))
    return out


def _appendix_head(report: Path):
    soup = BeautifulSoup((report / "01_timeline.html").read_text(), "html.parser")
    return next(h for h in soup.find_all(["h1", "h2"]) if "Appendix" in h.get_text() or "附录" in h.get_text())


def appendix(report: Path) -> dict[str, list[dict]]:
    """Chapter 01's appendix: per fold (its caption), the rows: id, friendly name, full name."""
    out = {}
    for t in _appendix_head(report).find_all_next("table", class_="kb"):
        fold = t.find_parent("details")
        caption = fold.summary.get_text(" ", strip=True) if fold is not None else "(no fold)"
        heads = [th.get_text(strip=True) for th in t.select("thead th")]
        rows = []
        for tr in t.select("tbody tr"):
            tds = tr.find_all("td", recursive=False)
            code = tr.find("code")
            kid, name = _kernel(tds[0].get_text())
            rows.append({"id": kid, "friendly": name, "full": code.get_text() if code else "",
                         "link": tds[0].select_one("a.kb-k") is not None, "heads": heads})
        out[caption] = rows
    return out


def missing_from_appendix(report: Path) -> list:
    """Kernels some chapter shows that chapter 01's appendix does not list with a full name."""
    rows = [r for rs in appendix(report).values() for r in rs if r["full"].strip()]
    ids = {(r["id"], r["friendly"]) for r in rows if r["id"]}
    friendly = {r["friendly"] for r in rows}
    return sorted((c, k, f) for c, k, f in shown_names(report)
                  if (k is not None and (k, f) not in ids) or (k is None and f not in friendly))


@pytest.fixture(scope="module")
def report(rendered_book):
    return rendered_book("en")


def test_every_kernel_a_chapter_shows_is_in_the_appendix(report):
    shown = shown_names(report)
    chapters = {c for c, _, _ in shown}
    # the kernel tables of chapter 01 (top kernels), 02 and 04 (profiled kernels) and 05's cards are all read
    assert {"01_timeline", "02_ncu", "04_roofline", "05_classification"} <= chapters, chapters
    assert {k[0] for _, k, _ in shown if k} == {"v", "p", "d"}  # profiled kernels of every phase
    assert not missing_from_appendix(report), missing_from_appendix(report)[:10]


def test_appendix_lists_each_phase_in_its_fold(report, run):
    """One fold per phase, decode open and first (as chapter 01's top tables), the others closed; each lists its
    top-n and every kernel selected for ncu, with the kernel id where ncu selected it, largest time first."""
    folds = _appendix_head(report).find_all_next("details")
    assert [f.has_attr("open") for f in folds] == [True, False, False]
    expected = shown_kernels(run.timeline, run.ncu_kernels(), P.SCHEMA["top_n"].default)
    tables = list(appendix(report).items())
    assert [c.split(":")[0] for c, _ in tables] == ["Decode", "Prefill", "Vision encode"]
    kernels = run.ncu_kernels()
    for (caption, rows), (phase, want) in zip(tables, expected.groupby("phase", sort=False)):
        assert rows[0]["heads"][:2] == ["Kernel", "#"] and "Full kernel name" in rows[0]["heads"]
        assert len(rows) == len(want) > P.SCHEMA["top_n"].default, (caption, len(rows))
        assert f"{len(rows)} kernels" in caption
        assert {r["id"] for r in rows if r["id"]} == set(kernels.kernel_id[kernels.phase == phase])
        assert [r["full"] for r in rows] == list(want.name)
        assert all(r["link"] for r in rows if r["id"])  # the id opens its card in chapter 05, as elsewhere


def test_appendix_renders_in_zh(rendered_book, report):
    en = appendix(report)
    zh = appendix(rendered_book("zh"))
    assert [len(r) for r in zh.values()] == [len(r) for r in en.values()]
    assert [[r["full"] for r in rs] for rs in zh.values()] == [[r["full"] for r in rs] for rs in en.values()]
    assert all("个内核" in c and "kernels" not in c for c in zh)
    page = (rendered_book("zh") / "01_timeline.html").read_text()
    assert "附录：友好名称 → 完整内核名称" in page and "Every kernel the book names" not in page
