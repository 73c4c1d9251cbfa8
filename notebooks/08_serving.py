# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Serving: the workload over batch sizes, as deployed
#
# How do the decode step, throughput and kernel mix move as the serving batch grows under CUDA graphs?

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# One workload captured at several batch sizes with decode as CUDA graphs (a study: `python -m kernelbook study`),
# read together: how the decode step and throughput move with the batch, which kernel classes take the time, where
# the profiled kernels sit against their ridge, what each token costs in bytes, and how well the what-if fitted at
# the smallest batch predicts the others.
#
# </details>

# %% tags=["parameters"]
study_dir: str = "data/studies/h100-serving"  # study folder (kernelbook study); empty: none
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import serving as SV
from kernelbook.narrate import serving as NS
from kernelbook.plots import figures as F

kb.setup(language, study_dir=study_dir)
st = kb.open_study(study_dir)
dt = SV.decode_table(st)
ct = SV.class_table(st)
kt = SV.kernel_table(st)
tt = SV.turn_table(kt)
traces = SV.traces_of(st)
wt, wc = SV.whatif_table(st, traces)
bt = SV.bytes_table(st, traces)
answer, rest = NS.opening(st, dt, ct, tt, wt, bt)
kb.summary(answer)
kb.paragraph(rest)
kb.md(NS.points_note(st))

# %% [markdown]
# ## The points
# One run per point of the grid, each a complete capture (timeline of every decode step, ncu on the top decode
# kernels). A point that failed is listed with its reason.

# %%
kb.table(SV.points_table(st), kb.tr("Points of the study"))

# %% [markdown]
# ## Decode step and throughput per batch
# Plain step: the wall time of a decode step in `generate()` calls without the profiler (every step timed). GPU busy: the
# step's kernels on the GPU's own timeline. Host: the rest of the plain step (HF generate's loop between graph
# replays). Tokens per second: batch ÷ plain step.

# %%
F.serving_steps(dt)

# %%
kb.table(dt, kb.tr("Decode step per batch"))

# %% [markdown]
# ## Where the kernel time goes
# Decode kernel time per step by class (the work a kernel does, not its library), GPU-busy basis.

# %%
F.serving_classes(ct)

# %%
kb.table(SV.by_batch(ct, "share_pct", "pct"), kb.tr("Share of decode kernel time (%) per class and batch"))

# %% [markdown]
# ## The profiled kernels against their ridge
# Each point's top decode kernels under ncu (caches flushed between replay passes). Intensity: FLOPs as counted
# (tensor-core MMA padding included) per DRAM byte. The ridge is where the kernel's compute roof meets the DRAM
# roof (tensor bf16 for matrix kernels, CUDA-core fp32 for the rest); below it a kernel is bound by bytes.

# %%
F.serving_roofline(kt, SV.roofs_of(st))

# %%
kb.table(NS.kernel_table(kt), kb.tr("Profiled decode kernels per batch"))

# %%
kb.table(tt, kb.tr("Kernel classes against their ridge per batch (time-weighted)"))

# %% [markdown]
# ## Bytes per token
# DRAM bytes a decode step moves by the shapes of its launches, as executed: each launch reads its operands once,
# so a MoE step that gathers each token's experts reads them once per token, not once per batch. Beside them, the
# weights the step must move, each once: of a MoE's experts, those its routers picked where the capture recorded them.

# %%
kb.table(NS.bytes_table(bt), kb.tr("Decode bytes per step and per token"))

# %% [markdown]
# ## The what-if fitted at the smallest batch
# Chapter 06's model fitted on the smallest batch's run and moved to each batch by its batch lever (FLOPs and
# activation bytes × batch, weights once), against what each batch measured: the step on the plain basis, device
# time against GPU-busy time, then per kernel class.

# %%
kb.table(wt, kb.tr("Predicted from the smallest batch against measured, per batch"))

# %%
kb.table(SV.by_batch(wc, "error_ms", "ms"), kb.tr("Predicted − measured decode kernel ms per step, per class and batch"))

# %% [markdown]
# ## The chapters
# [00 · Setup](00_setup.html) · [01 · Timeline](01_timeline.html) · [02 · Nsight Compute](02_ncu.html) ·
# [03 · Histograms](03_histograms.html) · [04 · Roofline](04_roofline.html) ·
# [05 · Classification](05_classification.html) · [06 · NPU what-if](06_npu.html) · [07 · Summary](07_summary.html)
