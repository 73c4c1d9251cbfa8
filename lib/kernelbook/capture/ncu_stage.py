"""The ncu stage of a capture: select → one ncu process → tables with a status per kernel.

By position when the timeline numbers op calls (one ncu process for every asked phase, see
capture.ncu); by name otherwise (one ncu process per phase, the fallback for nsys timelines).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd

from ..contract.config import CaptureConfig
from ..contract.layout import NcuDir, RunLayout, log_file, report_file, seen_file
from . import ncu as _ncu  # read `_ncu.PROFILE_GATE` at call time (bench/ncu_stage.py compares both)
from .ncu import (NcuError, NcuProcess, NcuStopped, expected_launches, finish_ncu, graph_launches, graph_phase,
                  ncu_command, representative_launches, select_kernels, targets_json, worker_command)
from .common import PARQUET, write_manifest
from .torch_backend import torchrun_worker


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ncu_progress(label: str, say=_say):
    """`ncu decode+prefill: 12/41 launches, 48 s`, one line per profiled launch, to `say`."""
    def report(done: int, expected: int | None, elapsed: float) -> None:
        of = f"/{expected}" if expected else ""
        say(f"  ncu {label}: {done}{of} launches, {elapsed:.0f} s")
    return report


def early_graph(params: CaptureConfig) -> bool:
    """Whether `early_ncu` starts the graph step's ncu (a static cache whose ncu phases are decode, and vision_encode,
    which a text model's run lacks) rather than the one by op call."""
    return params.static_cache and "decode" in params.ncu_phases and set(params.ncu_phases) <= {"decode", "vision_encode"}


def early_ncu(params: CaptureConfig, run_dir: Path, gate: Path) -> "NcuProcess | None":
    """Start ncu by op call (see `_by_position`) before the timeline part exists: its worker builds and warms up
    the model once the timeline's timed passes are over (`gate`), then waits for the targets this stage writes,
    so the model build overlaps the timeline's shapes pass. With a static cache whose ncu phases are decode (and
    vision_encode, absent from a text model's run), as in the serving study's points, the worker is the graph
    step's (see `_by_name`): it builds its model, then waits for the step; `ncu_stage` ends it if an eager phase is
    profiled after all. None where the stage will not profile with one worker (no ncu, tensor parallelism, a static
    cache's graph step beside eager phases). Under the nsys timeline the gate opens when the nsys worker's generate
    has ended, so the model build overlaps nsys writing its report."""
    import os

    graph = early_graph(params)
    if params.ncu_top_n == 0 or params.tensor_parallel > 1 or (params.static_cache and not graph):
        return None
    nd = RunLayout(run_dir).ncu()
    nd.path.mkdir(parents=True, exist_ok=True)
    nd.params.write_text(json.dumps(params.as_dict()))
    worker = worker_command(nd.params, targets_file=nd.targets, early=f"{gate}:{os.getpid()}",
                            gated=_ncu.PROFILE_GATE)
    return NcuProcess(ncu_command(nd.report("decode") if graph else nd.report(), None, worker, params.clock_control,
                                  params.cache_control, graph=graph))


