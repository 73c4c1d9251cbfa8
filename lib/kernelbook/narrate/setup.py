"""Chapter 00's sentences and labels, from `analyze.setup`: the headline, the measured peaks against spec, the spec
peaks table (its rows named in the reader's language) and the book's parameters."""
from __future__ import annotations

import pandas as pd

from ..devices import Device
from ..escape import md
from ..i18n import N_, text, tr

# `analyze.setup`'s row labels and notes, catalog keys: the display layer shows them in the reader's language
LABELS = (N_("compute capability"), N_("GPU memory (GiB)"), N_("driver"), N_("git revision"),
          N_("device-to-device copy (read + write)"), N_("clocks locked"), N_("note"),
          N_("SM clock at capture start (MHz)"), N_("max SM clock (MHz)"), N_("memory clock (MHz)"),
          N_("measured now, on this machine"), N_("recorded in the run's manifest"),
          N_("no measured peaks in this run (measure_peaks: false)"))


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


def peaks_table(dev: Device | None) -> pd.DataFrame:
    """The device's spec peaks (params/devices.yaml), each compute peak with its ridge point; a note where the run's
    GPU is not in the table."""
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


def measured_prose(measured: dict, dev: Device | None) -> str:
    """The measured peaks against the spec (`analyze.setup.measured_peaks`): their fractions and the measured ridge."""
    if not measured or dev is None:
        return ""
    g = measured["bf16_gemm_tflops"] / dev.tflops["bf16"]
    b = measured["d2d_copy_gbps"] / dev.dram_gbps
    ridge = measured["bf16_gemm_tflops"] * 1e12 / (measured["d2d_copy_gbps"] * 1e9)
    noisy = [k for k in ("bf16_gemm", "d2d_copy") if measured[k].get("noisy")]
    note = tr(" Flagged noisy (spread > 2 %): {which}.", which=", ".join(noisy)) if noisy else ""
    return tr("Measured ({where}): the GEMM reaches {gemm:.0%} of the spec bf16 peak and the copy {copy:.0%} of "
              "spec DRAM bandwidth, so the measured ridge is {ridge:.0f} FLOP/byte against {spec_ridge:.0f} on "
              "paper.{note} Spec source: {source}.", where=text(measured["where"]), gemm=g, copy=b, ridge=ridge,
              spec_ridge=dev.ridge("bf16"), note=note, source=dev.source)


def book_params_table(given: dict) -> pd.DataFrame:
    """The book's own parameters (what a render reads, not the capture): each with the value this
    chapter was given where it reads it, else the default the chapters start from, and which
    chapters read it. `given`: this chapter's parameter values by name."""
    from ..analyze.setup import value_text
    from ..params import CAPTURE, SCHEMA

    rows = []
    for k, spec in SCHEMA.items():
        readers = [f for f in spec.feeds if f != CAPTURE]
        if not readers:
            continue
        if k in given:
            value = tr("empty: the run's GPU") if k == "device" and not given[k] else value_text(given[k])
        else:
            value = tr("{value} (default)", value=value_text(spec.default))
        rows.append({"parameter": k, "value": value, "read_by": ", ".join(r.split("_", 1)[0] for r in readers),
                     "meaning": text(spec.doc)})
    return pd.DataFrame(rows)
