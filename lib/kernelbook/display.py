"""How the book shows a table to a reader: the one display layer every chapter goes through.

Analysis functions return DataFrames with machine columns (`pct_of_roof`, `flops_per_s`,
`duration_us`); this module turns one into what a reader expects, at display time only:

- a human header with its unit (`COLUMNS`, else read from the column's unit suffix);
- numbers with engineering prefixes and three significant digits (38.6 TFLOP/s, 3.30 MB, 5.40 µs),
  percentages with one decimal, counts grouped (52,223), never a raw 989400000000000;
- "—" for a missing value, with the reason as a note under the table where the caller gives one;
- no row index (a meaningful index becomes an ordinary first column);
- kernel names whole, monospace, wrapped and copyable; aten shapes as `1×10×1×128 · 1×10×1130×128`;
- a caption saying what the table is; a box that scrolls sideways inside the page with its first
  column (the kernel) kept in view;
- a header click sorts, a long table has a filter box, and a kernel id of the chapter's run links to its
  card in chapter 05's explorer (`link_kernels`, `SORT_JS`);
- an empty result as one sentence instead of a header-only table;
- headers, yes/no, phase names and notes in the narrative language (`i18n`): a `Col` label is the
  catalog key of its header;
- a cell that holds a named quantity (`contract.quantity.Q`, in an object column: `quantity.column`) prints as
  any number of its column and carries the quantity's mark, so the one-value test reads the table's figure
  beside the prose's (issue 41).

`table()` returns an object whose `_repr_html_` is the table, so a notebook cell ends with it; the
chapter setup also registers it as the HTML formatter of every DataFrame, so a table a chapter
displays without asking goes through the same layer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .contract import quantity as qty  # `quantity` below is the display of a value in a unit
from .contract.names import PHASE_NAMES
from .contract.shapes import readable
from .digits import MISSING, count, eng, missing, sig  # noqa: F401  (the display layer's names for them)
from .escape import html as esc_html
from .load.trace import demangle  # noqa: F401  (the display layer's name for it)
from .i18n import N_, text, tr


@dataclass(frozen=True)
class Col:
    label: str
    kind: str = "auto"  # see _CELL below


# Machine column → reader's header and how its cells print. Columns not listed fall back to their
# unit suffix (_pct, _us, _ms, _ns, _bytes, _per_s, ...) and a header made from the name.
COLUMNS: dict[str, Col] = {
    # identity
    "work_latency_us": Col("Latency of a launch that does work", "us"),
    # two timeline backends on one workload (chapter 01)
    "kernels_this": Col("Kernels, this run", "count"),
    "kernels_other": Col("Kernels, the other backend's run", "count"),
    "gpu_ms_this": Col("Kernel time, this run", "ms"),
    "gpu_ms_other": Col("Kernel time, the other backend's run", "ms"),
    "difference_pct": Col("This run against the other %", "signed"),
    # the first page (index, chapter 07): each phase's bound, the top levers
    "first_opportunity": Col("First opportunity", "text"),
    "lever_kind": Col("Kind", "text"),
    "off_step": Col("Off the deployed decode step", "text"),
    # the run as deployed's decode kernel time by category (chapter 07)
    "decode_step_kernel_ms": Col("Kernel time per decode step", "ms"),
    "decode_kernel_pct": Col("Share of decode kernel time %", "pct"),
    # the decode step against its physical limit (chapter 07): each step ÷ the limit
    "plain_x": Col("Plain step ÷ limit", "auto"),
    "busy_x": Col("GPU busy ÷ limit", "auto"),
    # the serving study (chapter 08)
    "batch": Col("Batch", "count"),
    "batch_size": Col("Batch size", "count"),
    "point": Col("Point", "count"),
    "capture_s": Col("Capture", "s"),
    "gpu": Col("GPU", "text"),
    "plain_step_ms": Col("Plain step", "ms"),
    "busy_step_ms": Col("GPU busy per step", "ms"),
    "host_step_ms": Col("Host per step", "ms"),
    "tokens_per_s": Col("Tokens/s", "count"),
    "busy_per_token_ms": Col("GPU busy per token", "ms"),
    "ms_per_step": Col("Per step", "ms"),
    "flops": Col("FLOPs per launch", "sig"),
    "dram_mb": Col("DRAM per launch (MB)", "sig"),
    "dram_roof_pct": Col("Of the DRAM roof %", "pct"),
    "binds": Col("Roof that binds at peak", "text"),
    "of_ridge_pct": Col("Of its ridge %", "pct"),
    "turns_at": Col("Reaches its ridge at batch", "count"),
    "step_mb": Col("DRAM per step (MB)", "sig"),
    "weight_mb": Col("Weights per step (MB)", "sig"),
    "other_mb": Col("Activations, KV cache, copies per step (MB)", "sig"),
    "per_token_mb": Col("DRAM per token (MB)", "sig"),
    "must_weight_mb": Col("Weights to move, each once (MB)", "sig"),
    "experts_counted": Col("MoE experts counted", "text"),
    "fitted_at": Col("Fitted at batch", "count"),
    "predicted_step_ms": Col("Predicted plain step", "ms"),
    "step_error_pct": Col("Step error %", "signed"),
    "first_step_ms": Col("First decode step", "ms"),
    "steady_step_ms": Col("Steady step", "ms"),
    "steady_error_pct": Col("Steady step error %", "signed"),
    "kernel": Col("Kernel", "text"),
    "kernel_id": Col("Kernel", "text"),
    "friendly_name": Col("Kernel", "text"),
    "name": Col("Full kernel name", "code"),
    "demangled": Col("Demangled name", "code"),
    "library": Col("Library", "text"),
    "category": Col("Category", "text"),
    "description": Col("What it does", "text"),
    "phase": Col("Phase", "phase"),
    "rank": Col("#", "int"),
    "status": Col("Status", "text"),
    "class": Col("Class", "text"),
    "level": Col("Memory level", "text"),
    "bound": Col("Bound by", "text"),
    "compute_roof": Col("Compute roof", "text"),
    "roofline_side": Col("Roofline side", "text"),
    "locality_issue": Col("L2 locality issue", "bool"),
    "reason": Col("Why", "text"),
    "op_shapes": Col("aten shapes", "shapes"),
    "matvec": Col("Matrix-vector", "bool"),
    "grid": Col("Grid", "text"),
    "block": Col("Block", "text"),
    "metric": Col("Metric", "text"),
    "unit": Col("Unit", "text"),
    "item": Col("Item", "text"),
    "value": Col("Value", "auto"),
    "parameter": Col("Parameter", "code"),
    "note": Col("Note", "text"),
    "source": Col("Source", "text"),
    "roof": Col("Roof", "text"),
    "peak": Col("Peak", "text"),
    "quantity": Col("Quantity", "text"),
    "opportunity": Col("Opportunity", "text"),
    "trigger": Col("Trigger (measured)", "text"),
    "likely_cause": Col("Likely cause", "text"),
    # chapter 01
    "module_type": Col("Module type", "text"),
    "module_types": Col("Module types (share of its time)", "text"),
    "module": Col("Module of the profiled launch", "code"),
    "layer": Col("Layer", "count"),
    "us_per_step": Col("Kernel time per step", "us"),
    "kernel_us": Col("Kernel time per step", "us"),
    "must_bytes": Col("Must move per step", "bytes"),
    "moved_bytes": Col("Moved per step", "bytes"),
    "moved_ncu_pct": Col("Of it measured by ncu %", "pct"),
    "floor_us": Col("Floor at DRAM bandwidth", "us"),
    "time_over_floor": Col("Kernel time ÷ floor", "sig"),
    "time_pct": Col("Time %", "pct"),
    "Time %": Col("Time %", "pct"),
    "calls": Col("Launches", "count"),
    "launches": Col("Launches", "count"),
    "mean_us": Col("Mean per launch", "us"),
    "mean µs": Col("Mean per launch", "us"),
    "median_us": Col("Median per launch", "us"),
    "median µs": Col("Median per launch", "us"),
    "total_ms": Col("Total", "ms"),
    "wall_ms": Col("Wall time", "ms"),
    "gpu_busy_ms": Col("GPU busy", "ms"),
    "idle_pct": Col("GPU idle %", "pct"),
    "kernels": Col("Kernels", "count"),
    "steps": Col("Steps", "count"),
    # tensor parallelism (chapter 01): per GPU rank, collectives paired across ranks, the one-GPU twin
    "gpu_rank": Col("GPU rank", "int"),
    "collective": Col("Collective", "text"),
    "collectives_per_step": Col("Collectives per step", "sig"),
    "nccl_ms_per_step": Col("NCCL kernel time per step", "ms"),
    "transfer_ms_per_step": Col("Transfer per step", "ms"),
    "wait_ms_per_step": Col("Wait per step", "ms"),
    "nccl_pct_of_kernel_time": Col("NCCL % of kernel time", "pct"),
    "wall_ms_per_step": Col("Wall per step", "ms"),
    "median_skew_us": Col("Median launch skew", "us"),
    "gpu_span_ms_per_step": Col("GPU span per step", "ms"),
    "payload_bytes": Col("Payload", "bytes"),
    "bus_bytes": Col("Bytes sent per rank", "bytes"),
    "link_time_us": Col("At link bandwidth", "us"),
    "transfer_us": Col("Measured transfer (median)", "us"),
    "wait_us_median_all_ranks": Col("Median wait, all ranks", "us"),
    "transfer_over_link_time": Col("Transfer ÷ link time", "ratio"),
    "one_gpu_ms": Col("1 GPU", "ms"),
    "tp_ms": Col("Tensor parallel", "ms"),
    "tp_over_one_gpu": Col("Tensor parallel ÷ 1 GPU", "ratio"),
    "transfer_ms": Col("NCCL transfer", "ms"),
    "wait_ms_max": Col("NCCL wait, most-waiting rank", "ms"),
    "change_ms": Col("Change", "ms"),
    # chapter 07: variants and the comparison of two runs (A, B)
    "variant": Col("Variant", "text"),
    "run": Col("Run", "text"),
    "op": Col("aten op", "text"),
    "family": Col("Kernel family", "text"),
    "baseline_ms": Col("Baseline", "ms"),
    "predicted_ms": Col("Predicted", "ms"),
    "measured_ms": Col("Measured", "ms"),
    "predicted_gain": Col("Predicted gain", "ratio"),
    "measured_gain": Col("Measured gain", "ratio"),
    "gain_error_pct": Col("Error of the predicted gain %", "signed"),
    "plain_generate_s": Col("Plain generate", "s"),
    "prompts_per_call": Col("Prompts per call", "count"),
    "against_run": Col("Set against (same host where kept)", "text"),
    "against_s": Col("Its plain generate", "s"),
    "speedup": Col("Speed-up per call", "ratio"),
    "per_prompt_speedup": Col("Speed-up per prompt", "ratio"),
    "wall_ms_per_step_a": Col("Wall per step A", "ms"),
    "wall_ms_per_step_b": Col("Wall per step B", "ms"),
    "gpu_busy_ms_per_step_a": Col("GPU busy per step A", "ms"),
    "gpu_busy_ms_per_step_b": Col("GPU busy per step B", "ms"),
    "launches_per_step_a": Col("Launches per step A", "count"),
    "launches_per_step_b": Col("Launches per step B", "count"),
    "wall_ratio": Col("Wall B ÷ A", "ratio"),
    "gpu_busy_ratio": Col("GPU busy B ÷ A", "ratio"),
    "pct_a": Col("A %", "pct"),
    "pct_b": Col("B %", "pct"),
    "change_pts": Col("Change (points)", "signed"),
    "us_per_step_a": Col("Per step A", "us"),
    "us_per_step_b": Col("Per step B", "us"),
    "change_us_per_step": Col("Change per step", "us"),
    "only_in": Col("Only in", "text"),
    "change": Col("Change (B − A)", "auto"),
    "basis": Col("Measured on", "text"),
    "busy_pct": Col("GPU busy %", "pct"),
    "ratio": Col("B ÷ A", "ratio"),
    "launches_per_step": Col("Launches per step", "count"),
    "kernel_time_ms": Col("Kernel time", "ms"),
    "copy_time_ms": Col("Copy and memset time", "ms"),
    "pct": Col("% of kernel time", "pct"),
    "this_run_pct": Col("This run %", "pct"),
    "reference_pct": Col("Reference report %", "pct"),
    "difference_pts": Col("Difference (points)", "signed"),
    # chapter 02
    "selected": Col("Selected", "count"),
    "profiled": Col("Profiled", "count"),
    "coverage_pct": Col("Coverage %", "pct"),
    "explained_time_pct": Col("Kernel time explained %", "pct"),
    "selected_time_pct": Col("Kernel time selected %", "pct"),
    "share_pct": Col("Time %", "pct"),
    "share": Col("Time %", "share"),
    "duration_us": Col("Duration", "us"),
    "sm_pct": Col("SM %", "pct"),
    "dram_pct": Col("DRAM %", "pct"),
    "memory_pct": Col("Memory %", "pct"),
    "l1_hit_pct": Col("L1 hit %", "pct"),
    "l2_hit_pct": Col("L2 hit %", "pct"),
    "achieved_occupancy_pct": Col("Achieved occupancy %", "pct"),
    "theoretical_occupancy_pct": Col("Theoretical occupancy %", "pct"),
    "registers": Col("Registers / thread", "int"),
    "waves_per_sm": Col("Waves per SM", "sig"),
    "spill_bytes": Col("Spill", "bytes"),
    "dram_bytes": Col("DRAM traffic", "bytes"),
    "flops_tensor": Col("Tensor FLOPs", "flop"),
    "flops_cuda": Col("CUDA-core FLOPs", "flop"),
    "intensity_dram": Col("DRAM intensity (FLOP/B)", "sig"),
    "ncu_us": Col("ncu duration", "us"),
    "timeline_median_us": Col("Timeline median", "us"),
    "duration_ratio": Col("ncu ÷ timeline", "ratio"),
    "expected_flops": Col("2·M·N·K", "flop"),
    "tensor_flops": Col("Tensor FLOPs", "flop"),
    "flops_ratio": Col("Counted FLOPs ÷ 2·M·N·K", "ratio"),
    "grouped": Col("Grouped (MoE)", "bool"),
    "cuda_core": Col("On CUDA cores", "bool"),
    "implies": Col("Operands", "text"),
    "implied_read_bytes": Col("Implied reads", "bytes"),
    "implied_write_bytes": Col("Implied writes", "bytes"),
    "bytes_ratio": Col("DRAM ÷ implied", "ratio"),
    "verdict": Col("Verdict", "text"),
    "identity": Col("Identified by", "text"),
    "profiled_step": Col("Profiled step", "int"),
    "op_index": Col("Op call #", "int"),
    # chapter 03
    "median": Col("Median (by count)", "sig"),
    "time_weighted_median": Col("Median (by time)", "sig"),
    "threshold": Col("Healthy level", "sig"),
    "time_pct_at_or_above": Col("Time at or above it %", "pct"),
    # chapter 04
    "intensity": Col("Intensity (FLOP/B)", "sig"),
    "flops_per_s": Col("Achieved", "flop_per_s"),
    "roof_flops_per_s": Col("Attainable (roof)", "flop_per_s"),
    "pct_of_roof": Col("% of roof", "pct"),
    "above_roof": Col("Above its roof", "bool"),
    "artifact": Col("Artifact (ncu's floor)", "bool"),
    "work_basis": Col("Useful work from", "text"),
    "counted_flops": Col("Counted FLOPs", "flop"),
    "useful_flops": Col("Useful FLOPs", "flop"),
    "padding_ratio": Col("Counted ÷ useful", "ratio"),
    "useful_intensity_dram": Col("Useful DRAM intensity (FLOP/B)", "sig"),
    "useful_flops_per_s": Col("Useful FLOP/s", "flop_per_s"),
    "dram_pct_of_roof": Col("% of DRAM roof", "pct"),
    "l2_pct_of_roof": Col("% of L2 roof", "pct"),
    "l1_pct_of_roof": Col("% of L1 roof", "pct"),
    "ridge_flop_per_byte": Col("Ridge (FLOP/B)", "sig"),
    "measured_pct_of_spec": Col("Measured % of spec", "pct"),
    "spread_pct": Col("Spread %", "pct"),
    "trials": Col("Trials", "count"),
    # chapter 05
    "pct_of_profiled": Col("% of profiled kernels", "pct"),
    "pct_of_profiled_time": Col("% of profiled time", "pct"),
    "blocks": Col("Blocks", "count"),
    "threads_per_block": Col("Threads / block", "count"),
    "blocks_per_sm": Col("Resident blocks / SM", "count"),
    "slots": Col("Block slots", "count"),
    "waves": Col("Waves", "sig"),
    "ncu_waves_per_sm": Col("Waves per SM (ncu)", "sig"),
    "tail_efficiency_pct": Col("Tail efficiency %", "pct"),
    "blocks_vs_sms": Col("Blocks ÷ SMs", "sig"),
    "meets_4x_sms": Col("≥ 4× SMs", "bool"),
    "tile_intensity": Col("Tile intensity (FLOP/B)", "sig"),
    "ridge": Col("Ridge (FLOP/B)", "sig"),
    "tile_vs_ridge": Col("Tile ÷ ridge", "ratio"),
    "smem_stages_bytes": Col("Shared memory the stages need", "bytes"),
    "smem_launch_bytes": Col("Shared memory allocated", "bytes"),
    "regs_per_block": Col("Registers / block", "count"),
    "regs_fit_blocks": Col("Blocks the registers allow", "count"),
    "t_tile_cycles": Col("Tile compute (cycles)", "sig"),
    "t_load_cycles": Col("Tile load at DRAM share (cycles)", "sig"),
    "s_min": Col("S_min", "int"),
    "stages_ok": Col("Stages ≥ S_min", "bool"),
    "needed_bytes_per_sm": Col("Needed in flight / SM", "bytes"),
    "achieved_bytes_per_sm": Col("Achieved in flight / SM", "bytes"),
    "warp_supply_bytes_per_sm": Col("Warps supply / SM", "bytes"),
    "stage_buffer_bytes_per_sm": Col("Stage buffers / SM", "bytes"),
    "achieved_vs_needed_pct": Col("Achieved ÷ needed %", "pct"),
    "gain_pct": Col("Est. gain (% of phase wall)", "pct"),
    "stages": Col("Pipeline stages", "count"),
    # chapter 05: why a kernel is slow (analyze.why)
    "stall": Col("Stall reason", "text"),
    "stall_1": Col("1st stall reason — % of stall cycles", "text"),
    "stall_2": Col("2nd stall reason", "text"),
    "stall_3": Col("3rd stall reason", "text"),
    "stall_share_pct": Col("% of stall cycles", "pct"),
    "cycles_per_instruction": Col("Stall cycles per issued instruction", "sig"),
    "registers_blocks": Col("Blocks / SM the registers allow", "count"),
    "shared_mem_blocks": Col("Blocks / SM shared memory allows", "count"),
    "blocks_blocks": Col("Blocks / SM limit", "count"),
    "warps_blocks": Col("Blocks / SM the warp slots allow", "count"),
    "barriers_blocks": Col("Blocks / SM the barriers allow", "count"),
    "limiter": Col("Limited by", "text"),
    "occupancy_gap_pct": Col("Theoretical − achieved (points)", "pct"),
    "limits_occupancy": Col("Launch caps occupancy below 100 %", "bool"),
    "sm_clock_mhz": Col("SM clock (ncu SM counter)", "mhz"),
    "gpc_clock_mhz": Col("GPC clock (the SMs' clock domain)", "mhz"),
    "boost_mhz": Col("Device maximum SM clock", "mhz"),
    "sm_vs_boost_pct": Col("SM reading ÷ maximum %", "pct"),
    "sm_minus_gpc_cycles": Col("SM − GPC cycles", "sig"),
    "nvidia_verdict": Col("NVIDIA's bottleneck verdict", "text"),
    "nvidia_supports": Col("Supports the book's class", "text"),
    "agrees": Col("Agrees", "bool"),
    "nvidia_advice": Col("NVIDIA's advice (est. speedup, % of kernel time)", "text"),
    # chapter 00 and the provenance tables
    "step": Col("Step", "text"),
    "by": Col("By", "text"),
    "wall_s": Col("Wall time", "s"),
    "meaning": Col("Meaning", "text"),
    "read_by": Col("Read by", "text"),
    "measured": Col("Measured", "auto"),
    "spec": Col("Spec", "auto"),
    # chapter 06
    "design": Col("Design", "text"),
    "area": Col("Area", "text"),
    "evidence (this run)": Col("Evidence (this run)", "text"),
    "what-if": Col("What-if", "text"),
    "confidence": Col("Confidence", "text"),
    "reference report": Col("Reference report", "text"),
    "kernel_ms": Col("Kernel time", "ms"),
    "rows": Col("Rows", "count"),
    "latency_us": Col("Latency L", "us"),
    "slowdown": Col("Slowdown b", "sig"),
    "dram_scaling": Col("Share of DRAM time that moves with bandwidth φ", "sig"),
    "fitted_on": Col("Fitted on GPU", "text"),
    "predicted": Col("Predicted GPU", "text"),
    "model_a_ms": Col("Model on the fitting GPU", "ms"),
    "measured_a_ms": Col("Measured on the fitting GPU", "ms"),
    "error_pct": Col("Error %", "pct"),
    "gain_error": Col("Gain error (predicted − measured)", "sig"),
    "uncertainty": Col("Uncertainty (cross-device)", "text"),
    "outside what was checked": Col("Outside what the cross-device check covered", "text"),
    "fit": Col("Fit", "text"),
    "phases": Col("Fitted on", "phase"),
    "calibrated_on": Col("Fitted on", "phase"),
    "wall_ms_per_step": Col("Wall per step", "ms"),
    "predicted_wall_ms": Col("Predicted wall", "ms"),
    "wall_error_pct": Col("Wall error %", "pct"),
    "busy_ms_per_step": Col("GPU busy per step", "ms"),
    "predicted_device_ms": Col("Predicted device time", "ms"),
    "device_error_pct": Col("Device error %", "pct"),
    "predicted_device_share_pct": Col("Predicted device share %", "pct"),
    "scaled_time_pct": Col("Kernel time scaled from category %", "pct"),
    "error_ms": Col("Error", "ms"),
    "bf16 TFLOP/s": Col("bf16 TFLOP/s", "sig"),
    "DRAM GB/s": Col("DRAM GB/s", "sig"),
    "SRAM MiB": Col("SRAM MiB", "sig"),
    "host µs/launch": Col("Host time per launch (µs)", "auto"),
    "fuses elementwise": Col("Fuses elementwise", "bool"),
    "weights on chip": Col("Weights on chip", "bool"),
    "vision_encode ms": Col("Vision encode", "ms"),
    "prefill ms": Col("Prefill", "ms"),
    "decode ms/token": Col("Decode per token", "ms"),
    "decode bound": Col("Decode bound by", "text"),
}

PHASE_LABEL = PHASE_NAMES  # contract.names: English phrases, catalog keys


def phase_label(phase: str) -> str:
    """A phase as a reader names it, in the narrative language ('vision encode', '视觉编码')."""
    return text(PHASE_LABEL.get(str(phase), str(phase)))


def phase_list(phases) -> str:
    """Phases as a reader names them, joined: a list, or one string of machine names joined with ', '
    ('vision_encode, prefill' → 'vision encode, prefill')."""
    items = phases if isinstance(phases, (list, tuple)) else str(phases).split(", ")
    return tr(", ").join(phase_label(p) for p in items)

# unit suffix of a machine column → cell kind (first match wins; order matters: _per_s before _s)
_SUFFIX = [("_pct_of_roof", "pct"), ("_pct", "pct"), ("_bytes_per_s", "bytes_per_s"), ("_flops_per_s", "flop_per_s"),
           ("_per_s", "sig"), ("_gbps", "gbps"), ("_tflops", "tflops"), ("_bytes", "bytes"), ("_flops", "flop"),
           ("_ns", "ns"), ("_us", "us"), ("_ms", "ms"), ("_s", "s"), ("_mhz", "mhz")]
_SUFFIX_LABEL = {"pct": "%"}


# --- numbers (missing, sig, eng and count: `digits`) ----------------------------------------------
def pct(v: float) -> str:
    """A percentage with one decimal (its '%' sits in the header): 12.3, 0.0 for zero, '< 0.1' for a
    value that is not zero but would print as 0.0."""
    if missing(v):
        return MISSING
    v = float(v)
    if v != 0 and abs(v) < 0.05:
        return "< 0.1" if v > 0 else "> -0.1"  # the hyphen-minus of every other negative
    return f"{v:,.1f}" if abs(v) < 1e4 else sig(v)


_TIME_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def quantity(v, unit: str) -> str:
    """A value in a named unit, as a reader reads it: `unit` is what the long-format tables carry
    (TFLOP/s, GB/s, µs, bytes, FLOP, %, % of peak, MiB, MHz, count, ...)."""
    if missing(v):
        return MISSING
    if isinstance(v, (bool, np.bool_)):
        return tr("yes") if v else tr("no")
    if not isinstance(v, (int, float, np.integer, np.floating)):
        return str(v)
    u = (unit or "").strip()
    base = {"TFLOP/s": (1e12, "FLOP/s"), "GFLOP/s": (1e9, "FLOP/s"), "FLOP/s": (1, "FLOP/s"),
            "GB/s": (1e9, "B/s"), "TB/s": (1e12, "B/s"), "B/s": (1, "B/s"), "bytes": (1, "B"), "B": (1, "B"),
            "FLOP": (1, "FLOP"), "µs": (1e-6, "s"), "us": (1e-6, "s"), "ms": (1e-3, "s"), "ns": (1e-9, "s"),
            "s": (1, "s"), "MHz": (1e6, "Hz"), "GHz": (1e9, "Hz")}
    if u in base:
        scale, bu = base[u]
        return eng(float(v) * scale, bu)
    if u.startswith("%"):
        return f"{pct(v)} {u}"
    if u in ("count", ""):
        return count(v)
    return f"{sig(v)} {u}"


# --- cells ----------------------------------------------------------------------------------------
def _kind(col: str, series: pd.Series) -> str:
    spec = COLUMNS.get(col)
    if spec and spec.kind != "auto":
        return spec.kind
    low = col.lower()
    for suf, kind in _SUFFIX:
        if low.endswith(suf):
            return kind
    if pd.api.types.is_bool_dtype(series):
        return "bool"
    if pd.api.types.is_integer_dtype(series):
        return "count"
    if pd.api.types.is_float_dtype(series) or (series.map(lambda v: isinstance(v, qty.Q)).any()
                                                and series.map(lambda v: _is_number(v) or missing(v)).all()):
        return "sig"  # a column of named quantities (object dtype) prints as the float column it stands for
    return "text"


def label(col) -> str:
    """The reader's header for a machine column."""
    col = str(col)
    if col in COLUMNS:
        return text(COLUMNS[col].label)
    if text(col) != col:  # a column named by a catalog key (a class, a check declared with N_)
        return text(col)
    per_batch = re.fullmatch(r"batch_(\d+)_[a-z]+", col)  # a study's pivot by batch (`analyze.serving.by_batch`)
    if per_batch:
        return tr("Batch {n}", n=int(per_batch.group(1)))
    low = col.lower()
    for suf, unit in (("_pct_of_roof", "% of roof"), ("_pct", "%"), ("_bytes_per_s", ""), ("_flops_per_s", ""),
                      ("_per_s", "/s"), ("_gbps", ""), ("_tflops", ""), ("_bytes", ""), ("_flops", ""),
                      ("_ns", ""), ("_us", ""), ("_ms", ""), ("_mhz", "")):
        if low.endswith(suf):
            stem = col[: -len(suf)].replace("_", " ")
            return (stem[:1].upper() + stem[1:] + (f" {unit}" if unit else "")).strip()
    words = col.replace("_", " ")
    return words[:1].upper() + words[1:]


