# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Timeline: where generate's time goes
#
# Where does generate's time go: how long each phase takes on the wall clock and the GPU, and which kernels hold it?

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads (the bundled run by default)
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
top_n: int = 15  # kernels per phase in the top-kernel tables, as in the reference report
one_gpu_run: str = ""  # tensor-parallel run_dir: the same model on one GPU, for the comparison; empty: none
capture: str = "auto"  # auto: capture what run_dir lacks when this machine can (GPU), else read; never; always (new run_dir)
params_file: str = ""  # capture parameters (YAML, e.g. params/default.yaml) used when this chapter captures

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import comm as C
from kernelbook.analyze import modules as M
from kernelbook.analyze import provenance as V
from kernelbook.analyze import steps as S
from kernelbook.analyze import timeline as T
from kernelbook.narrate import comm as CN
from kernelbook.narrate import modules as MN
from kernelbook.narrate import provenance as VN
from kernelbook.narrate import steps as SN
from kernelbook.narrate import timeline as TN
from kernelbook.plots import figures as F

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, top_n=top_n, one_gpu_run=one_gpu_run, capture=capture,
         params_file=params_file)
took = kb.capture_part(run_dir, "timeline", capture, params_file)
r = kb.open_run(run_dir, rank=rank)
summary = T.phase_summary(r.timeline, r.phases)
shares = T.category_shares(r.timeline)
cmp = T.reference_comparison(shares)
kb.summary(TN.headline(summary, shares, r.manifest))

# %% [markdown]
# ## Phases: wall time, GPU-busy time, idle share
# Wall time comes from the phase ranges on the CPU; GPU-busy time is the union of the phase's kernel
# intervals. A large idle share means the GPU waits for the CPU to launch work: the launch-bound signal.

# %%
kb.table(summary, kb.tr("Phases of one generate under the profiler (profiled pass)"), notes=TN.PHASE_SUMMARY_MISSING)

# %%
F.phase_bars(summary)

# %%
kb.md(TN.phase_prose(summary, r.manifest))

# %% [markdown]
# ## Decode step by step: time against position
# Every step of a plain generate (no profiler) against the KV cache length, beside the steps the profiler
# recorded (a long generation records windows of steps, not all of them). The check sets the profiled
# steps' estimate of the decode against the plain total; the table lists the kernels whose time grows
# with the KV cache (attention, cache copies).

# %%
F.step_curve(SN.step_curve(S.step_curve(r)))

# %%
kb.md(SN.prose(r))

# %%
kb.table(S.step_check(r), kb.tr("Do the profiled steps stand for the whole decode?"),
         empty=kb.tr("This run has no plain step times (captured before steps.parquet)."))

# %%
kb.md(SN.check_prose(r))

# %%
kb.table(S.growing_kernels(r.timeline), kb.tr("Decode kernels whose time per step grows with position (µs per step, "
                                              "first and last profiled steps)"),
         empty=SN.growth_note(r.timeline),
         columns={"first_us": kb.tr("First"), "last_us": kb.tr("Last"), "change_us": kb.tr("Change"),
                  "change_pct": kb.tr("Change %")})

# %% [markdown]
# ## Gaps between kernels in decode
# The idle time before each kernel. Gaps of a few µs are launch latency; long gaps are host work
# (Python, sampling, synchronisation).

# %%
gaps = T.kernel_gaps_us(r.timeline, "decode")
F.gap_histogram(gaps)

# %%
kb.md(TN.gap_prose(gaps))

# %% [markdown]
# ## Top kernels per phase
# Time % is the share of the phase's kernel time; mean and median are per launch. Hover a bar for the
# kernel and its numbers. The description says what a category's kernels usually are (a GEMV streams its
# weights: memory-bound when it moves enough bytes); each profiled kernel's own class, from its counters,
# is chapter 05's, and where the two differ chapter 05's is the measured one (a GEMV of a few µs moves
# too few bytes to load DRAM: latency-bound there).

# %%
F.top_kernel_bars(T.top_kernels_by_phase(r.timeline, top_n), r.timeline)

# %%
kb.table(T.top_table_display(r.timeline, "decode", top_n), TN.top_caption(r.timeline, "decode", top_n),
         empty=kb.tr("This run has no decode kernels."))

# %%
kb.table(T.top_table_display(r.timeline, "prefill", top_n), TN.top_caption(r.timeline, "prefill", top_n),
         empty=kb.tr("This run has no prefill kernels."))

# %%
kb.table(T.top_table_display(r.timeline, "vision_encode", top_n), TN.top_caption(r.timeline, "vision_encode", top_n),
         empty=kb.tr("This run has no vision-encode kernels."))

