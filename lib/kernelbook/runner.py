"""The book runner: execute each chapter with papermill, convert to standalone HTML, write an index.

Rendering goes to a staging folder beside the report; the previous report is replaced only when every
chapter succeeded. A failed chapter keeps its executed notebook and HTML (error visible) in the
staging folder, which is renamed `<out>.failed` and named in the error. plotly.js ships once with the
report (`plotly.min.js` beside the chapters), so the HTML works offline: each figure output's plotly JSON
(see `notebook`) is drawn in the HTML by that local copy, with plotly's network-bound controls left out.

Each chapter runs under a watchdog (`watch`): past its time limit (`chapter_timeout_s`), or when its
kernel stops answering, it is ended and run once more, then reported failed with the cell it was
running; the previous report is kept. The capture chapters' progress lines are printed under the
chapter's line as they happen.

The capture chapters run under the profiling lock. When more than one captures, they start side by side
and each part waits for the part before it (capture.chapters, contract.session `pipeline`), so a chapter's kernel start and
its rendering overlap the next part's capture, while the timeline's timed passes wait until chapter 00 has
ended. The chapters that only read the run start once the last part is in, `render_jobs` at a time (one per
CPU core by default, each in its own kernel, longest first), each reported on its own line as it finishes.
A failed one stops the book as before: the index and the error name the first failed chapter in book order.

The narrative language (`language`: en | zh) reaches every chapter as a parameter (its kernel's `tr`);
the runner translates the chapters' markdown cells through the same catalog before executing them,
marks the HTML with its `lang`, and writes the index and report.md in it (`i18n`). The book's one glossary
(`glossary`) is written beside the index as glossary.html, in the same language; the index and the top of every
chapter link to it (the link is the runner's, not a markdown cell's: a cell's text is a catalog key).

Parameters are checked against the run before any chapter runs (`checks.parameter_problems`: exit 2,
nothing written). A chapter the run cannot serve (no ncu counters in a partial run) stops with a
note (`notebook.ChapterStop`); the book keeps it, its HTML shows the note, and the index says so.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import escape, outdir
from . import params as P
from .i18n import HTML_LANG, in_language, language, translate_markdown, tr
from .capture.chapters import SKIPPED
from .contract.config import BookConfig
from .contract.layout import RunLayout
from .contract.manifest import read_manifest
from .contract import quantity
from .contract.session import BookSession
from .clocks import clock_lock
from .watch import execute_chapter, stop_all

NOTEBOOKS = P.REPO / "notebooks"
PLOTLY_JS = "plotly.min.js"


_KERNEL_NUMBERS = itertools.count()


def _kernel_manager(folder: str):
    """The kernel manager for chapters.

    - On POSIX it talks to the kernel over IPC sockets in `folder` (private, temporary) instead of TCP
      on localhost, so there is no port another user could connect to and no ipykernel warning about
      unencrypted TCP cutting into the progress lines. ZeroMQ has no IPC transport on Windows, where
      TCP stays.
    - It does not interrupt a kernel it is shutting down. jupyter_client sends SIGINT before every
      shutdown request; a chapter's kernel is idle by then (or stopped by its own error), and the
      signal only made ipykernel log "KeyboardInterrupt caught in kernel" into the runner's output,
      depending on timing. The shutdown request and, past the wait time, the kill still stop it. This overrides
      jupyter_client's private `_async_interrupt_kernel` (what its shutdown awaits); test_book's
      `test_chapter_kernels_are_shut_down_without_an_interrupt` fails when jupyter_client changes it."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import CaselessStrEnum

    class ChapterKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    if os.name != "posix":
        return ChapterKernelManager

    class IPCKernelManager(ChapterKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

        def _ip_default(self):
            # a name per kernel: chapters start their kernels at once, and IPC "ports" are file suffixes that
            # two kernels starting together under one name could both take
            return os.path.join(folder, f"kernel-{next(_KERNEL_NUMBERS)}")

    return IPCKernelManager


class BookError(RuntimeError):
    def __init__(self, msg: str, exit_code: int = 1):
        super().__init__(msg)
        self.exit_code = exit_code


def list_chapters(only: list[str] | None = None, folder: Path = NOTEBOOKS) -> list[Path]:
    found = sorted(Path(folder).glob("[0-9][0-9]_*.py"))
    if only:
        unknown = [c for c in only if not any(f.stem == c for f in found)]
        if unknown:
            raise BookError(f"unknown chapter(s) {unknown}; chapters: {[f.stem for f in found]}", 2)
        found = [f for f in found if f.stem in only]
    return found


def notebook_parameters(nb_path: Path) -> dict:
    """Parameter names → inferred type of a chapter (papermill's own inspection). The notebook papermill
    inspects is written into a private temporary folder of this call: two renders at once never share it,
    and no path planted in a shared folder is followed."""
    import papermill

    with tempfile.TemporaryDirectory(prefix="kb-inspect-") as folder:
        ipynb = to_ipynb(nb_path, Path(folder) / f"{nb_path.stem}.ipynb")
        return {name: p["inferred_type_name"] for name, p in papermill.inspect_notebook(str(ipynb)).items()}


def to_ipynb(py_path: Path, out: Path, language: str = "en") -> Path:
    """The chapter as a notebook, its markdown cells (headings and prose) in `language`."""
    import jupytext

    nb = jupytext.read(py_path)  # the chapter names its kernel (kernelspec in the .py header)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, language)
    jupytext.write(nb, out, fmt="ipynb")
    return out


def _html(executed: Path, out_html: Path, language: str = "en") -> None:
    import nbformat
    from nbconvert import HTMLExporter

    raw = executed.read_text(encoding="utf-8")
    nb = nbformat.reads(raw, as_version=4)
    _static_widgets(nb)
    _stop_notes(nb)
    _unmark_figures(nb)
    _plotly_html(nb)
    exp = getattr(_EXPORTERS, "html", None)
    if exp is None:  # one per rendering thread: its templates compile once (0.14 s), not once per chapter
        exp = _EXPORTERS.html = HTMLExporter(template_name="lab")
        # the template's require.js and MathJax come from a CDN: the shared HTML is offline and uses neither
        # (plotly.js ships beside it; the chapters write no TeX), so their script tags are dropped below
        exp.require_js_url = exp.mathjax_url = OFFLINE_DROP
        exp.exclude_input = True
        exp.exclude_input_prompt = True
        exp.exclude_output_prompt = True
    body, _ = exp.from_notebook_node(nb)
    body = quantity.spans(body)  # a quantity the chapter printed: a span the one-value test reads
    body = re.sub(rf'<script src="{re.escape(OFFLINE_DROP)}">\s*</script>', "", body)
    # plotly.js is UMD: hide AMD `define` while it loads so it sets window.Plotly.
    loader = (f'<script>window.__kbdef=window.define;window.define=undefined;</script>'
              f'<script src="{PLOTLY_JS}"></script><script>window.define=window.__kbdef;</script>')
    body = body.replace("<head>", "<head>\n" + loader, 1)
    body = _with_glossary_link(body, language)
    body = re.sub(r"<html(?![^>]*\blang=)", f'<html lang="{HTML_LANG[language]}"', body, count=1)
    body = re.sub(r'<html([^>]*)\blang="[^"]*"', rf'<html\1lang="{HTML_LANG[language]}"', body, count=1)
    out_html.write_text(body, encoding="utf-8")
    if quantity.OPEN in raw:  # the notebook the report keeps shows the figures as printed, without their marks
        nbformat.write(quantity.plain_tree(nbformat.reads(raw, as_version=4)), executed)


def _with_glossary_link(body: str, language: str) -> str:
    """The chapter page with the glossary's link at its top (inside `<main>`, else right after `<body>`), in the
    chapter's language: the notebook's own cells are catalog keys, so the link is the runner's."""
    from . import glossary

    nav = glossary.link(language)
    if "<main>" in body:
        return body.replace("<main>", "<main>\n" + nav, 1)
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + "\n" + nav, body, count=1)