def shapes(s) -> str:
    """aten input shapes as one readable form: '1x10x1x128;1x10x1130x128;;;' and
    '[1, 10, 1160, 128]x[1, 10, 1, 128];' both become '1×10×1×128 · 1×10×1130×128'; empty slots dropped."""
    return MISSING if missing(s) or s is None else (readable(s) or MISSING)


def cell(v, kind: str) -> str:
    """One cell as HTML (escaped), by kind."""
    if kind == "phase" and isinstance(v, (list, tuple, str)):  # one phase or several
        return esc_html(phase_list(v))
    if kind in ("text", "code", "shapes") and isinstance(v, (list, tuple)):
        v = ", ".join(map(str, v))
    if kind == "shapes":
        return esc_html(shapes(v))
    if missing(v):
        return MISSING
    if kind == "bool" or isinstance(v, (bool, np.bool_)):
        return tr("yes") if bool(v) else tr("no")
    if kind == "code":
        return f"<code>{esc_html(str(v))}</code>"
    if kind == "phase":
        return esc_html(phase_label(v))
    if kind == "text" or isinstance(v, str):
        return esc_html(text(str(v)))  # a value that is a catalog key (a class, a side) shows translated
    if kind == "pct":
        return pct(v)
    if kind == "share":
        return pct(100 * float(v))
    if kind == "signed":
        shown = pct(v)
        return shown if shown.startswith(("<", ">")) else ("+" if float(v) > 0 else "") + shown
    if kind == "ratio":
        return f"{sig(v)}×"
    if kind == "int":
        return f"{int(v):,}" if float(v) == int(v) else sig(v)
    if kind == "count":
        return count(v)
    if kind in _TIME_SCALE:
        return eng(float(v) * _TIME_SCALE[kind], "s")
    if kind == "bytes":
        return eng(v, "B")
    if kind == "bytes_per_s":
        return eng(v, "B/s")
    if kind == "gbps":
        return eng(float(v) * 1e9, "B/s")
    if kind == "flop":
        return eng(v, "FLOP")
    if kind == "flop_per_s":
        return eng(v, "FLOP/s")
    if kind == "tflops":
        return eng(float(v) * 1e12, "FLOP/s")
    if kind == "mhz":
        return eng(float(v) * 1e6, "Hz")
    return sig(v)


