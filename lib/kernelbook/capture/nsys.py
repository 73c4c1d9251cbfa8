"""Nsight Systems timeline backend.

`nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi` around the worker (which brackets the
measured generate with cudaProfilerStart/Stop), `nsys export --type sqlite`, then SQL over the
documented tables CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY/MEMSET, NVTX_EVENTS,
StringIds and CUPTI_ACTIVITY_KIND_RUNTIME. Phases come from the NVTX push/pop ranges the worker's
hooks emit (names `vision_encode`, `prefill`, `decode`), numbered in order.

nsys is found on PATH or inside an Nsight Compute install (`find_nsys`); its report importer needs libdw and
libelf (`nsys_works` names what is missing). The SQL is tested against a database built from the documented
schema.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..contract.config import CaptureConfig
from ..env import find_nsys
from ..contract.layout import NSYS_REPORT, NSYS_SQLITE, RunLayout
from ..contract.names import (MODULE_RANGE, NCU_TARGET, OP_RANGE, PASS_RANGE, PHASES, PROFILED_PASS,
                              SHAPES_PASS)
from .common import CaptureError

NVTX_PUSHPOP = 59  # NVTX_EVENTS.eventType of push/pop ranges
NVTX_STARTEND = 60

KERNELS_SQL = """
SELECT COALESCE(d.value, s.value) AS name, k.start AS start_ns, k.end AS end_ns,
       k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
       k.registersPerThread AS registers, k.staticSharedMemory + k.dynamicSharedMemory AS shared_bytes,
       k.streamId AS stream, r.start AS launch_ns, k.graphNodeId AS graph_node
FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN StringIds s ON s.id = k.shortName
LEFT JOIN StringIds d ON d.id = k.demangledName
LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
"""
MEMCPY_SQL = """
SELECT 'Memcpy ' || CASE m.copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 8 THEN 'DtoD' ELSE 'other' END
       AS name, m.start AS start_ns, m.end AS end_ns, m.streamId AS stream, r.start AS launch_ns
