"""Rooflines from the ncu tables: roofs, per-kernel points at DRAM, L2 and L1, and what lies above a roof.

Roofs come from `params/devices.yaml` (spec) and the run's manifest (measured GEMM and copy ceilings).
The L2 and L1 roofs come from ncu's own per-cycle peak counters when the capture recorded them
(`lts__t_bytes.sum.peak_sustained`, `l1tex__t_bytes.sum.peak_sustained` times the unit clock);
otherwise the L2 roof is estimated from the run's counters (bytes/s ÷ L2 throughput %, from the
kernel that loads L2 most, a lower bound on the true peak) and no L1 roof is drawn.

A kernel's compute roof is the tensor-core peak of its dtype when it issues tensor FLOPs, else the
CUDA-core fp32 peak. Attainable FLOP/s at intensity I on a level = min(compute roof, bandwidth × I).

Labels and causes are English phrases (`contract.phrase`); `narrate.roofline` writes what the rooflines say.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..contract.shapes import FLOPS_TOLERANCE, attention_work, expected_gemm_flops
from .histograms import weighted_mean
from ..contract.kernels import with_identity
from ..contract.manifest import Manifest, read_manifest
from ..contract.phrase import column as phrase_column
from ..contract.phrase import phrase
from .ncu_report import Launches, profiled_launch

LEVELS = ("dram", "l2", "l1")
LEVEL_LABEL = {"dram": "DRAM", "l2": "L2", "l1": "L1"}
ABOVE_TOLERANCE = 1.05  # a point more than 5 % above its roof is flagged, never silently drawn
RELIABLE_PCT = 20.0     # L2 % of peak needed before a bytes/% ratio is trusted as a roof estimate
SPEC = phrase("devices.yaml (spec)")  # where a roof comes from when nothing better measured it
# which peak a bandwidth roof is (`Roofs.peak_kind`): a figure's legend names it beside the roof's GB/s
PEAK_SPEC, PEAK_NCU, PEAK_ESTIMATE = phrase("spec"), phrase("ncu peak"), phrase("estimate")


@dataclass
class Roofs:
    compute: dict[str, float]                 # label -> FLOP/s
    bandwidth: dict[str, float]               # level -> B/s (the roof used for points and flags)
    measured: dict[str, float] = field(default_factory=dict)  # label (a phrase) -> FLOP/s or B/s, drawn dashed
    sources: dict[str, str] = field(default_factory=dict)    # level -> where its bandwidth comes from (a phrase)
    estimates: set[str] = field(default_factory=set)         # levels whose roof is an estimate
    estimated_from: dict[str, tuple[str, float]] = field(default_factory=dict)  # level -> (kernel id, its % of peak)
    run_id: str = ""  # the run whose ncu counters and manifest measured these roofs (`for_run`)

    def ridge(self, compute: str = "tensor bf16") -> float:
        """FLOP/byte where `compute`'s roof meets the DRAM roof (the device's ridge, on the roofs drawn)."""
        return self.compute[compute] / self.bandwidth["dram"]

    def estimated(self, level: str) -> bool:
        return level in self.estimates

    def peak_kind(self, level: str) -> str:
        """Which peak a bandwidth roof is, in a figure's few words (a phrase): the spec sheet's, ncu's peak as one
        capture measured it (a DRAM or cache clock read in that capture: two captures of one GPU differ by a few
        GB/s), or an estimate from the run's counters."""
        if level in self.estimates:
            return PEAK_ESTIMATE
        return PEAK_SPEC if self.sources.get(level, SPEC) == SPEC else PEAK_NCU

    def compute_for(self, row) -> tuple[str, float]:
        """(label, FLOP/s) of the compute roof that applies to a kernel row."""
        tensor = {c[len("flops_tensor_"):]: row.get(c, 0) or 0 for c in row.index if c.startswith("flops_tensor_")}
        tensor = {k: v for k, v in tensor.items() if v > 0}
        if tensor:
            dt = max(tensor, key=tensor.get)
            label = f"tensor {dt}"
            if label in self.compute:
                return label, self.compute[label]
        return "CUDA-core fp32", self.compute["CUDA-core fp32"]

    def table(self) -> pd.DataFrame:
        """Every roof with its value, unit and source (roof and source: phrases or catalog keys)."""
        rows = [{"roof": k, "value": v / 1e12, "unit": "TFLOP/s", "source": SPEC} for k, v in self.compute.items()]
        rows += [{"roof": phrase("{level} bandwidth", level=LEVEL_LABEL[k]), "value": v / 1e9, "unit": "GB/s",
                  "source": self.sources.get(k, SPEC)} for k, v in self.bandwidth.items()]
        rows += [{"roof": k, "value": v / (1e12 if "TFLOP" in k else 1e9),
                  "unit": "TFLOP/s" if "TFLOP" in k else "GB/s", "source": phrase("manifest (measured)")}
                 for k, v in self.measured.items()]
        out = pd.DataFrame(rows)
        for c in ("roof", "source"):
            out[c] = phrase_column((r[c] for r in rows), out.index)
        return out