# --- tables ---------------------------------------------------------------------------------------
# `table-layout:auto` undoes JupyterLab's `.jp-RenderedHTMLCommon table{table-layout:fixed}` (in every exported
# chapter): under it a `fit` table was squeezed to the page width and its numbers ran into the next cells. Numbers
# keep one line; text and kernel names wrap (a long unbroken token anywhere); a table wider than the page scrolls
# in its box with the kernel column kept in view.
STYLE = """<style>
.kb-tablebox{max-width:100%;overflow-x:auto;margin:.4rem 0 1rem 0;border:1px solid #e2e2e2}
.kb-tablebox table.kb{table-layout:auto;border-collapse:separate;border-spacing:0;font-size:13px;margin:0;
 width:max-content;min-width:100%}
.kb-tablebox table.kb th,.kb-tablebox table.kb td{padding:.25rem .6rem;border-bottom:1px solid #e8e8e8;text-align:right;
 vertical-align:top;white-space:nowrap;background:#fff}
.kb-tablebox table.kb th{background:#f6f6f6;font-weight:600;white-space:normal;min-width:4rem;max-width:11rem;
 vertical-align:bottom}
.kb-tablebox table.kb td.t,.kb-tablebox table.kb th.t{text-align:left;white-space:normal;min-width:8rem;max-width:22rem;
 overflow-wrap:anywhere}
.kb-tablebox table.kb.fit{width:100%}
.kb-tablebox table.kb td.c{text-align:left;white-space:normal;min-width:16rem}
.kb-tablebox table.kb td.c code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
 white-space:pre-wrap;word-break:break-all;user-select:all;background:none}
.kb-tablebox table.kb .sticky{position:sticky;left:0;z-index:1;box-shadow:1px 0 0 #d0d0d0}
.kb-tablebox table.kb th.sticky{z-index:2}
.kb-tablebox table.kb td.bad{background:#f8d0cc}
.kb-tablebox table.kb td.na{color:#999}
.kb-caption{font-weight:600;margin:1rem 0 .2rem 0}
.kb-note{font-size:12px;color:#555;margin:.1rem 0 .8rem 0}
.kb-empty{font-style:italic}
.kb-tablebox table.kb th.kb-a::after{content:" \\25B2"}
.kb-tablebox table.kb th.kb-d::after{content:" \\25BC"}
.kb-filter{font-size:12px;margin:.2rem 0;padding:.1rem .3rem;width:14rem}
.kb-tablebox table.kb.kb-paged tbody tr:nth-child(n+11){display:none}
.kb-more{font-size:12px;margin:-.6rem 0 1rem 0;padding:.1rem .4rem;cursor:pointer}
</style>"""

