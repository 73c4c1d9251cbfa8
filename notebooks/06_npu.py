# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · NPU what-if: the measured kernel mix on other hardware
#
# A model replays this run's launch sequence (per launch: FLOPs by unit, bytes off and on chip, the
# host gap before it, the copies that block the host) on accelerators described in `params/npus.yaml`
# and predicts vision-encode time, prefill time and decode time per token. It is validated first on
# the GPU that produced the run, each phase predicted from a fit on the other two, and, where the same
# workload was captured on another GPU, on that GPU; every recommendation below carries its what-if
# number and the error of those checks.

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
deployed_run: str = "data/runs/h100-variant-static-graphs"  # the same workload as deployed (CUDA graphs); empty: none
cross_run: str = "data/runs/h200-deepseek-ocr-2"  # the same workload on another GPU, predicted from this run and back; empty: none

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import summary as S
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, deployed_run=deployed_run, cross_run=cross_run)
r = kb.open_run(run_dir, rank=rank)
tr, gpu, _, k = W.for_run(r)
designs = {gpu.key: gpu, **W.load_designs()}
val = W.validation(tr)
dep = S.deployed_of(r, kb.open_run(deployed_run) if deployed_run else None)
dep_val = W.validation(W.for_run(dep)[0]) if dep is not None else None
cross = kb.open_run(cross_run) if cross_run else None
cross_note = W.cross_run_note(r, cross)
tr_x = W.for_run(cross)[0] if cross is not None and not cross_note else None
xd = W.cross_device(tr, tr_x) if tr_x is not None else None
xerr, env = (W.cross_device_error(xd), W.envelope(tr, tr_x)) if xd is not None else (None, None)
kb.summary(W.headline(val, tr) + (S.deployed_headline(dep, dep_val) if dep is not None else "")
           + (W.cross_device_headline(xd) if xd is not None else ""))

# %%
kb.missing_note(run_dir, "ncu")

# %% [markdown]
# ## Where the work numbers come from
# Rows of the work table (phase × kernel × op shapes × grid) by source, with their launches and kernel
# time. Rows "scaled from category" have no work of their own; their measured time is carried over.

# %%
kb.table(tr.work.groupby(["phase", "source"]).agg(rows=("name", "size"), launches=("launches", "sum"),
                                                  kernel_ms=("total_ns", lambda s: s.sum() / 1e6)).reset_index(),
         kb.tr("Work table rows by source"))

# %% [markdown]
# ## Kernel latency and slowdown, fitted on the run
# Device time of a launch = L + b × ideal, ideal being the slowest unit at the design's peak (tensor
# FLOPs, CUDA-core FLOPs, DRAM bytes, on-chip bytes). Per kernel class, L is the median time of the
# launches that do almost no work and b the median ratio of the rest to their ideal; PyTorch's
# vectorised elementwise path is fitted apart from its strided/broadcast path, indexed writes apart from
# gathers. φ is the share of the DRAM term that moves with another design's bandwidth: the class's ncu
# DRAM throughput as a fraction of peak, time-weighted (the rest keeps this GPU's time per byte).

# %%
kb.table(tr.calib, kb.tr("Latency L and slowdown b per kernel class, fitted on the run"))

# %% [markdown]
# ## Validation on the run's own GPU
# Each phase is predicted with L and b fitted on the other two phases only, so no phase is predicted
# from its own kernel times. The replay issues each launch after the host gap the run recorded and
# blocks the host at device-to-host copies; device time is compared with the measured GPU-busy time.

# %%
kb.table(val, kb.tr("Predicted against measured, each phase held out of the fit"))

# %%
kb.md(W.validation_prose(val, tr))

# %% [markdown]
# ### The same model on the run as deployed
# `deployed_run` is this workload with its decode steps run as CUDA graphs (static cache, compiled step),
# as serving stacks run them. The same fit and held-out test on that run: under graphs the device is busy
# most of the step, so this is where the model's device time decides the wall.

# %%
kb.table(dep_val, kb.tr("As deployed: predicted against measured, each phase held out of the fit"),
         empty=kb.tr("no deployment-shaped run of this workload (deployed_run)")) if dep_val is not None else \
    kb.md(S.deployed_missing(r, deployed_run))

# %% [markdown]
# ### The model on a GPU it never saw
# `cross_run` is this workload captured on another GPU. The model is fitted on one run (all its phases)
# and predicts the other GPU from that GPU's design alone: devices.yaml compute, DRAM bandwidth and L2 size,
# the L2 roof from its ncu counters and its kernel floor (the 5th percentile of its kernel durations); none
# of its kernel times. Then the other way round. Per phase the first row is the device time against the
# measured GPU-busy time, the class rows kernel time; the gain is the fitting GPU's time over the other's,
# the model's own ratio against the measured one.

# %%
kb.table(xd, kb.tr("Cross-device check: each GPU predicted from the other's run (ms per step)")) \
    if xd is not None else kb.md(cross_note)

# %%
kb.md(W.cross_device_prose(xd)) if xd is not None else None

# %% [markdown]
# Held-out error per phase and kernel class (kernel ms per step): which kernels the misses come from.

# %%
kb.table(W.error_by_class(tr), kb.tr("Held-out error per phase and kernel class"))

# %% [markdown]
# ## Designs
# Predicted times for a plain run (host gaps ÷ the capture's profiled/plain ratio) on each design in
# `params/npus.yaml`; designs that leave latency or efficiency null carry the run's fitted values.

# %%
kb.table(W.design_table(designs, tr, env), kb.tr("Predicted times per design"))

# %% [markdown]
# ## Sensitivity
# Each panel moves one resource with the rest of the measured GPU fixed, at the run's eager host gaps
# and at a graph-style 2 µs per launch; dots mark the knee where the resource stops mattering (within
# 5 % of the best time in the sweep). The host-time panels set the host time directly, so their two
# lines coincide. The green band on the DRAM bandwidth panels is the stretch the cross-device check covered.

# %%
sens = W.sensitivity_both(tr, gpu)
F.sensitivity_grid(sens, W.knees_both(sens), env)

# %%
kb.md(W.sensitivity_note(xerr, env))

# %% [markdown]
# ## Recommendations for the nine areas
# Evidence from this run, the what-if number, its uncertainty from the cross-device check (and the ways
# its design lies outside what that check covered), a confidence, and the reference report's claim beside.

# %%
kb.table(W.recommendations(tr, gpu, k, T.category_shares(r.timeline), xerr=xerr, env=env),
         kb.tr("Recommendations with their what-if numbers"))