_EXPORTERS = threading.local()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
OFFLINE_DROP = "kernelbook:offline-drop"


def _static_widgets(nb) -> None:
    """The shared HTML is offline: a live widget cannot render there (its manager loads from a CDN),
    so outputs that carry a static text/html fallback keep only that, and widget state is dropped."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]


def _unmark_figures(nb) -> None:
    """A figure's text (a title, a hover label) shows a quantity as printed: its marks are for the prose."""
    from .notebook import PLOTLY_MIME

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            for mime in (PLOTLY_MIME, "text/plain"):
                if mime in data:
                    data[mime] = quantity.plain_tree(data[mime])


def _plotly_html(nb) -> None:
    """Give each figure output (plotly's JSON mimetype) the HTML that draws it with the report's own
    plotly.min.js, in place of the kernel's (whose first figure carries plotly.js inline): nbconvert
    renders text/html and does not know plotly's mimetype."""
    import plotly.io as pio

    from .notebook import NO_NETWORK, PLOTLY_CONFIG, PLOTLY_MIME

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            fig = out.get("data", {}).get(PLOTLY_MIME)
            if fig is not None:
                out["data"]["text/html"] = pio.to_html(dict(fig), include_plotlyjs=False, full_html=False,
                                                       validate=False,
                                                       config={**fig.get("config", PLOTLY_CONFIG), **NO_NETWORK})


