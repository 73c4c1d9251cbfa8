"""Chapter 06's what-if model: replay the run's kernel mix on an accelerator described in params/npus.yaml.

Work per kernel launch (one row per kernel identity and phase):
- GEMM/GEMV: FLOPs = 2·M·N·K from the aten shapes; DRAM bytes = the weight operand (K·N·2 B), which
  is read once per launch because the active weights are far larger than any L2; activations on chip.
- profiled kernels (ncu): their counted tensor/CUDA-core FLOPs and L2 bytes; DRAM bytes as above for
  GEMM/GEMV (ncu's replay keeps weights L2-resident, chapter 04), else ncu's DRAM bytes.
- other kernels: bytes from their aten input shapes (inputs + one output, 2 B per element) when known,
  else scaled from the profiled members of their category (bytes per ns of kernel time); marked.

Device time of a launch = max(kernel floor, tensor FLOPs ÷ matrix peak·eff, CUDA-core FLOPs ÷ vector
peak·eff, DRAM bytes ÷ DRAM bw·eff, on-chip bytes ÷ SRAM bw·eff). Fused elementwise chains cost their
bytes only (no floor, no launch). A step's wall time = max(launches × host time per launch, Σ device
time): the host issues launches asynchronously, so the slower of the two sets the pace.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .histograms import weighted_mean
from .ncu_report import expected_gemm_flops

NPUS_YAML = Path(__file__).resolve().parents[3] / "params" / "npus.yaml"
FUSIBLE = ("elementwise", "copy/cast", "reduction/norm")
DTYPE_BYTES = 2
REQUIRED = ("matrix_tflops", "vector_tflops", "dram_gbps", "sram_mb", "sram_gbps", "kernel_floor_us",
            "launch_overhead_us", "mem_efficiency", "matrix_efficiency", "fuse_elementwise", "source")


@dataclass(frozen=True)
class Design:
    key: str
    matrix_tflops: dict
    vector_tflops: float
    dram_gbps: float
    sram_mb: float
    sram_gbps: float
    kernel_floor_us: float
    launch_overhead_us: float | None
    mem_efficiency: float
    matrix_efficiency: float
    fuse_elementwise: bool
    source: str

    def with_(self, **kw) -> "Design":
        return replace(self, **kw)


def load_designs(path: str | Path = NPUS_YAML) -> dict[str, Design]:
    raw = yaml.safe_load(Path(path).read_text())
    out, problems = {}, []
    for key, d in raw.items():
        missing = [f for f in REQUIRED if f not in d]
        if missing:
            problems.append(f"{key}: missing {missing}")
            continue
        out[key] = Design(key, **{f: d[f] for f in REQUIRED})
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems) + " (see the field list at the top of the file)")
    return out


def _shape_elems(op_shapes: str | None) -> list[int]:
    if not op_shapes:
        return []
    out = []
    for s in op_shapes.split(";"):
        try:
            out.append(int(np.prod([int(x) for x in s.split("x")])) if s else 0)
        except ValueError:
            continue
    return out


def _weight_bytes(op_shapes: str | None) -> float:
    e = _shape_elems(op_shapes)
    return float(e[1] * DTYPE_BYTES) if len(e) >= 2 else np.nan


def work_table(timeline: pd.DataFrame, kernels: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (phase, kernel identity, op shapes): launches, measured time, and per-launch work
    (flops_tensor, flops_cuda, dram_bytes, onchip_bytes) with where each number came from."""
    from .timeline import work_category

    tl = timeline[(timeline.kind == "kernel") & (timeline.phase != "other")]
    tl = tl.assign(category=work_category(tl), op_shapes=tl.op_shapes.fillna(""))
    g = tl.groupby(["phase", "name", "op_shapes"], sort=False).agg(
        launches=("duration_ns", "size"), total_ns=("duration_ns", "sum"), median_ns=("duration_ns", "median"),
        category=("category", "first"), friendly_name=("friendly_name", "first")).reset_index()
    prof = {} if kernels is None else {r["name"]: r for _, r in kernels[kernels.status == "profiled"].iterrows()}
    ft, fc, dram, chip, src = [], [], [], [], []
    for r in g.itertuples():
        p = prof.get(r.name) if r.phase == "decode" else None
        gemm = r.category in ("GEMM", "GEMV")
        if gemm:
            f = expected_gemm_flops(r.op_shapes)
            w = _weight_bytes(r.op_shapes)
            if p is not None:  # counted FLOPs include MMA padding: the work the unit really does
                ft.append(p.flops_tensor)
                fc.append(p.flops_cuda or 0.0)
                chip.append(p.l2_bytes)
                src.append("ncu FLOPs + weight bytes from shapes")
            else:
                ft.append(f)
                fc.append(0.0)
                e = _shape_elems(r.op_shapes)
                chip.append(float(sum(e)) * DTYPE_BYTES if e else np.nan)
                src.append("2·M·N·K + weight bytes from shapes")
            dram.append(w)
        elif p is not None:
            ft.append(p.flops_tensor)
            fc.append(p.flops_cuda or 0.0)
            dram.append(p.dram_bytes)
            chip.append(p.l2_bytes)
            src.append("ncu")
        else:
            e = _shape_elems(r.op_shapes)
            b = float(sum(e) + max(e)) * DTYPE_BYTES if e else np.nan
            ft.append(0.0)
            fc.append(float(max(e)) if e else np.nan)  # ~1 op per output element
            dram.append(b)
            chip.append(b)
            src.append("bytes from aten shapes" if e else "scaled from category")
    g["flops_tensor"], g["flops_cuda"], g["dram_bytes"], g["onchip_bytes"], g["source"] = ft, fc, dram, chip, src
    _scale_missing(g)
    return g


