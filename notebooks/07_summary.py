# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Summary: where the time goes, what bounds it, and what changing it measured
#
# Where does the time go, what bounds it, and what did changing it measure? The book on one page.

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# The book on one page: time per phase, the decode step against the bytes it must move, each phase's
# bound and its top opportunities, the NPU what-if's headline, and the optimization loop — for each
# variant of this run (a capture that changed one thing), the gain chapter 06's model predicted from
# this run beside the gain measured.
#
# </details>

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads (the baseline of the variants)
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
variant_runs: list = ["data/runs/h100-variant-static-graphs", "data/runs/h100-variant-batch8",
                      "data/runs/h100-variant-eager-attention"]  # variant runs of run_dir
baseline_run: str = ""  # a run to compare run_dir against; empty: no comparison section
cross_run: str = "data/runs/h200-deepseek-ocr-2"  # the same workload on another GPU: the what-if's cross-device error; empty: none
study_dir: str = "data/studies/h100-serving"  # a serving study of this workload: the batch lever's host time per step; empty: none
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import findings as FD
from kernelbook.analyze import levers as L
from kernelbook.analyze import serving as SV
from kernelbook.analyze import summary as S
from kernelbook.analyze import timeline as T
from kernelbook.analyze import whatif as W
from kernelbook.load.twins import twins
from kernelbook.narrate import findings as FN
from kernelbook.narrate import levers as NL
from kernelbook.narrate import modules as MN
from kernelbook.narrate import said, say
from kernelbook.narrate import summary as NS
from kernelbook.narrate import whatif as WN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, variant_runs=variant_runs, baseline_run=baseline_run,
         cross_run=cross_run, study_dir=study_dir)
given = kb.open_run(run_dir, rank=rank)
kb.not_served(WN.unmodellable(given))  # a timeline without op shapes (nsys): the note, not a failure
# the eager run and the run as deployed of this workload, whichever run_dir names: the chapter reads the same pair
# (and tells the same conclusions) from either; the eager run is the baseline the variants are set against
tw = twins(given, open_run=kb.open_run)
r = tw.eager if tw.eager is not None else given
tr, gpu, roofs, k = W.for_run(r)
asked = [kb.open_run(p) for p in variant_runs]
if tw.deployed is not None and tw.deployed is not r and all(v.path != tw.deployed.path for v in asked):
    asked.insert(0, tw.deployed)
kept, left_out = S.variants_of(r, [v for v in asked if v.path != r.path])
variants = [(v, W.for_run(v)[0]) for v in kept]
phases = S.phase_table(r)
limit = S.decode_limit(tr, r, roofs)
rows = S.variant_rows(tr, gpu, r, variants)
deploy = S.deployed(r, limit, variants)
controls = {v.run_id: S.host_control(r, v) for v, _ in variants}
stages, sections = NS.contract(r, k, roofs)
tr_dep = SV.with_host_growth(S.trace_of(tw.deployed, variants), tw.deployed, kb.study_if_given(study_dir))
lev = L.levers(tw.deployed, tw.eager, tr_dep, W.validation(tr_dep)) if tr_dep is not None else None
other_host = {rid for rid, c in controls.items() if len(c)}
answer, rest = NS.opening(phases, limit, rows, deploy, other_host)
kb.summary(answer)
kb.paragraph(rest)
found = FD.first(FD.findings(r, tw.deployed, limit, deploy, lev))
# each phase's bound on the first page is the deployed run's, where there is one: what serving would meet
dep_stages = NS.contract(tw.deployed, *W.for_run(tw.deployed)[:-3:-1])[0] if tw.deployed is not None else stages
kb.findings(FN.html(found, dep_stages, FD.top_levers(lev)), FN.markdown(found))
kb.md(NS.twins_note(tw, r), fold=kb.tr("Which runs this chapter reads"))

# %% [markdown]
# ## Where the time goes
# Wall time of each phase in the profiled generate call and the GPU-busy time inside it.

# %%
kb.table(phases, kb.tr("Time per phase (profiled pass)"))

# %%
F.phase_bars(T.phase_summary(r.timeline, r.phases))

# %% [markdown]
# ## The decode step against its physical limit
# Every decode step must stream the active weights and the KV cache from DRAM once; nothing can make
# it faster than those bytes at the measured bandwidth.

# %%
kb.table(NS.limit_table(limit), kb.tr("One decode step: bytes, limit and measured time"),
         empty=kb.tr("the run has no decode phase"))

# %%
kb.md(NS.limit_prose(limit))

# %% [markdown]
# ### Where the distance from the limit goes
# Chapter 01's bytes ledger, by module type: the bytes one decode step's kernels moved against the bytes the
# module must move, and how much of the plain step is not kernel time at all.

# %%
kb.md(MN.run_ledger(r)[1], fold=kb.tr("The ledger, module by module"))