STOP = "ChapterStop"
NOT_SERVED = "ChapterNotServed"  # a stop by design (notebook.ChapterNotServed): the book still succeeds


def _stop_notes(nb) -> None:
    """A chapter stopped by `ChapterStop` shows its note where it stopped and nothing after: papermill's
    red banner and the cells that never ran are dropped, the error output becomes the note."""
    keep = []
    for cell in nb.cells:
        if "papermill-error-cell-tag" in cell.get("metadata", {}).get("tags", []):
            continue
        keep.append(cell)
        stops = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"
                 and o.get("ename") in (STOP, NOT_SERVED)]
        if stops:
            note = stops[0]["evalue"]
            cell["outputs"] = [o for o in cell["outputs"] if o not in stops] + [
                {"output_type": "display_data", "metadata": {},
                 "data": {"text/html": f'<div class="kb-note" style="background:#fff3cd;padding:.6rem 1rem">'
                                       f'{escape.html(note)}</div>', "text/plain": escape.terminal(note)}}]
            break
    nb.cells = keep


def _stopped(err) -> str | None:
    """The note of a chapter stopped with `ChapterStop` (or `ChapterNotServed`), or None for a real failure."""
    return getattr(err, "evalue", None) if getattr(err, "ename", None) in (STOP, NOT_SERVED) else None


def check_runs(cfg: BookConfig) -> None:
    """Every run the parameters name (`BookConfig.runs`: run_dir when it exists, variant_runs, baseline_run,
    one_gpu_run, cross_run, deployed_run), checked against the run contract before anything is written: a damaged one stops the book with one
    message naming the file and what is wrong (exit 2, the previous report kept)."""
    from .load.run import RunError, check_run

    for i, v in enumerate(cfg.runs()):
        p = P.resolve_path(v)
        if i == 0 and not RunLayout(p).manifest.exists():
            continue  # a run the capture chapters will capture (the parameter check allowed it)
        try:
            check_run(p)
        except RunError as e:
            raise BookError(f"damaged run: {e}\nnothing rendered; an earlier report is kept", 2) from None


def _lifted(executed: Path) -> tuple[str, tuple[str, str] | None]:
    """What the index lifts from an executed chapter, its quantities' marks kept (the index shows them as the chapter
    does; `ChapterResult.entry` writes them plain), read in one pass: the one-line summary (the text of its first
    `kb-summary` output) and chapter 07's first page (`notebook.findings`: its HTML and the Markdown report.md opens
    with; None where the chapter shows none)."""
    import nbformat

    summary, found = None, None
    for cell in nbformat.read(executed, as_version=4).cells:
        for out in cell.get("outputs", []):
            meta, data = out.get("metadata", {}), out.get("data", {})
            if summary is None and "kb-summary" in str(meta):  # Markdown: the index lists what a reader reads
                text = data.get("text/markdown") or data.get("text/plain") or ""
                summary = escape.plain("".join(text) if isinstance(text, list) else text).strip()
            if found is None and meta.get("kb-findings"):
                body = data.get("text/html", "")
                found = ("".join(body) if isinstance(body, list) else body), meta.get("kb-findings-md", "")
    return summary or "", found


def _title(py_path: Path, language: str = "en") -> str:
    """The chapter's title: the heading of its first markdown cell, in `language`."""
    import jupytext

    for cell in jupytext.read(py_path).cells:
        if cell.cell_type == "markdown":
            for line in translate_markdown(cell.source, language).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return py_path.stem


