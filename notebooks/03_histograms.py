# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Histograms: what the profiled kernels look like
#
# What do the profiled kernels look like across the reference report's 13 metrics, counted by kernel and weighted by time?

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# The reference report's 13 metric distributions over the profiled kernels of one phase, each twice:
# by kernel count (what a typical kernel is like) and weighted by time (where the time goes; a
# kernel's weight is its share of the phase's kernel time, all launches). Percentages are of the
# device's sustained peak as ncu reports it.
#
# </details>

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
phase: str = "decode"  # phase whose profiled kernels are shown

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import histograms as H
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze.roofline import profiled_kernels
from kernelbook.narrate import histograms as HN
from kernelbook.narrate import ncu_report as NN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, phase=phase)
r = kb.open_run(run_dir, rank=rank, needs="ncu", phase=phase)
k = profiled_kernels(r)
k = k[k.phase == phase]
fid = N.fidelity(r.ncu_kernels(), r.timeline, r.manifest)  # chapter 02's ncu in context, in-loop reads included
in_loop = N.in_loop_l2(fid)  # producer → consumer kernels
cap = HN.captions(H.captions(k))
kb.summary(HN.headline(cap, phase))

# %%
F.histogram_grid(HN.shown(H.histogram_table(k)), cap)

# %% [markdown]
# ## Captions
# Medians by count and by time, and the share of profiled time at or above the healthy level (where
# there is one: the project's rules of thumb, whose sources and reasons chapter 05 gives under its health table).

# %%
kb.table(cap[["metric", "unit", "kernels", "median", "time_weighted_median", "threshold", "time_pct_at_or_above"]],
         kb.tr("The {phase} histograms in numbers", phase=kb.phase_label(phase)),
         notes={"threshold": kb.tr("no healthy level for this metric in the project's rules of thumb"),
                "time_pct_at_or_above": kb.tr("no healthy level")})

# %%
kb.md(HN.prose(cap, phase))

# %%
kb.md(NN.cache_control_note(r.manifest, "03", in_loop, fid))