def ncu_stage(params: CaptureConfig, run_dir: Path, manifest: dict, say=_say, wrap=None, early=None) -> None:
    """`say(line)` gets the progress lines (stderr by default; a chapter passes its progress bar). `wrap(cmd,
    worker)`: the command that actually runs (tensor parallelism: torchrun around it). `early`: the ncu that
    `early_ncu` started for this stage (ended here when the stage does not profile by op call after all)."""
    lay = RunLayout(run_dir)
    timeline = pd.read_parquet(lay.timeline)
    lay.ncu_dir().mkdir(exist_ok=True)
    params_file = lay.ncu().params
    params_file.write_text(json.dumps(params.as_dict()))
    info = manifest.setdefault("ncu", {"clock_control": params.clock_control,
                                       "cache_control": params.cache_control, "phases": {}})
    step = params.ncu_step
    if step is None and params.sample_window > 0:  # a sampled long generation: its middle
        step = params.max_new_tokens // 2
    present = set(timeline.loc[timeline.kind == "kernel", "phase"])
    absent = [ph for ph in params.ncu_phases if ph not in present]
    if absent:  # e.g. vision_encode of a text model: nothing to profile there
        info["phases_absent"] = absent
        say(f"  ncu: no {', '.join(absent)} kernels in this run's timeline; not profiled")
    sels = [select_kernels(timeline, ph, params.ncu_top_n, step) for ph in params.ncu_phases if ph in present]
    graphs = [s for s in sels if graph_phase(timeline, s)]
    eager = [s for s in sels if s not in graphs]
    by_position = eager and "op_index" in timeline and (timeline.op_index >= 0).any()
    graph_early = early is not None and early_graph(params)  # the early ncu is the graph step's
    if early is not None and not ((by_position and wrap is None and not graph_early)
                                  or (graph_early and not eager and [s.phase for s in graphs] == ["decode"])):
        early.kill()
        early = None
    if by_position:
        _by_position(params, run_dir, manifest, timeline, eager, params_file, say, wrap, early)
    elif eager:
        _by_name(params, run_dir, manifest, timeline, eager, params_file, say)
    if graphs:
        _by_name(params, run_dir, manifest, timeline, graphs, params_file, say, graph=True,
                 early=early if graph_early else None)
    if params.ncu_inloop:
        if wrap is not None:
            info["inloop"] = {"error": "not run under tensor parallelism (one rank under ncu while the others wait)"}
        elif any(v.get("profiled") for v in info["phases"].values()):
            _range_pass(params, run_dir, manifest, timeline, sels,
                        bool(by_position) and any(s.phase == "decode" for s in eager), params_file, say)
    failed = [p for p, v in info["phases"].items() if v["error"]]
    if failed and all(info["phases"][p]["profiled"] == 0 for p in failed):
        raise NcuError("; ".join(f"{p}: {info['phases'][p]['error']}" for p in failed))
    asked = {p: v for p, v in info["phases"].items() if v.get("selected")}
    if asked and all(v.get("profiled", 0) == 0 for v in asked.values()):
        # ncu ran and matched no launch (GPU test, graph steps not recognised): a complete run without counters
        # would pass as profiled; it lands partial with the reason instead
        raise NcuError("ncu profiled none of the selected kernels (" + "; ".join(
            f"{p}: 0 of {v['selected']}" for p, v in asked.items()) + "): no launch of the chosen step matched")


def _profile(cmd, log: Path, report: Path, timeout_s: int, progress, expected: int | None = None, early=None):
    """Run ncu (or wait for the one `early` started) and read what it wrote: (metrics, results, error, stop,
    wall s). `stop` is the NcuStopped to re-raise once the tables are written (a capture stopped by a signal)."""
    t = time.perf_counter()
    error = stop = None
    try:
        finish_ncu(early or NcuProcess(cmd), log, timeout_s, expected=expected, progress=progress)
    except NcuStopped as e:
        error, stop = str(e), e
    except NcuError as e:
        error = str(e)
    wall = time.perf_counter() - t
    metrics, results, error = _read(report_file(report), log.parent, error)
    return metrics, results, error, stop, wall


def _read(rep: Path, ncu_dir: Path, error: str | None):
    from ..load.ncu import NcuReportError, read_ncu_report_isolated

    if not rep.exists():
        return None, None, error
    try:
        m, r = read_ncu_report_isolated(rep, ncu_dir)
        return m, r, error
    except NcuReportError as e:
        return None, None, error or str(e)


NCCL_REASON = ("not profiled under tensor parallelism: replaying a collective on one rank while the other "
               "rank waits in it hangs (ncu 2025.3, measured on 2x H200); its time is split into transfer and "
               "wait in chapter 01")


