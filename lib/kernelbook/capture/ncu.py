"""Targeted Nsight Compute capture: one ncu process for all selected kernels of all asked phases.

By position (the default when the timeline carries `op_index`, see capture.phases): each selected
kernel's representative launch (its launch configuration holding the most time, in the profiled step)
is named by (phase, step, op call); the worker pushes the NVTX target range around exactly those op
calls, ncu profiles every kernel launched inside them and nothing else, and results are tied to
kernels by their position in that launch sequence. No name filter, so mangled, stale-named
(cuBLASLt/cuDNN) and Triton names are all the same to it.

By name (the fallback for timelines without op numbering, e.g. the nsys backend):

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
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..contract.names import NCU_TARGET

SECTIONS = (
    "SpeedOfLight", "SpeedOfLight_RooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart",
    "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
)
# Byte counters per memory level for the hierarchical roofline, and local-memory traffic (spills).
EXTRA_METRICS = (
    "dram__bytes.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    # per-cycle peaks of the same counters: the hierarchical roofline's L2 and L1 roofs
    "lts__t_bytes.sum.peak_sustained", "l1tex__t_bytes.sum.peak_sustained",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    # CUDA-core FLOP counters as totals (the roofline sections report them only as rates)
    *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
      for op in ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul")),
)
# By position, ncu profiles only between the worker's cudaProfilerStart/Stop around each target op call
# (`--profile-from-start off`), so the launches in between run without ncu's per-launch interception; see
# `ncu_command`.
PROFILE_GATE = True
# Graph steps: ncu's name filter over the replay's kernel nodes (`ncu_command`); bench/ncu_stage.py's `graphnames`.
GRAPH_NAME_FILTER = False
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")


class NcuError(RuntimeError):
    """ncu is missing, not permitted, or failed; the message says how to fix it."""


# The kernel the CUDA driver runs for a graph's memcpy (memset) node: under CUDA graphs the timeline shows it as a
# kernel (`memcpy32_post`, 22 per decode step of the bundled workload), but it is not a kernel node, and ncu's
# `--graph-profiling node` profiles kernel nodes only (H100, ncu 2025.3.1: no result for it with every launch
# configuration of the step asked for and no name filter). The selection leaves it out, and says so.
GRAPH_COPY_NODE = re.compile(r"^mem(cpy|set)\d+(_[a-z]+)?$")
GRAPH_COPY_REASON = ("the CUDA driver's kernel for a graph's copy node: ncu profiles a graph's kernel nodes, not its "
                     "copy nodes, so it is left out of the selection and the next kernel taken")


@dataclass
class Selection:
    phase: str
    step: int
    kernels: pd.DataFrame  # kernel_id, name, total_ns, launches, median_ns, rank, share
    left_out: list = field(default_factory=list)  # [{name, share, reason}]: ranked among the top, not profilable


def select_kernels(timeline: pd.DataFrame, phase: str = "decode", top_n: int = 20,
                   step: int | None = None) -> Selection:
    """Top-`top_n` kernel identities of `phase` by total GPU time, and the step ncu will profile.

    The step is the one whose launches cover the most selected identities (ties: the middle one),
    so each kernel's representative launch comes from a typical step. A graph's copy-node kernel
    (`GRAPH_COPY_NODE`) is not taken; `left_out` names those that ranked above the last kernel taken.
    `step` (decode: `ncu_step`)
    asks for a step: the recorded step nearest to it is taken (a sampled long generation records
    windows of steps only).
    """
    k = timeline[(timeline.phase == phase) & (timeline.kind == "kernel")]
    if k.empty:
        raise ValueError(f"no kernels in phase {phase!r}; phases present: {sorted(timeline.phase.unique())}")
    g = k.groupby("name", sort=False)["duration_ns"].agg(total_ns="sum", launches="size", median_ns="median")
    g = g.sort_values("total_ns", ascending=False)
    g["share"] = g["total_ns"] / k["duration_ns"].sum()
    copy = g.index.str.match(GRAPH_COPY_NODE)
    top = g[~copy].head(top_n).reset_index()
    last = g.index.get_loc(top["name"].iloc[-1]) if len(top) else len(g)
    left_out = [{"name": n, "share": float(g["share"].iloc[i]), "reason": GRAPH_COPY_REASON}
                for i, n in enumerate(g.index) if copy[i] and i < last]
    top.insert(0, "kernel_id", [f"{phase[0]}{i:03d}" for i in range(len(top))])  # d003, p003: unique in a run
    top["rank"] = range(1, len(top) + 1)
    chosen = set(top["name"])
    cover = k[k.name.isin(chosen)].groupby("step")["name"].nunique()
    if step is not None and phase == "decode":
        steps = cover.index.to_numpy()
        return Selection(phase, int(steps[abs(steps - step).argmin()]), top, left_out)
    best = cover[cover == cover.max()].index.to_list()
    return Selection(phase, int(best[len(best) // 2]), top, left_out)


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
    from ..contract.kernels import name_key

    if "<" not in name and "(" not in name:
        return "^" + _REGEX_SPECIAL.sub(r"\\\1", name) + "$"
    toks = [_REGEX_SPECIAL.sub(r"\\\1", t) for t in name_key(name).split() if t not in _COMMON_TOKENS]
    return f"(^|{_NW})" + f"{_NW}(.*{_NW})?".join(toks) + f"({_NW}|$)"


def name_regex(names: list[str], bare: bool = True) -> str:
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

    `bare=False` (kernels of a CUDA-graph replay): every selected name gets its own pattern and
    `BARE_NAME` is left out, since it would match every Triton kernel of the replayed step.
    """
    alts = [name_pattern(n) for n in dict.fromkeys(names) if not bare or "<" in n or "(" in n]
    return "regex:" + "|".join(f"({a})" for a in alts + ([BARE_NAME] if bare else []))


