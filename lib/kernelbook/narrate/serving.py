"""The serving chapter's sentences (chapter 08), from `analyze.serving`'s tables, and its words in the reader's
language."""
from __future__ import annotations

import pandas as pd

from ..i18n import tr
from ..load.study import StudyRuns
from . import said, say


def kernel_table(kt: pd.DataFrame) -> pd.DataFrame:
    """`analyze.serving.kernel_table` with the roof that binds each kernel in the reader's language."""
    return said(kt, ["binds"]) if len(kt) else kt


def bytes_table(bt: pd.DataFrame) -> pd.DataFrame:
    """`analyze.serving.bytes_table` with how the experts were counted in the reader's language."""
    return said(bt, ["experts_counted"]) if len(bt) else bt


def headline(st: StudyRuns, dt: pd.DataFrame, ct: pd.DataFrame, tt: pd.DataFrame, wt: pd.DataFrame) -> str:
    """The chapter's answer: the step, throughput and the GPU's busy share from the smallest to the largest batch."""
    return opening(st, dt, ct, tt, wt)[0]


def opening(st: StudyRuns, dt: pd.DataFrame, ct: pd.DataFrame, tt: pd.DataFrame, wt: pd.DataFrame,
            bt: pd.DataFrame | None = None) -> tuple[str, str]:
    """(the chapter's answer, what follows it: the class that grows most, whether any profiled class reaches its
    ridge, the weights the largest batch reads against those it must move (`bt`: `analyze.serving.bytes_table`), and
    the what-if's error at the other batches)."""
    parts = headline_parts(st, dt, ct, tt, wt, bt)
    return parts[0], " ".join(parts[1:])


def headline_parts(st: StudyRuns, dt: pd.DataFrame, ct: pd.DataFrame, tt: pd.DataFrame, wt: pd.DataFrame,
                   bt: pd.DataFrame | None = None) -> list:
    """The step and throughput from the smallest to the largest batch, the GPU's busy share, the class that grows
    most, whether any profiled class reaches its ridge, the weights the largest batch's launches read against those it
    must move (where they read more), and the what-if's error at the other batches: one sentence each."""
    if dt.empty:
        return [tr("No point of study {study} holds a run yet.", study=st.study_id)]
    a, b = dt.iloc[0], dt.iloc[-1]
    parts = [tr("Decode under CUDA graphs, batch {b0} → {b1}: the plain step grows {s0:.2f} → {s1:.2f} ms while "
                "throughput grows {t0:,.0f} → {t1:,.0f} tokens/s ({gain:.1f}×); the GPU is busy {p0:.0f} → {p1:.0f} % of "
                "the step.", b0=int(a.batch), b1=int(b.batch), s0=a.plain_step_ms, s1=b.plain_step_ms,
                t0=a.tokens_per_s, t1=b.tokens_per_s, gain=b.tokens_per_s / a.tokens_per_s, p0=a.busy_pct,
                p1=b.busy_pct)]
    if not ct.empty and ct.batch.nunique() > 1:
        piv = ct.pivot_table(index="class", columns="batch", values="share_pct", aggfunc="sum").fillna(0.0)
        grow = (piv.iloc[:, -1] - piv.iloc[:, 0]).idxmax()
        parts.append(tr("{cls} grows most: {p0:.0f} % → {p1:.0f} % of decode kernel time.", cls=grow,
                        p0=piv.loc[grow].iloc[0], p1=piv.loc[grow].iloc[-1]))
    if not tt.empty:
        turned = tt.dropna(subset=["turns_at"]).drop_duplicates("class")
        if turned.empty:
            top = tt[tt.batch == tt.batch.max()].sort_values("of_ridge_pct", ascending=False).iloc[0]
            parts.append(tr("No profiled kernel class reaches its ridge by batch {b}: the closest, {cls}, sits at "
                            "{pct:.0f} % of it ({ai:.1f} against {ridge:.0f} FLOP/byte): decode stays bound by bytes.",
                            b=int(tt.batch.max()), cls=top["class"], pct=top.of_ridge_pct, ai=top.intensity,
                            ridge=top.ridge))
        else:
            parts.append(tr("Classes that reach their ridge: {which}.", which=", ".join(
                f"{r['class']} ({tr('batch')} {int(r.turns_at)})" for _, r in turned.iterrows())))
    if bt is not None and not bt.empty:
        last = bt.iloc[-1]
        if last.must_weight_mb < 0.99 * last.weight_mb:  # a MoE's gathers read experts more than once
            parts.append(tr("At batch {b} the step's launches read {w:,.0f} MB of weights, {x:.1f}× the {must:,.0f} MB "
                            "it must move with each expert once ({how}); it moves {total:,.0f} MB in all.",
                            b=int(last.batch), w=last.weight_mb, x=last.weight_mb / last.must_weight_mb,
                            must=last.must_weight_mb, how=say(last.experts_counted), total=last.step_mb))
    if not wt.empty and len(wt) > 1:
        other = wt[wt.batch != wt.fitted_at]
        parts.append(tr("The what-if fitted at batch {b0} predicts the other batches' plain step within {e:.1f} % "
                        "(device time within {d:.1f} %).", b0=int(wt.fitted_at.iloc[0]),
                        e=other.step_error_pct.abs().max(), d=other.device_error_pct.abs().max()))
        spike = dt[dt.first_step_ms > 2 * dt.steady_step_ms] if "first_step_ms" in dt else dt.iloc[:0]
        if not spike.empty and other.steady_error_pct.notna().all():
            w = spike.loc[(spike.first_step_ms / spike.steady_step_ms).idxmax()]
            parts.append(tr("Against the steady step it is within {s:.1f} %: each generate's first decode step is left "
                            "out, a one-off host cost of HF's generate (at batch {b} it took {f:.1f} ms against "
                            "{st:.2f} ms a step after it, its GPU work that of any step).",
                            s=other.steady_error_pct.abs().max(), b=int(w.batch), f=w.first_step_ms,
                            st=w.steady_step_ms))
    return parts


def points_note(st: StudyRuns) -> str:
    """Which points the study holds and which it lacks, with their reasons."""
    missing = [p for p in st.points if p.run is None]
    held = len(st.points) - len(missing)
    out = tr("Study {study}: {held} of its {n} points captured.", study=st.study_id, held=held, n=len(st.points))
    if missing:
        out += " " + tr("Not shown: {which}.", which="; ".join(f"{p.id} ({p.status}: {p.note or p.reason})"
                                                              for p in missing))
    return out
