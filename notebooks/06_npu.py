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
# How would this run's measured kernel mix run on other accelerators, and how far can the model that predicts it be trusted?

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# A model replays this run's launch sequence (per launch: FLOPs by unit, bytes off and on chip, the
# host gap before it, the copies that block the host) on accelerators described in `params/npus.yaml`
# and predicts vision-encode time, prefill time and decode time per token. It is validated first on
# the GPU that produced the run, each phase predicted from a fit on the other two, and, where the same
# workload was captured on another GPU, on that GPU; every recommendation below carries its what-if
# number and the error of those checks.
#
# </details>

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
deployed_run: str = "data/runs/h100-variant-static-graphs"  # the same workload as deployed (CUDA graphs); empty: none
cross_run: str = "data/runs/h200-deepseek-ocr-2"  # the same workload on another GPU, predicted from this run and back; empty: none
study_dir: str = "data/studies/h100-serving"  # a serving study of this workload: the batch lever's host time per step; empty: none

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import serving as SV
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.load.twins import twins
from kernelbook.narrate import summary as NS
from kernelbook.narrate import whatif as WN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, deployed_run=deployed_run, cross_run=cross_run, study_dir=study_dir)
given = kb.open_run(run_dir, rank=rank)
kb.not_served(WN.unmodellable(given))  # a timeline without op shapes (nsys): the note, not a failure
# the eager run and the run as deployed of this workload, whichever run_dir names (deployed_run: the twin to take
# where it is one); the model is fitted and checked on both, and the recommendations come from the deployed run
tw = twins(given, deployed_run or None, open_run=kb.open_run)
r = tw.eager if tw.eager is not None else given
tr, gpu, _, k = W.for_run(r)
designs = {gpu.key: gpu, **W.load_designs()}
val = W.validation(tr)
dep = tw.deployed if tw.deployed is not None and tw.deployed is not r else None
tr_dep, _, _, k_dep = W.for_run(dep) if dep is not None else (None, None, None, None)
tr_dep = SV.with_host_growth(tr_dep, dep, kb.study_if_given(study_dir))  # the batch lever's host per step
dep_val = W.validation(tr_dep) if tr_dep is not None else None
cross = kb.open_run(cross_run) if cross_run else None
cross_note = WN.cross_run_note(r, cross)
tr_x = W.for_run(cross)[0] if cross is not None and not cross_note else None
xd = W.cross_device(tr, tr_x) if tr_x is not None else None
xerr, env = (W.cross_device_error(xd), W.envelope(tr, tr_x)) if xd is not None else (None, None)
kb.summary(WN.answer(dep_val, tr_dep, xd) if dep is not None else WN.answer(val, tr, xd))
kb.md((NS.as_deployed_headline(WN.headline(dep_val, tr_dep), dep, r, WN.headline(val, tr))
       if dep is not None else WN.headline(val, tr))
      + (WN.cross_device_headline(xd) if xd is not None else ""), fold=kb.tr("The model's checks in full"))

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
kb.table(tr.calib.drop(columns="ops_per_element"), kb.tr("Latency L and slowdown b per kernel class, fitted on the run"))

# %%
kb.md(WN.line_note(tr) + " " + WN.issue_note(tr))

# %% [markdown]
# ## Validation on the run's own GPU
# Each phase is predicted with L and b fitted on the other two phases only, so no phase is predicted
# from its own kernel times. The replay issues each launch after the host gap the run recorded and
# blocks the host at device-to-host copies; device time is compared with the measured GPU-busy time.

# %%
kb.table(val, kb.tr("Predicted against measured, each phase held out of the fit"))

# %%
kb.md(WN.validation_prose(val, tr), fold=kb.tr("Each phase held out, in detail"))

# %% [markdown]
# ### The same model on the run as deployed
# `deployed_run` is this workload with its decode steps run as CUDA graphs (static cache, compiled step),
# as serving stacks run them. The same fit and held-out test on that run: under graphs the device is busy
# most of the step, so this is where the model's device time decides the wall.

# %%
kb.table(dep_val, kb.tr("As deployed: predicted against measured, each phase held out of the fit"),
         empty=kb.tr("no deployment-shaped run of this workload (deployed_run)")) if dep_val is not None else \
    kb.md(NS.deployed_missing(r, deployed_run))

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
kb.md(WN.cross_device_prose(xd), fold=kb.tr("The other GPU, phase by phase")) if xd is not None else None

# %% [markdown]
# Held-out error per phase and kernel class (kernel ms per step): which kernels the misses come from.