def render_book(params: dict, out: str | Path | None = None, chapters: list[str] | None = None,
                log=print, run_as_given: str | None = None, notebooks: Path = NOTEBOOKS,
                params_as_given: str | None = None) -> Path:
    """Render the chapters in `notebooks` (the repository's by default; a copy renders the same way) of
    `params["run_dir"]` into `out` (default reports/<run-id>); paths in `params` and `out` are absolute (the
    command line resolves them against the caller's folder); `run_as_given` is the run as the caller wrote it,
    for the index, and `params_as_given` the params file, for a captured run's manifest. BookError on bad
    parameters (exit code 2) or a failed chapter."""
    from .checks import Asked, parameter_problems

    cfg = BookConfig.of(params)
    language = cfg.language
    only = chapters
    books = list_chapters(only, notebooks)
    problems = parameter_problems(Asked.of(params, [nb.stem for nb in books]))
    if problems:
        raise BookError(f"{len(problems)} problem(s) in parameters for the run {cfg.run_dir}:\n"
                        + "\n".join(f"  - {p}" for p in problems) + "\nnothing rendered", 2)
    check_runs(cfg)
    run_dir = P.resolve_path(cfg.run_dir)
    run_id = run_dir.name
    capture_stems = _capturing_chapters(cfg, run_dir, books)
    try:  # the report folder is the book's alone: checked before anything is written (`outdir`)
        out, earlier = outdir.guard(Path(out) if out else P.REPO / "reports" / run_id,
                                    [P.resolve_path(v) for v in cfg.runs()], run_id, language, bool(only))
        stage = outdir.stage(out, run_id, language)
    except outdir.OutRefused as e:
        raise BookError(f"{e}\nnothing rendered", 2) from None
    try:
        return _render(cfg, books, only, language, run_dir, run_id, capture_stems, out, earlier, stage, log,
                       run_as_given, params_as_given)
    except BaseException:  # stopped (Ctrl-C, SIGTERM) or the environment failed (a full disk): nothing is left
        shutil.rmtree(stage, ignore_errors=True)
        raise


@dataclass
class ChapterResult:
    """One chapter of a rendering: its index entry (`entry()`, also a line of timings.json) and how it ended.
    `summary` keeps its quantities' marks for the index (`entry()` gives it plain). `note`: the run cannot serve it
    (its ChapterStop note; `broken`: the run is missing or broken, which stops the book); `error`: a real failure;
    `kept`: taken from the earlier report (`--chapters` rendered others)."""

    stem: str
    title: str
    seconds: float
    summary: str = ""
    note: str | None = None
    broken: bool = False
    error: BaseException | None = None
    kept: bool = False
    findings: tuple[str, str] | None = None  # chapter 07's first page: (HTML, its quantities' marks kept; report.md's)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.broken

    def outcome(self) -> str:
        """The CLI's word for it: `ok (3.1 s)`, `stopped: …`, `FAILED (…)`."""
        state = "ok" if self.note is None else ("STOPPED: the run is missing or broken (see its note)" if self.broken
                                                else "stopped: the run cannot serve it (see its note)")
        return f"{state if self.error is None else 'FAILED'} ({self.seconds:.1f} s)"

    def failure(self) -> BaseException | None:
        """What stops the book at this chapter: its error, or the note of a run missing or broken."""
        if self.error is not None:
            return self.error
        if self.broken:
            return BookError(f"stopped: {escape.terminal(self.note.strip().splitlines()[0])}", 2)
        return None

    def entry(self) -> dict:
        return {"stem": self.stem, "title": self.title, "seconds": self.seconds, "ok": self.ok,
                "summary": quantity.plain(self.summary), **({"stopped": self.note} if self.note is not None else {}),
                **({"kept": True} if self.kept else {}),
                **({"findings": [quantity.plain(x) for x in self.findings]} if self.findings else {})}

    @classmethod
    def from_entry(cls, e: dict, kept: bool = False) -> "ChapterResult":
        return cls(e["stem"], e.get("title", e["stem"]), float(e.get("seconds", 0.0)), e.get("summary", ""),
                   e.get("stopped"), kept=kept or bool(e.get("kept")),
                   findings=tuple(e["findings"]) if e.get("findings") else None)