def tp_ncu_stage(params: CaptureConfig, run_dir: Path, manifest: dict, say=_say) -> None:
    """ncu per rank under tensor parallelism: for each rank, torchrun starts every rank again with that
    rank's worker under ncu and the others plain (one ncu per GPU: the form that works on 2x H200), with
    the rank's own top kernels selected from its timeline, NCCL kernels left out (NCCL_REASON). Rank 0's
    tables land in ncu/ as in a one-GPU run, rank r's in ncu/rank<r>/; the hang guard is run_ncu's time
    limit, which ends ncu, torchrun and every rank by process group."""
    import shutil

    from ..contract.kernels import is_nccl

    lay = RunLayout(run_dir)
    timeline = pd.read_parquet(lay.timeline)
    n = params.tensor_parallel
    ranks = {}
    for r in range(n):
        stage = lay.tp_ncu_stage(r)  # shaped like a run: rank r's timeline without its NCCL kernels
        sub = stage.root
        sub.mkdir()
        tl = timeline[timeline["rank"] == r].drop(columns="rank")
        tl[~tl.name.map(is_nccl)].to_parquet(stage.timeline, **PARQUET)
        m: dict = {}
        say(f"  ncu rank {r} of {n}")
        try:
            ncu_stage(params, sub, m, say, wrap=lambda cmd, worker, r=r: _tp_command(cmd, worker, r, n, sub))
        finally:
            if stage.ncu_dir().exists():
                shutil.move(str(stage.ncu_dir()), str(lay.ncu_dir(r)))
            ranks[str(r)] = m.get("ncu", {})
            shutil.rmtree(sub, ignore_errors=True)
            manifest["ncu"] = {**ranks["0"], "ranks": ranks, "nccl": NCCL_REASON,
                               "mode": f"per rank: one ncu around one rank's worker under torchrun ({n} ranks)"}
            write_manifest(run_dir, manifest)


def _tp_command(ncu_cmd: list[str], worker: list[str], rank: int, n: int, where: Path) -> list[str]:
    """torchrun with `n` ranks: rank `rank` runs `ncu_cmd` (ncu around the worker), the others `worker`."""
    f = RunLayout(where).tp_launch
    f.write_text(json.dumps({"ncu_rank": rank, "ncu": ncu_cmd, "plain": worker}))
    return torchrun_worker(n, "--mode", "tp-exec", "--params", str(f))