def roofs(device, manifest: Manifest | dict, kernels: pd.DataFrame, metrics: pd.DataFrame | None = None,
          device_sources: dict | None = None) -> Roofs:
    """The run's roofs. `device_sources`: where each of `device`'s facts came from (`devices.for_run`: the DRAM
    peak ncu measured on the GPU wins over devices.yaml's); without it every fact is devices.yaml's."""
    compute = {f"tensor {p}": device.peak_flops(p) for p in ("bf16", "fp16", "tf32", "fp8")
               if device.tflops.get(p)}
    compute["CUDA-core fp32"] = device.peak_flops("fp32")
    bw = {"dram": device.dram_bytes_per_s}
    sources = {"dram": (device_sources or {}).get("dram_gbps", SPEC)}  # devices.for_run's: a catalog key
    estimates, estimated_from = set(), {}
    mp = read_manifest(manifest).measured_peaks
    measured = {}
    if mp and mp.bf16_gemm_tflops:
        # labels are catalog keys: English in the data (chapter 07 reads the DRAM one), shown translated
        measured[phrase("bf16 GEMM (TFLOP/s, measured)")] = mp.bf16_gemm_tflops * 1e12
    if mp and mp.d2d_copy_gbps:
        measured[phrase("DRAM copy (GB/s, measured)")] = mp.d2d_copy_gbps * 1e9
    for lvl, peak_metric, clock_metric in (("l2", "lts__t_bytes.sum.peak_sustained", "lts__cycles_elapsed.avg.per_second"),
                                           ("l1", "l1tex__t_bytes.sum.peak_sustained",
                                            "l1tex__cycles_elapsed.avg.per_second")):
        v = _ncu_peak(metrics, peak_metric, clock_metric)
        if v:
            bw[lvl] = v
            sources[lvl] = phrase("ncu {metric} × unit clock (median over results)", metric=peak_metric)
    if "l2" not in bw:
        est = l2_roof_estimate(kernels)
        if est:
            bw["l2"], kid, pct = est
            estimates.add("l2")
            estimated_from["l2"] = (kid, pct)
            sources["l2"] = phrase("estimated: {kernel}'s L2 bytes/s ÷ its L2 throughput ({pct:.0f} %), a lower bound",
                                   kernel=kid, pct=pct)
    return Roofs(compute, bw, measured, sources, estimates, estimated_from)


def _ncu_peak(metrics: pd.DataFrame | None, peak_metric: str, clock_metric: str) -> float | None:
    if metrics is None or not len(metrics):
        return None
    m = metrics[metrics.metric.isin([peak_metric, clock_metric])]
    w = m.pivot_table(index="result_id", columns="metric", values="value", aggfunc="first")
    if peak_metric not in w or clock_metric not in w:
        return None
    return float((w[peak_metric] * w[clock_metric]).median())


