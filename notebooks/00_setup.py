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
# Which GPU and software produced this run, what the device can do on paper (spec peaks and ridge
# point) and what it did when measured, and how the clocks were held while profiling.

# %% tags=["parameters"]
run_dir: str = "data/runs/h200-deepseek-ocr-2"  # run directory the book reads (the bundled run by default)
device: str = ""  # device name for spec peaks; empty means the GPU recorded in the run
lock_clocks: bool = False  # lock GPU clocks with scripts/lock-gpu-clock.sh while measuring here

# %%
from kernelbook import notebook as kb
from kernelbook.analyze import setup as S

kb.setup()
r = kb.open_run(run_dir)
dev = S.device_for(r, device or None)

# %%
kb.summary(S.headline(r, dev))

# %% [markdown]
# ## Environment
# Recorded by the capture on the GPU machine ("absent" where a tool was not installed).

# %%
S.environment_table(r.manifest)

# %% [markdown]
# ## Spec peaks and ridge points
# From `params/devices.yaml` (the one table of device peaks). The ridge point is peak FLOP/s ÷ DRAM
# bytes/s: kernels with a lower arithmetic intensity cannot reach the compute roof.

# %%
S.peaks_table(dev)

# %% [markdown]
# ## Measured peaks
# A bf16 GEMM (8192³) and a device-to-device copy, after warmup, timed with CUDA events, median of
# repeated trials. Measured now when this notebook runs on a GPU, else as recorded in the run.

# %%
measured = S.measured_peaks(r.manifest, measure_here=True, lock_clocks=lock_clocks)
S.measured_table(measured, dev)

# %%
kb.md(S.measured_prose(measured, dev))

# %% [markdown]
# ## Clocks and capture settings

# %%
S.clock_table(r.manifest)

# %%
S.params_table(r.manifest)