def _by_position(params: CaptureConfig, run_dir, manifest, timeline, sels, params_file, say=_say, wrap=None, early=None) -> None:
    from .ncu_tables import kernel_table_by_position

    nd, info = RunLayout(run_dir).ncu(), manifest["ncu"]
    reps = pd.concat([representative_launches(timeline, s) for s in sels], ignore_index=True)
    exp = expected_launches(timeline, reps)
    targets = nd.targets
    # whole or not at all: a worker started early reads it when it appears
    nd.targets_tmp.write_text(json.dumps(targets_json(reps)))
    os.replace(nd.targets_tmp, targets)
    report = nd.report()
    worker = worker_command(params_file, targets_file=targets, gated=_ncu.PROFILE_GATE)
    cmd = early.cmd if early is not None else ncu_command(report, None, worker, params.clock_control,
                                                          params.cache_control)
    if wrap is not None:
        cmd = wrap(cmd, worker)
    label = "+".join(s.phase for s in sels)
    say(f"  ncu {label}: {len(exp)} launches in {exp[['phase', 'step', 'op_index']].drop_duplicates().shape[0]} "
        f"op calls for {len(reps)} kernels")
    metrics, results, error, stop, wall = _profile(cmd, log_file(report), report, params.ncu_timeout_s,
                                                    ncu_progress(label, say), len(exp), early)
    selected = pd.concat([s.kernels.assign(phase=s.phase) for s in sels], ignore_index=True)
    selected = selected[["phase"] + [c for c in selected.columns if c != "phase"]]
    kernels, launches = kernel_table_by_position(selected, exp, metrics, results, error, timeline=timeline)
    kernels = kernels.merge(reps[["kernel_id", "phase", "step", "op_index"]].rename(
        columns={"step": "profiled_step"}), on=["kernel_id", "phase"], how="left")
    if metrics is not None:
        phase_of = launches[launches.result_id >= 0].set_index("result_id")["phase"]
        results = results.assign(phase=results.result_id.map(phase_of).fillna("unexpected"))
        metrics.merge(results[["result_id", "phase"]], on="result_id").to_parquet(nd.metrics, **PARQUET)
        results.to_parquet(nd.results, **PARQUET)
    kernels.to_parquet(nd.kernels, **PARQUET)
    launches.to_parquet(nd.launches, **PARQUET)
    seen_file = nd.targets_seen
    seen = pd.DataFrame(json.loads(seen_file.read_text())) if seen_file.exists() else pd.DataFrame()
    n_results = 0 if results is None else len(results)
    ran = nd.worker_run  # how the worker ran the workload (see capture.ncu_worker.worker)
    info.update({"worker": json.loads(ran.read_text())} if ran.exists() else {})
    info.update({
        "mode": "by position: NVTX range around each selected kernel's op call, no name filter",
        "processes": 1, "wall_s": wall, "expected_launches": len(exp), "results": n_results,
        "selected": len(selected), "results_per_selected": n_results / max(1, len(selected)),
        "op_calls_marked_by_worker": len(seen), "op_check": _op_check(reps, seen),
        "command": (" ".join("<report>" if c == str(report) else c for c in cmd[:cmd.index(worker[0])])
                    if wrap is None else "torchrun: ncu (as below) around one rank's worker, the others plain")
        + f" python -m kernelbook _worker --mode ncu --targets {RunLayout(run_dir).rel(targets)}"
        + (" --profile-gate" if "--profile-gate" in worker else ""),
    })
    for s in sels:
        k = kernels[kernels.phase == s.phase]
        info["phases"][s.phase] = {
            "step": s.step, "selected": len(k), "profiled": int((k.status == "profiled").sum()),
            "results": int((launches.phase == s.phase).mul(launches.result_id >= 0).sum()),
            "wall_s": wall, "error": error, "left_out": s.left_out}
    write_manifest(run_dir, manifest)
    if stop is not None:
        raise stop


_APP_PASS = re.compile(r"Application replay pass (\d+)")