# Sorting and filtering, in the shared HTML and in JupyterLab (a trusted output runs it): a click on a header
# sorts the rows by that column (numbers by the value behind the cell, `data-v`, so "1.44 GB" sorts above "514
# MB"; a second click reverses), and a table of more than 12 rows gets a filter box. A click on a kernel id
# (`kernel_link`) opens its card where the card is on this page; elsewhere the shared HTML follows the link to
# chapter 05, and a page that is not a chapter's HTML file (JupyterLab, whose own handler would ask its server for
# a file that is not there) leaves the link inert. Plain DOM, no library, no network; the table works without it.
SORT_JS = """<script>(function(s){var b=s&&s.previousElementSibling;if(!b||!b.querySelector)return;
var t=b.querySelector('table.kb');if(!t||!t.tHead||t.getAttribute('data-kbs'))return;t.setAttribute('data-kbs','1');
var hs=t.tHead.rows[0].cells,tb=t.tBodies[0],ea=Array.prototype.forEach;
function v(td){var x=td?td.getAttribute('data-v'):null;return x===null?null:parseFloat(x);}
ea.call(hs,function(h,i){h.style.cursor='pointer';h.addEventListener('click',function(){
var d=h.className.indexOf('kb-a')<0?'kb-a':'kb-d';ea.call(hs,function(x){x.classList.remove('kb-a','kb-d');});
h.classList.add(d);var rows=Array.prototype.slice.call(tb.rows);rows.sort(function(r,q){var a=v(r.cells[i]),c=v(q.cells[i]),o;
if(a!==null&&c!==null)o=a-c;else if(a!==null)o=-1;else if(c!==null)o=1;
else o=(r.cells[i]||{}).textContent.localeCompare((q.cells[i]||{}).textContent);return d==='kb-a'?o:-o;});
rows.forEach(function(r){tb.appendChild(r);});});});
t.addEventListener('click',function(e){var a=e.target.closest?e.target.closest('a.kb-k'):null;if(!a)return;
var c=document.getElementById(a.getAttribute('data-card'));if(c){e.preventDefault();e.stopPropagation();c.open=true;
c.scrollIntoView();try{history.replaceState(null,'','#'+c.id);}catch(x){}}
else if(!/\\.html?$/i.test(location.pathname)){e.preventDefault();e.stopPropagation();}},true);
if(tb.rows.length>12){var f=document.createElement('input');f.type='search';f.className='kb-filter';
f.placeholder=s.getAttribute('data-filter');f.addEventListener('input',function(){var q=f.value.toLowerCase();
ea.call(tb.rows,function(r){r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':'';});});
b.parentNode.insertBefore(f,b);
var m=document.createElement('button'),n=tb.rows.length,open=false;m.type='button';m.className='kb-more';
function page(){t.classList.toggle('kb-paged',!open&&!f.value);m.textContent=(open?s.getAttribute('data-less'):
s.getAttribute('data-more')).replace('{n}',n);m.style.display=f.value?'none':'';}
m.addEventListener('click',function(){open=!open;page();});f.addEventListener('input',page);
b.parentNode.insertBefore(m,b.nextSibling);page();}})(document.currentScript);</script>"""