# %% [markdown]
# ## The model's parts: kernel time by module, and the bytes one decode step moves
# Each kernel is tied to the module whose forward launched it (recorded in the capture's shapes pass): its
# type (attention with its projections, MoE experts, router, norm, lm_head, ...) and its decoder layer. The
# ledger sets what each module type must move per decode step (its weights and the KV cache it reads) against
# what its kernels moved, so the distance between the step and its limit is read module by module.

# %%
types = M.by_module_type(r.timeline)
F.module_share_bars(types) if len(types) else None

# %%
kb.table(types, kb.tr("Kernel time per step by phase and module type"),
         empty=kb.tr("This run was captured before kernels were tied to modules."))

# %%
kb.md(MN.modules_prose(types))

# %%
layers = M.by_layer(r.timeline)
F.layer_bars(layers) if len(layers) else None

# %%
ledger, ledger_says = MN.run_ledger(r)
kb.table(ledger, kb.tr("Bytes ledger of one decode step, by module type"),
         empty=kb.tr("This run was captured before kernels were tied to modules."))

# %%
kb.md(ledger_says + "\n\n" + kb.tr(MN.LEDGER_NOTE), fold=kb.tr("The ledger, module by module"))

# %% [markdown]
# ## Categories per phase, and decode against the reference report
# GEMM kernels that run a matrix-vector product (M or N = 1 in their aten shapes) count as GEMV, the
# work the reference report's cuBLAS GEMV kernels did.

# %%
F.category_bars(shares)

# %%
kb.table(cmp, kb.tr("Decode kernel time by category: this run against the reference report"),
         notes={"reference_pct": kb.tr("the reference report does not break this category out")})

# %%
F.reference_bars(cmp)

# %%
kb.md(TN.reference_prose(cmp, r), fold=kb.tr("Against the reference report, category by category"))

# %% [markdown]
# ## Tensor parallelism: communication and waiting per rank
# In a run split over several GPUs, each NCCL collective is paired across the ranks (the n-th of a step on
# every rank). It ends on all ranks together, so the rank that launched it last shows the transfer itself;
# every other rank's extra time in it is waiting for that rank. The rest of this chapter, and the
# other chapters, show one rank: the `rank` parameter.

# %%
tp = C.section(r, kb.open_run(one_gpu_run) if one_gpu_run else None)
kb.md(CN.prose(tp, one_gpu_run))

# %%
kb.table(tp.ranks, kb.tr("NCCL time per rank and phase, split into transfer and wait (per step)")) if tp else None

# %%
kb.table(tp.link, kb.tr("Collectives against the link: bytes each rank sends, the time at the link's datasheet "
                        "bandwidth, and the measured transfer")) if tp else None

# %%
F.launch_skew(tp.coll) if tp else None

# %%
kb.table(tp.against, kb.tr("Tensor parallel against one GPU (decode per token, prefill per call; NCCL transfer and "
                            "wait from the profiled pass)")) \
    if tp and tp.against is not None else None

# %%
kb.table(tp.categories, kb.tr("Decode kernel time per step by category: one GPU and each rank")) \
    if tp and tp.categories is not None else None

# %% [markdown]
# ## How the timeline was taken
# From the manifest: the profiler backend, the model and inputs, plain against profiled generate (the
# profiler's overhead), and how each kernel got its aten shapes and its op call.

# %%
kb.md(VN.decision(took, "timeline"))

# %%
kb.table(VN.table(V.timeline_account(r.manifest)), kb.tr("Timeline capture"),
         empty=kb.tr("This run records no timeline capture details."))

# %% [markdown]
# ## The other timeline backend on the same workload
# Where the same workload was captured with the other timeline profiler (Nsight Systems or the torch profiler) and
# sits beside this run: the kernels and GPU time each recorded, and each one's overhead.

# %%
twin = kb.backend_twin(r)
backend, bk = (T.backend_agreement(r, twin), T.backend_kernels(r, twin)) if twin is not None else (None, None)
kb.md(TN.backend_prose(r, twin, backend, bk))

# %%
kb.table(backend, kb.tr("Kernel time per phase, this run and the other backend's")) if twin is not None else None

# %%
kb.table(bk, kb.tr("Decode kernels holding ≥ 1 % of decode kernel time, by kernel stem")) if twin is not None else None

# %% [markdown]
# ## Appendix: friendly names → full kernel names
# Every kernel the book names: each phase's top kernels by time and every kernel selected for Nsight Compute (with
# its id), each name whole as the run recorded it: what `ncu --kernel-name` and a search of the sources match.
# Open a phase for its list; click a name to select all of it for copying.

# %%
names = T.shown_kernels(r.timeline, r.ncu_kernels(), top_n)
kb.folded((caption, kb.table(frame), phase == "decode")
          for phase, caption, frame in TN.appendix_tables(names, r.timeline, top_n))