def _range_pass(params: CaptureConfig, run_dir, manifest, timeline, sels, by_position: bool, params_file,
                say=_say) -> None:
    """The range pass (capture.ncu_ranges): one ncu process in app-range replay over a worker that wraps the
    decode step ncu profiled, and (by op call) each profiled kernel's op call with its producer's and the producer
    alone, in cudaProfilerStart/Stop; the caches are flushed before each range as in the main pass. Writes
    ncu/ranges.parquet, adds `dram_read_bytes_inloop` (pair − producer) to ncu/kernels.parquet and records the
    pass in the manifest's `ncu.inloop`. A failed pass leaves the main tables as they are."""
    from .ncu import range_command
    from .ncu_ranges import RANGE_METRICS, consumer_reads, plan_ranges, ranges_json, tie_ranges

    nd = RunLayout(run_dir).ncu()
    info = manifest["ncu"]["inloop"] = {
        "mode": "range", "replay": "app-range", "cache_control": params.cache_control, "metrics": list(RANGE_METRICS),
        "processes": 0, "wall_s": 0.0, "passes": None, "error": None, "ranges": 0, "kernels": 0}
    dec = next((s for s in sels if s.phase == "decode"), None)
    if dec is None:
        info["error"] = "no decode step was profiled: nothing to measure in the loop"
        write_manifest(run_dir, manifest)
        return
    reps = representative_launches(timeline, dec) if by_position else None
    plan, planned = plan_ranges(timeline, dec.step, reps)
    nd.ranges_targets.write_text(ranges_json(plan))
    report = nd.inloop_report()
    pairs = int((planned.kind == "pair").sum())
    say(f"  ncu ranges: decode step {dec.step} whole" + (f", {pairs} kernels with their producers in steps "
        f"{min(k[1] for k in plan if k[1] != dec.step)}–{max(k[1] for k in plan)}" if pairs else "")
        + f" ({len(planned)} ranges, caches flushed before each)")
    cmd = range_command(report, worker_command(params_file, ranges_file=nd.ranges_targets), params.clock_control,
                        params.cache_control)
    metrics, _, error, stop, wall = _profile(cmd, log_file(report), report, params.ncu_timeout_s,
                                             ncu_progress("ranges", say), len(planned))
    log = log_file(report)
    passes = [int(x) for x in _APP_PASS.findall(log.read_text(errors="replace"))] if log.exists() else []
    seen_path = seen_file(nd.ranges_targets)
    seen = json.loads(seen_path.read_text()) if seen_path.exists() else []
    ranges, tie_error = tie_ranges(planned, seen, metrics)
    info.update(processes=1, wall_s=wall, passes=max(passes) if passes else None, error=error or tie_error,
                ranges=int(len(ranges)), op_check=_range_op_check(ranges, timeline))
    if len(ranges):
        ranges.to_parquet(nd.ranges, **PARQUET)
    reads = consumer_reads(ranges).assign(phase="decode")
    if len(reads) and nd.kernels.exists():
        kernels = pd.read_parquet(nd.kernels).drop(columns=list(INLOOP_COLUMNS), errors="ignore")
        kernels.merge(reads, on=["phase", "kernel_id"], how="left").to_parquet(nd.kernels, **PARQUET)
        info["kernels"] = int(len(reads))
    write_manifest(run_dir, manifest)
    if stop is not None:
        raise stop


# the in-loop columns a kernel table may hold: the range pass's, and those of the `--cache-control none` pass that
# earlier captures wrote (dropped when the range pass writes its own)
INLOOP_COLUMNS = ("dram_read_bytes_inloop", "duration_ns_inloop", "dram_bytes_inloop", "dram_write_bytes_inloop",
                  "l2_bytes_inloop")


def _range_op_check(ranges: pd.DataFrame, timeline: pd.DataFrame) -> dict:
    """Do the spans the worker closed start and end at the aten ops the timeline names at those op calls?"""
    spans = ranges[ranges.first_op >= 0] if len(ranges) else ranges
    if spans.empty or "op_index" not in timeline:
        return {"checked": 0, "agree": 0}
    ops = (timeline[timeline.kind == "kernel"].drop_duplicates(["phase", "step", "op_index"])
           .set_index(["phase", "step", "op_index"]).op)
    agree = [ops.get((r.phase, r.step, r.first_op)) == aten_name(r.op_first)
             and ops.get((r.phase, r.step, r.last_op)) == aten_name(r.op_last) for r in spans.itertuples()]
    return {"checked": len(agree), "agree": int(sum(agree))}


def aten_name(op) -> str:
    """A dispatcher op as the timeline names it: 'aten.mm.default' → 'aten::mm'."""
    return "::".join(str(op).split(".")[:2])


def _op_check(reps: pd.DataFrame, seen: pd.DataFrame) -> dict:
    """Do the op calls the worker marked run the aten op the timeline names for them? ('aten::mm' vs
    the dispatcher's 'aten.mm.default')."""
    if seen.empty:
        return {"checked": 0, "agree": 0}
    seen = seen.assign(op_seen=seen.op.map(aten_name))
    m = reps.drop_duplicates(["phase", "step", "op_index"]).merge(
        seen[["phase", "step", "op_index", "op_seen"]], on=["phase", "step", "op_index"], how="left")
    agree = m.op == m.op_seen
    return {"checked": int(m.op_seen.notna().sum()), "agree": int(agree.sum()),
            "differ": m.loc[~agree, ["phase", "step", "op_index", "op", "op_seen"]].astype(str).to_dict("records")[:10]}


