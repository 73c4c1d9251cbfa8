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
    pd.set_option("display.precision", 2)


def summary(text: str):
    """Display `text` as the chapter's one-line summary (the index page lists it)."""
    from IPython.display import Markdown, display

    display(Markdown(f"**{text}**"), metadata={"kb-summary": True})


def md(text: str):
    from IPython.display import Markdown

    return Markdown(text)