def _scale_missing(g: pd.DataFrame) -> None:
    """Rows without work numbers take their category's bytes and FLOPs per ns of measured kernel time."""
    known = g[g.source != "scaled from category"]
    for col in ("flops_tensor", "flops_cuda", "dram_bytes", "onchip_bytes"):
        miss = g[col].isna() | (g.source == "scaled from category")
        if not miss.any():
            continue
        k = known[known[col].notna()]
        per_ns = (k[col] * k.launches).groupby(k.category).sum() / k.groupby("category").total_ns.sum()
        overall = float((k[col] * k.launches).sum() / k.total_ns.sum()) if len(k) else 0.0
        g.loc[miss, col] = g.loc[miss].apply(lambda r: per_ns.get(r.category, overall) * r.median_ns, axis=1)
        g.loc[miss, "source"] = "scaled from category"


def host_time_per_launch_us(summary: pd.DataFrame, manifest: dict, phase: str = "decode") -> float:
    """The run's own host time per launch: the plain run's wall time per step (profiled wall ÷ the
    capture's profiled/plain ratio) over the kernels launched per step."""
    s = summary.set_index("phase").loc[phase]
    ratio = manifest.get("timeline_info", {}).get("overhead_ratio") or 1.0
    return 1e3 * s.wall_ms / ratio / s.kernels  # per step on both sides: steps cancel