# %%
kb.table(W.error_by_class(tr), kb.tr("Held-out error per phase and kernel class"))

# %% [markdown]
# ## Where a decode step's time goes between kernels
# On a run whose decode ran as CUDA graphs the kernels of one replay follow each other after a node gap of
# well under a microsecond: there is no launch overhead per kernel left. What the plain step holds beyond the
# replay's kernels and node gaps is host time between replays, HF generate's loop (sampling, stopping checks,
# copying the next inputs into the graph's buffers, the graph launch): the model carries it as one term per
# step, not as a cost per launch. An eager run spends its host time per launch instead.

# %%
kb.table(W.replay_host_table({r.run_id: tr, **({dep.run_id: tr_dep} if tr_dep is not None else {})}),
         kb.tr("Decode step: kernels, node gaps and host time (ms per step)"))

# %% [markdown]
# ## Designs
# Each design in `params/npus.yaml` states its levers or inherits them from the GPU the model was fitted on:
# kernel floor per kernel and per graph, fraction of peak per kernel class (efficiency: 1/b), dispatch cost,
# on-chip SRAM capacity and bandwidth, weight precision. Each lever column says which: "(own)" where the
# design states it, "(inherited)" where it carries the fitted GPU's value. An SRAM that keeps weights holds
# the most-read weights first up to its capacity (the resident MiB of one decode step's weights are shown);
# the rest still streams from DRAM. Times are for a plain run (host gaps ÷ the capture's profiled/plain ratio);
# the decode figure of the run as deployed (CUDA graphs) sits beside the one of this run, each with the model's
# error on its run: as fitted on all phases, and with decode held out of the fit.

# %%
kb.table(WN.design_table(W.design_table(designs, tr, env, deployed=tr_dep, val=val, dep_val=dep_val, xerr=xerr)),
         kb.tr("Predicted times per design"), columns=WN.design_headers())

# %%
kb.md(WN.deployed_note(W.deployed_step_figures(tr, tr_dep))) if tr_dep is not None else None

# %% [markdown]
# ## The levers one at a time
# Decode time per token with one lever moved from the fitted GPU: the kernel floor, all kernels at peak
# (efficiency), both, DRAM bandwidth, an SRAM keeping the hottest weights (partial residency), fp8 or int4
# weights (weight bytes only: activations, KV cache and compute unchanged), and batch. Where this run decoded
# eagerly, its column issues launches as a graph (2 µs each); the deployed column is the CUDA-graph run as it ran.

# %%
kb.table(WN.lever_table(W.lever_table(tr, gpu, tr_dep, val=val, dep_val=dep_val)),
         kb.tr("Decode per token, one lever at a time"))

# %% [markdown]
# ## Sensitivity
# Each row of panels moves one lever with the rest of the measured GPU fixed: kernel floor, efficiency (the
# fraction of peak every kernel class sustains), DRAM bandwidth, an on-chip SRAM that keeps the most-read
# weights (partial residency: the curve falls smoothly as more weights fit), bytes per weight (int4, fp8,
# bf16) and batch. One line per way of dispatching decode: this run's own host gaps, launches issued as a graph
# at 2 µs each, and the run as deployed (CUDA graphs, with its host time between replays as one term per step);
# on a run whose decode ran as graphs, that run alone. Dots mark the knee where the lever stops mattering
# (within 5 % of the best time in the sweep). The green band on the DRAM bandwidth panels is the stretch the
# cross-device check covered.

# %%
sens = WN.sensitivity(W.sensitivity_both(tr, gpu, deployed=tr_dep))
F.sensitivity_grid(sens, W.knees_both(sens), env)

# %%
kb.md(WN.sensitivity_note(xerr, env) + "\n\n" + WN.sensitivity_errors(tr, val, tr_dep, dep_val),
      fold=kb.tr("How to read the curves, and the error each carries"))

# %% [markdown]
# ## Recommendations for the nine areas
# Drawn from the run as deployed where the workload has one (decode as CUDA graphs: what a serving stack runs),
# else from this run. Evidence from that run, the what-if number, its uncertainty from the cross-device check
# (and the ways its design lies outside what that check covered), a confidence, and the reference report's
# claim beside.

# %%
kb.md(NS.twins_note(tw, r))

# %%
kb.table(WN.recommendations(tr_dep, gpu, k_dep, T.category_shares(dep.timeline), xerr=xerr, env=env)
         if dep is not None else WN.recommendations(tr, gpu, k, T.category_shares(r.timeline), xerr=xerr, env=env),
         kb.tr("Recommendations with their what-if numbers"))
