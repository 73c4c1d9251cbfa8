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
# Which of the selected kernels were profiled (and why any was not), how much of each phase's GPU
# time they explain, their hardware counters, and whether ncu's numbers agree with the timeline and
# with the FLOPs the GEMM shapes imply.

# %% tags=["parameters"]
run_dir: str = "data/runs/h200-deepseek-ocr-2"  # run directory the book reads (the bundled run by default)

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import ncu_report as N
from kernelbook.plots import figures as F

kb.setup()
r = kb.open_run(run_dir, needs="ncu")
kernels = r.ncu_kernels()
cov = N.coverage(kernels)
fid = N.fidelity(kernels, r.timeline)
kb.summary(N.headline(cov, fid, r.manifest))

# %% [markdown]
# ## Coverage
# Every selected kernel ends `profiled` or with the reason it is not.

# %%
cov

# %%
kb.md(N.coverage_prose(cov, kernels, r.manifest))

# %% [markdown]
# ## Per-kernel metrics
# One representative launch per kernel (the launch configuration holding most of its time).
# Percentages are of the device's sustained peak; bytes and FLOPs are per launch.

# %%
N.metric_table(kernels, r.timeline)

# %% [markdown]
# ## Fidelity
# ncu replays each kernel in isolation with its own caches and clocks (`--cache-control` and
# `--clock-control` as recorded), so its duration can differ from the same kernel inside the
# timeline. Tensor-core FLOPs are checked against 2·M·N·K from each GEMM's aten shapes.

# %%
fid

# %%
F.fidelity_scatter(fid)

# %%
kb.md(N.fidelity_prose(fid))