def predict(work: pd.DataFrame, d: Design, host_us: float, batch: int = 1, active_bytes: float | None = None,
            steps: dict | None = None) -> pd.DataFrame:
    """Per phase: predicted device time, host time and wall time (ms; decode also per token), at `batch`.
    Batch scales FLOPs and activation bytes, not weight bytes (the GEMV→GEMM transition). With
    `active_bytes` (one decode step's weights), weights live on chip when the design's SRAM holds them."""
    w = work.copy()
    gemm = w.category.isin(["GEMM", "GEMV"])
    ft = w.flops_tensor * batch
    fc = w.flops_cuda * batch
    dram = np.where(gemm, w.dram_bytes, w.dram_bytes * batch)
    chip = w.onchip_bytes * batch
    if active_bytes is not None and d.sram_mb * 2**20 >= active_bytes:  # weights live on chip: their bytes come from SRAM instead of DRAM
        chip = chip + np.where(gemm, dram, 0)
        dram = np.where(gemm, 0, dram)
    peak_m = d.matrix_tflops.get("bf16") * 1e12 * d.matrix_efficiency
    peak_v = d.vector_tflops * 1e12 * d.matrix_efficiency
    bw = d.dram_gbps * 1e9 * d.mem_efficiency
    sbw = d.sram_gbps * 1e9 * d.mem_efficiency
    fused = w.category.isin(FUSIBLE) & d.fuse_elementwise
    floor = np.where(fused, 0.0, d.kernel_floor_us * 1e-6)
    t = np.maximum.reduce([floor, ft / peak_m, np.nan_to_num(fc) / peak_v, np.nan_to_num(dram) / bw,
                           np.nan_to_num(chip) / sbw])
    w["device_s"] = t * w.launches
    w["host_launches"] = np.where(fused, 0, w.launches)
    host = d.launch_overhead_us if d.launch_overhead_us is not None else host_us
    rows = []
    for ph, grp in w.groupby("phase", sort=False):
        n = (steps or {}).get(ph, 1)
        dev_ms = 1e3 * grp.device_s.sum() / n
        host_ms = 1e-3 * host * grp.host_launches.sum() / n
        rows.append({"phase": ph, "steps": n, "device_ms_per_step": dev_ms, "host_ms_per_step": host_ms,
                     "wall_ms_per_step": max(dev_ms, host_ms), "bound": "host/launch" if host_ms > dev_ms else "device",
                     "per_token_ms": max(dev_ms, host_ms) / batch if ph == "decode" else np.nan})
    return pd.DataFrame(rows)


def measured(summary: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """The run's phase times per step: profiled wall, plain-run wall estimate, and GPU busy time (ms)."""
    ratio = manifest.get("timeline_info", {}).get("overhead_ratio") or 1.0
    s = summary[summary.phase.isin(["vision_encode", "prefill", "decode"])].copy()
    s["n"] = np.where(s.phase == "decode", s.steps.clip(lower=1), 1)
    return pd.DataFrame({"phase": s.phase, "steps": s.n, "profiled_wall_ms_per_step": s.wall_ms / s.n,
                         "plain_wall_ms_per_step": s.wall_ms / s.n / ratio,
                         "busy_ms_per_step": s.gpu_busy_ms / s.n}).reset_index(drop=True)


def validation(work: pd.DataFrame, d: Design, summary: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """The model on the GPU that produced the run vs the run, per phase: wall (vs the plain-run
    estimate) and device time (vs GPU-busy time), with the error in %."""
    m = measured(summary, manifest)
    steps = dict(zip(m.phase, m.steps))
    host = host_time_per_launch_us(summary, manifest)
    p = predict(work, d, host, steps=steps)
    v = m.merge(p, on=["phase", "steps"])
    v["wall_error_pct"] = 100 * (v.wall_ms_per_step - v.plain_wall_ms_per_step) / v.plain_wall_ms_per_step
    v["device_error_pct"] = 100 * (v.device_ms_per_step - v.busy_ms_per_step) / v.busy_ms_per_step
    return v[["phase", "steps", "plain_wall_ms_per_step", "wall_ms_per_step", "wall_error_pct", "busy_ms_per_step",
              "device_ms_per_step", "device_error_pct", "bound"]]


def active_weight_bytes(work: pd.DataFrame, steps: int) -> float:
    """Weight bytes one decode step reads (all GEMM/GEMV launches of decode ÷ steps)."""
    w = work[(work.phase == "decode") & work.category.isin(["GEMM", "GEMV"])]
    return float((w.dram_bytes * w.launches).sum() / max(1, steps))


SWEEPS = {
    "DRAM bandwidth (GB/s)": ("dram_gbps", np.geomspace(500, 16000, 24)),
    "matrix bf16 TFLOP/s": ("matrix_tflops", np.geomspace(25, 4000, 24)),
    "host time per launch (µs)": ("launch_overhead_us", np.geomspace(0.25, 64, 24)),
    "on-chip SRAM (MiB)": ("sram_mb", np.geomspace(8, 8192, 24)),
    "batch size": ("batch", np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])),
}