def l2_roof_estimate(kernels: pd.DataFrame) -> tuple[float, str, float] | None:
    if kernels.empty:  # a run without profiled kernels: no L2 estimate, the spec roof stands
        return None
    k = kernels[(kernels.get("l2_pct", pd.Series(dtype=float)) >= RELIABLE_PCT) & (kernels.l2_bytes > 0)]
    if k.empty:
        return None
    top = k.loc[k.l2_pct.idxmax()]
    return float(top.l2_bytes_per_s / (top.l2_pct / 100)), str(top.kernel_id), float(top.l2_pct)


# a cache level that counted under this fraction of the DRAM bytes was gone around, not used
BYPASS_FRACTION = 0.01


def _bypassed(row, lvl: str) -> bool:
    """A cache level that counted under BYPASS_FRACTION of the bytes that came from DRAM: the kernel's loads
    went around it (TMA / async copies from global into shared memory skip L1), so its bytes do not
    describe the kernel's traffic and a point there would be an artifact (d004: 6.6 kB at L1 for 334 MB
    from DRAM, 403,237 FLOP/B). Small pointwise kernels, whose L1 counts a part of the DRAM bytes (their
    stores, ncu's own traffic), keep their points."""
    dram = row.get("dram_bytes")
    b = row.get(f"{lvl}_bytes")
    return lvl != "dram" and bool(dram and np.isfinite(dram) and b == b and b < BYPASS_FRACTION * dram)


