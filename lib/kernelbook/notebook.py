"""What a chapter needs from Jupyter: one figure mechanism, the summary line, a way to stop with a note, and a
readable note in place of a traceback when something fails that no check foresaw (`setup` installs it).

Figures: a chapter's figure output carries plotly's own mimetype, `application/vnd.plotly.v1+json` (the
figure as JSON), a one-line text/plain, and a text/html that draws the same figure with no network:
- JupyterLab draws the JSON interactively with the jupyterlab-plotly extension that ships inside the
  plotly package (it ranks above HTML, so the HTML is not used there);
- a papermill output converted with plain `jupyter nbconvert --to html` draws the text/html: the first
  figure of a kernel carries plotly.js itself (hidden from an AMD `define`, so it sets `window.Plotly`
  whether or not the page's require.js loaded), the later ones draw with it;
- the book's HTML replaces each text/html with one that draws the JSON with the one plotly.min.js
  shipped beside the report (`runner._html`), so its pages stay small; under the book runner
  (`BookSession.plotlyjs_beside`) no figure carries plotly.js, so the executed notebooks stay small too.
Every figure's config leaves out plotly's network-bound controls (`NO_NETWORK`): no "Share chart…"
upload to Plotly Cloud; kernel-level profiles of unreleased models and hardware
must not be one click from an upload.
"""
from __future__ import annotations

import plotly.io as pio


def _plotly_renderer_base():
    """plotly's renderer that emits its JSON mimetype: the one use of the private `plotly.io._base_renderers`
    (plotly exports no public base class for a renderer); tests/test_private_apis.py fails when plotly moves it."""
    from plotly.io._base_renderers import PlotlyRenderer

    return PlotlyRenderer


