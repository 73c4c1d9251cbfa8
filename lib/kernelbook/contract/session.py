"""What the book runner tells the chapters it runs, as one typed value.

The runner starts each chapter's kernel with this process's environment; a `BookSession` travels in one
variable (`ENV`, JSON) instead of a variable per fact, and a chapter reads it with `current()`. A chapter run
alone (JupyterLab, papermill) sees the defaults: no locks held for it, no pipeline, no command.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

ENV = "KERNELBOOK_SESSION"


@dataclass(frozen=True)
class BookSession:
    locks_held: bool = False  # the runner holds the profiling (and clock) lock across the capture chapters
    command: str = ""  # the command line that rendered the book, for a captured run's manifest
    clock_state: dict | None = None  # what the runner's clock lock did (clocks.clock_lock)
    params_as_given: str = ""  # --params as the caller wrote it (the chapters get it absolute)
    # the capture chapters side by side: a folder where the runner marks each one's end (`<stem>.ended`); a part
    # then waits for the part before it to be in the run (capture.chapters); "": one after another or alone
    pipeline: str = ""
    # the runner draws every figure of its HTML with the plotly.min.js it ships beside the report (runner._html):
    # a chapter's figures need not carry plotly.js themselves (4.8 MB in each executed notebook, which papermill
    # writes again after every cell)
    plotlyjs_beside: bool = False
    # the quantities a chapter prints carry their marks (contract.quantity), which the runner turns into spans in
    # the HTML and strips everywhere else
    quantity_marks: bool = False

    def env(self) -> dict[str, str]:
        return {ENV: json.dumps(asdict(self))}


def current() -> BookSession:
    """The session the runner started this chapter in (the defaults for a chapter run alone)."""
    raw = os.environ.get(ENV)
    return BookSession(**json.loads(raw)) if raw else BookSession()