# --- kernel ids that link to their card -------------------------------------------------------------
# Chapter 05's explorer lists a card for every profiled kernel, each a <details> whose id is
# `card_anchor(kernel_id)`. A table's kernel cell whose id has a card links there: from another chapter of the
# shared HTML to `05_classification.html#kernel-d004`, which opens that card on load (`CARD_OPEN_JS`); inside
# chapter 05 the click opens the card and scrolls to it. The ids with a card are the chapter's own run's
# profiled kernels (`link_kernels`, called by `notebook.open_run`); none link until it is called.
EXPLORER_CHAPTER = "05_classification"
_CARDS: set[str] = set()


def card_anchor(kernel_id: str) -> str:
    """The id of a kernel's card in chapter 05 ('kernel-d004'): stable across renderings of a run."""
    return f"kernel-{kernel_id}"


def link_kernels(kernel_ids) -> None:
    """The kernel ids whose table cells link to their card from now on (empty: none link)."""
    _CARDS.clear()
    _CARDS.update(str(k) for k in kernel_ids)


def kernel_link(cell_text: str) -> str:
    """A kernel cell ('d004 lm_head GEMV', escaped as it prints) with its leading id as a link to the id's
    card; unchanged when the id has no card."""
    kid, _, rest = cell_text.partition(" ")
    if kid not in _CARDS:
        return cell_text
    a = esc_html(card_anchor(kid))
    link = (f'<a class="kb-k" href="{EXPLORER_CHAPTER}.html#{a}" data-card="{a}" '
            f'title="{esc_html(tr("kernel card in chapter 05"))}">{kid}</a>')
    return link + (" " + rest if rest else "")


