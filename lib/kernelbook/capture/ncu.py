"""Targeted Nsight Compute capture: one ncu process for all selected kernels.

Selection comes from the run's timeline: the top-N kernel identities (demangled name) by total time
in a phase. The workload runs once under ncu; only one NVTX range is pushed (`kb_ncu_target`, around
one representative step of the phase), the kernel-name filter matches the selected instantiations
(`name_regex`), and `--filter-mode per-launch-config --launch-count 1` profiles the first launch of
each launch configuration of those kernels inside that step. Cost therefore grows with distinct kernels and
configurations, never with launches.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .phases import NCU_TARGET

SECTIONS = (
    "SpeedOfLight", "SpeedOfLight_RooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart",
    "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
)
# Byte counters per memory level for the hierarchical roofline, and local-memory traffic (spills).
EXTRA_METRICS = (
    "dram__bytes.sum", "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    # per-cycle peaks of the same counters: the hierarchical roofline's L2 and L1 roofs
    "lts__t_bytes.sum.peak_sustained", "l1tex__t_bytes.sum.peak_sustained",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    # CUDA-core FLOP counters as totals (the roofline sections report them only as rates)
    *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
      for op in ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul")),
)
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")


class NcuError(RuntimeError):
    """ncu is missing, not permitted, or failed; the message says how to fix it."""


@dataclass
class Selection:
    phase: str
    step: int
    kernels: pd.DataFrame  # kernel_id, name, total_ns, launches, median_ns, rank, share


def select_kernels(timeline: pd.DataFrame, phase: str = "decode", top_n: int = 20) -> Selection:
    """Top-`top_n` kernel identities of `phase` by total GPU time, and the step ncu will profile.

    The step is the one whose launches cover the most selected identities (ties: the middle one),
    so each kernel's representative launch comes from a typical step.
    """
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]
    if k.empty:
        raise ValueError(f"no kernels in phase {phase!r}; phases present: {sorted(timeline.phase.unique())}")
    g = k.groupby("name", sort=False)["duration_ns"].agg(total_ns="sum", launches="size", median_ns="median")
    g = g.sort_values("total_ns", ascending=False)
    g["share"] = g["total_ns"] / k["duration_ns"].sum()
    top = g.head(top_n).reset_index()
    top.insert(0, "kernel_id", [f"k{i:03d}" for i in range(len(top))])
    top["rank"] = range(1, len(top) + 1)
    chosen = set(top["name"])
    cover = k[k.name.isin(chosen)].groupby("step")["name"].nunique()
    best = cover[cover == cover.max()].index.to_list()
    step = int(best[len(best) // 2])
    return Selection(phase, step, top)


# Namespace tokens that repeat in every ATen name: left out of a pattern (they add nothing but backtracking).
_COMMON_TOKENS = {"at", "native", "c10", "std", "detail", "cuda", "binary_internal", "unnamed", "void",
                  "operator", "const"}
_NW = "[^A-Za-z0-9_]"
# ncu's filter sees some launches under a stale name (see `name_regex`); such names carry no template or
# parameter list, so this alternative lets ncu profile every launch it names so, once per launch config.
BARE_NAME = "^[^<(]*$"


def name_pattern(name: str) -> str:
    """A regex that finds one kernel instantiation, named as Kineto prints it, in the name NVIDIA's
    demangler gives the same instantiation.

    The two disagree on spelling (`{lambda()#1}` vs `[lambda() (instance 1)]`, `(anonymous namespace)`
    vs `<unnamed>`, `2ul` vs `(unsigned long)2`, parameter types vs `const T1 &`), but the tokens of
    `kernels.name_key` (function, template arguments, lambda numbers) appear in both, in order. The
    pattern asks for those tokens in order, each standing alone, anything between, so it matches this
    instantiation and not its siblings (`MulFunctor` vs `AddFunctor`, `<8>` vs `<4>`). Only `.`, `*`,
    `?`, groups and bracket classes are used (no look-around or `\\b`). A C-linkage name (nvjet, cuDNN,
    Triton) is the same in both tools and is matched whole.
    """
    from ..analyze.kernels import name_key

    if "<" not in name and "(" not in name:
        return "^" + _REGEX_SPECIAL.sub(r"\\\1", name) + "$"
    toks = [_REGEX_SPECIAL.sub(r"\\\1", t) for t in name_key(name).split() if t not in _COMMON_TOKENS]
    return f"(^|{_NW})" + f"{_NW}(.*{_NW})?".join(toks) + f"({_NW}|$)"


def name_regex(names: list[str]) -> str:
    """ncu `--kernel-name` filter (matched on ncu's demangled names): one `name_pattern` per selected
    instantiation, plus `BARE_NAME`.

    Why `BARE_NAME`: measured on an H100 (bench/ncu_filter_check.py), ncu's filter sees kernels that
    cuBLASLt and cuDNN launch (nvjet GEMVs, cuDNN's generated attention) under a stale name, the bare
    function name of an earlier launch (`CatArrayBatchedCopy_vectorized` for the cuDNN SDPA kernel),
    while the report names them correctly. A filter of exact names therefore skipped them; a filter of
    function short names caught them only when the stale name happened to be in its list, and profiled
    every sibling instantiation besides (top 20 on an H100: 45 launches profiled, against 37 now).
    Real ATen names always carry a template list, so `BARE_NAME` adds only C-linkage and stale-named
    launches, each once per launch configuration; it also covers the selected C-linkage names, so
    only templated names need a pattern. The reader identifies each result by the name in the
    report (`kernels.name_key`).
    """
    alts = [name_pattern(n) for n in dict.fromkeys(names) if "<" in n or "(" in n]
    return "regex:" + "|".join(f"({a})" for a in [*alts, BARE_NAME])


def ncu_command(report_base: Path, names: list[str], worker: list[str], clock_control: str = "none",
                cache_control: str = "none", sections=SECTIONS, extra_metrics=EXTRA_METRICS) -> list[str]:
    exe = shutil.which("ncu")
    if not exe:
        raise NcuError("Nsight Compute (ncu) is not on PATH. Install Nsight Compute (it ships with the CUDA "
                       "toolkit, e.g. /usr/local/cuda/bin/ncu or /opt/nvidia/nsight-compute/<ver>/ncu) and "
                       "add its folder to PATH, or set ncu_top_n: 0 to capture the timeline only.")
    cmd = [exe, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NCU_TARGET}/",
           "--kernel-name-base", "demangled", "--kernel-name", name_regex(names),
           "--filter-mode", "per-launch-config", "--launch-count", "1",
           "--clock-control", clock_control, "--cache-control", cache_control,
           "-o", str(report_base), "--force-overwrite"]
    for s in sections:
        cmd += ["--section", s]
    if extra_metrics:
        cmd += ["--metrics", ",".join(extra_metrics)]
    return cmd + worker


TIMEOUT_GRACE_S = 60  # after SIGINT, how long ncu gets to close the report before SIGKILL
PERMISSION_HELP = ("ncu may not read GPU performance counters here (ERR_NVGPUCTRPERM). Fix: run as root, or "
                   "allow non-admin profiling: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | "
                   "sudo tee /etc/modprobe.d/ncu.conf` and reboot (see NVIDIA's ERR_NVGPUCTRPERM page).")


def run_ncu(cmd: list[str], log_path: Path, timeout_s: int) -> subprocess.CompletedProcess:
    """Run ncu; raise NcuError with the fix for the known failure modes, keep the log either way.

    ncu runs in its own process group. Past `timeout_s` the group gets SIGINT first (ncu then closes
    the report with the results it has, so a cut-off capture keeps what was profiled), SIGKILL after
    a grace period.
    """
    import os
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=TIMEOUT_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    log_path.write_text((out or "") + "\n--- stderr ---\n" + (err or ""))
    text = (out or "") + (err or "")
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuError(PERMISSION_HELP)
    if timed_out:
        raise NcuError(f"ncu did not finish within ncu_timeout_s = {timeout_s} s; the kernels it profiled "
                       "before that are kept (raise ncu_timeout_s to profile the rest)")
    if proc.returncode != 0 and "==PROF==" not in text:
        last = text.strip().splitlines()[-1] if text.strip() else "no output"
        raise NcuError(f"ncu failed (exit {proc.returncode}): {last}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def worker_command(params_file: Path, phase: str, step: int) -> list[str]:
    return [sys.executable, "-m", "kernelbook", "_worker", "--params", str(params_file),
            "--mode", "ncu", "--target", f"{phase}:{step}"]