GRAPH_MODE = ("by graph node: the NVTX target range around the profiled step's graph replay, --graph-profiling "
              "node, the first launch of every launch configuration in the step (no name filter: ncu's filter sees "
              "graph nodes under stale names), tied by the report's names and launch configurations")


def _by_name(params: CaptureConfig, run_dir, manifest, timeline, sels, params_file, say=_say, graph: bool = False,
             early=None) -> None:
    """One ncu process per phase, by name. `graph`: the phase's steps are CUDA-graph replays (see
    `GRAPH_MODE`); each selected kernel is tied to its launch by (step, launch index in the step); the worker
    starts and stops the profiler around the step (`--profile-gate`), so ncu does not intercept the launches of
    its warmup, compile and graph recording. `early`: the graph step's ncu that `early_ncu` started, its model
    built; it is told its step through the targets file."""
    from .ncu_tables import same_launch_elsewhere

    nd, info = RunLayout(run_dir).ncu(), manifest["ncu"]
    mode = GRAPH_MODE if graph else "by name: --kernel-name filter per phase (timeline without op numbering)"
    info["mode"] = f"{info['mode']}; {mode}" if info.get("mode") and graph else mode
    all_metrics, all_kernels, all_results = _tables(nd) if graph else ([], [], [])
    next_id = int(all_results[0].result_id.max()) + 1 if all_results and len(all_results[0]) else 0
    for sel in sels:
        phase = sel.phase
        report = nd.report(phase)
        cmd = ncu_command(report, sel.kernels["name"].tolist(),
                          worker_command(params_file, phase, sel.step, gated=graph and _ncu.PROFILE_GATE),
                          params.clock_control, params.cache_control, graph=graph)
        if early is not None:  # whole or not at all: the early worker reads its step when the file appears
            nd.targets_tmp.write_text(json.dumps({"step": f"{phase}:{sel.step}"}))
            os.replace(nd.targets_tmp, nd.targets)
            cmd = early.cmd
        say(f"  ncu {phase}: {len(sel.kernels)} kernels by name in step {sel.step}"
            + (" (CUDA-graph replay, node by node)" if graph else ""))
        metrics, results, error, stop, wall = _profile(cmd, log_file(report), report,
                                                        params.ncu_timeout_s, ncu_progress(phase, say), early=early)
        started_early, early = early is not None, None
        if metrics is not None:  # result ids stay unique across the stage's ncu processes
            metrics = metrics.assign(result_id=metrics.result_id + next_id)
            results = results.assign(result_id=results.result_id + next_id)
            next_id = int(results.result_id.max()) + 1 if len(results) else next_id
        kernels = _phase_table(sel, metrics, results, timeline, error, graph)
        if metrics is not None:
            metrics = metrics.merge(results[["result_id"]], on="result_id")
            metrics.insert(0, "phase", phase)
            all_metrics.append(metrics)
            all_results.append(results.assign(phase=phase))
        all_kernels.append(kernels)
        if graph:  # a process of its own beside the eager phases' one
            info["processes"] = info.get("processes", 0) + 1
        info["phases"][phase] = {
            "step": sel.step, "selected": len(sel.kernels), "wall_s": wall, "error": error,
            "profiled": int((kernels.status == "profiled").sum()), "results": 0 if results is None else len(results),
            "graph_replay": graph, "left_out": sel.left_out, "started_early": started_early,
            "command": (" ".join(cmd[:cmd.index("-o")]) if graph else
                        " ".join(cmd[:cmd.index("--kernel-name")]) + " --kernel-name <regex of selected names> ..."),
        }
        write_manifest(run_dir, manifest)
        if stop is not None:
            break
    if all_metrics:
        pd.concat(all_metrics, ignore_index=True).to_parquet(nd.metrics, **PARQUET)
        pd.concat(all_results, ignore_index=True).to_parquet(nd.results, **PARQUET)
    kernels = pd.concat(all_kernels, ignore_index=True)
    if graph:  # an eager phase's kernel with no op call takes the graph step's counters of the same launch
        same_launch_elsewhere(kernels, timeline)
        for ph in info["phases"]:
            info["phases"][ph]["profiled"] = int(((kernels.phase == ph) & (kernels.status == "profiled")).sum())
    kernels.to_parquet(nd.kernels, **PARQUET)
    n_sel = len(kernels)
    n_res = sum(len(r) for r in all_results)
    info.update(selected=n_sel, results=n_res, results_per_selected=n_res / max(1, n_sel))
    write_manifest(run_dir, manifest)
    if stop is not None:
        raise stop