class _Rendering:
    """One rendering's chapters into its staging folder: the capture chapters (under the locks, side by side when
    more than one captures), then the chapters that read the run, `render_jobs` at a time."""

    def __init__(self, cfg: BookConfig, books: list[Path], language: str, run_dir: Path, capture_stems: list[str],
                 stage: Path, ipc_folder: str, log):
        self.cfg, self.books, self.language, self.run_dir = cfg, books, language, run_dir
        self.capture_stems, self.stage, self.ipc_folder, self.log = capture_stems, stage, ipc_folder, log
        self.km_class = _kernel_manager(ipc_folder)
        self.pipelined = len(capture_stems) > 1
        self.order = {nb.stem: i for i, nb in enumerate(books, 1)}

    def _limit(self, stem: str) -> float:
        """A capture chapter that captures may run as long as its ncu stage on top of the chapter's limit, and side
        by side, as long as the capture chapters before it too (it waits for their parts)."""
        c = self.cfg
        limit = c.chapter_timeout_s + (c.ncu_timeout_s if stem in self.capture_stems else 0)
        if self.pipelined and stem in self.capture_stems:
            limit += c.chapter_timeout_s * self.capture_stems.index(stem)
        return limit

    def chapter(self, nb: Path, lines: "_ChapterLines | None") -> ChapterResult:
        """Execute one chapter into the staging folder and convert it to HTML."""
        t = time.perf_counter()
        src = to_ipynb(nb, self.stage / f"{nb.stem}.src.ipynb", self.language)
        executed = self.stage / f"{nb.stem}.ipynb"
        declared = notebook_parameters(nb)
        nb_params = {k: _to_nb(v) for k, v in self.cfg.as_dict().items() if k in declared}
        on_retry = lines.retry if lines else (
            (lambda why: print(f"    {nb.stem}: " + tr("ended: {why}; trying once more", why=why), flush=True))
            if self.log is print else None)
        error = execute_chapter(src, executed, nb_params, self.km_class, limit_s=self._limit(nb.stem),
                                cwd=str(P.REPO), on_progress=lines.progress if lines else None, on_retry=on_retry)
        note = _stopped(error)
        broken = note is not None and getattr(error, "ename", None) == STOP
        if note is not None:  # the run cannot serve this chapter: it shows the note, the book goes on
            error = None
        src.unlink()
        summary, found = _lifted(executed) if executed.exists() else ("", None)  # before `_html` writes it plain
        if executed.exists():
            try:
                _html(executed, self.stage / f"{nb.stem}.html", self.language)
            except Exception as e:  # e.g. nbconvert's templates missing: the book fails with its reason
                error = error or e
        if note is not None:
            with in_language(self.language):
                # the note's first clause, up to its first colon (either language's), names what is missing
                first = re.split(r"[:：]", note.replace("**", "").split("\n")[0], maxsplit=1)[0]
                summary = tr("Not shown: {note}", note=first)
        return ChapterResult(nb.stem, _title(nb, self.language), time.perf_counter() - t, summary, note, broken, error,
                             findings=found)

    def capture_chapter(self, nb: Path) -> ChapterResult:
        head = f"[{self.order[nb.stem]}/{len(self.books)}] {nb.stem}"
        lines = _ChapterLines(head, lazy=self.pipelined) if self.log is print else None
        if lines:
            lines.start()
        try:
            r = self.chapter(nb, lines)
        finally:
            (Path(self.ipc_folder) / f"{nb.stem}.ended").touch()  # a part waiting on this chapter's stops waiting
        if lines:
            lines.end(r.outcome())
        return r

    def run(self, locks: ExitStack) -> list[ChapterResult]:
        """Every chapter, in book order, up to and including the first that stops the book."""
        serial = [nb for nb in self.books if nb.stem in self.capture_stems]
        captured, captures, last_in = [], [], False
        if self.pipelined:  # side by side; the reading chapters start once the last part is in
            from .capture.chapters import part_done

            cap_pool = ThreadPoolExecutor(max_workers=len(serial), thread_name_prefix="capture")
            captures = [cap_pool.submit(self.capture_chapter, nb) for nb in serial]
            last_part = CAPTURE_PARTS[serial[-1].stem]
            try:
                while not (all(f.done() for f in captures) or part_done(self.run_dir, last_part)):
                    time.sleep(0.2)
            except KeyboardInterrupt:
                cap_pool.shutdown(wait=False, cancel_futures=True)
                stop_all()
                raise
            last_in = part_done(self.run_dir, last_part)
        else:  # one capture chapter, or none
            for nb in serial:
                captured.append(self.capture_chapter(nb))
                if captured[-1].failure() is not None:
                    break
            if serial:
                locks.close()  # the analysis chapters need no lock
        go_on = last_in if self.pipelined else not any(r.failure() for r in captured)
        rest = [nb for nb in self.books if nb.stem not in self.capture_stems] if go_on else []
        done = self._reading(rest, captures, cap_pool if captures else None)
        if captures:
            cap_pool.shutdown()
            locks.close()
            captured = [f.result() for f in captures]
        return _until_failure(captured, sorted(done, key=lambda r: self.order[r.stem]))

    def _reading(self, rest: list[Path], captures: list, cap_pool) -> list[ChapterResult]:
        """The chapters that read the run: each in its own kernel, `render_jobs` at a time (the longest first, so no
        long chapter starts last while the other workers sit idle), reported as they finish."""
        jobs = max(1, min(_jobs(self.cfg), max(1, len(rest))))
        done = []
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="chapter") as pool:
            ahead = sorted(rest, key=lambda nb: LONGEST_FIRST.index(nb.stem) if nb.stem in LONGEST_FIRST
                           else len(LONGEST_FIRST))
            futures = [pool.submit(self.chapter, nb, None) for nb in ahead]
            try:
                for f in as_completed(futures):
                    r = f.result()
                    done.append(r)
                    if self.log is print:
                        _ChapterLines.say(f"[{self.order[r.stem]}/{len(self.books)}] {r.stem} ... {r.outcome()}")
                for f in captures:  # the capture chapters side by side: wait for each to end (render)
                    f.result()
            except KeyboardInterrupt:  # Ctrl-C: no chapter starts, the running ones' kernels end now
                pool.shutdown(wait=False, cancel_futures=True)
                if cap_pool is not None:
                    cap_pool.shutdown(wait=False, cancel_futures=True)
                stop_all()
                raise
        return done


