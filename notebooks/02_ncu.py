# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Nsight Compute: the kernels that matter, counted
#
# Which kernels did Nsight Compute profile, how much GPU time do they explain, and do its counters agree with the shapes?

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads (the bundled run by default)
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
capture: str = "auto"  # auto: capture what run_dir lacks when this machine can (GPU), else read; never; always (new run_dir)
params_file: str = ""  # capture parameters (YAML, e.g. params/default.yaml) used when this chapter captures

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import provenance as V
from kernelbook.narrate import ncu_report as NN
from kernelbook.narrate import modules as MN
from kernelbook.narrate import provenance as VN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, capture=capture, params_file=params_file)
took = kb.capture_part(run_dir, "ncu", capture, params_file)
r = kb.open_run(run_dir, rank=rank, needs="ncu")
kernels = r.ncu_kernels()
cov = N.coverage(kernels)
fid = N.fidelity(kernels, r.timeline, r.manifest, r.ncu_metrics())
kb.summary(NN.headline(cov, fid, r.manifest))

# %% [markdown]
# ## How the counters were taken
# From the manifest: how kernels were selected and identified, ncu's controls and command, how many
# launches it profiled per selected kernel and what that cost.

# %%
kb.md(VN.decision(took, "ncu"))

# %%
kb.table(VN.table(V.ncu_account(r.manifest)), kb.tr("Nsight Compute capture"))

# %% [markdown]
# ## Coverage
# Every selected kernel ends `profiled` or with the reason it is not.

# %%
kb.table(cov, kb.tr("Coverage of the selected kernels, per phase"))

# %%
kb.md(NN.coverage_prose(cov, kernels, r.manifest))

# %% [markdown]
# ## Per-kernel metrics
# One representative launch per kernel (the launch configuration holding most of its time).
# Percentages are of the device's sustained peak; bytes and FLOPs are per launch.

# %%
kb.table(NN.metric_table(MN.with_kernel_modules(N.metric_table(kernels, r.timeline), kernels, r.timeline)),
         kb.tr("Per-kernel metrics (one representative launch per kernel)"), notes=NN.METRIC_MISSING)

# %% [markdown]
# ## The few launches that hold a kernel's time
# ncu profiled one launch of each kernel, yet a kernel can spend most of its time in a few launches far
# longer than the rest. For each profiled kernel whose launches are heavy-tailed (the rule is stated
# below), its longest launches grouped by the module that launched them, the aten op and its shapes: how
# many per step or call, how long each, and what share of the kernel's and of the phase's time they hold.

# %%
ht = N.heavy_tailed(kernels, r.timeline)
hl = N.heavy_launches(ht, r.timeline, r.manifest)
kb.md(NN.heavy_prose(ht, hl), fold=kb.tr("How heavy-tailed each kernel's launches are"))

# %%
kb.table(N.heavy_table(hl), kb.tr("The few launches that hold its time"), columns=NN.heavy_headers(),
         notes=NN.HEAVY_MISSING, empty=kb.tr("No profiled kernel's launches are heavy-tailed."))

# %%
kb.md(NN.vision_prose(N.vision_heavy(ht, hl, r.timeline), kernels))

# %% [markdown]
# ## Fidelity: ncu in context
# ncu replays each kernel in isolation with its own caches and clocks (`--cache-control` and
# `--clock-control` as recorded), so its duration can differ from the same kernel inside the
# timeline. Each kernel is compared with the timeline launches of its own launch shape (grid, block
# and aten shapes of the launch ncu profiled), never pooled with other shapes of the same grid; a
# difference above 1.25× gets its reason. A kernel whose loop launch reads what the launch before it
# has just written (producer → consumer) finds part of it in L2, which the replay flushed: its
# cold-cache counters overstate the loop's DRAM traffic. Counted FLOPs are checked against the useful
# work of the shapes — 2·M·N·K for a matrix product (a grouped MoE GEMM against the sum over its
# groups), one per element for a pointwise op or a sum — and every difference gets its verdict.

# %%
kb.table(NN.fidelity_table(fid), kb.tr("Fidelity: ncu against the loop per launch shape, counted FLOPs against the shapes"),
         notes=NN.FIDELITY_MISSING)

# %%
F.fidelity_scatter(fid)

# %%
kb.md(NN.fidelity_prose(fid), fold=kb.tr("Each launch shape, ncu against the loop"))

# %% [markdown]
# ## Byte fidelity
# ncu's DRAM bytes against what each kernel with shapes must move: a matrix product's weights and
# activations (a grouped MoE GEMM: every expert's weights) and its output, an attention kernel's q and
# its K and V (the KV cache in decode), a pointwise op's, copy's or reduction's inputs and output. With
# caches flushed these come from DRAM once per launch; far below means cache-resident under replay
# (`--cache-control none`) or one kernel of several the op launches, far above means over-fetching —
# or, for a launch of a few kB, what every cold launch reads besides its operands.

# %%
bf = N.byte_fidelity(kernels, r.timeline, r.manifest, N.in_loop_l2(fid))
kb.table(NN.byte_table(bf), kb.tr("Byte fidelity: DRAM bytes against the bytes the shapes imply"),
         empty=kb.tr("No profiled matrix or attention kernel has shapes that say what it must move."))

# %%
kb.md(NN.byte_fidelity_prose(bf, r.manifest), fold=kb.tr("Each kernel's bytes against the bytes its shapes imply"))
