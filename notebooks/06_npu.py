# %% [markdown]
# # 06 · NPU what-if: the measured kernel mix on other hardware
#
# A model replays this run's kernels (work per launch: FLOPs by unit, bytes off and on chip, launch
# count, phase) on accelerators described in `params/npus.yaml` and predicts vision-encode time,
# prefill time and decode time per token. It is validated first on the GPU that produced the run;
# every recommendation below carries its what-if number.

# %% tags=["parameters"]
run_dir: str = "data/runs/h200-deepseek-ocr-2"  # run directory the book reads

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.load.run import load_run
from kernelbook.plots import figures as F

kb.setup()
r = load_run(run_dir)
k = R.profiled_kernels(r)
work = W.work_table(r.timeline, k if len(k) else None)
summary = T.phase_summary(r.timeline, r.phases)
m = W.measured(summary, r.manifest)
steps = dict(zip(m.phase, m.steps))
host_us = W.host_time_per_launch_us(summary, r.manifest)
designs = W.load_designs()
gpu = designs["h200-as-measured"]
active = W.active_weight_bytes(work, steps.get("decode", 1))
val = W.validation(work, gpu, summary, r.manifest)
kb.summary(W.headline(val, host_us))

# %% [markdown]
# ## Where the work numbers come from
# Rows of the work table (kernel identity × shapes × phase) by source.

# %%
work.groupby(["phase", "source"]).agg(rows=("name", "size"), launches=("launches", "sum"),
                                      kernel_ms=("total_ns", lambda s: s.sum() / 1e6)).reset_index()

# %% [markdown]
# ## Validation on the run's own GPU
# Wall time per step vs the plain-run estimate (profiled wall ÷ the capture's profiled/plain ratio),
# and modelled device time vs measured GPU-busy time. Host time per launch is the run's own (decode),
# so decode wall agrees by construction; the device column is the independent test.

# %%
val

# %%
kb.md(W.validation_prose(val, host_us, gpu))

# %% [markdown]
# ## Designs

# %%
W.design_table(designs, work, host_us, steps, active)

# %% [markdown]
# ## Sensitivity
# Each panel moves one resource with the rest of the measured GPU fixed, at the run's eager host time
# per launch and at a graph-style 2 µs; dots mark the knee where the resource stops mattering (within
# 5 % of the best time in the sweep).

# %%
sens = W.sensitivity_both(work, gpu, host_us, steps, active)
F.sensitivity_grid(sens, W.knees_both(sens))

# %% [markdown]
# ## Recommendations for the nine areas
# Evidence from this run, the what-if number, a confidence, and the reference report's claim beside.

# %%
W.recommendations(work, gpu, host_us, steps, active, k, T.category_shares(r.timeline))