FROM CUPTI_ACTIVITY_KIND_MEMCPY m
LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
"""
MEMSET_SQL = """
SELECT 'Memset' AS name, m.start AS start_ns, m.end AS end_ns, m.streamId AS stream, r.start AS launch_ns
FROM CUPTI_ACTIVITY_KIND_MEMSET m
LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
"""
# the ranges of NVTX's default domain (torch's and kernelbook's), with their thread: libraries mark ranges of their own
# in a domain of their own, such as CUB's device algorithms (`cub::DeviceRadixSort`, CCCL's domain), which are no
# torch op
NVTX_SQL = f"""
SELECT COALESCE(n.text, s.value) AS phase, n.start AS start_ns, n.end AS end_ns, n.globalTid AS tid
FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
WHERE n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND n.end IS NOT NULL AND COALESCE(n.domainId, 0) = 0
ORDER BY n.start
"""


def importer_missing(exe: Path) -> list[str]:
    """The shared libraries nsys's report importer (QdstrmImporter, beside nsys in its install) cannot find: without
    them `nsys profile` collects but writes no .nsys-rep. Empty when it finds them all (or has no importer to check)."""
    importers = sorted(exe.resolve().parent.parent.glob("*/QdstrmImporter"))
    if not importers or not shutil.which("ldd"):
        return []
    try:
        out = subprocess.run(["ldd", str(importers[0])], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line]


# the Debian/Ubuntu packages that hold the importer's libraries (seen missing on the lent H100's image)
# (ldd names libelf only once libdw is found: libdw1 needs libelf1, so both are named)
LIB_PACKAGES = {"libdw.so.1": "libdw1 libelf1", "libelf.so.1": "libelf1"}


def nsys_works() -> tuple[bool, str]:
    """(whether nsys can capture and write its reports here, why): found (`find_nsys`), `nsys --version` answers,
    and its importer finds its libraries; otherwise one line that says what is missing and how to get it."""
    exe = find_nsys()
    if exe is None:
        return False, "nsys is not on PATH nor inside an Nsight Compute or Nsight Systems install"
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{exe} --version failed: {e}"
    if out.returncode != 0:
        return False, f"{exe} --version exited {out.returncode}"
    version = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "nsys"
    missing = importer_missing(exe)
    if missing:
        pkgs = " ".join(dict.fromkeys(p for m in missing for p in LIB_PACKAGES.get(m, m).split()))
        return False, (f"{version} at {exe} cannot write its reports: its importer lacks {', '.join(missing)}; install "
                       f"{pkgs} (apt-get install {pkgs}), or unpack them (dpkg -x) and add their lib folder to "
                       "LD_LIBRARY_PATH")
    return True, f"{version} at {exe}"


def _table_exists(con, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def _session_start_ns(con) -> int:
    """The report's session start (ns since the epoch; 0 where the table is absent): its timestamps count from it."""
    if not _table_exists(con, "TARGET_INFO_SESSION_START_TIME"):
        return 0
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def read_nsys_sqlite(path: str | Path, first_decode_step: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, phases) from an `nsys export --type sqlite` database. `first_decode_step`: the step of its first
    decode range (a sampled window's report starts mid-generation, without a prefill to count from)."""
    return _phased(*_read_db(path), first_decode_step)


def _read_db(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(GPU activity without phases, the NVTX ranges: `NVTX_SQL`) of an nsys sqlite export; the session's start (ns
    since the epoch) in each frame's attrs."""
    con = sqlite3.connect(str(path))
    try:
        if not _table_exists(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
            raise ValueError(f"{path} has no CUPTI_ACTIVITY_KIND_KERNEL table: was CUDA tracing (-t cuda) on?")
        k = pd.read_sql_query(KERNELS_SQL, con)
        k["grid"] = k.gridX.astype(str) + "x" + k.gridY.astype(str) + "x" + k.gridZ.astype(str)
        k["block"] = k.blockX.astype(str) + "x" + k.blockY.astype(str) + "x" + k.blockZ.astype(str)
        # a kernel node of a CUDA-graph replay (`--cuda-graph-trace=node`) carries its graph node's id: the same
        # `graph` flag the torch profiler's trace gives a launch by cudaGraphLaunch (load.trace)
        k["graph"] = k.pop("graph_node").notna()
        k = k.drop(columns=["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"])
        k["kind"] = "kernel"
        parts = [k]
        for table, sql, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_SQL, "memcpy"),
                                 ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_SQL, "memset")):
            if _table_exists(con, table):
                m = pd.read_sql_query(sql, con)
                m["kind"] = kind
                parts.append(m)
        nv = pd.read_sql_query(NVTX_SQL, con) if _table_exists(con, "NVTX_EVENTS") else pd.DataFrame(
            columns=["phase", "start_ns", "end_ns", "tid"])
        t0 = _session_start_ns(con)
    finally:
        con.close()
    tl = pd.concat(parts, ignore_index=True)
    tl["duration_ns"] = tl.end_ns - tl.start_ns
    tl["graph"] = tl["graph"].astype("boolean").fillna(False).astype(bool)  # copies and memsets: no graph node
    tl["launch_ns"] = tl["launch_ns"].astype("float64")  # NaN where no runtime call correlates (contract)
    for col, fill in (("registers", -1), ("shared_bytes", -1)):
        tl[col] = tl[col].fillna(fill).astype("int64")
    tl["op"] = None
    tl["op_shapes"] = None
    tl.attrs["session_start_ns"] = nv.attrs["session_start_ns"] = t0
    return tl, nv


