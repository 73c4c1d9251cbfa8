"""The first page's sentences (the index, chapter 07's opening and report.md), from `analyze.findings`: one sentence
per finding (at most 30 words) with its basis and a link to the section that holds its evidence, then the bound of
each phase and the top three levers on one scale."""
from __future__ import annotations

from urllib.parse import quote

import pandas as pd

from .. import escape
from ..analyze.findings import Finding
from ..i18n import N_, tr
from ..i18n import heading as shown_heading
from . import say

MAX_WORDS = 30


def anchor(heading: str) -> str:
    """The fragment that lands on a chapter's section: nbconvert's id for the heading as the reader's language shows it
    (spaces as '-', characters a URL fragment may not hold percent-encoded), its ':' encoded too, which the
    browser decodes to find the id (a bare ':' would make the link read as a URL scheme to a Markdown renderer)."""
    return quote(shown_heading(heading).replace(" ", "-"), safe="?/@!$&'()*+,;=")


def href(f: Finding) -> str:
    return f"{f.chapter}.html#{anchor(f.section)}"


def sentence(f: Finding) -> str:
    """The finding as one sentence in the reader's language."""
    v = f.values
    if f.key == "decode_share":
        return tr("Decode takes {pct:.0f} % of the plain generate ({steps} steps).", **v)
    if f.key == "limit" and v["graphs"]:
        return tr("As deployed (CUDA graphs), a decode step takes {step_ms:.2f} ms, {x:.1f}× the {limit_ms:.2f} ms its "
                  "weights and KV cache need at measured DRAM bandwidth.", **v)
    if f.key == "limit":
        return tr("An eager decode step takes {step_ms:.2f} ms, {x:.1f}× the {limit_ms:.2f} ms its weights and KV "
                  "cache need at measured DRAM bandwidth.", **v)
    if f.key == "host" and v["graphs"]:
        return tr("{pct:.0f} % of that step ({host_ms:.2f} of {step_ms:.2f} ms) is host time between graph replays: "
                  "no kernel runs.", **v)
    if f.key == "host":
        return tr("{pct:.0f} % of that step ({host_ms:.2f} of {step_ms:.2f} ms) is host time between kernel launches: "
                  "no kernel runs.", **v)
    if f.key == "kernel_class":
        return tr("{cls} kernels take {pct:.0f} % of decode kernel time, {ms:.2f} ms per step.",
                  cls=tr(v["cls"]), pct=v["pct"], ms=v["ms"])
    if f.key == "graphs" and v.get("range"):
        lo, hi = v["range"]
        return tr("CUDA graphs measured {gain:.1f}× faster decode than HF's eager loop ({lo:.1f}–{hi:.1f}× across "
                  "the eager run's timing trials): {eager_ms:.2f} → {deployed_ms:.2f} ms per step.",
                  lo=lo, hi=hi, **v)
    if f.key == "graphs":
        return tr("CUDA graphs measured {gain:.1f}× faster decode than HF's eager loop: {eager_ms:.2f} → "
                  "{deployed_ms:.2f} ms per step.", **v)
    if f.key == "lever_software":
        return tr("Best software lever: {lever} ({setting}), {pct:.0f} % off the deployed decode step.",
                  lever=say(v["lever"]), setting=say(v["setting"]), pct=v["pct"])
    if f.key == "lever_hardware":
        return tr("Best hardware lever: {lever} at {setting}, {pct:.0f} % off the deployed decode step by the "
                  "what-if.", lever=say(v["lever"]), setting=say(v["setting"]), pct=v["pct"])
    raise ValueError(f"no sentence for the finding {f.key!r}")


BASIS = {"plain": N_("plain, unprofiled"), "plain against GPU-busy": N_("plain step against GPU-busy time"),
         "GPU-busy": N_("GPU-busy time"), "measured kernel time": N_("measured kernel time removed"),
         "model": N_("chapter 06's model")}


def basis(f: Finding) -> str:
    return tr("{basis}; run {run}", basis=tr(BASIS.get(f.basis, f.basis)), run=f.run_id)


def bounds(stages: pd.DataFrame) -> pd.DataFrame:
    """Each phase's bound and its first opportunity (the contract's stages table, three of its columns)."""
    return pd.DataFrame({"phase": list(stages.Stage), "bound": list(stages.Bottleneck),
                         "first_opportunity": list(stages["Key Issue"])})


def levers(top: pd.DataFrame) -> pd.DataFrame:
    """The top levers: name, kind, setting and the share of the deployed decode step each takes off."""
    return pd.DataFrame({"lever": [say(x) for x in top.lever], "lever_kind": [say(x) for x in top.kind],
                         "setting": [say(x) for x in top.setting],
                         "off_step": [f"{-float(x):.0f} %" for x in top["change %"]]})


def html(found: list[Finding], stages: pd.DataFrame, top: pd.DataFrame) -> str:
    """The first page as HTML (the index; chapter 07 shows it too): the findings, each phase's bound, the top levers,
    the tables through the display layer (sortable as in every chapter)."""
    from ..display import table

    e = escape.html
    items = "".join(f'<li>{e(sentence(f))} <span class="basis">({e(basis(f))})</span> '
                    f'<a href="{e(href(f))}">{e(tr("evidence"))} →</a></li>' for f in found)
    out = [f'<h2>{e(tr("Findings"))}</h2><ol class="findings">{items}</ol>' if found else
           f'<h2>{e(tr("Findings"))}</h2><p>{e(tr("The run supports no finding yet (no decode phase)."))}</p>']
    if not stages.empty:
        out.append(f'<h3>{e(tr("The bound of each phase"))}</h3>' + table(bounds(stages)).html)
    if not top.empty:
        out.append(f'<h3>{e(tr("The top three levers, on one scale"))}</h3>' + table(levers(top)).html)
    return "\n".join(out)


def markdown(found: list[Finding]) -> str:
    """The findings as report.md opens with them (links relative to the rendered book beside it)."""
    if not found:
        return ""
    lines = [f"## {tr('Findings')}", ""]
    lines += [f"{i}. {escape.md(sentence(f))} *({escape.md(basis(f))})* [{tr('evidence')}]({href(f)})"
              for i, f in enumerate(found, 1)]
    return "\n".join(lines) + "\n"