# Chapter 05 after its cards: the card the address names (`05_classification.html#kernel-d004`) opens and comes
# into view, on load and whenever the address's fragment changes.
CARD_OPEN_JS = """<script>(function(){function o(){var h=location.hash.slice(1),c=h?document.getElementById(
decodeURIComponent(h)):null;if(c&&c.tagName==='DETAILS'){c.open=true;c.scrollIntoView();}}
o();window.addEventListener('hashchange',o);window.addEventListener('load',o);})();</script>"""


class Shown:
    """A displayable piece of HTML (what `table()` returns); `frame` keeps the data it shows."""

    def __init__(self, html_text: str, frame: pd.DataFrame | None = None, text: str = ""):
        self.html = html_text
        self.frame = frame
        self.text = text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text or (self.frame.to_string(index=False) if self.frame is not None else "")


def _flatten(df: pd.DataFrame) -> pd.DataFrame:
    """Drop a meaningless (range) index; make a meaningful one an ordinary first column."""
    if isinstance(df.columns, pd.MultiIndex):
        df = df.copy()
        df.columns = [" ".join(str(x) for x in c if str(x)) for c in df.columns]
    idx = df.index
    if isinstance(idx, pd.RangeIndex) or (idx.name is None and pd.api.types.is_integer_dtype(idx)
                                          and not isinstance(idx, pd.MultiIndex)):
        return df.reset_index(drop=True)
    names = [n if n is not None else ("item" if i == 0 else f"level {i}") for i, n in enumerate(idx.names)]
    out = df.copy()
    out.index = idx.set_names(names)
    return out.reset_index()


