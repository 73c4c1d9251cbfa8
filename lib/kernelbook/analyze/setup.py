"""Chapter 00's tables: environment, spec vs measured peaks, clocks, parameters."""
from __future__ import annotations

import pandas as pd

from ..contract.manifest import Manifest, MeasuredPeaks, Timing, read_manifest
from ..devices import Device, UnknownDeviceError, lookup
from ..i18n import text, tr
from ..escape import md


def device_for(run, name: str | None) -> Device | None:
    try:
        return lookup(name or run.gpu_name)
    except UnknownDeviceError:
        if name:
            raise
        return None


def headline(run, dev: Device | None) -> str:
    info = run.info
    tl, peaks = info.timeline_info, info.measured_peaks
    parts = [tr("{model} on {gpu}", model=md(info.workload.model), gpu=md(run.gpu_name))]
    if dev:
        parts.append(tr("bf16 ridge {ridge:.0f} FLOP/byte (spec)", ridge=dev.ridge("bf16")))
    if peaks:
        parts.append(tr("measured {tflops:.0f} TFLOP/s bf16, {gbps:.0f} GB/s copy", tflops=peaks.bf16_gemm_tflops,
                        gbps=peaks.d2d_copy_gbps))
    if tl.plain_generate:
        parts.append(tr("plain generate {seconds:.2f} s (no profiler)", seconds=tl.plain_generate.median_s))
    return tr("; ").join(parts)


def environment_table(manifest: Manifest | dict) -> pd.DataFrame:
    m = read_manifest(manifest)
    env, gpu = m.environment, m.environment.gpu
    rows = [("GPU", gpu.name), (tr("compute capability"), gpu.compute_capability),
            ("SMs", gpu.sm_count), (tr("GPU memory (GiB)"), gpu.memory_gib),
            ("L2 (MiB)", round(gpu.l2_bytes / 2**20, 1) if gpu.l2_bytes else None),
            (tr("driver"), env.driver), ("CUDA", env.cuda), ("torch", env.torch),
            ("transformers", env.transformers), ("ncu", env.ncu), ("nsys", env.nsys),
            ("python", env.python), (tr("git revision"), m.git_revision)]
    return _items(rows)


def _items(rows: list[tuple]) -> pd.DataFrame:
    """item/value rows as text, a value the run does not record left missing (not the string 'None')."""
    return pd.DataFrame([(k, None if v is None else str(v)) for k, v in rows], columns=["item", "value"])


def peaks_table(dev: Device | None) -> pd.DataFrame:
    if dev is None:
        return pd.DataFrame({"note": [tr("the run's GPU is not in params/devices.yaml: add a row to compare")]})
    rows = [(tr("{dtype} tensor", dtype=p) if p not in ("fp32", "fp64") else tr("{dtype} CUDA core", dtype=p), "TFLOP/s", v,
             round(dev.ridge(p), 1) if v else None) for p, v in dev.tflops.items()]
    df = pd.DataFrame(rows, columns=["peak", "unit", "value", "ridge_flop_per_byte"])
    extra = pd.DataFrame([(tr("DRAM bandwidth"), "GB/s", dev.dram_gbps, None), ("L2", "MiB", dev.l2_mb, None),
                          ("SMs", "count", dev.sm_count, None), (tr("max SM clock"), "MHz", dev.sm_clock_max_mhz, None)],
                         columns=df.columns)
    out = pd.concat([df, extra], ignore_index=True)
    out.attrs["source"] = dev.source
    return out


