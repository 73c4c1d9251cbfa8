# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Setup: the machine, its peaks and the run
#
# Which GPU and software produced this run, what can the device do on paper and when measured, and how were its clocks held?

# %% tags=["parameters"]
run_dir: str = "data/runs/h100-deepseek-ocr-2"  # run directory the book reads (the bundled run by default)
rank: int = 0  # tensor-parallel run: the rank (GPU) whose kernels the chapter shows
language: str = "en"  # narrative language: en or zh (the book runner translates the markdown cells too)
device: str = ""  # device name for spec peaks; empty means the GPU recorded in the run
lock_clocks: bool = False  # lock GPU clocks with scripts/lock-gpu-clock.sh while measuring here
measure_here: bool = False  # also measure this machine's GPU now (the run's own peaks are in its manifest)
capture: str = "auto"  # auto: capture what run_dir lacks when this machine can (GPU), else read; never; always (new run_dir)
params_file: str = ""  # capture parameters (YAML, e.g. params/default.yaml) used when this chapter captures

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import provenance as V
from kernelbook.analyze import setup as S
from kernelbook.narrate import provenance as VN
from kernelbook.narrate import setup as SN

# every parameter, checked as the book command checks them: a bad one stops here with its note
kb.setup(language, run_dir=run_dir, rank=rank, device=device, lock_clocks=lock_clocks, measure_here=measure_here,
         capture=capture, params_file=params_file)
took = kb.capture_part(run_dir, "setup", capture, params_file)
r = kb.open_run(run_dir, rank=rank, require_timeline=False)
dev = S.device_for(r, device or None)

# %%
kb.summary(SN.headline(r, dev))

# %% [markdown]
# ## Environment
# Recorded by the capture on the GPU machine ("absent" where a tool was not installed).

# %%
kb.table(S.environment_table(r.manifest), kb.tr("Environment"), notes={"value": kb.tr("not recorded by this capture")})

# %% [markdown]
# ## Spec peaks and ridge points
# From `params/devices.yaml` (the one table of device peaks). The ridge point is peak FLOP/s ÷ DRAM
# bytes/s: kernels with a lower arithmetic intensity cannot reach the compute roof.

# %%
kb.table(SN.peaks_table(dev), kb.tr("Spec peaks: {device}", device=dev.display_name) if dev else kb.tr("Spec peaks"),
         notes={"ridge_flop_per_byte": kb.tr("a ridge point belongs to a compute peak only")})

# %% [markdown]
# ## Measured peaks
# A bf16 GEMM (8192³) and a device-to-device copy, after warmup, timed with CUDA events, median of
# repeated trials, measured by the capture's setup step on the run's own GPU (this chapter, when it
# captures) and read from the manifest; `measure_here` measures this machine's GPU as well.

# %%
measured = S.measured_peaks(r.manifest, measure_here=measure_here, lock_clocks=lock_clocks)
kb.table(S.measured_table(measured, dev), kb.tr("Measured peaks against spec"))

# %%
kb.md(SN.measured_prose(measured, dev))

# %% [markdown]
# ## Clocks and capture settings

# %%
kb.table(S.clock_table(r.manifest), kb.tr("Clocks and ncu settings"),
         notes={"value": kb.tr("not recorded by this capture")})

# %% [markdown]
# ## Parameters
# The capture's parameters are what the run's manifest records: they made the data. The book's
# parameters steer this render (which run, which phase, thresholds); each chapter reads its own.

# %%
kb.table(S.params_table(r.manifest), kb.tr("Capture parameters (from the run's manifest)"))

# %%
kb.table(SN.book_params_table({"run_dir": run_dir, "language": language, "device": device, "lock_clocks": lock_clocks}),
         kb.tr("Book parameters (this render; a value marked default is what the chapters that read it start from)"))

# %% [markdown]
# ## How this run was taken
# The capture's own account from the manifest: each step, which chapter (or the capture command) ran
# it and its wall time, and the software it ran with. This chapter's decision is first.

# %%
kb.md(VN.decision(took, "setup"))

# %%
kb.table(VN.table(V.steps(r.manifest)), kb.tr("Capture steps"), empty=kb.tr("This run records no capture steps."))

# %%
kb.table(VN.table(V.versions(r.manifest)), kb.tr("Software and hardware of the capture"))
