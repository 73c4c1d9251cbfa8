"""Chapter 00's tables: environment, measured peaks against spec, clocks, parameters. Labels are English catalog keys
(declared in `narrate.setup`, which also holds the chapter's sentences and its spec-peak and book-parameter tables):
the display layer shows a text cell that is a catalog key in the reader's language."""
from __future__ import annotations

import pandas as pd

from ..contract.manifest import Manifest, MeasuredPeaks, Timing, read_manifest
from ..devices import Device, UnknownDeviceError, lookup


def device_for(run, name: str | None) -> Device | None:
    try:
        return lookup(name or run.gpu_name)
    except UnknownDeviceError:
        if name:
            raise
        return None


def environment_table(manifest: Manifest | dict) -> pd.DataFrame:
    m = read_manifest(manifest)
    env, gpu = m.environment, m.environment.gpu
    rows = [("GPU", gpu.name), ("compute capability", gpu.compute_capability),
            ("SMs", gpu.sm_count), ("GPU memory (GiB)", gpu.memory_gib),
            ("L2 (MiB)", round(gpu.l2_bytes / 2**20, 1) if gpu.l2_bytes else None),
            ("driver", env.driver), ("CUDA", env.cuda), ("torch", env.torch),
            ("transformers", env.transformers), ("ncu", env.ncu), ("nsys", env.nsys),
            ("python", env.python), ("git revision", m.git_revision)]
    return _items(rows)


def _items(rows: list[tuple]) -> pd.DataFrame:
    """item/value rows as text, a value the run does not record left missing (not the string 'None')."""
    return pd.DataFrame([(k, None if v is None else str(v)) for k, v in rows], columns=["item", "value"])


# where measured peaks come from (`measured_peaks`' "where"; catalog keys)
MEASURED_HERE, RECORDED = "measured now, on this machine", "recorded in the run's manifest"
NO_MEASURED = "no measured peaks in this run (measure_peaks: false)"


def measured_peaks(manifest: Manifest | dict, measure_here: bool = True, lock_clocks: bool = False) -> dict:
    """Measure on this machine when it has a GPU (under the profiling lock), else the run's record; "where" says
    which (`MEASURED_HERE`, `RECORDED`)."""
    from ..env import cuda_visible

    if measure_here and cuda_visible():
        from contextlib import nullcontext

        from ..contract.session import current
        from ..clocks import clock_lock
        from ..measure import measure_peaks

        # under the book runner's locks (a capture in progress) the lock is already this book's
        with (nullcontext() if current().locks_held else clock_lock(lock_clocks)):
            return {**measure_peaks(), "where": MEASURED_HERE}
    rec = read_manifest(manifest).measured_peaks
    return {**_peaks_record(rec), "where": RECORDED} if rec else {}


def _peaks_record(rec: MeasuredPeaks) -> dict:
    """The run's measured peaks in the shape `measure.measure_peaks` returns (TFLOP/s, GB/s; per measurement its
    spread, a fraction, trials and noisy flag), so a record and a measurement made now read alike."""
    def timing(t: Timing | None) -> dict:
        return {} if t is None else {**t.extra, "median_s": t.median_s, "spread": t.spread, "trials": t.trials,
                                     "samples_s": list(t.samples_s), "noisy": t.noisy}

    return {"bf16_gemm_tflops": rec.bf16_gemm_tflops, "d2d_copy_gbps": rec.d2d_copy_gbps,
            "bf16_gemm": timing(rec.bf16_gemm), "d2d_copy": timing(rec.d2d_copy)}


def measured_table(measured: dict, dev: Device | None) -> pd.DataFrame:
    if not measured:
        return pd.DataFrame({"note": [NO_MEASURED]})
    rows = [("bf16 GEMM", "TFLOP/s", measured["bf16_gemm_tflops"], dev.tflops.get("bf16") if dev else None,
             measured["bf16_gemm"]["spread"] * 100, measured["bf16_gemm"]["trials"]),
            ("device-to-device copy (read + write)", "GB/s", measured["d2d_copy_gbps"],
             dev.dram_gbps if dev else None, measured["d2d_copy"]["spread"] * 100, measured["d2d_copy"]["trials"])]
    df = pd.DataFrame(rows, columns=["quantity", "unit", "measured", "spec", "spread_pct", "trials"])
    df["measured_pct_of_spec"] = 100 * df.measured / df.spec
    return df


def clock_table(manifest: Manifest | dict) -> pd.DataFrame:
    m = read_manifest(manifest)
    clocks, state, ncu = m.environment.clocks, m.clock_state, m.ncu
    rows = [("clocks locked", state.locked), ("note", state.note if state.note else None),
            ("SM clock at capture start (MHz)", clocks.sm_clock_mhz),
            ("max SM clock (MHz)", clocks.sm_clock_max_mhz),
            ("memory clock (MHz)", clocks.mem_clock_mhz),
            ("ncu --clock-control", ncu.clock_control if ncu else None),
            ("ncu --cache-control", ncu.cache_control if ncu else None)]
    return _items(rows)


def params_table(manifest: Manifest | dict) -> pd.DataFrame:
    """The capture's parameters as its manifest records them (older manifests also recorded book
    parameters; those are left out here: they describe a render, not this capture)."""
    from ..params import CAPTURE, SCHEMA

    p = read_manifest(manifest).params
    keep = {k: v for k, v in p.items() if k not in SCHEMA or CAPTURE in SCHEMA[k].feeds}
    return pd.DataFrame({"parameter": list(keep), "value": [value_text(v) for v in keep.values()],
                         "meaning": [SCHEMA[k].doc if k in SCHEMA else "" for k in keep]})


def value_text(v) -> str:
    """A parameter's value as the tables print it (a list joined with ', ', None as 'null')."""
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)