def measured_peaks(manifest: Manifest | dict, measure_here: bool = True, lock_clocks: bool = False) -> dict:
    """Measure on this machine when it has a GPU (under the profiling lock), else the run's record."""
    from ..env import cuda_visible

    if measure_here and cuda_visible():
        from contextlib import nullcontext

        from ..contract.session import current
        from ..clocks import clock_lock
        from ..measure import measure_peaks

        # under the book runner's locks (a capture in progress) the lock is already this book's
        with (nullcontext() if current().locks_held else clock_lock(lock_clocks)):
            return {**measure_peaks(), "where": tr("measured now, on this machine")}
    rec = read_manifest(manifest).measured_peaks
    return {**_peaks_record(rec), "where": tr("recorded in the run's manifest")} if rec else {}


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
        return pd.DataFrame({"note": [tr("no measured peaks in this run (measure_peaks: false)")]})
    rows = [("bf16 GEMM", "TFLOP/s", measured["bf16_gemm_tflops"], dev.tflops.get("bf16") if dev else None,
             measured["bf16_gemm"]["spread"] * 100, measured["bf16_gemm"]["trials"]),
            (tr("device-to-device copy (read + write)"), "GB/s", measured["d2d_copy_gbps"],
             dev.dram_gbps if dev else None, measured["d2d_copy"]["spread"] * 100, measured["d2d_copy"]["trials"])]
    df = pd.DataFrame(rows, columns=["quantity", "unit", "measured", "spec", "spread_pct", "trials"])
    df["measured_pct_of_spec"] = 100 * df.measured / df.spec
    return df


def measured_prose(measured: dict, dev: Device | None) -> str:
    if not measured or dev is None:
        return ""
    g = measured["bf16_gemm_tflops"] / dev.tflops["bf16"]
    b = measured["d2d_copy_gbps"] / dev.dram_gbps
    ridge = measured["bf16_gemm_tflops"] * 1e12 / (measured["d2d_copy_gbps"] * 1e9)
    noisy = [k for k in ("bf16_gemm", "d2d_copy") if measured[k].get("noisy")]
    note = tr(" Flagged noisy (spread > 2 %): {which}.", which=", ".join(noisy)) if noisy else ""
    return tr("Measured ({where}): the GEMM reaches {gemm:.0%} of the spec bf16 peak and the copy {copy:.0%} of "
              "spec DRAM bandwidth, so the measured ridge is {ridge:.0f} FLOP/byte against {spec_ridge:.0f} on "
              "paper.{note} Spec source: {source}.", where=measured["where"], gemm=g, copy=b, ridge=ridge,
              spec_ridge=dev.ridge("bf16"), note=note, source=dev.source)


def clock_table(manifest: Manifest | dict) -> pd.DataFrame:
    m = read_manifest(manifest)
    clocks, state, ncu = m.environment.clocks, m.clock_state, m.ncu
    rows = [(tr("clocks locked"), state.locked), (tr("note"), text(state.note) if state.note else None),
            (tr("SM clock at capture start (MHz)"), clocks.sm_clock_mhz),
            (tr("max SM clock (MHz)"), clocks.sm_clock_max_mhz),
            (tr("memory clock (MHz)"), clocks.mem_clock_mhz),
            ("ncu --clock-control", ncu.clock_control if ncu else None),
            ("ncu --cache-control", ncu.cache_control if ncu else None)]
    return _items(rows)


def params_table(manifest: Manifest | dict) -> pd.DataFrame:
    """The capture's parameters as its manifest records them (older manifests also recorded book
    parameters; those are left out here: they describe a render, not this capture)."""
    from ..params import CAPTURE, SCHEMA

    p = read_manifest(manifest).params
    keep = {k: v for k, v in p.items() if k not in SCHEMA or CAPTURE in SCHEMA[k].feeds}
    return pd.DataFrame({"parameter": list(keep), "value": [_text(v) for v in keep.values()],
                         "meaning": [text(SCHEMA[k].doc) if k in SCHEMA else "" for k in keep]})


def book_params_table(given: dict) -> pd.DataFrame:
    """The book's own parameters (what a render reads, not the capture): each with the value this
    chapter was given where it reads it, else the default the chapters start from, and which
    chapters read it. `given`: this chapter's parameter values by name."""
    from ..params import CAPTURE, SCHEMA

    rows = []
    for k, spec in SCHEMA.items():
        readers = [f for f in spec.feeds if f != CAPTURE]
        if not readers:
            continue
        if k in given:
            value = tr("empty: the run's GPU") if k == "device" and not given[k] else _text(given[k])
        else:
            value = tr("{value} (default)", value=_text(spec.default))
        rows.append({"parameter": k, "value": value, "read_by": ", ".join(r.split("_", 1)[0] for r in readers),
                     "meaning": text(spec.doc)})
    return pd.DataFrame(rows)


def _text(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)