def _until_failure(captured: list[ChapterResult], reading: list[ChapterResult]) -> list[ChapterResult]:
    """The capture chapters, then (when none stopped the book) the reading ones, up to the first that stops it."""
    out = []
    for r in captured:
        out.append(r)
        if r.failure() is not None:
            return out
    for r in reading:
        out.append(r)
        if r.failure() is not None:
            break
    return out


def _render(cfg: BookConfig, books, only, language, run_dir, run_id, capture_stems, out, earlier, stage, log,
            run_as_given, params_as_given) -> Path:
    """render_book's work once the report folder is checked and its staging folder made."""
    from plotly.offline import get_plotlyjs

    (stage / PLOTLY_JS).write_text(get_plotlyjs())
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"{outdir.IPC_PREFIX}{os.getpid()}-") as ipc_folder, \
            _env(BookSession(plotlyjs_beside=True, quantity_marks=True).env()), ExitStack() as locks:
        book = _Rendering(cfg, books, language, run_dir, capture_stems, stage, ipc_folder, log)
        if capture_stems:  # one profiling lock (and clock lock) across the capture chapters, always released
            state = locks.enter_context(clock_lock(cfg.lock_clocks))
            # more than one capture chapter: side by side, each part waiting for the one before (the session's
            # pipeline)
            if book.pipelined:
                for stem in CAPTURE_PARTS:  # a chapter that does not capture here is no part to wait for
                    if stem not in capture_stems:
                        (Path(ipc_folder) / f"{stem}.ended").write_text(SKIPPED)
            locks.enter_context(_env(BookSession(locks_held=True, command=_command(), clock_state=state,
                                                 params_as_given=params_as_given or "",
                                                 pipeline=ipc_folder if book.pipelined else "",
                                                 plotlyjs_beside=True, quantity_marks=True).env()))
            if log is print:
                print(f"capture: {', '.join(capture_stems)} will capture into {run_dir} (locks held until the "
                      "last of them ends)", flush=True)
        results = book.run(locks)
    failed = next((r for r in results if r.failure() is not None), None)
    if only and not failed and earlier is not None:
        results = _keep_other_chapters(out, stage, results)
    if not failed and any(r.stem == "05_classification" and not r.kept for r in results):
        from .narrate.classify import report_for_run

        rules = _rules(cfg)
        with in_language(language):
            text = report_for_run(run_dir, rules)
        if text:
            (stage / "report.md").write_text(quantity.plain(text), encoding="utf-8")
    found = next((r.findings for r in results if r.findings), None)
    if found and found[1] and (stage / "report.md").exists():  # report.md opens with the same findings
        _open_with(stage / "report.md", quantity.plain(found[1]))
    entries = [r.entry() for r in results]
    with in_language(language):
        # the index shows each summary's quantities as the chapter does (marked: the one-value test reads them)
        _index(stage, run_id, cfg, [{**e, "summary": r.summary} for r, e in zip(results, entries)],
               time.perf_counter() - t_all, run_as_given or cfg.run_dir, found[0] if found else "")
        _glossary(stage, run_id, cfg, results)
    (stage / "timings.json").write_text(json.dumps(entries, indent=1))
    if failed:
        dest = outdir.failed_dest(out)
        outdir.mark(stage, run_id, language)
        os.replace(stage, dest)
        err = failed.failure()
        if isinstance(err, BookError):  # a chapter stopped because the run is missing or broken
            raise BookError(f"chapter {failed.stem} {err}\n  its notebook and HTML (with the note) are in {dest}; "
                            f"the previous report in {out} is unchanged", 2)
        last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise BookError(f"chapter {failed.stem} failed: {last}\n  its executed notebook and HTML (error visible) are "
                        f"in {dest}; the previous report in {out} is unchanged")
    outdir.swap(stage, out, earlier, run_id, language)
    return out


def _rules(cfg: BookConfig):
    """Chapter 05's thresholds as the book was given them: its parameters are the Rules fields by name, and report.md
    and the glossary use the same."""
    from dataclasses import fields

    from .analyze.classify import Rules

    return Rules(**{f.name: getattr(cfg, f.name) for f in fields(Rules) if hasattr(cfg, f.name)})