def _merge_kernel(df: pd.DataFrame) -> pd.DataFrame:
    """kernel_id + friendly_name → one 'Kernel' column ('k003 Direct Copy (float)'), the sticky one."""
    if "kernel_id" in df.columns and "friendly_name" in df.columns:
        df = df.copy()
        fn = df.pop("friendly_name")
        df["kernel_id"] = [f"{k} {f}" if not missing(f) else str(k) for k, f in zip(df["kernel_id"], fn)]
        df = df.rename(columns={"kernel_id": "kernel"})
    key = next((c for c in ("kernel", "kernel_id", "friendly_name") if c in df.columns), None)
    if key is not None and df.columns[0] != key:  # the kernel column leads: it is the sticky one
        df = df[[key] + [c for c in df.columns if c != key]]
    return df


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _long_values(df: pd.DataFrame) -> tuple[pd.DataFrame, set, dict]:
    """Long-format tables (a `unit` column beside numeric value columns): each value printed in its
    row's unit ('989 TFLOP/s'), the unit column dropped; a value column mixing numbers and words (a
    kernel card's "limited by: registers") prints the words as they are. Returns the frame, the
    formatted columns and the named quantities among their values, (row, column) → Q."""
    if "unit" not in df.columns:
        return df, set(), {}
    vals = [c for c in ("value", "measured", "spec", "median", "time_weighted_median", "threshold")
            if c in df.columns and (pd.api.types.is_numeric_dtype(df[c]) or df[c].map(_is_number).any())]
    if not vals:
        return df, set(), {}
    df = df.copy()
    named = {(i, c): v for c in vals for i, v in enumerate(df[c]) if isinstance(v, qty.Q)}
    for c in vals:
        df[c] = [quantity(v, u) for v, u in zip(df[c], df["unit"])]
    return df.drop(columns="unit"), set(vals), named