def _phase_table(sel, metrics, results, timeline, error, graph: bool) -> pd.DataFrame:
    """One phase's rows of the kernel table from what its ncu process wrote (see `_by_name`)."""
    from .ncu_tables import kernel_table

    kernels = kernel_table(sel, metrics, results, timeline, error, graph=graph)
    kernels.insert(0, "phase", sel.phase)
    if graph:
        at = graph_launches(timeline, sel).set_index("kernel_id")
        kernels["profiled_step"] = sel.step
        kernels["launch_index"] = kernels.kernel_id.map(at["launch_index"]).fillna(-1).astype("int64")
        kernels.loc[kernels.status == "profiled", "identity"] = (
            "graph node: the report's name and launch configuration, at (step, launch index) of its first launch")
    return kernels


def rederive_graph_phases(run_dir: Path) -> dict:
    """Rebuild a run's graph-replay phases of the kernel table from the counters its ncu processes stored
    (ncu/metrics.parquet, ncu/results.parquet), with this code's selection, and the manifest's counts with
    them; eager phases keep their rows. For a committed run whose selection rule changed after capture
    (bench/rederive_ncu.py). Returns the manifest's new ncu section."""
    from .ncu_tables import same_launch_elsewhere

    run_dir = Path(run_dir)
    lay = RunLayout(run_dir)
    manifest = json.loads(lay.manifest.read_text())
    info = manifest["ncu"]
    timeline = pd.read_parquet(lay.timeline)
    nd = lay.ncu()
    metrics, results = pd.read_parquet(nd.metrics), pd.read_parquet(nd.results)
    kernels = pd.read_parquet(nd.kernels)
    top_n = manifest["params"]["ncu_top_n"]
    for ph, v in info["phases"].items():
        if not v.get("graph_replay"):
            continue
        sel = select_kernels(timeline, ph, top_n)
        sel.step = v["step"]  # the step ncu profiled
        m = metrics[metrics.phase == ph].drop(columns="phase")
        res = results[results.phase == ph].drop(columns="phase")
        rows = _phase_table(sel, m, res, timeline, v["error"], graph=True)
        kernels = pd.concat([kernels[kernels.phase != ph], rows], ignore_index=True)
        v.update(selected=len(rows), left_out=sel.left_out)
    same_launch_elsewhere(kernels, timeline)
    for ph, v in info["phases"].items():
        v["profiled"] = int(((kernels.phase == ph) & (kernels.status == "profiled")).sum())
    kernels.to_parquet(nd.kernels, **PARQUET)
    info.update(selected=len(kernels), results_per_selected=info["results"] / max(1, len(kernels)),
                processes=int("expected_launches" in info)
                + sum(bool(v.get("graph_replay")) for v in info["phases"].values()))
    write_manifest(run_dir, manifest)
    return info


def _tables(nd: NcuDir) -> tuple[list, list, list]:
    """The tables an earlier ncu process of this stage wrote (eager phases), to which graph phases add."""
    def read(f):
        return [pd.read_parquet(f)] if f.exists() else []
    return read(nd.metrics), read(nd.kernels), read(nd.results)
