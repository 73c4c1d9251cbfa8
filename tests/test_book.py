"""Every chapter executed headlessly by papermill on the bundled run; HTML checked in a real browser."""
import html as htmllib
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from conftest import FIGURES, REPO, RUN, earlier_report
from kernelbook import params as P
from kernelbook.load.run import load_run
from kernelbook.runner import BookError, list_chapters, render_book

# a committed run whose ncu stage profiled decode and prefill only (manifest ncu.phases), 20 kernels each
LACKS_VISION = REPO / "data" / "runs" / "h100-long-generation-2048"
TITLES = {"00_setup": "00 · Setup", "01_timeline": "01 · Timeline", "02_ncu": "02 · Nsight Compute",
          "03_histograms": "03 · Histograms", "04_roofline": "04 · Roofline", "05_classification": "05 · Classification",
          "06_npu": "06 · NPU what-if", "07_summary": "07 · Summary"}


@pytest.fixture(scope="module")
def report(rendered_book):
    return rendered_book("en")


def test_index_links_every_chapter_with_a_summary(report):
    html = (report / "index.html").read_text()
    for nb in list_chapters():
        assert f'href="{nb.stem}.html"' in html
    timings = json.loads((report / "timings.json").read_text())
    assert all(t["ok"] and t["summary"] for t in timings)
    assert not [t["stem"] for t in timings if "*" in t["summary"]]  # plain text, no markdown left over


@pytest.mark.parametrize("stem", list(TITLES))
def test_chapter_html_has_title_and_figures(report, stem):
    """The page holds its title and one plotly call per figure, with the local plotly.js only; that
    each figure draws in a browser is tests/test_browser.py's check."""
    html = (report / f"{stem}.html").read_text()
    assert TITLES[stem] in html and '<html lang="en"' in html
    assert "cdn.plot.ly" not in html and "plotly.min.js" in html  # offline: the local copy only
    assert html.count("Plotly.newPlot") == FIGURES[stem]
    assert html.count('"showSendToCloud": false') == FIGURES[stem] and '"showSendToCloud": true' not in html
    assert "<th>...</th>" not in html and "<td>...</td>" not in html  # no table cut by pandas
    assert "Traceback" not in html


def test_failed_chapter_keeps_earlier_chapters_and_previous_report(report, tmp_path):
    # a run whose ncu kernel table lacks its `flops` column: past the door (a damaged run stops before any chapter,
    # see test_damaged_runs; a partial capture's table has no derived columns), but chapter 04 cannot draw its points
    broken = tmp_path / "runs" / "broken"
    shutil.copytree(RUN, broken, ignore=shutil.ignore_patterns("raw"))
    _drop_flops(broken)
    out = tmp_path / "rep"
    shutil.copytree(report, out)
    before = (out / "04_roofline.html").read_text()
    with pytest.raises(BookError, match="chapter 04_roofline failed"):
        render_book(P.validate({"run_dir": str(broken)}, consumer="book"), out, log=lambda *_: None)
    assert (out / "04_roofline.html").read_text() == before  # previous report untouched
    failed = tmp_path / "rep.failed"
    assert (failed / "00_setup.html").exists() and (failed / "03_histograms.html").exists()
    html = (failed / "04_roofline.html").read_text()
    assert "This chapter stopped on an error:" in html and "object has no attribute" in html  # the note


def test_rendering_one_chapter_keeps_the_others(report, tmp_path):
    out = tmp_path / "rep"
    shutil.copytree(report, out)
    before = (out / "05_classification.html").read_text()
    render_book(P.validate({}, consumer="book"), out, chapters=["03_histograms"], log=lambda *_: None)
    stems = {p.stem for p in out.glob("*.html")} - {"index", "glossary"}
    assert stems == {nb.stem for nb in list_chapters(None)}  # nothing dropped
    assert (out / "05_classification.html").read_text() == before and (out / "report.md").exists()
    index = (out / "index.html").read_text()
    assert index.count("(earlier render)") == len(stems) - 1 and all(f'href="{s}.html"' in index for s in stems)


def _drop_flops(run):
    import pandas as pd

    f = run / "ncu" / "kernels.parquet"
    pd.read_parquet(f).drop(columns="flops").to_parquet(f, index=False)