def sensitivity(work: pd.DataFrame, d: Design, host_us: float, steps: dict, active_bytes: float) -> pd.DataFrame:
    """Long format: sweep, x, phase, ms (decode per token, prefill per call) with everything else at `d`."""
    rows = []
    for label, (field, xs) in SWEEPS.items():
        for x in xs:
            dd, batch = d, 1
            if field == "matrix_tflops":
                dd = d.with_(matrix_tflops={**d.matrix_tflops, "bf16": float(x)})
            elif field == "batch":
                batch = int(x)
            else:
                dd = d.with_(**{field: float(x)})
            p = predict(work, dd, host_us, batch, active_bytes, steps).set_index("phase")
            for ph, col in (("decode", "per_token_ms"), ("prefill", "wall_ms_per_step")):
                if ph in p.index:
                    rows.append({"sweep": label, "x": float(x), "phase": ph, "ms": float(p.loc[ph, col])})
    return pd.DataFrame(rows)


def knees(sens: pd.DataFrame, within_pct: float = 5.0) -> pd.DataFrame:
    """Per sweep and phase: the x beyond which the time stays within `within_pct` % of its best value
    (where that resource stops mattering)."""
    rows = []
    for (sw, ph), g in sens.groupby(["sweep", "phase"]):
        g = g.sort_values("x")
        best = g.ms.min()
        ok = g.ms <= best * (1 + within_pct / 100)
        # first x from which every larger x is also within tolerance (monotone tail)
        tail = ok[::-1].cumprod()[::-1].astype(bool)
        knee = float(g.x[tail].iloc[0]) if tail.any() else np.nan
        rows.append({"sweep": sw, "phase": ph, "knee_x": knee, "best_ms": best, "worst_ms": g.ms.max()})
    return pd.DataFrame(rows)


def at(work, d: Design, host_us, steps, active_bytes, phase="decode", batch=1, **change) -> float:
    """One what-if number: decode ms per token (or the phase's ms per step) with fields of `d` changed."""
    p = predict(work, d.with_(**change), host_us, batch, active_bytes, steps).set_index("phase")
    return float(p.loc[phase, "per_token_ms" if phase == "decode" else "wall_ms_per_step"])


REFERENCE_CLAIMS = {
    "matrix/vector unit balance": "reduce tensor-core density to 30-40 % of die area; more CUDA cores",
    "memory bandwidth": "2-3 TB/s is enough for a high-end inference NPU",
    "L1/L2 sizing": "L2 of 128-256 MB; KV-cache SRAM of 32-64 MB",
    "dedicated decode (GEMV) units": "dedicated GEMV accelerators, weight-stationary dataflow",
    "operator fusion hardware": "a programmable fusion engine (21.7 % of time in small elementwise kernels)",
    "precision support": "native BF16, FP8, INT4/INT8; 6 % conversion overhead",
    "parallelism and occupancy": "fewer SMs (60-80), deeper pipelines",
    "interconnect": "300-500 GB/s inter-chip is enough",
    "power": "3-5× TOPS/W by cutting tensor density and bandwidth",
}