def _phased(tl: pd.DataFrame, nv: pd.DataFrame, first_decode_step: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, phases): the activity `tl` with the phase and step of each launch, from the NVTX ranges `nv`
    (columns phase, start_ns, end_ns; other names are left out)."""
    from ..load.trace import _assign_phase

    phases = _phases_from_nvtx(nv, first_decode_step)
    tl = tl.copy()
    tl["phase"], tl["step"] = _assign_phase(tl["launch_ns"].to_numpy(), tl["start_ns"].to_numpy(), phases)
    phases.attrs["session_start_ns"] = tl.attrs.get("session_start_ns", 0)
    return tl.sort_values("start_ns", kind="stable").reset_index(drop=True), phases


_SIZES = re.compile(r", sizes = (\[(?:\[[^\]]*\](?:, )?)*\])")


def read_capture_sqlite(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """(timeline, phases, shaped) from the one-process capture's report (`start_capture`): the profiled generate,
    marked `kbpass#profiled`, and the shapes pass, marked `kbpass#shapes` (None where it did not run), each an NVTX
    range of the capture's thread. The shapes pass's kernels carry their aten op and its input shapes (the innermost
    range torch's `emit_nvtx(record_shapes=True)` pushed around the launch: `aten::mm, seq = 3, op_id = 7, sizes =
    [[1, 1280], [1280, 896]]`), their op call (`kbop#<i>`) and module (`kbmod#<path>|<class>`), as a torch profiler's
    shapes pass gives them (load.trace `join_shapes` takes them onto the profiled pass)."""
    tl, nv = _read_db(path)
    passes = nv[nv.phase.str.startswith(PASS_RANGE, na=False)]
    found = {name[len(PASS_RANGE):]: row for name, row in zip(passes.phase, passes.itertuples(index=False))}
    if PROFILED_PASS not in found:
        raise ValueError(f"{path} has no NVTX range {PASS_RANGE}{PROFILED_PASS}: it is not a report of the "
                         "one-process capture (capture.nsys `start_capture`)")
    t = np.where(np.isnan(tl["launch_ns"].to_numpy()), tl["start_ns"].to_numpy(), tl["launch_ns"].to_numpy())

    def part(p):
        inside = nv[(nv.start_ns >= p.start_ns) & (nv.end_ns <= p.end_ns) & (nv.tid == p.tid)]
        sel = tl[(t >= p.start_ns) & (t <= p.end_ns)]
        sel.attrs = dict(tl.attrs)
        return (*_phased(sel, inside), inside)

    timeline, phases, _ = part(found[PROFILED_PASS])
    if SHAPES_PASS not in found:
        return timeline, phases, None
    shaped, _, ranges = part(found[SHAPES_PASS])
    return timeline, phases, _with_ops(shaped, ranges)


def _with_ops(tl: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The shapes pass's activity with each launch's aten op and input shapes, op call and module (see
    `read_capture_sqlite`), from the NVTX ranges of its thread."""
    from ..contract.names import parse_module_range, parse_op_range
    from ..load.trace import _shapes_str, innermost, with_calls

    text = ranges["phase"].astype(str).to_numpy()
    # a range's name ends where emit_nvtx's fields begin; names repeat (an op's, a module's, an op call's), so what
    # each name is is decided once per distinct name
    codes, names = pd.factorize(np.array([x.partition(", ")[0] for x in text.tolist()], dtype=object))
    names = pd.Series(names)
    ours = (names.str.startswith((OP_RANGE, MODULE_RANGE, PASS_RANGE, "kb::")) | names.isin(PHASES)
            | (names == NCU_TARGET)).to_numpy()[codes]
    name = names.to_numpy(dtype=object)[codes]
    start, end = ranges["start_ns"].to_numpy("float64"), ranges["end_ns"].to_numpy("float64")
    t = tl["launch_ns"].to_numpy()
    tl = tl.copy()
    # the op: the innermost range around the launch, where it is an op's (a launch whose innermost range is one of
    # kernelbook's has none, as in the torch profiler's trace, whose launch then points at a user range)
    at = innermost(start, end, t)
    op_at = np.where(at >= 0, at, 0)
    is_op = (at >= 0) & ~ours[op_at]
    tl["op"] = np.where(is_op, name[op_at], None)
    shapes, parsed = {}, {}
    for i in np.unique(at[is_op]).tolist():
        m = _SIZES.search(text[i])
        sizes = m.group(1) if m else None
        if sizes not in parsed:  # one op's shapes recur step after step
            parsed[sizes] = _shapes_str(json.loads(sizes)) if sizes else None
        shapes[i] = parsed[sizes]
    tl["op_shapes"] = [shapes.get(i) if ok else None for i, ok in zip(at.tolist(), is_op.tolist())]
    # the op call and the module: kernelbook's ranges, read as in the torch profiler's trace (load.trace)
    def spans(parse) -> list[tuple]:
        value = names.map(parse).to_numpy(dtype=object)[codes]
        k = np.flatnonzero(pd.notna(value))
        return list(zip(start[k], end[k], value[k]))

    return with_calls(tl, spans(parse_op_range), spans(parse_module_range), to_ns=1)


def read_nsys_windows(paths: list[Path], first_decode_steps: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, phases) of a sampled generation: one report per window (`--capture-range-end=repeat`), each read
    with its first decode step, its clock moved onto the first report's (each counts from its own session start)."""
    tls, phs = [], []
    for path, first in zip(paths, first_decode_steps):
        tl, ph = read_nsys_sqlite(path, first)
        shift = tl.attrs["session_start_ns"] - (tls[0].attrs["session_start_ns"] if tls else tl.attrs["session_start_ns"])
        for df, cols in ((tl, ("start_ns", "end_ns", "launch_ns")), (ph, ("start_ns", "end_ns"))):
            for c in cols:
                df[c] = df[c] + shift
        tls.append(tl)
        phs.append(ph)
    tl = pd.concat(tls, ignore_index=True).sort_values("start_ns", kind="stable").reset_index(drop=True)
    return tl, pd.concat(phs, ignore_index=True)


def _phases_from_nvtx(nv: pd.DataFrame, first_decode_step: int = 1) -> pd.DataFrame:
    nv = nv[nv.phase.isin(["vision_encode", "prefill", "decode"])].copy()
    step = np.zeros(len(nv), dtype="int64")
    n_decode = first_decode_step - 1
    for i, p in enumerate(nv.phase):
        if p == "decode":
            n_decode += 1
            step[i] = n_decode
        elif p == "prefill":
            n_decode = 0
    nv["step"] = step
    nv["duration_ns"] = nv.end_ns - nv.start_ns
    return nv[["phase", "step", "start_ns", "end_ns", "duration_ns"]].reset_index(drop=True)


def window_starts(steps) -> list[int]:
    """The first step of each run of consecutive profiled steps (a sampled generation's `Sampling.steps`): one nsys
    report each, in order; step 0 is vision encode and prefill."""
    s = sorted(steps)
    return [x for i, x in enumerate(s) if i == 0 or s[i - 1] != x - 1]


@dataclass
class NsysPass:
    """The profiled generate under nsys, running: the worker (model built and warmed up in its own process) waits
    for `go` before its measured generate, so the caller may finish CPU work beside the build; `finish_nsys` ends it."""

    proc: object
    run_dir: Path
    go: Path
    started: float
    timeout_s: float
    window_starts: list[int] | None


def nsys_command(lay: RunLayout, sampling=None, repeat: bool = False) -> list[str]:
    """`nsys profile` up to the application it runs, its report(s) at `lay.nsys_base`: `--capture-range=cudaProfilerApi`
    (the worker brackets its measured generate, or each sampled window: `--capture-range-end=repeat`, one report per
    window), `--cuda-graph-trace=node` so a CUDA-graph replay shows its kernels, no CPU sampling or context switches
    (`-s none --cpuctxsw=none`)."""
    exe = str(find_nsys() or "nsys")
    return [exe, "profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--capture-range=cudaProfilerApi",
            f"--capture-range-end={'repeat' if sampling or repeat else 'stop'}", "--cuda-graph-trace=node",
            "-o", str(lay.nsys_base), "--force-overwrite", "true"]


def worker_command(pfile: Path, done: Path) -> list[str]:
    """The profiled generate's worker (`capture.ncu_worker.worker`, mode nsys): it writes its generate's s to `done`."""
    import sys

    return [sys.executable, "-m", "kernelbook", "_worker", "--params", str(pfile), "--mode", "nsys", "--out", str(done)]


def start_nsys(params: CaptureConfig, run_dir: Path, sampling=None) -> NsysPass:
    """Start the profiled generate under nsys (`nsys_command`) in a worker of its own, which builds and warms up its
    model at once and waits for the go file before its measured generate (`finish_nsys` writes it)."""
    lay = RunLayout(run_dir)
    return _launch(params, lay, nsys_command(lay, sampling) + worker_command(lay.nsys_params, worker_done(lay)),
                   window_starts(sampling.steps) if sampling else None)


def start_capture(params: CaptureConfig, run_dir: Path) -> NsysPass:
    """Start the timeline stage's own process under nsys (`nsys_command`; torch_backend `nsys_capture_worker`): it
    builds and warms up the model at once, then waits for the go file before its plain generates; its profiled
    generate and its shapes pass are one capture range, one report."""
    import sys

    lay = RunLayout(run_dir)
    return _launch(params, lay, nsys_command(lay, repeat=PRIME == "range") + [
        sys.executable, "-m", "kernelbook", "_worker", "--params", str(lay.nsys_params), "--mode", "nsys-capture",
        "--out", str(run_dir)], None)


def _launch(params: CaptureConfig, lay: RunLayout, cmd: list[str], starts: list[int] | None) -> NsysPass:
    """`cmd` (nsys around a kernelbook process) with `--early <go file>:<this pid>`, its output in nsys.log, once the
    parameters are written for it (raw/params.json) and its go and done files are gone; `starts`: its window
    starts (`NsysPass.window_starts`)."""
    import time

    from ..proc import start_limited

    lay.nsys_params.write_text(json.dumps(params.as_dict()))
    worker_done(lay).unlink(missing_ok=True)
    go = lay.nsys_params.with_name("go")
    go.unlink(missing_ok=True)
    with open(lay.nsys_log, "w") as log:
        proc = start_limited(cmd + ["--early", f"{go}:{os.getpid()}"], stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, LAUNCHED: repr(time.time())})
    return NsysPass(proc, lay.root, go, time.perf_counter(), params.capture_timeout_s, starts)


