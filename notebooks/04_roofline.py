# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Roofline: how far each kernel is from its roof
#
# How far is each profiled kernel from its roof, on ncu's normalized roofline and the physical one per memory level?

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# Normalized (ncu's speed of light: fraction of peak memory vs fraction of peak SM throughput) and
# physical (FLOP/s vs FLOP/byte, log-log) rooflines for the profiled kernels of one phase. Compute
# roofs are the tensor-core peak of the kernel's dtype (when it issues tensor FLOPs) or the CUDA-core
# fp32 peak, from `params/devices.yaml`; measured ceilings from the manifest are drawn dashed. Each
# kernel has a point per memory level (DRAM, L2, L1): same FLOP/s, intensity over that level's bytes.
#
# </details>

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
phase: str = "decode"  # phase whose profiled kernels are shown

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import roofline as R
from kernelbook.devices import facts_table
from kernelbook.narrate import ncu_report as NN
from kernelbook.narrate import roofline as RN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, phase=phase)
r = kb.open_run(run_dir, rank=rank, needs="ncu", phase=phase)
k = R.profiled_kernels(r)
dev, dev_sources, roofs = R.for_run(r, k)  # devices.yaml, with what ncu measured on the GPU winning
pts = R.points(k, roofs)
fid = N.fidelity(k, r.timeline, r.manifest, r.ncu_metrics())
in_loop = N.in_loop_l2(fid)  # producer → consumer kernels: their DRAM points are the cold-cache figure
# (the note on cache control gives their in-loop DRAM reads beside it, where the run measured the loop)
bw_only = R.bandwidth_only(k, roofs)
kb.summary(RN.prose(pts, bw_only, roofs, phase).split("\n\n")[0])

# %% [markdown]
# ## Roofs
# Every roof drawn below, with its source.

# %%
kb.table(RN.table(roofs.table()), kb.tr("Roofs"))

# %%
kb.md("\n\n".join([*RN.roof_notes(roofs), NN.cache_control_note(r.manifest, "04", in_loop, fid)]))

# %% [markdown]
# ## Normalized roofline

# %%
F.roofline_normalized(R.normalized(k), phase)

# %% [markdown]
# ## Physical roofline

# %%
useful = R.useful_work(k, r.timeline)
F.roofline_physical(pts, roofs, phase, useful)

# %%
kb.md("\n\n".join([RN.useful_note(useful, phase), RN.near_empty_note(k, phase), RN.bypass_note(k, phase)]))

# %% [markdown]
# ## Counted and useful FLOPs
# What ncu counted (the points above) beside the useful work of each matrix product's and attention's shapes,
# with counted ÷ useful: the tensor pipe's padding.

# %%
kb.table(RN.table(useful[useful.phase == phase].drop(columns="phase")),
         kb.tr("Counted and useful FLOPs of the {phase} matrix products and attention", phase=kb.phase_label(phase)),
         empty=kb.tr("No profiled {phase} kernel has shapes that give its work.", phase=kb.phase_label(phase)))

# %%
kb.md(RN.prose(pts, bw_only, roofs, phase))

# %% [markdown]
# ## Points above a roof
# A point more than 5 % above the roof that applies to it is listed here with the likely cause read
# from the data (it is also outlined red in the plots).

# %%
kb.table(RN.table(R.above_roof_causes(pts, k, roofs, fid)), kb.tr("Points above a roof"),
         empty=kb.tr("No point lies more than {tol:.0f} % above its roof.", tol=R.ABOVE_TOLERANCE * 100 - 100))

# %% [markdown]
# ## Every point
# Intensity in FLOP/byte, achieved and attainable FLOP/s, % of roof and which roof binds.

# %%
kb.table(pts[pts.phase == phase].sort_values(["share", "level"], ascending=[False, True]),
         kb.tr("Every {phase} point, largest kernel time first", phase=kb.phase_label(phase)),
         empty=kb.tr("No profiled {phase} kernel issues FLOPs.", phase=kb.phase_label(phase)),
         notes={"roof_flops_per_s": kb.tr("no bandwidth roof at this level"),
                "pct_of_roof": kb.tr("no roof at this level")})

# %% [markdown]
# ## Kernels without FLOPs
# Copies, gathers and casts have no arithmetic intensity; their place is the fraction of each
# bandwidth roof they reach.

# %%
kb.table(bw_only[bw_only.phase == phase],
         kb.tr("{phase} kernels without FLOPs: % of each bandwidth roof", phase=kb.phase_label(phase).capitalize()),
         empty=kb.tr("Every profiled {phase} kernel issues FLOPs.", phase=kb.phase_label(phase)),
         notes={"l1_pct_of_roof": kb.tr("no L1 roof in this capture"), "l2_pct_of_roof": kb.tr("no L2 roof in this capture")})

# %% [markdown]
# ## Per-kernel rooflines

# %%
F.roofline_small_multiples(pts, roofs, phase)