def _with_config(k: pd.DataFrame) -> pd.DataFrame:
    """`k` with its launch configuration as two string columns, `_g` (grid) and `_b` (block)."""
    return k.assign(_g=k.grid.fillna("?").astype(str), _b=k.block.fillna("?").astype(str))


def _top_config(k: pd.DataFrame, name: str) -> tuple[str, str]:
    """(grid, block) of `name`'s launch configuration holding the most time in `k` (from `_with_config`)."""
    return k[k.name == name].groupby(["_g", "_b"])["duration_ns"].sum().idxmax()


def representative_launches(timeline: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """One launch per selected kernel, in the selection's step where it launches there: of its launch
    configurations (grid, block) in that step, the one holding the most time, and its first launch. A kernel
    that does not launch in that step is taken at its configuration holding the most time in the phase, in the
    earliest step that has one. (Taking the phase's top configuration everywhere sent a long generation's
    ncu worker to its last step: the KV-cache copy and the attention grow with the cache, so their heaviest
    configuration is the last step's, 1790 steps past the chosen one.) Columns: kernel_id, name, phase,
    step, op_index, grid, block, op, launch_ns."""
    k = _with_config(timeline[(timeline.phase == sel.phase) & (timeline.kind == "kernel") & (timeline.op_index >= 0)])
    rows = []
    for r in sel.kernels.itertuples():
        mine = k[k.name == r.name]
        if mine.empty:
            continue
        here = mine[mine.step == sel.step]
        pool = here if len(here) else mine
        cfg = _top_config(pool, r.name)
        same = pool[(pool._g == cfg[0]) & (pool._b == cfg[1])]
        pick = same.sort_values(["step", "launch_ns"]).iloc[0]
        rows.append({"kernel_id": r.kernel_id, "name": r.name, "phase": sel.phase, "step": int(pick.step),
                     "op_index": int(pick.op_index), "grid": pick.grid, "block": pick.block,
                     "op": pick.op, "launch_ns": pick.launch_ns})
    return pd.DataFrame(rows, columns=["kernel_id", "name", "phase", "step", "op_index", "grid", "block", "op",
                                       "launch_ns"])


def graph_phase(timeline: pd.DataFrame, sel: Selection) -> bool:
    """Whether the selection's step ran as a CUDA-graph replay: its kernels were launched by a compiled
    graph's call (torch.compile, mode reduce-overhead), not by numbered aten op calls, so selection by op
    call has nothing to mark there and ncu must take the step's graph replay node by node."""
    k = timeline[(timeline.phase == sel.phase) & (timeline.kind == "kernel") & (timeline.step == sel.step)]
    if k.empty:
        return False
    if "graph" in k:  # the trace named the launching call cudaGraphLaunch
        return bool(k["graph"].fillna(False).astype(bool).mean() > 0.5)
    if "op_index" not in k or "op" not in k:  # a timeline without op calls (nsys): nothing says it was a graph
        return False
    return not (k.op_index >= 0).any() and bool(k.op.fillna("").str.contains("CompiledFxGraph").mean() > 0.5)


def graph_launches(timeline: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """Graph runs: each selected kernel's representative launch named by (step, launch index in the step):
    its launch configuration holding the most time in the phase, and of that configuration the first launch
    in the selection's step. The step's graph replay launches the same nodes in the same order every step,
    so ncu, filtering the step by name once per launch configuration, profiles exactly these launches.
    Columns: kernel_id, name, phase, step, launch_index, grid, block."""
    k = timeline[(timeline.phase == sel.phase) & (timeline.kind == "kernel") & (timeline.step == sel.step)]
    k = k.sort_values(["launch_ns", "start_ns"], kind="stable").reset_index(drop=True)
    k = _with_config(k.assign(launch_index=range(len(k))))
    ph = _with_config(timeline[(timeline.phase == sel.phase) & (timeline.kind == "kernel")])
    rows = []
    for r in sel.kernels.itertuples():
        mine = k[k.name == r.name]
        if mine.empty:
            continue
        cfg = _top_config(ph, r.name)
        same = mine[(mine._g == cfg[0]) & (mine._b == cfg[1])]
        pick = (same if len(same) else mine).iloc[0]
        rows.append({"kernel_id": r.kernel_id, "name": r.name, "phase": sel.phase, "step": sel.step,
                     "launch_index": int(pick.launch_index), "grid": pick.grid, "block": pick.block})
    return pd.DataFrame(rows, columns=["kernel_id", "name", "phase", "step", "launch_index", "grid", "block"])


def expected_launches(timeline: pd.DataFrame, reps: pd.DataFrame) -> pd.DataFrame:
    """Every kernel launch inside the target op calls, in launch order: what ncu will profile, one
    result each. `kernel_id` names the selected kernel a launch stands for (None for a kernel that the
    same op call launches beside it)."""
    calls = reps[["phase", "step", "op_index"]].drop_duplicates()
    k = timeline[timeline.kind == "kernel"].merge(calls, on=["phase", "step", "op_index"])
    k = k.sort_values(["launch_ns", "start_ns"], kind="stable").reset_index(drop=True)
    key = reps.set_index(["phase", "step", "op_index", "name", "grid", "block"])["kernel_id"]
    k["kernel_id"] = None
    taken = set()
    for i, r in k.iterrows():  # the first launch of the representative's name + config in its op call
        kid = key.get((r.phase, r.step, r.op_index, r["name"], r.grid, r.block))
        if kid is not None and (r.phase, kid) not in taken:  # kernel ids restart in each phase
            k.at[i, "kernel_id"] = kid
            taken.add((r.phase, kid))
    return k[["phase", "step", "op_index", "op", "name", "grid", "block", "kernel_id"]]


def targets_json(reps: pd.DataFrame) -> dict:
    """The worker's targets: {"phase:step": [op_index, ...]}."""
    out: dict = {}
    for r in reps.itertuples():
        out.setdefault(f"{r.phase}:{r.step}", set()).add(int(r.op_index))
    return {k: sorted(v) for k, v in out.items()}


def ncu_command(report_base: Path, names: list[str] | None, worker: list[str], clock_control: str = "none",
                cache_control: str = "all", sections=SECTIONS, extra_metrics=EXTRA_METRICS,
                graph: bool = False) -> list[str]:
    """The ncu command line. `names=None`: by position (every launch inside the NVTX target ranges);
    a list: by name (`name_regex`, once per launch configuration). `graph`: the target range holds a
    CUDA-graph replay, profiled node by node (`--graph-profiling node`: each kernel node is a result,
    with the NVTX ranges open at the graph's launch), the first launch of every launch configuration of
    the step, with no name filter: measured on an H100 (ncu 2025.3.1), a name filter over a graph replay
    matched nodes by stale names (it profiled `triton_..._9` as `triton_..._11` and missed three of 20
    selected kernels), while the report names each node correctly, so results are tied by those names."""
    cmd = [ncu_exe(), "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NCU_TARGET}/"]
    if "--profile-gate" in worker:  # the worker (`worker_command(gated=True)`) starts and stops the profiler
        cmd += ["--profile-from-start", "off"]
    if names is not None and not graph:
        cmd += ["--kernel-name-base", "demangled", "--kernel-name", name_regex(names),
                "--filter-mode", "per-launch-config", "--launch-count", "1"]
    if graph:  # no name filter: under graph replays ncu's filter saw nodes under stale names (H100, ncu 2025.3.1)
        cmd += ["--filter-mode", "per-launch-config", "--launch-count", "1", "--graph-profiling", "node"]
        if names is not None and GRAPH_NAME_FILTER:
            cmd += ["--kernel-name-base", "demangled", "--kernel-name", name_regex(names, bare=False)]
    cmd += ["--clock-control", clock_control, "--cache-control", cache_control,
            "-o", str(report_base), "--force-overwrite"]
    for s in sections:
        cmd += ["--section", s]
    if extra_metrics:
        cmd += ["--metrics", ",".join(extra_metrics)]
    return cmd + worker


def ncu_exe() -> str:
    exe = shutil.which("ncu")
    if not exe:
        raise NcuError("Nsight Compute (ncu) is not on PATH. Install Nsight Compute (it ships with the CUDA "
                       "toolkit, e.g. /usr/local/cuda/bin/ncu or /opt/nvidia/nsight-compute/<ver>/ncu) and "
                       "add its folder to PATH, or set ncu_top_n: 0 to capture the timeline only.")
    return exe


def range_command(report_base: Path, worker: list[str], clock_control: str = "none", cache_control: str = "all"
                  ) -> list[str]:
    """The range pass's ncu command (capture.ncu_ranges): app-range replay, each cudaProfilerStart/Stop range of
    the worker one result, the caches flushed before each range (`cache_control` all), only the range metrics."""
    from .ncu_ranges import RANGE_METRICS

    return [ncu_exe(), "--target-processes", "all", "--replay-mode", "app-range", "--clock-control", clock_control,
            "--cache-control", cache_control, "--metrics", ",".join(RANGE_METRICS), "-o", str(report_base),
            "--force-overwrite", *worker]


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


TIMEOUT_GRACE_S = 60  # after SIGINT, how long ncu gets to close the report before SIGKILL
PERMISSION_HELP = ("ncu may not read GPU performance counters here (ERR_NVGPUCTRPERM). Fix: run as root, or "
                   "allow non-admin profiling: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | "
                   "sudo tee /etc/modprobe.d/ncu.conf` and reboot (see NVIDIA's ERR_NVGPUCTRPERM page).")


class NcuStopped(NcuError):
    """The capture was stopped (signal) while ncu ran; ncu was asked to close its report first."""


PROF_LINE = re.compile(r"==PROF== Profiling \"")


class NcuProcess:
    """ncu started in its own process group (`finish_ncu` waits for it): its process, the lines it printed, and
    the profiled launches so far."""

    def __init__(self, cmd: list[str]):
        import threading
        import time

        # SIGINT at its default in ncu: a capture started in the background (nohup ... &) has SIGINT ignored,
        # which ncu would inherit, and then neither close its report on a stop nor end before the grace
        # period's SIGKILL
        self.cmd, self.t0, self.lines, self.done = cmd, time.monotonic(), [], 0
        self.line_s: list[float] = []  # when each line came (time.monotonic()), and when the output ended
        self.ended_s: float | None = None
        self.progress, self.expected = None, None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True, preexec_fn=_default_sigint)
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        import time

        for line in self.proc.stdout:
            self.lines.append(line)
            self.line_s.append(time.monotonic())
            if PROF_LINE.search(line):
                self.done += 1
                if self.progress:
                    self.progress(self.done, self.expected, time.monotonic() - self.t0)
        self.ended_s = time.monotonic()

    def kill(self) -> None:
        """End ncu and its worker at once (a started ncu whose targets never came)."""
        import os
        import signal

        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def run_ncu(cmd: list[str], log_path: Path, timeout_s: int, expected: int | None = None,
            progress=None) -> subprocess.CompletedProcess:
    """Run ncu; raise NcuError with the fix for the known failure modes, keep the log either way (see
    `finish_ncu`)."""
    return finish_ncu(NcuProcess(cmd), log_path, timeout_s, expected, progress)


def finish_ncu(run: NcuProcess, log_path: Path, timeout_s: int, expected: int | None = None,
               progress=None) -> subprocess.CompletedProcess:
    """Wait for a started ncu; raise NcuError with the fix for the known failure modes, keep the log either way.

    ncu runs in its own process group. Past `timeout_s` from its start, or when the capture is stopped (SIGINT,
    SIGTERM), the group gets SIGINT first (ncu then closes the report with the results it has, so a
    cut-off capture keeps what was profiled), SIGKILL after a grace period. `progress(done, expected,
    elapsed_s)` is called at each profiled launch, parsed from ncu's `==PROF== Profiling` lines.
    """
    import os
    import signal
    import time

    proc = run.proc
    run.expected, run.progress = expected, progress
    timed_out = stopped = False
    try:
        proc.wait(timeout=max(0.0, timeout_s - (time.monotonic() - run.t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:  # KeyboardInterrupt, or the capture's SIGTERM handler
        stopped = True
    if timed_out or stopped:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=TIMEOUT_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run.reader.join(timeout=10)
    text = "".join(run.lines)
    log_path.write_text(text)
    if stopped:
        raise NcuStopped("the capture was stopped while ncu ran; the kernels it profiled before that are kept")
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuError(PERMISSION_HELP)
    if timed_out:
        raise NcuError(f"ncu did not finish within ncu_timeout_s = {timeout_s} s; the kernels it profiled "
                       "before that are kept (raise ncu_timeout_s to profile the rest)")
    if proc.returncode != 0 and "==PROF==" not in text:
        last = text.strip().splitlines()[-1] if text.strip() else "no output"
        raise NcuError(f"ncu failed (exit {proc.returncode}): {last}")
    return subprocess.CompletedProcess(run.cmd, proc.returncode, text, "")


def worker_command(params_file: Path, phase: str | None = None, step: int | None = None,
                   targets_file: Path | None = None, early: str | None = None, gated: bool = False,
                   ranges_file: Path | None = None) -> list[str]:
    """The workload under ncu: by step (`phase:step`), by op call (`--targets` JSON, see targets_json) or by range
    (`--ranges` JSON, capture.ncu_ranges); `early`: started before the targets are written (capture.ncu_worker
    `worker`)."""
    cmd = [sys.executable, "-m", "kernelbook", "_worker", "--params", str(params_file), "--mode", "ncu"]
    cmd += (["--targets", str(targets_file)] if targets_file else ["--ranges", str(ranges_file)] if ranges_file
            else ["--target", f"{phase}:{step}"])
    return cmd + (["--early", early] if early else []) + (["--profile-gate"] if gated else [])
