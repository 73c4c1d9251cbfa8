"""What a chapter needs from Jupyter: a plotly renderer that works offline, and the summary line.

The renderer emits the figure as an HTML div that expects `window.Plotly` (the runner ships one copy
of plotly.js beside the report) plus plotly's own mimetype, which JupyterLab renders interactively.
"""
from __future__ import annotations

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer


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


def full(df):
    """A table whose text columns are shown whole (no truncation), without the row index: for tables
    of sentences such as recommendations."""
    import pandas as pd
    from IPython.display import HTML

    with pd.option_context("display.max_colwidth", None):
        return HTML(df.to_html(index=False, escape=True, float_format=lambda v: f"{v:,.2f}"))


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

    static = "".join(f"<details><summary><b>{html_escape(k)}</b> — {html_escape(c['class'])}</summary>"
                     f"<p><code>{html_escape(c['name'])}</code></p>{c['metrics'].to_html(float_format=_fmt)}"
                     f"{c['roofline'].to_html(index=False, float_format=_fmt) if len(c['roofline']) else ''}"
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
            display(md(f"**{c['class']}**\n\n`{c['name']}`"), c["metrics"], c["roofline"])

    pick.observe(show, names="value")
    show()
    box = W.VBox([pick, out])
    bundle["application/vnd.jupyter.widget-view+json"] = {"version_major": 2, "version_minor": 0,
                                                          "model_id": box.model_id}
    display(bundle, raw=True)


def html_escape(s) -> str:
    import html

    return html.escape(str(s))


def _fmt(x: float) -> str:
    return f"{x:,.3g}" if abs(x) < 1e4 else f"{x:.3e}"