def table(df: pd.DataFrame | pd.Series, caption: str | None = None, *, empty: str | None = None,
          notes: dict[str, str] | str | None = None, columns: dict[str, str] | None = None,
          styles: pd.DataFrame | None = None, merge_kernel: bool = True) -> Shown:
    """The one way the book shows a table.

    caption: what the table is (shown above it). empty: the sentence shown instead of a table with
    no rows (default: "No rows."). notes: reasons for missing cells, column → reason (or one line),
    printed under the table. columns: header overrides for this table, machine column → header.
    styles: a frame of CSS classes ('bad', 'na' or '') aligned with `df`, for shaded cells.
    """
    if isinstance(df, pd.Series):
        df = df.to_frame()
    if df is None or len(df) == 0 or len(df.columns) == 0:
        sentence = empty or tr("No rows.")
        cap = f'<p class="kb-caption">{esc_html(caption)}</p>' if caption else ""
        return Shown(f'{cap}<p class="kb-empty">{esc_html(sentence)}</p>', None, sentence)
    frame = df
    df = _flatten(df)
    if styles is not None:
        styles = _flatten(styles.reindex(index=frame.index))
    if merge_kernel:
        had = list(df.columns)
        df = _merge_kernel(df)
        if styles is not None and "kernel_id" in had and "friendly_name" in had:
            styles = styles.drop(columns=[c for c in ("friendly_name",) if c in styles]).rename(
                columns={"kernel_id": "kernel"})
        if styles is not None:
            styles = styles.reindex(columns=df.columns)
    df, long_cols, named = _long_values(df)
    heads = {c: (columns or {}).get(c, label(c)) for c in df.columns}
    kinds = {c: ("text" if c in long_cols else _kind(str(c), df[c])) for c in df.columns}
    first = df.columns[0]
    rows = []
    th = []
    for c in df.columns:
        cls = " ".join(x for x in ("t" if kinds[c] in ("text", "code", "phase", "shapes") else "",
                                   "sticky" if c == first else "") if x)
        th.append(f'<th class="{cls}">{esc_html(heads[c])}</th>' if cls else f"<th>{esc_html(heads[c])}</th>")
    for i in range(len(df)):
        tds = []
        for c in df.columns:
            k = kinds[c]
            v = df[c].iloc[i]
            cls = [{"text": "t", "phase": "t", "shapes": "t", "code": "c"}.get(k, "")]
            if c == first:
                cls.append("sticky")
            if styles is not None and c in styles.columns:
                s = styles[c].iloc[i]
                if isinstance(s, str) and s:
                    cls.append(s)
            attr = " ".join(x for x in cls if x)
            dv = (f' data-v="{float(v)!r}"' if k not in ("text", "code", "phase", "shapes", "bool")
                  and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                  and np.isfinite(v) else "")
            shown = cell(v, k)
            if c in ("kernel", "kernel_id") and _CARDS:
                shown = kernel_link(shown)
            q = v if isinstance(v, qty.Q) else named.get((i, c))
            if q is not None:  # a named quantity: its mark goes with the figure (issue 41's one-value test)
                shown = qty.mark(q, shown)
            tds.append(f'<td class="{attr}"{dv}>{shown}</td>' if attr else f"<td{dv}>{shown}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    # a table with full kernel names fits the page: the name column takes what is left and wraps
    fit = " fit" if "code" in kinds.values() else ""
    body = (f'<div class="kb-tablebox"><table class="kb{fit}"><thead><tr>{"".join(th)}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')
    cap = f'<p class="kb-caption">{esc_html(caption)}</p>' if caption else ""
    foot = ""
    if notes:
        any_missing = any(df[c].map(missing).any() for c in df.columns)
        # a note may be a catalog key declared with N_ (a module's table of reasons): shown translated
        items = ([text(notes)] if any_missing else []) if isinstance(notes, str) else [
            tr("{missing} in {column}: {why}", missing=MISSING, column=heads.get(c, label(c)), why=text(why))
            for c, why in notes.items()
            if c in df.columns and df[c].map(missing).any()]
        foot = "".join(f'<p class="kb-note">{esc_html(n)}</p>' for n in items)
    # a long table shows its first 10 rows (as sorted) and a button for the rest; without scripts every row shows
    sort = SORT_JS.replace("<script>", f'<script data-filter="{esc_html(tr("filter rows"))}" '
                           f'data-more="{esc_html(tr("show all {n} rows", n="{n}"))}" '
                           f'data-less="{esc_html(tr("show the first 10 rows"))}">', 1)
    return Shown(STYLE + cap + body + sort + foot, frame, caption or "")


def sentence(text: str) -> Shown:
    """A result that is one sentence (an empty table said in words)."""
    return Shown(f'<p class="kb-empty">{esc_html(text)}</p>', None, text)


def styled_cells(styler) -> dict[tuple[int, int], dict[str, str]]:
    """(row, column) position → the CSS properties the Styler gives that cell. The one use of pandas' private
    `Styler._compute().ctx` (pandas has no public reader of computed cell styles); tests/test_private_apis.py
    fails when pandas changes it."""
    return {ij: dict(props) for ij, props in styler._compute().ctx.items()}


def styler_table(styler, caption: str | None = None, **kw) -> Shown:
    """A pandas Styler through the same layer: its data, with cells it styles as 'bad' (a background)
    or 'na' (greyed) carried over as classes."""
    df = styler.data
    cls = pd.DataFrame("", index=df.index, columns=df.columns)
    for (i, j), d in styled_cells(styler).items():
        if "background-color" in d:
            cls.iat[i, j] = "bad"
        elif d.get("color") in ("#999", "#999999"):
            cls.iat[i, j] = "na"
    return table(df, caption, styles=cls, **kw)


# --- prose ----------------------------------------------------------------------------------------
_WORDS = {0: "no", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
          9: "nine", 10: "ten"}


def plural(n: int, noun: str, plural_form: str | None = None, zero: str = "no") -> str:
    """'no kernels', 'one kernel', '3 kernels'... as a person writes a count in a sentence."""
    n = int(n)
    word = plural_form or (noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else
                           noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s"))
    if n == 0:
        return f"{zero} {word}"
    if n == 1:
        return f"one {noun}"
    return f"{n} {word}"


def share_phrase(p: float, of: str) -> str:
    """A percentage of something in words at the edges: 'none of the profiled time', 'all of it',
    'under 1 % of', else '37 % of'. `p` in percent."""
    if missing(p):
        return f"an unmeasured share of {of}"
    if p <= 0:
        return f"none of {of}"
    if p >= 100:
        return f"all of {of}"
    if p < 1:
        return f"under 1 % of {of}"
    if p > 99:
        return f"over 99 % of {of}"
    return f"{p:.0f} % of {of}"