def test_cli_book_exit_code_for_failed_chapter(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(RUN, broken, ignore=shutil.ignore_patterns("raw"))
    _drop_flops(broken)
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--run", str(broken), "--out",
                           str(tmp_path / "out"), "--chapters", "04_roofline"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 1 and "chapter 04_roofline failed" in proc.stderr


def test_report_md_holds_the_profiler_output_contract(report):
    text = (report / "report.md").read_text()
    assert text.startswith("Profile: deepseek-ocr-2 [h100-deepseek-ocr-2]")
    assert "| Stage | Duration (us) | TC% | DRAM% | Occ% | Bottleneck | Key Issue |" in text
    tops = [ln for ln in text.splitlines() if ln.startswith("- ") and "— est. " in ln and "— trigger: " in ln]
    assert len(tops) == 9  # vision encode, prefill and decode are profiled: the top 3 of each
    # one section per profiled stage, in the Stages table's order (the run's ncu stage profiled all three)
    stages = [ln.split("|")[1].strip() for ln in text.splitlines()
              if ln.startswith(("| decode", "| prefill", "| vision"))]
    sections = [ln[3:] for ln in text.splitlines() if ln[3:] in stages and ln.startswith("## ")]
    assert stages == ["vision\\_encode", "prefill", "decode"] and sections == stages


@pytest.mark.parametrize("stem", ["03_histograms", "04_roofline", "05_classification"])
def test_cache_note_gives_the_in_loop_reads_the_run_measured(report, stem):
    """The bundled run measured the loop (ncu's range pass): chapters 03 and 04 had said the producer → consumer
    kernels' in-loop DRAM traffic was 'not measured by this capture' (they gave the note no fidelity table), while
    chapter 05 gave the figures. Every chapter gives the measured expert GEMM's reads and names what was not
    measured."""
    k = load_run(RUN).ncu_kernels().set_index("kernel_id")
    gemm = k[k.name.str.contains("nvjet_sm90_tst_128x8") & (k.phase == "decode")].iloc[0]
    html = (report / f"{stem}.html").read_text()
    assert "not measured by this capture" not in html and "as this run measured" in html
    assert (f"{gemm.name} {gemm.dram_read_bytes / 1e6:.2f} MB flushed, {gemm.dram_read_bytes_inloop / 1e6:.2f} MB in the "
            "loop") in html
    assert "the range pass measures decode kernels whose op call launches them alone" in html


def test_kernel_explorer_degrades_to_static_cards_in_html(report):
    html = (report / "05_classification.html").read_text()
    cards = re.findall(r'<details id="kernel-(\w\d{3})"><summary><b>\1 ', html)
    # one card per profiled kernel of every phase (20 each of decode, prefill and vision encode), the chapter's
    # phase (decode) first, each with its anchor
    assert len(cards) == 60 == len(set(cards)) and cards[:20] == [f"d{i:03d}" for i in range(20)]
    assert sorted(cards[20:]) == [f"{ph}{i:03d}" for ph in "pv" for i in range(20)]


def test_cli_book_prints_only_its_progress(tmp_path):
    """The CLI's output is one line per chapter and the report path: kernels run over IPC sockets, so
    ipykernel has no unencrypted-TCP warning to cut into the progress lines."""
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--out", str(tmp_path / "out"),
                           "--chapters", "00_setup"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines[0].startswith("[1/1] 00_setup ... ok (") and lines[1].startswith("report: ") and len(lines) == 2, lines


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    import os

    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


def test_ctrl_c_ends_the_running_chapters_at_once_and_keeps_the_previous_report(tmp_path):
    """Ctrl-C while reading chapters run side by side: the book stops within seconds (exit 130, one line), every
    chapter kernel it started is gone, no staging folder is left, and the previous report is untouched."""
    import os
    import signal
    import time

    out = earlier_report(tmp_path / "out", "the previous report")
    proc = subprocess.Popen([sys.executable, "-m", "kernelbook", "book", "--out", str(out), "--chapters",
                             "06_npu,07_summary,01_timeline"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    kernels = []
    while time.time() < deadline and len(kernels) < 2:  # at least two chapters' kernels started
        time.sleep(0.5)
        kernels = [c for c in _children(proc.pid) if "ipykernel" in open(f"/proc/{c}/cmdline").read()]
    assert len(kernels) >= 2, "two chapter kernels never ran side by side"
    time.sleep(2)  # inside the chapters' cells
    t = time.time()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends (the kernels run in sessions of their own)
    stdout, stderr = proc.communicate(timeout=60)
    assert time.time() - t < 20, f"took {time.time() - t:.0f} s to stop"
    assert proc.returncode == 130, stderr
    assert "book stopped by the user" in stderr and "Traceback" not in stderr, stderr
    time.sleep(1)
    assert not [k for k in kernels if os.path.exists(f"/proc/{k}")], "chapter kernels left running"
    assert (out / "index.html").read_text() == "the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "a staging folder was left"


def test_chapter_kernels_are_shut_down_without_an_interrupt(tmp_path):
    """jupyter_client sends SIGINT before every shutdown; a kernel caught mid-reply then logs
    "KeyboardInterrupt caught in kernel" into the runner's output (seen once in CI, timing-dependent).
    The chapters' kernel manager sends the kernel no signal from start to shutdown."""
    import asyncio

    from kernelbook.runner import _kernel_manager

    sent = []

    class Recording(_kernel_manager(str(tmp_path))):
        async def _async_signal_kernel(self, signum):
            sent.append(signum)
            await super()._async_signal_kernel(signum)

    async def session():
        km = Recording(kernel_name="python3")
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        await kc.execute_interactive("x = 1", timeout=60)
        kc.stop_channels()
        await km.shutdown_kernel()
        return km.has_kernel

    assert asyncio.run(session()) is False  # it did stop
    assert sent == []


class _Tables(HTMLParser):
    """Every <table> of a page: its class and its body rows as (tag, text) cells."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell, self._head = [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"class": dict(attrs).get("class") or "", "rows": []})
        elif tag in ("thead", "tbody"):
            self._head = tag == "thead"
        elif tag == "tr" and self.tables and not self._head:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables and not self._head:
            self._cell = [tag, ""]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell:
            self.tables[-1]["rows"][-1].append(tuple(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell:
            self._cell[1] += data


NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


@pytest.mark.parametrize("stem", list(TITLES))
def test_tables_are_shown_for_a_reader(report, stem):
    """Every table went through the display layer: no row index, no raw number of 10^6 or more (nor
    1.293e+05 notation), no bare NaN/None."""
    p = _Tables()
    p.feed((report / f"{stem}.html").read_text())
    problems = []
    for i, t in enumerate(p.tables):
        if "kb" not in t["class"].split():
            problems.append(f"table {i} not through the display layer (class {t['class']!r})")
        for row in t["rows"]:
            if row and row[0][0] == "th":
                problems.append(f"table {i} has a row index")
            for _, text in row:
                text = text.strip()
                if text in ("NaN", "nan", "None", "<NA>", "NaT", "inf"):
                    problems.append(f"table {i}: bare {text}")
                if re.search(r"\d[eE][-+]?\d", text):
                    problems.append(f"table {i}: exponent notation {text!r}")
                big = [m for m in NUMBER.findall(text) if abs(float(m.replace(",", ""))) >= 1e6]
                if big:
                    problems.append(f"table {i}: unformatted {big[0]} in {text[:60]!r}")
    assert p.tables or stem == "03_histograms"
    assert not problems, sorted(set(problems))[:10]


def test_appendix_holds_each_full_kernel_name(report, run):
    """Chapter 01's appendix lists the top decode kernels (top_n, 15 by default) by their whole names,
    as monospace code cells, for ncu --kernel-name filters and source searches."""
    from kernelbook.analyze.timeline import top_kernels

    page = (report / "01_timeline.html").read_text()
    appendix = page[page.index("Appendix: friendly names"):]
    codes = {htmllib.unescape(c) for c in re.findall(r"<code>(.*?)</code>", appendix, flags=re.S)}
    names = top_kernels(run.timeline, "decode", P.SCHEMA["top_n"].default).name.tolist()
    assert len(names) == 15 and not [n for n in names if n not in codes]
    assert "…" not in appendix.split("</table>")[0]


def test_partial_run_renders_what_it_holds_and_says_what_is_missing(partial_run, tmp_path):
    """A capture whose ncu report could not be read: the book renders, the ncu chapters show the
    manifest's reason instead of a traceback, chapter 06 says it runs without counters, the index
    shows the run's status."""
    out = render_book(P.validate({"run_dir": str(partial_run)}, consumer="book"), tmp_path / "rep", log=lambda *_: None)
    reason = json.loads((partial_run / "manifest.json").read_text())["reason"]
    assert reason.startswith("ncu: NcuError: decode: reading decode.ncu-rep failed (exit 1)")
    timings = {t["stem"]: t for t in json.loads((out / "timings.json").read_text())}
    assert all(t["ok"] for t in timings.values())
    stopped = {s for s, t in timings.items() if "stopped" in t}
    assert stopped == {"02_ncu", "03_histograms", "04_roofline", "05_classification"}
    for stem in stopped:
        html = (out / f"{stem}.html").read_text()
        assert "No Nsight Compute counters in h100-partial" in html and "holds no profiled kernels" in html
        assert "Traceback" not in html and "An Exception was encountered" not in html
        assert timings[stem]["summary"].startswith("Not shown: No Nsight Compute counters")
    assert "renders without them" in (out / "06_npu.html").read_text()
    assert (out / "01_timeline.html").read_text().count("Plotly.newPlot") == FIGURES["01_timeline"]
    index = (out / "index.html").read_text()
    assert "<b>partial</b>" in index and "reading decode.ncu-rep failed" in index
    assert not (out / "report.md").exists()  # the output contract needs profiled kernels


@pytest.mark.parametrize("yaml_text, says", [
    # the run path travels absolute from the entry point (issue 31), so the message names it so; the bundled run
    # profiles vision_encode too, so this asks a committed run whose ncu stage profiled decode and prefill only
    pytest.param(f"phase: vision_encode\nrun_dir: {LACKS_VISION.relative_to(REPO)}",
                 [f"phase: {LACKS_VISION} has no ncu counters for 'vision_encode'",
                  "it profiled decode (20 kernels) and prefill (20 kernels)",
                  "ncu_phases: [vision_encode, prefill, decode]"], id="phase: vision_encode"),
    ("kernel: d999", ["kernel: 'd999' is not a profiled decode kernel", "it has 20: d000 … d019", "ncu_top_n"]),
])
def test_cli_book_exit_2_for_what_the_run_does_not_hold(tmp_path, yaml_text, says):
    (tmp_path / "p.yaml").write_text(yaml_text)
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(tmp_path / "p.yaml"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert all(s in proc.stderr for s in says), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == "" and not (tmp_path / "out").exists()


def test_help_lists_exactly_the_commands_that_exist():
    out = subprocess.run([sys.executable, "-m", "kernelbook", "--help"], capture_output=True, text=True,
                         cwd=REPO).stdout
    assert "{book,capture,study,diff,lab}" in out
    assert "SUPPRESS" not in out and "_worker" not in out


def test_capture_always_on_a_cpu_machine_stops_at_once_with_exit_2(tmp_path):
    """The capture chapters cannot capture without a GPU: `capture: always` stops before any chapter
    runs, with the reason, and writes nothing (no run directory, no report)."""
    (tmp_path / "p.yaml").write_text("capture: always\n")
    new = tmp_path / "runs" / "new-run"
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(tmp_path / "p.yaml"),
                           "--run", str(new), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=REPO, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "cannot capture" in proc.stderr and "no GPU" in proc.stderr and "Traceback" not in proc.stderr
    assert not new.exists() and not (tmp_path / "out").exists()


def test_capture_auto_on_a_cpu_machine_reads_and_says_so(report):
    """The default `capture: auto` renders the bundled run here, and each capture chapter says why it read."""
    for stem, part in (("00_setup", "setup"), ("01_timeline", "timeline"), ("02_ncu", "ncu")):
        page = (report / f"{stem}.html").read_text()
        assert f"capture: auto — the run already holds its {part} part, so the chapter reads it" in page
    steps = (report / "00_setup.html").read_text()
    # the bundled run was captured by the capture command (bench/gpu_capture.sh): each step says so (a run the
    # book captured names the chapter that took each step: test_capture_steps_name_the_chapter_that_took_them)
    assert "Nsight Compute capture" in steps and "timeline capture" in steps
    assert steps.count("python -m kernelbook capture") >= 3


def test_diff_compares_two_runs_and_refuses_a_non_run(partial_run, tmp_path):
    """`diff` on the bundled run and its partial twin (same timeline, no ncu counters): every phase at
    ratio 1.00, no kernel family only on one side, and each side's ncu coverage; a folder that is no run
    is exit 2 with the reason."""
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "diff", str(RUN), str(partial_run)],
                          capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ncu decode 20/20, prefill 20/20" in out and "ncu decode 0/20" in out
    rows = [ln for ln in out.splitlines() if ln.startswith(("  vision_encode ", "  prefill ", "  decode "))]
    assert len(rows) == 3 and all(ln.count(" 1.00 ") == 2 for ln in rows), rows
    assert out.count("0 only in B, 0 only in A") == 3
    bad = subprocess.run([sys.executable, "-m", "kernelbook", "diff", str(RUN), str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "has no manifest.json" in bad.stderr and "Traceback" not in bad.stderr


def test_capture_steps_name_the_chapter_that_took_them():
    """A run the book captured (capture.chapters records `produced_by`) names the chapter of each step; the others
    name the capture command."""
    from kernelbook.analyze import provenance as V

    m = {"timings_s": {"timeline": 63.0, "ncu": 98.0},
         "produced_by": {"timeline": {"chapter": "01_timeline"}, "ncu": {"chapter": "02_ncu"}}}
    t = V.steps(m)
    assert list(t.by) == ["01_timeline", "02_ncu", ""] and t.wall_s.iloc[-1] == 161.0
    assert list(V.steps({"timings_s": {"ncu": 1.0}}).by)[:1] == ["python -m kernelbook capture"]