def recommendations(work, d: Design, host_us: float, steps: dict, active_bytes: float, kernels: pd.DataFrame,
                    shares: pd.DataFrame, graph_host_us: float = 2.0) -> pd.DataFrame:
    """The reference report's nine areas, each with evidence from this run and a what-if number.
    What-ifs are taken at `graph_host_us` host time per launch (launches issued as a graph): at the
    run's own eager host time decode is launch-bound and no hardware knob moves it, which is itself
    the first finding."""
    g = d.with_(launch_overhead_us=graph_host_us)
    base = at(work, g, host_us, steps, active_bytes)
    base_p = at(work, g, host_us, steps, active_bytes, "prefill")
    eager = at(work, d, host_us, steps, active_bytes)

    def pct(new, old):
        return 100 * (new - old) / old

    sh = shares[shares.phase == "decode"].set_index("category").pct
    dk = kernels[(kernels.phase == "decode") & (kernels.status == "profiled")]
    w_sm = weighted_mean(dk.sm_pct.where(dk.flops_tensor > 0), dk.share)
    l2hit = weighted_mean(dk.l2_hit_pct, dk.share)
    occ = weighted_mean(dk.achieved_occupancy_pct, dk.share)
    under_wave = weighted_mean((dk.waves_per_sm < 1).astype(float), dk.share)
    fus = sum(sh.get(c, 0) for c in FUSIBLE)
    gv = work[(work.phase == "decode") & (work.source == "ncu FLOPs + weight bytes from shapes")]
    pad = gv.flops_tensor / gv.op_shapes.map(expected_gemm_flops)
    half_m = {**d.matrix_tflops, "bf16": d.matrix_tflops["bf16"] / 2}
    b8 = at(work, g, host_us, steps, active_bytes, batch=8)
    rows = [
        ("matrix/vector unit balance",
         f"tensor-core kernels run at {w_sm:.0f} % SM throughput (time-weighted) in decode",
         f"half the matrix TFLOP/s: decode/token {pct(at(work, g.with_(matrix_tflops=half_m), host_us, steps, active_bytes), base):+.0f} %, "
         f"prefill {pct(at(work, g.with_(matrix_tflops=half_m), host_us, steps, active_bytes, 'prefill'), base_p):+.0f} %", "medium"),
        ("memory bandwidth",
         f"decode GEMVs read {active_bytes / 1e9:.2f} GB of weights per token",
         f"at 2.5 TB/s decode time per token rises by {pct(at(work, g, host_us, steps, active_bytes, dram_gbps=2500), base):+.0f} %; "
         f"at 8 TB/s {pct(at(work, g, host_us, steps, active_bytes, dram_gbps=8000), base):+.0f} %", "medium"),
        ("L1/L2 sizing",
         f"decode L2 hit {l2hit:.0f} % (time-weighted, ncu replay); one token's weights are {active_bytes / 2**20:,.0f} MiB",
         f"SRAM ≥ {active_bytes / 2**20:,.0f} MiB holds them: decode/token "
         f"{pct(at(work, g, host_us, steps, active_bytes, sram_mb=max(1024, 1.1 * active_bytes / 2**20)), base):+.0f} %",
         "low (model assumes SRAM bandwidth is sustained)"),
        ("dedicated decode (GEMV) units",
         f"GEMV is {sh.get('GEMV', 0):.0f} % of decode kernel time; counted tensor FLOPs are "
         f"{pad.min():.0f}–{pad.max():.0f}× 2·M·N·K (MMA tiles pad the token dimension)",
         f"batch 8 instead of 1: decode per token {pct(b8, base):+.0f} % (weights read once for 8 tokens)", "medium"),
        ("operator fusion hardware",
         f"elementwise + copy/cast + reduction = {fus:.0f} % of decode kernel time, in ~{int(work[work.phase == 'decode'].launches.sum() / max(1, steps.get('decode', 1)))} launches per token",
         f"fusing those chains: decode/token {pct(at(work, g.with_(fuse_elementwise=True), host_us, steps, active_bytes), base):+.0f} %; "
         f"eager dispatch ({host_us:.1f} µs per launch) vs graph ({graph_host_us:g} µs): {pct(base, eager):+.0f} %", "high"),
        ("precision support",
         f"copy/cast kernels take {sh.get('copy/cast', 0):.0f} % of decode kernel time",
         "not modelled: the run has no FP8/INT8 kernels to measure; halving weight bytes halves the DRAM term of GEMVs "
         "only once decode is bandwidth-bound", "none (no data)"),
        ("parallelism and occupancy",
         f"achieved occupancy {occ:.0f} % (time-weighted); {100 * under_wave:.0f} % of profiled decode time in kernels under one wave",
         "not a what-if: fewer SMs would not slow kernels that fill less than one wave, but the model has no SM count",
         "low"),
        ("interconnect", f"communication kernels: {sh.get('communication', 0):.1f} % of decode kernel time "
                         f"(a {'multi' if sh.get('communication', 0) else 'single'}-GPU run)",
         "the data cannot support a claim", "none (no data)"),
        ("power", "no power or energy counters were captured", "the data cannot support a claim", "none (no data)"),
    ]
    out = pd.DataFrame(rows, columns=["area", "evidence (this run)", "what-if", "confidence"])
    out["reference report"] = out.area.map(REFERENCE_CLAIMS)
    return out


