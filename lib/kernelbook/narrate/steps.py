"""Chapter 01's step-by-step sentences, from `analyze.steps`: what the curve says, whether the profiled steps stand
for the whole decode, and why no kernel grows with position."""
from __future__ import annotations

import pandas as pd

from ..analyze import steps as S
from ..i18n import N_, text, tr

# `analyze.steps.CURVE_SERIES` and `CHECK_ROWS`, catalog keys: the figure's series and the check's rows
SERIES = (N_("plain wall"), N_("profiled wall"), N_("GPU-busy (profiled)"))
CHECK_ROWS = (N_("decode steps (plain generate)"), N_("decode steps profiled"), N_("plain decode total"),
              N_("estimate from the profiled steps"), N_("difference"))
assert SERIES == S.CURVE_SERIES and CHECK_ROWS == S.CHECK_ROWS


def step_curve(curve: pd.DataFrame) -> pd.DataFrame:
    """`analyze.steps.step_curve` with its series in the reader's language (the figure's legend)."""
    return curve.assign(series=curve.series.map(text))


def prose(run) -> str:
    """What the curve says (`analyze.steps.curve_figures`): the plain decode step at the start and the end, and the
    profiled steps' GPU-busy time against their wall time."""
    f = S.curve_figures(run)
    if f is None:
        return tr("This run did not time its plain decode steps one by one (captured before steps.parquet); the "
                  "figure shows the profiled steps only.")
    what = (tr("the profiler recorded {n} of {total} decode steps in {w} windows", n=f["profiled"], total=f["n"],
               w=f["windows"]) if f["windows"] is not None else tr("the profiler recorded every decode step"))
    return tr("Over {n} decode steps (KV cache {a:,} → {b:,} tokens) a plain step took {head:.2f} ms at the start "
              "and {tail:.2f} ms at the end ({chg:+.0f} %; each step's median over the plain generates, not their "
              "mean); {what}, whose GPU-busy time is {busy:.2f} ms per step ({share:.0f} % of their wall time under "
              "the profiler).",
              n=f["n"], a=f["a"], b=f["b"], head=f["head"], tail=f["tail"], chg=f["chg"], what=what, busy=f["busy"],
              share=f["share"])


def check_prose(run) -> str:
    """The verdict of `analyze.steps.step_check` in a sentence (empty without plain step times)."""
    a = S.check(run)
    if a is None:
        return ""
    if a["every_step"]:
        return tr("Every decode step was profiled, so no step stands in for another and the estimate is the plain "
                  "total itself: the check speaks only where a long generation is sampled.")
    return (tr("The profiled steps stand for the whole decode: their estimate is {e:+.1f} % from the plain total "
               "(within {p:.0f} %).", e=a["error_pct"], p=S.CHECK_PCT) if a["ok"] else
            tr("The profiled steps do not stand for the whole decode: their estimate is {e:+.1f} % from the plain "
               "total (more than {p:.0f} %); sample more windows (sample_every) before reading decode figures as the "
               "generation's.", e=a["error_pct"], p=S.CHECK_PCT))


def growth_note(timeline: pd.DataFrame) -> str:
    """Why `analyze.steps.growing_kernels` is empty for this timeline."""
    span = S.growth_span(timeline)
    if span is None:
        return tr("The profiled decode steps span too few positions to see growth.")
    return tr("No decode kernel's time per step grew by {pct:.0f} % or more between the first and the last profiled "
              "steps (positions {a} to {b}): over this span the KV cache's growth is within run-to-run noise.",
              pct=S.GROWTH_MIN_PCT, a=span[0], b=span[1])
