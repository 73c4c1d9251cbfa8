"""What a chapter needs from Jupyter: a plotly renderer that works offline, and the summary line.

The renderer emits the figure as an HTML div that expects `window.Plotly` (the runner ships one copy
of plotly.js beside the report) plus plotly's own mimetype, which JupyterLab renders interactively.
"""
from __future__ import annotations

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from .display import sentence, styler_table, table  # noqa: F401  (chapters call kb.table / kb.sentence)


class OfflineRenderer(MimetypeRenderer):
    def to_mimebundle(self, fig_dict):
        html = pio.to_html(fig_dict, include_plotlyjs=False, full_html=False, validate=False,
                           config={"displaylogo": False, "responsive": True})
        return {"text/html": html}


def setup() -> None:
    """Call once at the top of a chapter."""
    import pandas as pd

    pio.renderers["kernelbook"] = OfflineRenderer()
    pio.renderers.default = "kernelbook"
    pd.set_option("display.max_colwidth", 80)
    pd.set_option("display.max_columns", None)  # the HTML scrolls sideways; a "..." column hides data
    pd.set_option("display.precision", 2)
    pd.set_option("display.float_format", number)
    _tables_through_display_layer()


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


def full(df, caption: str | None = None):
    """A table of sentences (recommendations): text shown whole and wrapped, without the row index.
    The display layer never truncates, so this is `table` by another name, kept for the chapters."""
    return table(df, caption)


def md(text: str):
    from IPython.display import Markdown

    return Markdown(text)


class MissingDataError(RuntimeError):
    """The run lacks what a chapter needs; the message says which capture step produces it."""


def require_ncu(kernels, run_dir: str):
    """The run's profiled-kernel table, or one clear error naming the capture step that makes it."""
    if kernels is None or len(kernels) == 0 or not (kernels.status == "profiled").any():
        raise MissingDataError(f"{run_dir} has no profiled ncu kernels (ncu/kernels.parquet). This chapter needs "
                               "the ncu stage: capture with ncu_top_n > 0 on a machine where ncu can read counters.")
    return kernels


def explorer(cards: dict[str, dict]):
    """A kernel picker in JupyterLab (ipywidgets) that degrades to static cards in the HTML.

    One output carries both: the widget view (what JupyterLab renders when the kernel is live) and a
    text/html fallback listing every card (what nbconvert writes, as no widget state is saved)."""
    from IPython.display import display

    from .display import demangle

    static = "".join(f"<details><summary><b>{html_escape(k)}</b> — {html_escape(c['class'])}</summary>"
                     f"<p><code style='white-space:pre-wrap;word-break:break-all'>{html_escape(demangle(c['name']))}"
                     f"</code></p>{table(c['metrics'], 'Metrics (one representative launch)')._repr_html_()}"
                     f"{table(c['roofline'], 'Roofline points', empty='No roofline point: this kernel issues no FLOPs.')._repr_html_()}"
                     "</details>" for k, c in cards.items())
    bundle = {"text/html": f"<div class='kb-explorer'>{static}</div>",
              "text/plain": f"{len(cards)} kernels (open in JupyterLab for the picker)"}
    try:
        import ipywidgets as W
    except ImportError:
        display(bundle, raw=True)
        return
    pick = W.Dropdown(options=list(cards), description="kernel", layout=W.Layout(width="70%"))
    out = W.Output()

    def show(*_):
        c = cards[pick.value]
        out.clear_output()
        with out:
            display(md(f"**{c['class']}**\n\n`{demangle(c['name'])}`"), table(c["metrics"], "Metrics"),
                    table(c["roofline"], "Roofline points", empty="No roofline point: this kernel issues no FLOPs."))

    pick.observe(show, names="value")
    show()
    box = W.VBox([pick, out])
    bundle["application/vnd.jupyter.widget-view+json"] = {"version_major": 2, "version_minor": 0,
                                                          "model_id": box.model_id}
    display(bundle, raw=True)


def html_escape(s) -> str:
    import html

    return html.escape(str(s))