def headline(val: pd.DataFrame, host_us: float) -> str:
    errs = ", ".join(f"{r.phase} {r.wall_error_pct:+.0f} %" for r in val.itertuples())
    return (f"Model vs this run (wall per step): {errs}; decode is host-bound at {host_us:.1f} µs per launch, so "
            "no hardware knob moves it until launches are batched")


def validation_prose(val: pd.DataFrame, host_us: float, d: Design) -> str:
    v = val.set_index("phase")
    out = [f"Host time per launch from the run: **{host_us:.1f} µs** (PyTorch eager, plain run)."]
    for ph, r in v.iterrows():
        ok = abs(r.wall_error_pct) <= 25
        out.append(f"- **{ph}**: wall {r.wall_ms_per_step:.2f} ms predicted vs {r.plain_wall_ms_per_step:.2f} ms "
                   f"({r.wall_error_pct:+.0f} %, {'within' if ok else 'outside'} the 25 % target); device time "
                   f"{r.device_ms_per_step:.2f} vs GPU-busy {r.busy_ms_per_step:.2f} ms ({r.device_error_pct:+.0f} %).")
    bad = v[v.device_error_pct.abs() > 25]
    if len(bad):
        side = "under" if (bad.device_error_pct < 0).all() else "mis"
        out.append(f"Where the error comes from: device time is {side}-predicted in " + ", ".join(bad.index)
                   + f". The model assumes kernels reach {100 * d.matrix_efficiency:.0f} % of the matrix peak and "
                   f"{100 * d.mem_efficiency:.0f} % of DRAM bandwidth, and sizes unprofiled elementwise work from aten "
                   "input shapes only.")
        host_bound = bad[bad.bound == "host/launch"]
        if len(host_bound):
            out.append("In " + ", ".join(host_bound.index) + " the predicted wall is the host term, so the wall "
                       "error is smaller than the device error; wall = max(host, device) assumes perfect overlap, "
                       "which a phase with host synchronisations does not have.")
    return "\n".join(out)


def design_table(designs: dict, work, host_us: float, steps: dict, active_bytes: float) -> pd.DataFrame:
    rows = []
    for key, d in designs.items():
        fits = d.sram_mb * 2**20 >= active_bytes
        p = predict(work, d, host_us, 1, active_bytes, steps).set_index("phase")
        rows.append({"design": key, "bf16 TFLOP/s": d.matrix_tflops.get("bf16"), "DRAM GB/s": d.dram_gbps,
                     "SRAM MiB": d.sram_mb, "host µs/launch": d.launch_overhead_us if d.launch_overhead_us is not None
                     else round(host_us, 1), "fuses elementwise": d.fuse_elementwise, "weights on chip": fits,
                     "vision_encode ms": p.loc["vision_encode", "wall_ms_per_step"] if "vision_encode" in p.index else np.nan,
                     "prefill ms": p.loc["prefill", "wall_ms_per_step"] if "prefill" in p.index else np.nan,
                     "decode ms/token": p.loc["decode", "per_token_ms"] if "decode" in p.index else np.nan,
                     "decode bound": p.loc["decode", "bound"] if "decode" in p.index else "", "source": d.source})
    return pd.DataFrame(rows)


def sensitivity_both(work, d: Design, host_us: float, steps: dict, active_bytes: float,
                     graph_host_us: float = 2.0) -> pd.DataFrame:
    a = sensitivity(work, d, host_us, steps, active_bytes).assign(dispatch=f"eager ({host_us:.0f} µs/launch)")
    g = d.with_(launch_overhead_us=graph_host_us)
    b = sensitivity(work, g, host_us, steps, active_bytes).assign(dispatch=f"graph ({graph_host_us:g} µs/launch)")
    return pd.concat([a, b], ignore_index=True)


def knees_both(sens: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([knees(g).assign(dispatch=k) for k, g in sens.groupby("dispatch")], ignore_index=True)