LAUNCHED = "KB_NSYS_LAUNCHED"  # when the stage started nsys (time.time()), for the process's own account of its start


# How the one-process capture primes nsys before its profiled generate: `inline`, a one-token generate inside the
# passes' capture range, before the profiled one (outside the passes' ranges: no table holds it); `range`, a capture
# range of its own around it (its report, <base>.1, is dropped; the passes' report is <base>.2); `none`. Measured on
# the H100 (bench/nsys_ranges.py, bench/measured/nsys_ranges_h100_s26.json): every cudaProfilerStop holds the process
# about 3 s, whatever the range holds (3.0 s after a one-token generate; 7.1-7.6 s after the shapes pass), so a range
# of its own costs the book those seconds, and `inline` primes the same way (the kernels' first traced launches come
# before the profiled generate's) inside the one range. KB_NSYS_PRIME chooses for a bench.
PRIME = os.environ.get("KB_NSYS_PRIME", "inline")


def capture_report(lay: RunLayout) -> Path:
    """The one-process capture's report of its passes (see `PRIME`)."""
    return numbered_report(lay, 2) if PRIME == "range" else lay.nsys_report


def numbered_report(lay: RunLayout, n: int) -> Path:
    """The `n`-th report (from 1) nsys writes under `--capture-range-end=repeat`: <base>.<n>.nsys-rep."""
    return lay.nsys_base.with_name(f"{lay.nsys_base.name}.{n}{NSYS_REPORT}")


