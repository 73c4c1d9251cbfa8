# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Classification: why each kernel is slow and what to try first
#
# Why is each profiled kernel slow, and what should be tried first?

# %% [markdown]
# <details><summary>How this chapter works</summary>
#
# Each profiled kernel gets a bottleneck class from its SM and memory throughput (the project's rules of
# thumb, thresholds are this chapter's parameters; the health section says where they come from), checked
# against the roofline ridge; then why each kernel is slow (where its
# warps stall, what caps its occupancy, the clock it ran at, NVIDIA's own verdicts), the metric health
# table, wave quantization, the tile analysis of GEMM/GEMV kernels, and the top opportunities per phase
# in the profiler output contract (also written to `report.md` beside this book).
#
# </details>

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
phase: str = "decode"  # phase whose profiled kernels are classified
high_pct: float = 60.0  # SM or memory throughput at or above this is high
low_pct: float = 30.0  # below this is low
l2_hit_min_pct: float = 80.0  # L2 hit rate below this flags a locality issue
mem_latency_cycles: float = 800.0  # global-memory latency assumed by S_min and Little's law
kernel: str = ""  # kernel id (d000 … decode, p000 … prefill, v000 … vision encode) the explorer opens on; empty: the one with the most time

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import classify as C
from kernelbook.analyze import ncu_report as N
from kernelbook.analyze import roofline as R
from kernelbook.analyze import timeline as T
from kernelbook.analyze import why as W
from kernelbook.devices import facts_table
from kernelbook.load.twins import twins
from kernelbook.narrate import modules as MN
from kernelbook.narrate import ncu_report as NN
from kernelbook.narrate import classify as NC
from kernelbook.narrate import why as NW

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, phase=phase, high_pct=high_pct, low_pct=low_pct,
         l2_hit_min_pct=l2_hit_min_pct, mem_latency_cycles=mem_latency_cycles, kernel=kernel)
r = kb.open_run(run_dir, rank=rank, needs="ncu", phase=phase, kernel=kernel)
k = R.profiled_kernels(r)
dev, dev_sources, roofs = R.for_run(r, k)  # devices.yaml, with what ncu measured on the GPU winning
rules = C.Rules(high_pct, low_pct, l2_hit_min_pct, mem_latency_cycles)
fid = N.fidelity(r.ncu_kernels(), r.timeline, r.manifest)  # chapter 02's ncu in context
in_loop = N.in_loop_l2(fid)  # producer → consumer (chapter 02)
c = C.classify(k, dev.ridge("bf16"), rules, in_loop)
cp = c[c.phase == phase]
summary = T.phase_summary(r.timeline, r.phases)
opps = C.all_opportunities(r, summary, c, roofs)
# the eager run and the run as deployed of this workload, whichever run_dir names: the headline and the
# opportunities lead with the deployed run's (what a serving stack runs), the eager run's beside them
tw = twins(r, open_run=kb.open_run)
mine = (r, c, opps)
twin = (tw.other, *C.classified(tw.other, rules)) if tw.other is not None else None
deployed_side, eager_side = (mine, twin) if r is tw.deployed else (twin, mine)
kb.summary(NC.pair_headline(deployed_side, eager_side, phase))
kb.paragraph(NC.pair_rest(deployed_side, eager_side, phase))

# %% [markdown]
# ## Classes
# Counts, and the share of profiled time in each class.

# %%
kb.table(C.class_counts(cp), kb.tr("Bottleneck classes of the profiled {phase} kernels", phase=kb.phase_label(phase)))

# %%
kb.table(MN.with_kernel_modules(NC.reasons(cp[["phase", "kernel_id", "friendly_name", "category", "class",
                                               "roofline_side", "locality_issue", "counters", "reason"]]),
                                r.ncu_kernels(), r.timeline).drop(columns="phase"),
         kb.tr("Each kernel's class and why"))

# %%
kb.md(NC.class_prose(cp, rules, dev.ridge("bf16"), phase, r.info.ncu.cache_control))

# %%
kb.md(NN.cache_control_note(r.manifest, "05", in_loop, fid), fold=kb.tr("Where the DRAM counters come from"))

# %% [markdown]
# ## Metrics per class
# The reference report's table: plain means over kernels, then means weighted by time.

# %%
kb.table(NC.class_table(cp, weighted=False), kb.tr("Metrics per class: plain mean over kernels (each kernel counts once)"),
         notes=kb.tr("— : no kernel of this class has the metric"))

# %%
kb.table(NC.class_table(cp, weighted=True),
         kb.tr("Metrics per class: mean weighted by each kernel's share of {phase} kernel time", phase=kb.phase_label(phase)),
         notes=kb.tr("— : no kernel of this class has the metric"))

# %% [markdown]
# ## Why each kernel is slow: where its warps wait
# ncu counts, per instruction a warp issues, the cycles it spent stalled and on what. Each reason's
# share of all stall cycles says what the kernel waits on (issuing itself is not a stall). Stalls cost
# time only while no other warp is ready to issue, so they matter most in the kernels that keep few
# warps resident.

# %%
metrics = r.ncu_metrics()
kb.table(NW.top_stalls_wide(W.top_stalls(cp, metrics)), kb.tr("Top 3 stall reasons per kernel (share of its stall cycles)"))

# %%
kb.table(W.class_stalls(cp, metrics), kb.tr("Top stall reasons per class, each kernel weighted by its share of {phase} kernel time",
                                            phase=kb.phase_label(phase)))

# %% [markdown]
# ## What limits occupancy
# Resident blocks per SM that each resource allows for the launch (ncu's occupancy limits); the fewest
# is what caps theoretical occupancy. Achieved occupancy is what the SMs kept resident on average.