# %% [markdown]
# ### Eager against deployed
# Serving stacks run each decode step as CUDA graphs, not HF's eager loop: the same limit against the plain step
# of this run and of each variant whose decode ran as graphs.

# %%
kb.table(deploy, kb.tr("Decode per step: eager and as deployed, against the physical limit (ms; × the limit)"),
         empty=kb.tr("the run has no decode phase"))

# %%
kb.md(NS.deployed_prose(deploy, limit))

# %% [markdown]
# ### The run as deployed
# Its own decode figures, which the first page quotes.

# %%
kb.md(NS.deployed_decode_prose(tw.deployed))

# %%
kb.table(FD.decode_categories(tw.deployed), kb.tr("Decode kernel time by category, as deployed")) \
    if tw.deployed is not None else None

# %% [markdown]
# ## Bounds and the top opportunities
# The class that holds most of each profiled phase's kernel time (chapter 05) and its three largest
# opportunities, with their estimated gains; the same block is the run's `report.md`, the profiler
# output contract.

# %%
kb.table(stages, kb.tr("Stages: duration, tensor-core, DRAM and occupancy % (time-weighted), bound, key issue"),
         empty=kb.tr("no profiled kernels"))

# %%
kb.md(say(sections), fold=kb.tr("Each phase's classes and opportunities, as report.md lists them"))

# %% [markdown]
# ## The NPU what-if in one line

# %%
cross = kb.open_run(cross_run) if cross_run else None
xd = W.cross_device(tr, W.for_run(cross)[0]) if cross is not None and W.cross_run_problem(r, cross) is None else None
kb.md(WN.headline(W.validation(tr), tr) + (WN.cross_device_headline(xd) if xd is not None else ""))

# %% [markdown]
# ## Levers on one scale
# Software levers (measured kernel time removed from the deployed run's step) beside chapter 06's hardware levers
# (the model's change, with its error), each as decode ms per token of the deployed step, ranked by gain. A lever
# the deployed run already has is listed as such, not proposed.

# %%
kb.table(NL.table(lev if lev is not None else L.empty()), kb.tr("Levers on one scale"),
         empty=kb.tr("no run of this workload as deployed (decode as CUDA graphs)"))

# %%
kb.md(NL.levers_prose(lev, tw.deployed) if lev is not None else "")

# %% [markdown]
# ## Variants: predicted against measured
# Each variant changed one capture parameter. The prediction is chapter 06's model on this run with
# the matching lever. Where both captures timed their plain generate calls per phase, measured times are
# those and the model predicts a plain run; otherwise both sides are the profiled pass's wall time (the
# model replays this run's own host gaps), so the profiler's overhead cancels in each gain. A gain is
# baseline ÷ variant.

# %%
kb.table(said(rows[["variant", "phase", "basis", "baseline_ms", "predicted_ms", "measured_ms", "predicted_gain",
              "measured_gain", "gain_error_pct"]], ["basis"]),
         kb.tr("Predicted vs measured gain per variant (decode per token, prefill per call)"),
         empty=kb.tr("no variant runs given (variant_runs)"))

# %%
F.variant_gains(rows)

# %%
kb.table(S.plain_generate(r, variants), kb.tr("Plain generate calls (no profiler), median of the timing trials"))

# %%
kb.md(NS.variants_prose(rows, controls, left_out), fold=kb.tr("Each variant in words: what it changed and what it measured"))

# %% [markdown]
# ## Comparison of two runs
# `baseline_run` against this run when it is set, else this run against its first variant: the same as
# `python -m kernelbook diff A B`. Kernels are matched by the aten op that launched them and their
# family, whatever the tile; a kernel launched from a compiled graph matches its family.

# %%
pair = S.comparison_pair(kb.open_run(baseline_run) if baseline_run else None, r, variants)
cmp = S.comparison(pair)
kb.md(NS.comparison_note(pair))

# %%
kb.table(cmp["phases"], kb.tr("Per phase, per step: A and B"), empty=kb.tr("nothing to compare"))

# %%
kb.table(cmp["categories"], kb.tr("Share of kernel time per category (%)"), empty=kb.tr("nothing to compare"))

# %%
kb.table(cmp["kernels"], kb.tr("Kernel families matched by aten op and family (top 12 per phase)"),
         empty=kb.tr("nothing to compare"))

# %%
kb.table(cmp["metrics"], kb.tr("ncu metrics of the kernels profiled in both"), empty=kb.tr("no kernel profiled in both runs"))

# %% [markdown]
# ## The chapters
# [00 · Setup](00_setup.html) · [01 · Timeline](01_timeline.html) · [02 · Nsight Compute](02_ncu.html) ·
# [03 · Histograms](03_histograms.html) · [04 · Roofline](04_roofline.html) ·
# [05 · Classification](05_classification.html) · [06 · NPU what-if](06_npu.html) · [08 · Serving](08_serving.html)