def _glossary(stage: Path, run_id: str, cfg: BookConfig, results: list[ChapterResult]) -> None:
    """glossary.html beside the index, in the current language: each entry's chapter linked where the book holds it."""
    from . import glossary

    titles = {r.stem: r.title for r in results if (stage / f"{r.stem}.html").exists()}
    (stage / glossary.FILE).write_text(glossary.page(titles, run_id, glossary.values(_rules(cfg))), encoding="utf-8")


class _ChapterLines:
    """The CLI's line for one chapter: `[2/8] 01_timeline ... ok (63.3 s)`, with the chapter's capture
    progress lines (and a retry) printed under it as they happen; the outcome then repeats the chapter's
    name on a line of its own. Chapters side by side share the terminal: a chapter whose lines follow another
    chapter's names itself again first, and `lazy` leaves its name out until it has something to say (a
    capture chapter waiting for the part before it says nothing)."""

    _lock = threading.Lock()
    _last: "_ChapterLines | None" = None  # the chapter that printed last
    _open = False  # its first line awaits its outcome or a progress line (no newline yet)

    def __init__(self, head: str, lazy: bool = False):
        self.head, self.broken, self.lazy = head, False, lazy

    @classmethod
    def _close(cls) -> None:
        if cls._open:
            print(flush=True)
            cls._last.broken = True
        cls._open = False

    @classmethod
    def say(cls, line: str) -> None:
        """A line of its own (a reading chapter's outcome)."""
        with cls._lock:
            cls._close()
            print(line, flush=True)
            cls._last = None

    def start(self) -> None:
        if self.lazy:
            return
        with self._lock:
            self._close()
            print(f"{self.head} ...", end="", flush=True)
            _ChapterLines._last, _ChapterLines._open = self, True

    def _line(self, text: str) -> None:
        with self._lock:
            if _ChapterLines._last is not self:  # another chapter printed in between (or none yet, lazy)
                self._close()
                print(f"{self.head} ...", flush=True)
            elif _ChapterLines._open:
                print(flush=True)
            _ChapterLines._last, _ChapterLines._open = self, False
            print(f"    {text}", flush=True)
            self.broken = True

    def progress(self, line: str) -> None:
        self._line(line)

    def retry(self, why: str) -> None:
        self._line(tr("ended: {why}; trying once more", why=why))

    def end(self, outcome: str) -> None:
        with self._lock:
            if _ChapterLines._last is self and _ChapterLines._open:
                print(f" {outcome}", flush=True)
            else:
                self._close()
                print(f"{self.head} {outcome}", flush=True)
            _ChapterLines._last, _ChapterLines._open = self, False


CAPTURE_PARTS = {"00_setup": "setup", "01_timeline": "timeline", "02_ncu": "ncu"}


def _capturing_chapters(cfg: BookConfig, run_dir: Path, books: list[Path]) -> list[str]:
    """The capture chapters of this rendering that will capture (capture.chapters.decide); a capture
    that cannot be honoured (`always` on a machine without a GPU, or over an existing run) stops the
    book before any chapter runs, exit code 2."""
    from .capture.chapters import decide
    from .capture.common import CaptureError

    stems = [nb.stem for nb in books if nb.stem in CAPTURE_PARTS]
    out = []
    for stem in stems:
        try:
            do, _ = decide(run_dir, CAPTURE_PARTS[stem], cfg.capture)
        except CaptureError as e:
            raise BookError(f"{stem}: {e}\nnothing rendered", 2) from None
        if do or (out and cfg.capture != "never"):  # later parts of a capture that began here
            out.append(stem)
    return out