# the capture process under nsys marks the lines of its progress so the stage can pass them on from nsys's log
PROGRESS_MARK = "kernelbook: "


def relay(log: Path, progress):
    """A call that passes the progress lines (`PROGRESS_MARK`) written to `log` since the last call on to `progress`."""
    at = [0]

    def more() -> None:
        try:
            with open(log, "rb") as f:
                f.seek(at[0])
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # whole lines only
        at[0] += end
        for line in chunk[:end].decode(errors="replace").splitlines():
            if line.startswith(PROGRESS_MARK):
                progress(line[len(PROGRESS_MARK):])
    return more


def tp_rank_exec(params_file: Path, out: Path) -> None:
    """One torchrun rank of `tp_nsys_timeline`'s profiled pass: this process becomes `nsys profile` around the rank's
    worker (its reports in the rank's raw/, its output in the rank's nsys.log); the worker inherits torchrun's
    rank environment, so it joins the ranks' process group as the rank itself would."""
    import json
    import os

    from ..contract.layout import rank_run, worker_file
    from ..contract.sampling import plan

    params = CaptureConfig.of(json.loads(Path(params_file).read_text()))
    lay = rank_run(out, int(os.environ["RANK"]))
    lay.raw.mkdir(parents=True, exist_ok=True)
    done = worker_file(lay.nsys_params)
    done.unlink(missing_ok=True)
    sampling = plan(params.max_new_tokens, params.sample_window, params.sample_every)
    cmd = nsys_command(lay, sampling) + worker_command(Path(params_file), done)
    log = os.open(lay.nsys_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.execvp(cmd[0], cmd)


def await_worker(proc, done: Path, started: float, timeout_s: float, generated, tick=lambda: None) -> None:
    """Wait for nsys (`proc`) to end, calling `generated()` once, as soon as its worker has written `done` (or when nsys
    ends without it), and `tick()` at every look; at `timeout_s` after `started` nsys and its worker are ended
    (TimeLimitExceeded)."""
    import time

    from ..proc import TimeLimitExceeded, end

    told = False
    try:
        while proc.poll() is None:
            tick()
            if not told and done.exists():
                told = True
                generated()
            if time.perf_counter() - started > timeout_s:
                raise TimeLimitExceeded(f"nsys profile (capture_timeout_s) did not finish within {timeout_s:g} s; "
                                        "it was ended (its process group killed)")
            time.sleep(0.2)
    except BaseException:
        end(proc)
        raise
    tick()
    if not told:
        generated()


def finish_nsys(run: NsysPass, generated=lambda: None):
    """Let the worker's measured generate run (`go`), wait for nsys, export its report(s) to sqlite and read them.
    `generated()` is called as soon as the worker has written its generate's seconds (its GPU work is over; nsys then
    writes its report): the capture's timed passes are over there. Returns (timeline, phases, info: the worker's
    generate s, nsys's wall s, export s, ingest s)."""
    import time

    run.go.write_text("go")
    await_worker(run.proc, worker_done(RunLayout(run.run_dir)), run.started, run.timeout_s, generated)
    wall = time.perf_counter() - run.started
    return read_reports(RunLayout(run.run_dir), run.window_starts, run.timeout_s, run.proc.returncode, wall)


def worker_done(lay: RunLayout) -> Path:
    """Where the nsys worker of the run (or rank) `lay` writes its generate's seconds."""
    from ..contract.layout import worker_file

    return worker_file(lay.nsys_params)


def read_reports(lay: RunLayout, starts: list[int] | None, timeout_s: float, returncode: int, wall_s: float):
    """The report(s) nsys wrote for the run (or rank) `lay`, exported to sqlite and read: (timeline, phases, info).
    `starts`: a sampled generation's window starts (one report each), None for one report of every step;
    `returncode`: nsys's (or torchrun's) exit code; `wall_s`: how long nsys ran."""
    import time

    dbs, export_s = exported(lay, window_reports(lay, starts), timeout_s, returncode)
    t = time.perf_counter()
    if starts is None:
        tl, phases = read_nsys_sqlite(dbs[0])
    else:  # a window's report: decode steps count from its first step (step 0: vision encode and prefill)
        tl, phases = read_nsys_windows(dbs, [max(s, 1) for s in starts])
    return tl, phases, nsys_info(lay, tl, wall_s, export_s, time.perf_counter() - t, len(dbs))


def window_reports(lay: RunLayout, starts: list[int] | None) -> list[Path]:
    """The report(s) nsys writes for the run (or rank) `lay` (see `read_reports`)."""
    if starts is None:
        return [lay.nsys_report]
    return [numbered_report(lay, i) for i in range(1, len(starts) + 1)]


def exported(lay: RunLayout, reports: list[Path], timeout_s: float, returncode: int) -> tuple[list[Path], float]:
    """nsys's reports for the run (or rank) `lay`, each exported to sqlite: (the databases, the export's s). A failed
    nsys, or a report missing, raises with the end of nsys's log."""
    import time

    from ..proc import run_limited

    if returncode != 0 or not all(r.exists() for r in reports):
        got = sorted(p.name for p in lay.raw.glob(f"{lay.nsys_base.name}*{NSYS_REPORT}"))
        tail = lay.nsys_log.read_text(errors="replace").strip().splitlines()[-6:] if lay.nsys_log.exists() else []
        raise RuntimeError(f"nsys profile failed (exit {returncode}; reports {got or 'none'} of {len(reports)} "
                           f"expected); see {lay.rel(lay.nsys_log)}" + "".join(f"\n  | {line}" for line in tail))
    exe = str(find_nsys() or "nsys")
    t = time.perf_counter()
    dbs = []
    for rep in reports:
        db = rep.with_suffix(NSYS_SQLITE)
        exp = run_limited([exe, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(db), str(rep)],
                          timeout_s, "nsys export (capture_timeout_s)", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
        if exp.returncode != 0:
            raise RuntimeError(f"nsys export failed: {exp.stderr.strip()[-400:]}")
        dbs.append(db)
    return dbs, time.perf_counter() - t


def nsys_info(lay: RunLayout, tl: pd.DataFrame, wall_s: float, export_s: float, ingest_s: float, reports: int) -> dict:
    """The nsys pass's record: the profiled generate's s (as its process wrote them), nsys's wall, export and ingest
    s, the kernels and reports read."""
    done = worker_done(lay)
    worker = json.loads(done.read_text()) if done.exists() else {}
    return {"generate_s": worker.get("generate_s", float("nan")),
            "capture_toggle_s": worker.get("capture_toggle_s", 0.0), "nsys_profile_wall_s": wall_s,
            "trace_export_s": export_s, "ingest_s": ingest_s,
            "nsys_kernels": int((tl.kind == "kernel").sum()), "nsys_reports": reports}


# Why `auto` keeps the torch profiler for a decode step replayed as a CUDA graph (a static cache): one launch a step
# leaves the torch profiler little to add, so nsys's lower overhead on eager steps does not carry over. Measured on the
# lent H100 (2026-11-26), profiled ÷ plain generate: torch 0.95x (data/runs/h100-variant-static-graphs) and
# 0.95-1.26x (data/studies/h100-serving, batch 1-32); nsys 1.41x (tests/fixtures/nsys/h100-nsys-graphs, captured when
# the profiled generate ran in a worker that built and compiled the model a second time: runs captured then store
# the reason with that clause, analyze.provenance keeps both forms).
GRAPH_STEP_REASON = ("auto: torch; decode replays a CUDA graph (static cache): measured on the H100, the torch profiler's "
                     "overhead there is no higher than nsys's (0.95-1.26x against 1.41x)")


def pick_backend(choice: str, params: CaptureConfig | None = None, gpu: str | None = None) -> tuple[str, str]:
    """(backend, why) for timeline_backend auto | torch | nsys. `auto` takes nsys where it works, the capture is
    one it runs (no tensor parallelism, no CUDA-graph decode step: `GRAPH_STEP_REASON`) and the GPU's row in
    devices.yaml records its
    overhead measured lower than the torch profiler's (`timeline_overhead`, bench/timeline_overhead.py); else the
    torch profiler, saying why. `gpu`: the device name (this machine's first GPU when not given)."""
    ok, why = nsys_works()
    if choice == "nsys":
        if not ok:
            raise CaptureError(f"timeline_backend: nsys was asked for but {why}")
        return "nsys", "asked for in params"
    if choice == "torch":
        return "torch", "asked for in params"
    if not ok:
        return "torch", f"auto: nsys unusable ({why})"
    if params is not None and params.tensor_parallel > 1:
        return "torch", ("auto: torch; tensor-parallel ranks under nsys take two torchruns (plain generates and the "
                         "shapes pass, then nsys), the torch profiler one: ask for timeline_backend: nsys to get it")
    if params is not None and params.static_cache:
        return "torch", GRAPH_STEP_REASON
    over = _measured_overhead(gpu)
    if over is None:
        return "torch", f"auto: torch; nsys works here ({why}), its overhead against the torch profiler's not yet measured"
    dev, n, t, where = over.device, over.nsys, over.torch, over.where
    if n < t:
        return "nsys", (f"auto: nsys; on {dev} its overhead was measured lower: {n:.2f}x against {t:.2f}x for the "
                        f"torch profiler ({where})")
    return "torch", (f"auto: torch; on {dev} the torch profiler's overhead was measured lower: {t:.2f}x against "
                     f"{n:.2f}x for nsys ({where})")


def _measured_overhead(gpu: str | None):
    """`devices.measured_overhead` for `gpu`, by default the GPU this process sees."""
    from ..devices import measured_overhead

    if gpu is None:
        try:
            import torch

            gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        except Exception:
            gpu = None
    return measured_overhead(gpu)