PlotlyRenderer = _plotly_renderer_base()

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# plotly.js 3 shows "Share chart..." (sendChartToCloud, an upload to plotlyServerURL) unless told not to;
# its older showLink / Chart Studio options are gone from it. The mode bar keeps only local tools.
NO_NETWORK = {"showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, **NO_NETWORK}
_PLOTLYJS_SENT = [False]  # whether this kernel's outputs already carry plotly.js (the first figure does)
_CHAPTER_RUN = [None]  # the chapter's own run_dir (its parameter), as setup was given it

from . import escape as esc
from .contract import session
from .display import phase_label, sentence, styler_table, table  # noqa: F401  (chapters call kb.table / kb.sentence)
from .i18n import language, tr, use_language  # noqa: F401  (chapters call kb.tr / kb.use_language)


class FigureRenderer(PlotlyRenderer):
    def to_mimebundle(self, fig_dict):
        bundle = super().to_mimebundle(fig_dict)
        title = (fig_dict.get("layout", {}).get("title") or {})
        title = title.get("text", "") if isinstance(title, dict) else str(title)
        bundle["text/plain"] = f"<plotly figure: {title or 'untitled'}>"
        html = pio.to_html(fig_dict, include_plotlyjs=False, full_html=False, validate=False, config=self.config)
        if not _PLOTLYJS_SENT[0]:
            html = plotlyjs_inline() + html
            _PLOTLYJS_SENT[0] = True
        bundle["text/html"] = html
        return bundle


def plotlyjs_inline() -> str:
    """plotly.js in a script tag, hidden from an AMD `define` while it loads (nbconvert's page loads
    require.js when it has network; plotly.js would then register as a module and not set window.Plotly)."""
    from plotly.offline import get_plotlyjs

    return ("<script>window.__kbdef=window.define;window.define=undefined;</script>"
            f"<script>{get_plotlyjs()}</script><script>window.define=window.__kbdef;</script>")


def setup(language: str = "en", **parameters) -> None:
    """Call once at the top of a chapter, with every parameter of the chapter by name (`language` and
    the rest). They are checked by the schema the CLI uses (`params.validate`: types, ranges, choices,
    relations such as low_pct < high_pct); a bad one stops the chapter with the note the CLI prints, not
    a traceback. Every sentence, caption, header and figure title the chapter writes from here on is in
    `language` (`tr`)."""
    import pandas as pd

    from .display import link_kernels

    _readable_failures()
    check_parameters({"language": language, **parameters})
    use_language(language)
    _CHAPTER_RUN[0] = parameters.get("run_dir")  # open_run links kernel ids to their cards for this run
    link_kernels(())

    pio.renderers["kernelbook"] = FigureRenderer(config=PLOTLY_CONFIG)
    # the chapter's first figure carries plotly.js (a re-run from the top, too), unless the book runner ships it
    _PLOTLYJS_SENT[0] = session.current().plotlyjs_beside
    pio.renderers.default = "kernelbook"
    pd.set_option("display.max_colwidth", 80)
    pd.set_option("display.max_columns", None)  # the HTML scrolls sideways; a "..." column hides data
    pd.set_option("display.precision", 2)
    pd.set_option("display.float_format", number)
    _tables_through_display_layer()


def _readable_failures() -> None:
    """Whatever fails inside the chapter past the book's check of the run (`load.run.check_run`) shows as a
    readable note (`_failure_note`), not a traceback. The cell still ends in error: papermill and the book runner
    count the chapter failed (exit 1, its one line on the terminal), Run All stops there in JupyterLab, and `%tb`
    shows the whole traceback. A `ChapterStop` shows its own note as before."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None:
        ip.set_custom_exc((Exception,), _failure_note)


def _failure_note(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler (`_readable_failures`): a note saying what failed, where, and what to
    do, then the error itself as one line in place of the traceback (what the runner prints on the terminal)."""
    import sys

    from IPython.display import display

    if hasattr(value, "_render_traceback_"):  # ChapterStop and its kind: their note is their traceback
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # what %tb shows
    sys.last_exc = value
    error, call, where = _failure_facts(etype, value, tb)
    display(md(tr("**This chapter stopped on an error:** `{error}`, in `{call}` (at `{where}`).\n\n"
                  "The run may be damaged in a way the book's check of the run directory does not catch, or this is "
                  "a bug in kernelbook. Please report it with this note and the run's `manifest.json`; in JupyterLab, "
                  "`%tb` in a new cell shows the whole traceback.",
                  error=esc.md_code(error), call=esc.md_code(call), where=esc.md_code(where))))
    line = tr("{error} (at {where}; the run may be damaged, or this is a kernelbook bug: see the chapter's note)",
              error=error, where=where)
    shell._showtraceback(etype, value, [esc.text(line)])
    return None


def _failure_facts(etype, value, tb) -> tuple[str, str, str]:
    """(error, call, where) of an exception raised in a chapter cell, each one line of at most 200 characters:
    `ValueError: ...` (its message's first line), the cell's line that called into the failure, and where in
    kernelbook (`analyze/setup.py:27 headline … i18n.py:85 tr`: the function the cell called, and the innermost
    place; the cell's own line when it failed there)."""
    import traceback
    from pathlib import Path

    pkg = Path(__file__).resolve().parent
    lines = str(value).strip().splitlines()
    error = f"{etype.__name__}: {lines[0]}" if lines else etype.__name__
    frames = traceback.extract_tb(tb)
    past_ipython = [f for f in frames if "IPython" not in Path(f.filename).parts]  # run_code's frame is IPython's
    cell = past_ipython[0] if past_ipython else (frames[-1] if frames else None)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(pkg)]

    def place(f) -> str:
        return f"{Path(f.filename).resolve().relative_to(pkg).as_posix()}:{f.lineno} {f.name}"

    if ours:  # the call the cell made into kernelbook, and the innermost place there when it is another
        where = place(ours[0]) + (f" … {place(ours[-1])}" if len(ours) > 1 else "")
    else:
        where = f"line {cell.lineno}" if cell is not None else "?"
    call = (cell.line or "?") if cell is not None else "?"
    return tuple(esc.text(v)[:200] for v in (error, call, where))