def bypassed_levels(kernels: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The profiled kernels with FLOPs of a phase whose L2 or L1 counted fewer bytes than DRAM: no point at
    that level (see `_bypassed`). Columns: kernel_id, friendly_name, level, level_bytes, dram_bytes."""
    k = kernels[(kernels.status == "profiled") & (kernels.flops > 0) & (kernels.phase == phase)]
    rows = [{"kernel_id": r.kernel_id, "friendly_name": r.get("friendly_name"), "level": LEVEL_LABEL[lvl],
             "level_bytes": r.get(f"{lvl}_bytes"), "dram_bytes": r.dram_bytes}
            for _, r in k.iterrows() for lvl in LEVELS if _bypassed(r, lvl)]
    return pd.DataFrame(rows, columns=["kernel_id", "friendly_name", "level", "level_bytes", "dram_bytes"])


def useful_work(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per profiled kernel with FLOPs whose aten shapes give its work: the FLOPs ncu counted beside the useful
    FLOPs of the profiled launch's shapes (a matrix product's 2·M·N·K, an attention's 4·B·H·Sq·Sk·D), counted ÷
    useful (× of padding: the MMA tile pads a matrix-vector product's and a one-query attention's small
    dimension), and the DRAM intensity (FLOP/B) and FLOP/s of each. Counted FLOPs are what the points are
    drawn with; the useful ones are the work the model asked for."""
    cols = ["phase", "kernel_id", "friendly_name", "category", "op_shapes", "work_basis", "counted_flops",
            "useful_flops", "padding_ratio", "intensity_dram", "useful_intensity_dram", "flops_per_s",
            "useful_flops_per_s"]
    rows = []
    ix = Launches(timeline)
    for _, k in kernels[(kernels.status == "profiled") & (kernels.flops > 0)].iterrows():
        _, op, shp = profiled_launch(k, ix)
        if k.category in ("GEMM", "GEMV"):
            useful, basis = expected_gemm_flops(shp), phrase("2·M·N·K")
        elif k.category == "attention" and shp:
            att = attention_work(shp)
            # a prefill's causal mask skips up to half of it, which the shapes do not say
            useful, basis = (att[0] if att else np.nan), (phrase("4·B·H·Sq·Sk·D (attention)")
                                                          if "x1x" in shp.split(";")[0] else
                                                          phrase("4·B·H·Sq·Sk·D (attention, no causal mask assumed)"))
        else:
            continue
        if not useful == useful or useful <= 0:
            continue
        dram = k.dram_bytes if k.dram_bytes and k.dram_bytes > 0 else np.nan
        rows.append({"phase": k.phase, "kernel_id": k.kernel_id, "friendly_name": k.get("friendly_name"),
                     "category": k.category, "op_shapes": shp, "work_basis": basis, "counted_flops": k.flops,
                     "useful_flops": useful, "padding_ratio": k.flops / useful, "intensity_dram": k.flops / dram,
                     "useful_intensity_dram": useful / dram, "flops_per_s": k.flops_per_s,
                     "useful_flops_per_s": k.flops_per_s * useful / k.flops})
    out = pd.DataFrame(rows, columns=cols)
    out["work_basis"] = phrase_column((r["work_basis"] for r in rows), out.index)  # the phrases kept
    return out


def padded(u: pd.DataFrame, phase: str) -> dict | None:
    """What the points' FLOPs are, measured: the kernels of `phase` whose counted FLOPs exceed their useful work
    (from `useful_work`): their ids and the range of counted ÷ useful; None when none does."""
    f = u[(u.phase == phase) & (u.padding_ratio > 1 + FLOPS_TOLERANCE)] if len(u) else u
    if f.empty:
        return None
    return {"kernels": list(f.kernel_id), "lo": f.padding_ratio.min(), "hi": f.padding_ratio.max()}


# A near-empty kernel's L2 count is ncu's per-launch floor, not its traffic: every profiled kernel counts at
# least about 1.4 MB at L2 (d019, 2560 float adds: 1.42 MB at L2 for 5.1 kB from DRAM). A kernel whose L2 bytes
# are within FLOOR_BAND of that floor and over FLOOR_OVER_DRAM × its DRAM bytes is near-empty: its L2 and L1
# points are marked as artifacts.
FLOOR_BAND = 1.5
FLOOR_OVER_DRAM = 10


def l2_floor(kernels: pd.DataFrame) -> float:
    """The fewest L2 bytes any profiled kernel of the run counted (B): ncu's per-launch floor."""
    b = kernels.loc[kernels.status == "profiled", "l2_bytes"] if len(kernels) else pd.Series(dtype=float)
    b = b[b > 0]
    return float(b.min()) if len(b) else np.nan


def _near_empty(row, floor: float) -> bool:
    l2, dram = row.get("l2_bytes"), row.get("dram_bytes")
    return bool(floor == floor and l2 == l2 and dram and dram == dram and l2 <= FLOOR_BAND * floor
                and l2 > FLOOR_OVER_DRAM * dram)


def near_empty(kernels: pd.DataFrame, phase: str) -> dict | None:
    """The near-empty kernels of `phase`, whose L2 and L1 points are artifacts: their ids, the most DRAM bytes any of
    them read, the fewest and most L2 bytes they counted and the run's L2 floor (`l2_floor`, B); None without any."""
    floor = l2_floor(kernels)
    k = kernels[(kernels.status == "profiled") & (kernels.flops > 0) & (kernels.phase == phase)] if len(kernels) else kernels
    k = k[[_near_empty(r, floor) for _, r in k.iterrows()]] if len(k) else k
    if k.empty:
        return None
    return {"kernels": list(k.kernel_id), "dram_bytes": k.dram_bytes.max(), "l2_min_bytes": k.l2_bytes.min(),
            "l2_max_bytes": k.l2_bytes.max(), "floor_bytes": floor}


def points(kernels: pd.DataFrame, r: Roofs) -> pd.DataFrame:
    """Long format, one row per profiled kernel × memory level with FLOPs > 0: intensity (FLOP/B),
    achieved FLOP/s, the attainable FLOP/s at that intensity, % of roof, bound, time share, above-roof flag.
    A cache level that counted fewer bytes than DRAM (the loads went around it) gets no point."""
    rows = []
    k = kernels[(kernels.status == "profiled") & (kernels.flops > 0)]
    floor = l2_floor(kernels)
    for _, row in k.iterrows():
        clabel, cpeak = r.compute_for(row)
        empty = _near_empty(row, floor)
        for lvl in LEVELS:
            b = row.get(f"{lvl}_bytes")
            if not b or not np.isfinite(b) or b <= 0 or _bypassed(row, lvl):
                continue
            inten = row.flops / b
            bw = r.bandwidth.get(lvl)
            roof = min(cpeak, bw * inten) if bw else np.nan
            rows.append({
                "phase": row.phase, "kernel_id": row.kernel_id, "friendly_name": row.get("friendly_name"),
                "category": row.get("category"), "level": LEVEL_LABEL[lvl], "intensity": inten,
                "flops_per_s": row.flops_per_s, "roof_flops_per_s": roof, "compute_roof": clabel,
                "pct_of_roof": 100 * row.flops_per_s / roof if roof == roof else np.nan,
                "bound": ("memory" if bw and bw * inten < cpeak else "compute") if bw else "no roof",
                "share": row.share, "duration_us": row.duration_ns / 1e3,
                # a near-empty kernel's cache counts are ncu's floor and a few sectors: drawn, marked
                "artifact": empty and lvl != "dram",
            })
    p = pd.DataFrame(rows)
    if len(p):
        p["above_roof"] = (p.pct_of_roof > 100 * ABOVE_TOLERANCE) & ~p.artifact
    return p


def bandwidth_only(kernels: pd.DataFrame, r: Roofs) -> pd.DataFrame:
    """Profiled kernels without FLOPs (copies, gathers, casts): no roofline point, so their place is
    % of the bandwidth roof at each level."""
    k = kernels[(kernels.status == "profiled") & ~(kernels.flops > 0)]
    out = k[["phase", "kernel_id", "friendly_name", "category", "share", "duration_ns"]].copy()
    out["duration_us"] = out.pop("duration_ns") / 1e3
    for lvl in LEVELS:
        bw = r.bandwidth.get(lvl)
        out[f"{lvl}_pct_of_roof"] = 100 * k[f"{lvl}_bytes_per_s"] / bw if bw else np.nan
    return out.reset_index(drop=True)


def above_roof_causes(p: pd.DataFrame, kernels: pd.DataFrame, r: Roofs,
                      fidelity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every point above its roof, with the likely cause read from the data (`fidelity`: chapter 02's
    table, whose flops_ratio is tensor FLOPs ÷ 2·M·N·K)."""
    if p.empty or not p.above_roof.any():
        return pd.DataFrame(columns=["kernel_id", "friendly_name", "level", "pct_of_roof", "likely_cause"])
    ratio = {} if fidelity is None else fidelity.set_index("kernel_id")["flops_ratio"].to_dict()
    kk = kernels.set_index("kernel_id")
    rows = []
    for _, q in p[p.above_roof].iterrows():
        k = kk.loc[q.kernel_id]
        rr = ratio.get(q.kernel_id, np.nan)
        if rr == rr and rr > 1 + FLOPS_TOLERANCE:
            cause = phrase("tensor FLOPs are {ratio:.0f}× 2·M·N·K: the MMA tile pads the small dimension, so counted "
                           "FLOP/s include padding work", ratio=rr)
        elif q.level == "DRAM" and (k.get("l2_hit_pct") or 0) > 80:
            cause = phrase("DRAM bytes undercounted: L2 hit {pct:.0f} % under ncu replay with --cache-control none "
                           "keeps the data L2-resident, so DRAM intensity is inflated", pct=k.l2_hit_pct)
        elif q.level == "L2" and r.estimated("l2"):
            cause = phrase("the L2 roof is a lower-bound estimate")
        else:
            cause = phrase("clock above the spec table's assumption, or a roof value too low for this part (check "
                           "devices.yaml)")
        rows.append({"kernel_id": q.kernel_id, "friendly_name": q.friendly_name, "level": q.level,
                     "pct_of_roof": q.pct_of_roof, "likely_cause": cause})
    out = pd.DataFrame(rows)
    out["likely_cause"] = phrase_column((r["likely_cause"] for r in rows), out.index)  # the phrases kept
    return out


def normalized(kernels: pd.DataFrame) -> pd.DataFrame:
    """ncu speed-of-light coordinates: fraction of peak memory throughput (max over DRAM/L2/L1) and
    fraction of peak SM throughput, per profiled kernel."""
    k = kernels[kernels.status == "profiled"]
    return pd.DataFrame({"phase": k.phase, "kernel_id": k.kernel_id, "friendly_name": k.get("friendly_name"),
                         "category": k.get("category"), "memory_frac": k.memory_pct / 100,
                         "compute_frac": k.sm_pct / 100, "share": k.share,
                         "duration_us": k.duration_ns / 1e3}).reset_index(drop=True)


def figures(p: pd.DataFrame, bw_only: pd.DataFrame, phase: str = "decode") -> dict:
    """What the rooflines say, computed (`narrate.roofline.prose`): `points` False without any point, `dram` False
    without a DRAM point of `phase`; else the DRAM points' count, time-weighted mean and median % of roof, how many
    are memory-side, the largest by time (id, name, share %, % of roof, intensity), the bandwidth-only kernels of the
    phase (count, share %, median % of the DRAM roof; None without any), and the points above their roof with the
    tolerance (%)."""
    if p.empty:
        return {"points": False}
    d = p[(p.level == "DRAM") & (p.phase == phase)]
    if d.empty:
        return {"points": True, "dram": False}
    worst = d.sort_values("share", ascending=False).iloc[0]
    out = {"points": True, "dram": True, "n": len(d), "wmean": weighted_mean(d.pct_of_roof, d.share),
           "median": d.pct_of_roof.median(), "n_memory": len(d[d.bound == "memory"]),
           "largest": {"name": worst.friendly_name, "share": 100 * worst.share, "pct": worst.pct_of_roof,
                       "intensity": worst.intensity}, "bandwidth_only": None,
           "n_above": int(p.above_roof.sum()), "tol": 100 * ABOVE_TOLERANCE - 100}
    if len(bw_only):
        b = bw_only[bw_only.phase == phase]
        if len(b):
            out["bandwidth_only"] = {"n": len(b), "share": 100 * b.share.sum(), "median": b.dram_pct_of_roof.median()}
    return out


def for_run(run, kernels: pd.DataFrame | None = None) -> tuple[object, dict, Roofs]:
    """(device, where each of its facts came from, roofs) of a run: `devices.for_run` (devices.yaml, with what ncu
    measured on the GPU winning) and its roofs over `kernels` (default `profiled_kernels`). The one place every
    chapter, the what-if and report.md take the device and roofs from, so they print the same DRAM peak."""
    from ..devices import for_run as device_of

    dev, sources = device_of(run)
    k = profiled_kernels(run) if kernels is None else kernels
    return dev, sources, replace(roofs(dev, run.info, k, run.ncu_metrics(), sources), run_id=run.run_id)


TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"


def with_tensor_pipe(k: pd.DataFrame, metrics: pd.DataFrame | None) -> pd.DataFrame:
    """`k` with `tensor_pipe_pct`: ncu's tensor pipe active cycles, % of peak sustained (`sm__pipe_tensor_cycles_
    active`, all MMA types), per result; NaN where the run's metric table lacks it."""
    k = k.copy()
    if metrics is None or "result_id" not in k or not (metrics.metric == TENSOR_PIPE).any():
        k["tensor_pipe_pct"] = np.nan
        return k
    m = metrics[metrics.metric == TENSOR_PIPE].groupby("result_id").value.first()
    k["tensor_pipe_pct"] = k.result_id.map(lambda r: m.get(int(r), np.nan) if r == r else np.nan)
    return k



def profiled_kernels(run) -> pd.DataFrame:
    """The run's ncu kernel rows with identity columns (friendly name, category by work done, library)
    from the timeline and `tensor_pipe_pct` (`with_tensor_pipe`); empty frame when the run has no ncu stage or
    it profiled no kernel."""
    k = run.ncu_kernels()
    if k is None or "status" not in k or not (k.status == "profiled").any():
        return pd.DataFrame()  # no ncu stage, or one that profiled nothing (a partial capture)
    k = with_identity(k, run.timeline)
    k["duration_us"] = k.duration_ns / 1e3
    return with_tensor_pipe(k, run.ncu_metrics())