# %%
occ = W.occupancy(cp, metrics)
kb.table(NW.occupancy(occ), kb.tr("Occupancy limits, theoretical vs achieved"))

# %%
kb.md(NW.occupancy_prose(occ))

# %% [markdown]
# ## The SM clock each kernel ran at
# Against the device's maximum SM clock from the devices table.

# %%
kb.table(W.clocks(cp, metrics, dev.sm_clock_max_mhz), kb.tr("SM clock per kernel"))

# %%
kb.md(NW.clock_prose(W.clock_summary(metrics, dev.sm_clock_max_mhz), dev.display_name, r.info.ncu.clock_control),
      fold=kb.tr("How the clock was read, and what it means"))

# %% [markdown]
# ## NVIDIA's rules beside the book's class
# Nsight Compute's own rule results: its bottleneck verdict (which book class it supports) and the
# optimizations it proposes, with its estimate of the speedup.

# %%
nv = W.nvidia_rules(cp, r.ncu_results())
kb.table(NW.nvidia_rules(nv), kb.tr("NVIDIA's verdict and advice per kernel"), empty=kb.tr(NW.NO_RULES))

# %%
kb.md(NW.rules_prose(nv))

# %% [markdown]
# ## Metric health
# Healthy levels per metric; unhealthy cells are shaded, — where a metric does not apply. Tensor pipe
# active is ncu's `sm__pipe_tensor_cycles_active` (% of peak), for kernels that issue tensor FLOPs.

# %%
kb.styler_table(NC.health_styled(C.health(cp)), kb.tr("Metric health per kernel (shaded: unhealthy; — : does not apply)"))

# %%
kb.md(kb.tr(NC.THRESHOLD_SOURCES), fold=kb.tr("Where the healthy levels come from"))

# %% [markdown]
# ## Device facts used here
# The SM count, clock, L2 size and DRAM peak this chapter uses: what ncu read from the GPU itself where the run
# has it, else the devices table's row for the GPU's name.

# %%
kb.table(facts_table(dev, dev_sources), kb.tr("Device facts and their source"))

# %% [markdown]
# ## Wave quantization
# Blocks ÷ (SMs × resident blocks per SM) = waves; the last wave's fill is the tail efficiency. A grid
# under 4× the SM count cannot balance load or hide a tail (the project's rule of thumb: with four waves
# a part-empty last wave costs at most a quarter of the time).

# %%
waves = C.wave_table(cp, r.ncu_metrics(), dev.sm_count)
kb.table(waves, kb.tr("Waves on {sms} SMs", sms=dev.sm_count))

# %%
kb.md(NC.wave_prose(waves, dev.sm_count))

# %% [markdown]
# ## Tiles of the GEMM/GEMV kernels
# Tile (BM×BN), BK and pipeline stages decoded from the kernel name; tile intensity BM·BN/(BM+BN)
# FLOP/B (2-byte inputs) vs the bf16 ridge; shared memory the stages need vs what the launch
# allocates; S_min = ceil(latency ÷ stage cycles) + 1, a stage taking the longer of its tile's compute
# and its load at the SM's share of DRAM bandwidth.

# %%
tiles = C.tile_table(cp, dev, rules)
kb.table(tiles, kb.tr("Tiles decoded from the kernel names"), empty=kb.tr("No GEMM/GEMV kernel name carries its tile shape."))

# %%
kb.md(NC.tile_prose(tiles, rules))

# %% [markdown]
# ## Bytes in flight (memory-bound kernels)
# Little's law: to run at the DRAM roof each SM needs bandwidth-per-SM × latency bytes in flight. Warps
# supply one 16-byte load per thread; a tiled kernel's asynchronous copies fill its stage buffers
# without a thread per load, so those can hold more.

# %%
kb.table(C.littles_law(cp, dev, rules), kb.tr("Bytes in flight per SM (Little's law)"),
         empty=kb.tr("No profiled {phase} kernel is memory-bound, so none needs the DRAM roof's bytes in flight.",
                     phase=kb.phase_label(phase)))

# %% [markdown]
# ## Top opportunities
# Ranked by estimated gain in % of the phase's wall time (upper bounds: the roof assumed reachable). Where the
# workload was also captured as deployed (decode as CUDA graphs), that run's come first: they are what is left
# to gain in serving; the eager run's follow, as what HF's eager loop adds.

# %%
kb.table(NC.opportunities(deployed_side[2].get(phase)),
         kb.tr("Top opportunities in {phase}: {run}", phase=kb.phase_label(phase), run=deployed_side[0].run_id),
         empty=kb.tr("No profiled kernels in {phase}.", phase=kb.phase_label(phase))) if deployed_side else None

# %%
kb.table(NC.opportunities(eager_side[2].get(phase)),
         kb.tr("Top opportunities in {phase}: {run}", phase=kb.phase_label(phase), run=eager_side[0].run_id),
         empty=kb.tr("No profiled kernels in {phase}.", phase=kb.phase_label(phase))) if eager_side else None

# %%
kb.source(NC.contract_markdown(r, summary, c, opps, rules), fold=kb.tr("report.md, as written"))

# %% [markdown]
# ## Kernel explorer
# Every profiled kernel of every phase, this chapter's phase first. In JupyterLab, pick a kernel to see its
# metrics, roofline points, name, class and why it is slow. In the HTML the same cards are listed statically,
# and a kernel id in any chapter's table opens its card here.

# %%
every = C.phase_first(c, phase)
why = NW.kernel_why(every, metrics, dev.sm_clock_max_mhz, r.ncu_results())
kb.explorer(NC.kernel_cards(every, R.points(k, roofs), why), first=kernel)