@contextmanager
def _env(values: dict):
    """Environment variables for the chapter kernels (papermill starts them with this process's env)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _command() -> str:
    return "python -m kernelbook " + " ".join(sys.argv[1:]) if sys.argv and "kernelbook" in " ".join(sys.argv) \
        else "kernelbook.runner.render_book"


def _keep_other_chapters(out: Path, stage: Path, results: list[ChapterResult]) -> list[ChapterResult]:
    """Rendering some chapters keeps the others the existing report has (HTML, notebook, report.md),
    so a partial render never drops finished chapters; the index lists all of them in book order."""
    done = {r.stem for r in results}
    prev = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else []
    kept = []
    for e in prev:
        if e["stem"] in done or not (out / f"{e['stem']}.html").exists():
            continue
        for ext in (".html", ".ipynb"):
            if (out / f"{e['stem']}{ext}").exists():
                shutil.copy2(out / f"{e['stem']}{ext}", stage / f"{e['stem']}{ext}")
        kept.append(ChapterResult.from_entry(e, kept=True))
        if e["stem"] == "05_classification" and (out / "report.md").exists():
            shutil.copy2(out / "report.md", stage / "report.md")
    order = [nb.stem for nb in list_chapters(None)]
    return sorted(results + kept, key=lambda r: order.index(r.stem) if r.stem in order else len(order))


# the reading chapters by their render time on the bundled run, longest first (bench/book_render.py, two at a time
# on 2 cores: 07 7.9 s, 06 6.9 s, 01 5.5 s, 05 4.4 s, 04 4.1 s, 02 4.0 s, 03 2.6 s, 00 2.4 s)
LONGEST_FIRST = ["07_summary", "06_npu", "01_timeline", "05_classification", "04_roofline", "02_ncu",
                 "03_histograms", "00_setup"]


def _jobs(cfg: BookConfig) -> int:
    """How many reading chapters run at once: `render_jobs`, or with 0 one more than the CPU cores this process may
    use, at most 4. Each is a kernel of its own, and a kernel leaves its core idle while it starts and while the
    runner converts a finished chapter to HTML: on this 2-core CPU three at once rendered the book in 18.9 s
    (median of 3) against 21.1 s two at once, back to back (bench/book_render.py)."""
    n = cfg.render_jobs
    if n > 0:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cores + 1))


def _to_nb(v):
    return v if not isinstance(v, Path) else str(v)


def _open_with(report: Path, findings_md: str) -> None:
    """report.md with the findings after its title line (once: a kept report.md may already hold them)."""
    text = report.read_text(encoding="utf-8")
    if findings_md.strip() and findings_md.strip() not in text:
        head, _, rest = text.partition("\n")
        report.write_text(f"{head}\n\n{findings_md.strip()}\n{rest}", encoding="utf-8")


def _index(stage: Path, run_id: str, cfg: BookConfig, entries: list[dict], total_s: float, run_shown: str,
           findings: str = "") -> None:
    """index.html: the run's first page (chapter 07's findings, each phase's bound, the top levers; `findings`, HTML
    the package wrote), then one row per chapter with its summary, in the current language (`i18n`)."""
    from . import glossary

    info = read_manifest(P.resolve_path(cfg.run_dir))
    esc = escape.html
    rows = "\n".join(
        f'<tr><td><a href="{e["stem"]}.html">{esc(e["title"])}</a></td>'
        f'<td>{esc(e["summary"]) or ("" if e["ok"] else "<b>" + esc(tr("failed")) + "</b>")}</td>'
        f'<td class="num">{esc(tr("{seconds:.1f} s", seconds=e["seconds"]))}'
        f'{esc(tr(" (earlier render)")) if e.get("kept") else ""}</td></tr>'
        for e in entries)
    status = info.status
    warn = "" if status == "complete" else (  # the values escaped, the status in bold
        '<p class="warn">' + tr("This run is {status}: {reason}", status=f"<b>{esc(status)}</b>",
                                reason=esc(info.reason or "")) + "</p>")
    lang = HTML_LANG[language()]
    captured = tr("{model} on {gpu}, captured {created}; rendered in {seconds:.0f} s.",
                  model=info.workload.model or "?", gpu=info.environment.gpu.name or "?",
                  created=info.created or "?", seconds=total_s)
    contract = (f'<p>{esc(tr("Profiler output contract:"))} <a href="report.md">report.md</a></p>'
                if (stage / "report.md").exists() else "")
    (stage / "index.html").write_text(quantity.spans(f"""<!doctype html><html lang="{lang}"><head><meta charset="utf-8">
<title>kernelbook — {esc(run_id)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border-bottom:1px solid #ddd;padding:.5rem;text-align:left;vertical-align:top}}
td.num{{text-align:right;white-space:nowrap}}.warn{{background:#fff3cd;padding:.5rem}}
ol.findings li{{margin:.4rem 0}}.basis{{color:#666;font-size:.9em}}</style></head><body>
<h1>kernelbook: {esc(run_id)}</h1>
{glossary.link()}
<p>{esc(captured)}</p><p>{esc(tr("Run:"))} <code>{esc(run_shown)}</code></p>{warn}
{findings}
{contract}
<h2>{esc(tr("The chapters"))}</h2>
<table><tr><th>{esc(tr("chapter"))}</th><th>{esc(tr("summary"))}</th><th>{esc(tr("render"))}</th></tr>
{rows}
</table></body></html>
"""), encoding="utf-8")