def _tables_through_display_layer() -> None:
    """Every DataFrame (and Styler) a chapter displays goes through `display.table`: human headers,
    formatted numbers, no index, a scroll box. A chapter calls `table()` itself to add a caption."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    import pandas as pd
    from pandas.io.formats.style import Styler

    html_fmt = ip.display_formatter.formatters["text/html"]
    html_fmt.for_type(pd.DataFrame, lambda df: table(df)._repr_html_())
    html_fmt.for_type(pd.Series, lambda s: table(s)._repr_html_())
    html_fmt.for_type(Styler, lambda st: styler_table(st)._repr_html_())


def check_parameters(values: dict) -> dict:
    """`values` (a chapter's parameters) checked as the book command checks them, or ChapterStop with the
    same message (`N problem(s) in parameters:` and one line per problem)."""
    from .params import ParamError, validate

    try:
        return validate(values, consumer="book")
    except ParamError as e:
        raise ChapterStop(str(e)) from None


def number(v: float) -> str:
    """How tables print a float: thousands grouped, two decimals from 1 up, three significant digits
    below, scientific notation only under 0.001."""
    if v != v:
        return "NaN"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:,.2f}"
    return f"{v:.3g}" if a >= 1e-3 else f"{v:.2e}"


def summary(text: str):
    """Display `text` as the chapter's one-line summary (the index page lists it), in bold: emphasis
    inside `text` is dropped, since nested `**` would end the bold half-way and show in the index."""
    from IPython.display import Markdown, display

    display(Markdown(f"**{text.replace('**', '').strip()}**"), metadata={"kb-summary": True})


def paragraph(text: str) -> None:
    """Display `text` (markdown the package wrote) now, in the middle of a cell; nothing where it is empty."""
    from IPython.display import Markdown, display

    if text.strip():
        display(Markdown(text))


def findings(page_html: str, report_md: str = ""):
    """The run's first page (`narrate.findings`: the findings, each phase's bound, the top levers), shown here; the book
    runner lifts it onto the index and opens report.md with `report_md`."""
    from IPython.display import HTML, display

    display(HTML(page_html), metadata={"kb-findings": True, "kb-findings-md": report_md})


def full(df, caption: str | None = None):
    """A table of sentences (recommendations): text shown whole and wrapped, without the row index.
    The display layer never truncates, so this is `table` by another name, kept for the chapters."""
    return table(df, caption)


def folded(parts):
    """Tables each under its own fold (a <details> whose summary is the table's caption), in one output: `parts` is
    (caption, table, open) per fold, the table as `table()` returns it, made without a caption. A closed fold keeps
    a long list out of the chapter's visible length until the reader opens it."""
    from .display import Shown

    parts = list(parts)
    body = "".join(f'<details class="kb-fold"{" open" if is_open else ""}><summary class="kb-caption">'
                   f"{esc.html(caption)}</summary>{shown._repr_html_()}</details>" for caption, shown, is_open in parts)
    return Shown(body, None, "\n".join(caption for caption, _, _ in parts))


def md(text: str, fold: str | None = None):
    """Markdown the package wrote: every run string in it went through `escape.md` / `escape.md_code`. With `fold`
    (its title, in the reader's language) it is a folded section: the reader opens it for the detail, and the
    chapter's visible prose stays within its word budget (tests/test_words.py)."""
    from IPython.display import HTML, Markdown

    if fold is None or not text.strip():
        return Markdown(text)
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return HTML(f'<details class="kb-fold"><summary>{esc.html(fold)}</summary>\n{markdown2html_mistune(text)}'
                "</details>")


def source(text: str, fold: str | None = None):
    """`text` (Markdown source, e.g. report.md) shown as written, in a fenced block no line of it can close; folded
    under `fold` where given (`md`)."""
    return md(esc.md_fence(esc.md_block(text)), fold=fold)


class ChapterStop(Exception):
    """Ends a chapter early with a note instead of a traceback: the run is missing or broken, or the
    parameters ask it for what it does not hold.

    IPython shows `_render_traceback_`'s lines in place of a traceback, so JupyterLab shows the note
    alone and Run All stops there; papermill reports the same lines; the book runner recognises it by
    name, keeps the chapter's HTML with the note, and ends with a non-zero exit status."""

    def _render_traceback_(self):
        return [str(self)]


class ChapterNotServed(ChapterStop):
    """A `ChapterStop` by design: the run lacks a whole stage the chapter needs (no ncu counters in a
    timeline-only or partial run). The book keeps the chapter with its note and still succeeds."""


def not_served(note: str | None) -> None:
    """Stop the chapter with `note` when the run cannot serve it by design (`ChapterNotServed`: the book still
    succeeds and the index says what is not shown); nothing when `note` is None."""
    from .escape import plain

    if note:
        raise ChapterNotServed(plain(note))


def open_study(study_dir: str):
    """The study at `study_dir` (`load.study.StudyRuns`); none given stops the chapter by design
    (`ChapterNotServed`), a folder that is not a study with the note saying how to make one (`ChapterStop`)."""
    from .escape import plain
    from .load.study import StudyError
    from .load.study import open_study as _open

    if not study_dir:
        raise ChapterNotServed(tr("No study given: capture one with `python -m kernelbook study --params "
                                  "params/study-serving.yaml --out data/studies/<id>` on a GPU machine and render "
                                  "the book with `--study data/studies/<id>`."))
    try:
        return _open(study_dir)
    except StudyError as e:
        raise ChapterStop(plain(str(e))) from None


def study_if_given(study_dir: str):
    """The study at `study_dir` for a chapter that reads it beside its run (its batch lever's host time per step):
    None when none is given (the parameter check has refused a folder that is not a study)."""
    return open_study(study_dir) if study_dir else None


def backend_twin(run):
    """The run's workload captured with the other timeline profiler beside it (`load.twins.backend_twin`), opened
    through the door check; None where there is none."""
    from .load.twins import backend_twin as find

    path = find(run.path)
    return open_run(str(path)) if path is not None else None


def open_run(run_dir: str, needs: str | None = None, require_timeline: bool = True, **asked):
    """The run at `run_dir`, checked against what the chapter asks of it (`phase=`, `kernel=`, and
    `needs="ncu"` for the chapters that read counters). What it cannot serve stops the chapter with
    one note naming what the run holds and how to capture the rest (`ChapterStop`)."""
    from .checks import Asked, missing, parameter_problems
    from .load.run import RunError, load_run
    from .params import ParamError, validate

    try:
        params = validate({"run_dir": run_dir, **asked}, consumer="book")
    except ParamError as e:
        raise ChapterStop(str(e)) from None
    ask = Asked.of({k: params[k] for k in ("run_dir", *asked)})
    problems = parameter_problems(ask)
    if problems:
        raise ChapterStop(tr("This chapter cannot be shown with these parameters:") + "\n" +
                          "\n".join(f"  - {p}" for p in problems)) from None
    if needs is not None:
        not_served(missing(run_dir, needs, rank=ask.ncu_rank))
    try:
        run = load_run(run_dir, require_timeline=require_timeline, rank=ask.ncu_rank)
    except RunError as e:
        raise ChapterStop(str(e)) from None
    if _CHAPTER_RUN[0] is not None and run_dir == _CHAPTER_RUN[0]:
        _link_cards(run)
    return run


def _link_cards(run) -> None:
    """The chapter's own run (not a variant or baseline it opens beside it): its profiled kernels have a card in
    chapter 05's explorer, so their ids link there from every table (`display.link_kernels`)."""
    from .display import link_kernels

    k = run.ncu_kernels()
    link_kernels(() if k is None or "status" not in k else k.loc[k.status == "profiled", "kernel_id"])


def capture_part(run_dir: str, part: str, capture: str, params_file: str = ""):
    """The capture chapters' first step: capture `part` ("setup", "timeline", "ncu") into `run_dir` when
    `capture` asks and this machine can, else nothing (see capture.chapters). Returns what happened
    ({'captured', 'why', 'wall_s'}); a capture that cannot be honoured stops the chapter with the reason."""
    from .capture import chapters
    from .capture.common import CaptureError

    try:
        return chapters.part(run_dir, part, capture, params_file or None, progress=chapters.notebook_progress())
    except CaptureError as e:
        raise ChapterStop(str(e)) from None


def missing_note(run_dir: str, needs: str):
    """A note saying what the run lacks for `needs` ("ncu"), with the manifest's status and reason, for
    a chapter that renders without it; None (nothing shown) when the run has it."""
    from .checks import missing

    note = missing(run_dir, needs, renders_without=True)
    return None if note is None else md("> " + note)


def explorer(cards: dict[str, dict], first: str = ""):
    """A kernel picker in JupyterLab (ipywidgets) that degrades to static cards in the HTML; it opens
    on the card whose key starts with `first` (a kernel id), else on the first card.

    One output carries both: the widget view (what JupyterLab renders when the kernel is live) and a
    text/html fallback listing every card (what nbconvert writes, as no widget state is saved). Each static
    card is a <details> with a stable id (`display.card_anchor`: 'kernel-d004') that kernel ids in every
    chapter's tables link to; the address's fragment opens its card (`display.CARD_OPEN_JS`)."""
    from IPython.display import display

    from .display import CARD_OPEN_JS, card_anchor, demangle

    nopoint = tr("No roofline point: this kernel issues no FLOPs.")
    # each card a <details> with a stable id that kernel ids in every chapter's tables link to
    static = "".join(f"<details id='{html_escape(card_anchor(c.get('kernel_id') or k.split(' ')[0]))}'>"
                     f"<summary><b>{html_escape(k)}</b> — {html_escape(c['class'])}</summary>"
                     f"<p><code style='white-space:pre-wrap;word-break:break-all'>{html_escape(demangle(c['name']))}"
                     f"</code></p>{table(c['metrics'], tr('Metrics (one representative launch)'))._repr_html_()}"
                     f"{table(c['roofline'], tr('Roofline points'), empty=nopoint)._repr_html_()}{_why(c)}"
                     "</details>" for k, c in cards.items())
    bundle = {"text/html": f"<style>.kb-explorer details:target>summary{{background:#fff3cd}}</style>"
                           f"<div class='kb-explorer'>{static}</div>{CARD_OPEN_JS}",
              "text/plain": tr("{n} kernels (open in JupyterLab for the picker)", n=len(cards))}
    try:
        import ipywidgets as W
    except ImportError:
        display(bundle, raw=True)
        return
    start = next((k for k in cards if first and k.split(" ")[0] == first), next(iter(cards), None))
    pick = W.Dropdown(options=list(cards), value=start, description="kernel", layout=W.Layout(width="70%"))

    def card(key: str) -> str:
        c = cards[key]
        return (f"<p><b>{html_escape(c['class'])}</b></p><p><code style='white-space:pre-wrap;word-break:break-all'>"
                f"{html_escape(demangle(c['name']))}</code></p>{table(c['metrics'], tr('Metrics'))._repr_html_()}"
                f"{table(c['roofline'], tr('Roofline points'), empty=nopoint)._repr_html_()}{_why(c)}")

    # The card is an HTML widget whose value the picker sets, not an Output widget that captures display
    # calls (papermill's nbclient intercepts an Output widget's messages): in one render of the soak
    # (bench/soak.py, this CPU machine) chapter 05 hung in this cell, with the Output widget, on both tries
    # until the runner's watchdog ended it.
    view = W.HTML(value=card(start))
    pick.observe(lambda change: setattr(view, "value", card(change["new"])), names="value")
    box = W.VBox([pick, view])
    bundle["application/vnd.jupyter.widget-view+json"] = {"version_major": 2, "version_minor": 0,
                                                          "model_id": box.model_id}
    display(bundle, raw=True)


def _why(card: dict) -> str:
    """A kernel card's "why it is slow" table as HTML, or nothing where the card has none."""
    w = card.get("why")
    return "" if w is None else table(w, tr("Why it is slow: stalls, occupancy, clock, NVIDIA's rules"))._repr_html_()


def html_escape(s) -> str:
    """`s` (from a run) as HTML text: `escape.html`."""
    return esc.html(s)
