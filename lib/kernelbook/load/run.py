"""Load a run directory (the only interface between capture and the chapters)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..contract import layout
from ..contract.layout import NCU_TABLES, NcuDir, RunLayout
from ..contract.manifest import Manifest, read_manifest
from ..params import resolve_path


class RunError(ValueError):
    pass


class RunDamaged(RunError):
    """A run directory whose files contradict the run contract (DESIGN.md): one message naming the file and
    what is wrong with it. The book stops before any chapter runs (exit 2) and writes nothing."""


PHASES = ("vision_encode", "prefill", "decode", "other")
# the columns each table must hold for the chapters to read it: the tables beside the manifest, and those of each
# ncu folder (ncu/, and each rank's ncu/rank<r>/ in a tensor-parallel run; contract.layout names them all)
REQUIRED = {layout.TIMELINE: ("name", "phase", "start_ns", "end_ns", "duration_ns"),
            layout.PHASES: ("phase", "step", "start_ns", "end_ns", "duration_ns"),
            layout.STEPS: ("phase", "step", "wall_ms")}
NCU_REQUIRED = {layout.KERNELS: ("phase", "kernel_id", "name", "status"),
                layout.METRICS: ("result_id", "metric", "value"),
                layout.RESULTS: ("result_id",),
                layout.LAUNCHES: ()}
# the manifest's sections the chapters read by key: each an object where present
SECTIONS = ("environment", "ncu", "timeline_info", "timeline_backend", "clock_state", "timings_s", "measured_peaks")
# columns that hold numbers wherever they appear (a text column there is damage)
NUMERIC = ("start_ns", "end_ns", "duration_ns", "value", "step", "rank", "wall_ms", "trial", "result_id")
# ncu's percentages of peak are differences of sampled counters and read a little below zero on an idle unit:
# the bundled runs hold `.min.pct_of_peak_sustained_elapsed` values down to −1.19 %. A percentage below this
# is no such noise.
PCT_NOISE = 5.0
# ncu/kernels.parquet: the columns that are amounts (times, bytes, FLOPs, rates, counts, shares, percentages of
# peak): never infinite, never negative (percentages: not below −PCT_NOISE). NaN is allowed there: a kernel that
# was not profiled has no counters, and a profiled one lacks what its sections did not measure (its L1
# intensity when it moved no L1 bytes). The in-loop columns (`dram_read_bytes_inloop`: capture.ncu_ranges; older
# runs' `duration_ns_inloop`, ...) are amounts of the same kind, NaN where the in-loop pass did not reach the kernel
# (a launch without an op call to mark, an op call of several kernels). Positions (op_index, launch_index, profiled_step) may be −1 or NaN.
_AMOUNT = re.compile(r"(_ns|_bytes|_per_s|_hz|_gbps|_pct|_size|_per_block|_per_sm)(_inloop)?$|^(flops|intensity_)|"
                     r"^(launches|share|registers|configs_profiled)$")
# ... and those taken from the timeline for every selected kernel, which the chapters rank and sum by
_FROM_TIMELINE = ("total_ns", "launches", "median_ns", "share")


def _read_manifest(p: Path) -> dict:
    mf = RunLayout(p).manifest
    if not mf.exists():
        raise RunError(f"{p} has no manifest.json: not a kernelbook run (or its capture never started)")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise RunDamaged(f"{mf}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise RunDamaged(f"{mf}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except OSError as e:
        raise RunDamaged(f"{mf}: cannot be read ({e.strerror})") from None
    if not isinstance(manifest, dict):
        raise RunDamaged(f"{mf}: expected a JSON object, got {type(manifest).__name__}")
    missing = [k for k in ("status", "params") if k not in manifest]
    if missing:
        raise RunDamaged(f"{mf}: missing key(s) {', '.join(missing)} (a capture writes status and params)")
    if manifest["status"] not in ("complete", "partial"):
        raise RunDamaged(f"{mf}: status is {str(manifest['status'])[:80]!r}, expected 'complete' or 'partial'")
    if not isinstance(manifest["params"], dict):
        raise RunDamaged(f"{mf}: params is {type(manifest['params']).__name__}, expected an object")
    return manifest


def _check_device(mf: Path, manifest: dict, needed: bool) -> None:
    """The run's device as the chapters look it up (`devices.for_run`: the manifest's `device`, else the GPU name
    the capture recorded): `device`, where given, is a row of params/devices.yaml; the GPU name is one where the
    chapters need it (no `device`); and where both name a row, it is the same row. A GPU name devices.yaml does not
    list beside a `device` that names a row is no contradiction: that row stands for the GPU. `needed`: the run
    holds measurements a chapter reads against the device's peaks."""
    from ..devices import DEVICES_YAML, UnknownDeviceError, lookup

    env = manifest.get("environment") or {}
    gpu = env.get("gpu")
    gpu_name = gpu.get("name") if isinstance(gpu, dict) else gpu
    device = manifest.get("device")
    for what, v in (("device", device), ("environment.gpu.name", gpu_name)):
        if v is not None and not isinstance(v, str):
            raise RunDamaged(f"{mf}: {what} is {type(v).__name__}, expected a device name")
    if not device and not gpu_name:
        if needed:
            raise RunDamaged(f"{mf}: names no device (neither `device` nor environment.gpu.name): the chapters "
                             f"cannot tell which GPU's peaks in {DEVICES_YAML} the run is measured against")
        return

    def unknown(what: str, v: str) -> RunDamaged:
        return RunDamaged(f"{mf}: {what} {v[:80]!r} is not a device of {DEVICES_YAML}: add a row for it there (copy "
                          "a row, put this name under `names`, fill its peaks from the vendor's datasheet with a "
                          "`source` note)")

    row = None
    if device:
        try:
            row = lookup(device)
        except UnknownDeviceError:
            raise unknown("device", device) from None
    if gpu_name:
        try:
            gpu_row = lookup(gpu_name)
        except UnknownDeviceError:
            if row is None:
                raise unknown("environment.gpu.name", gpu_name) from None
            return
        if row is not None and row.key != gpu_row.key:
            raise RunDamaged(f"{mf}: device is {device[:40]!r} ({row.display_name}), but the run's GPU "
                             f"(environment.gpu.name) is {gpu_name[:80]!r}, which {DEVICES_YAML.name} maps to "
                             f"{gpu_row.key!r}: the manifest contradicts itself about the device it was measured on")


def _check_measured_peaks(mf: Path, manifest: dict) -> None:
    """`measured_peaks`, where the capture measured them (`measure_peaks`): every number chapters 00 and 04 read
    (a capture writes them all or none; absent or empty: not measured, which the chapters say)."""
    mp = manifest.get("measured_peaks")
    if mp is None or mp == {}:
        return
    for key, parts in (("bf16_gemm_tflops", "bf16_gemm"), ("d2d_copy_gbps", "d2d_copy")):
        v = mp.get(key)
        if not _positive(v):
            raise RunDamaged(f"{mf}: measured_peaks {'lacks ' + key if v is None else f'{key} is {str(v)[:40]!r}'}"
                             f" (a capture that measures the peaks writes it, a number > 0)")
        rec = mp.get(parts)
        if not (isinstance(rec, dict) and _positive(rec.get("trials")) and _positive(rec.get("spread"), at_least=0)):
            raise RunDamaged(f"{mf}: measured_peaks.{parts} lacks its trials and spread (numbers the capture "
                             "writes with the median)")


def _positive(v, at_least: float | None = None) -> bool:
    """`v` is a finite number (not a bool) above 0, or at least `at_least` when given."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return v >= at_least if at_least is not None else v > 0


def _required(rel: str) -> tuple[str, ...]:
    parts = rel.split("/")
    return NCU_REQUIRED.get(parts[-1], ()) if parts[0] == layout.NCU else REQUIRED.get(rel, ())


def _schema(p: Path, rel: str) -> list[str]:
    """The columns of the Parquet table `rel`, or RunDamaged naming it (truncated, not Parquet, a folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = p / rel
    if not f.is_file():
        raise RunDamaged(f"{f}: not a file")
    try:
        meta = pq.read_metadata(f)
        names = meta.schema.to_arrow_schema().names
    except (pa.ArrowException, OSError) as e:
        why = "empty file" if f.stat().st_size == 0 else str(e).splitlines()[0][:160]
        raise RunDamaged(f"{f}: not a readable Parquet table ({why}); the file is truncated or not Parquet") from None
    lacking = [c for c in _required(rel) if c not in names]
    if lacking:
        raise RunDamaged(f"{f}: lacks column(s) {', '.join(lacking)}")
    if meta.num_rows == 0 and rel in (layout.TIMELINE, layout.PHASES):
        raise RunDamaged(f"{f}: has no rows")
    return names


class _Table:
    """Some columns of a run's table, read once: text as Arrow dictionaries (a few distinct names over many rows
    read in a millisecond), numbers as NumPy arrays; what it reads must hold what it should, or RunDamaged."""

    def __init__(self, p: Path, rel: str, columns, names: list[str]):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.f = p / rel
        cols = [c for c in dict.fromkeys(columns) if c in names]
        try:
            text = [c for c, t in zip(names, pq.read_schema(self.f).types)
                    if c in cols and (pa.types.is_string(t) or pa.types.is_large_string(t))]
            # one dictionary per column over its row groups: grouping and taking rows need them alike
            self.t = pq.read_table(self.f, columns=cols, read_dictionary=text).unify_dictionaries()
            self.columns = set(cols)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise RunDamaged(f"{self.f}: its data cannot be read ({str(e).splitlines()[0][:160]}); the file is "
                             "truncated or damaged") from None
        for c in cols:
            if c in NUMERIC:
                self.numbers(c)
        if "phase" in cols:
            bad = sorted(set(map(str, self.t.column("phase").unique().drop_null().to_pylist())) - set(PHASES))
            if bad:
                raise RunDamaged(f"{self.f}: unknown phase(s) {', '.join(repr(b[:40]) for b in bad[:3])}; phases "
                                 f"are {', '.join(PHASES)}")

    def __contains__(self, c: str) -> bool:
        return c in self.columns

    def __len__(self) -> int:
        return self.t.num_rows

    def numbers(self, c: str) -> np.ndarray:
        """Column `c` as int64 or float64 (an empty cell as NaN), or RunDamaged when it holds no numbers."""
        import pyarrow as pa

        col = self.t.column(c)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            kind = col.type.value_type if pa.types.is_dictionary(col.type) else col.type  # text is read as one
            raise RunDamaged(f"{self.f}: column {c} holds {kind} values, expected numbers")
        return col.to_numpy()

    def text(self, c: str, i: int) -> str:
        return str(self.t.column(c)[int(i)].as_py())

    def rows(self, c: str, bad: np.ndarray, what: str, why: str, label=None, values=None) -> None:
        """RunDamaged naming the first row where `bad` holds: '<file>: column <c>, row <i>: <what> (<value>)'."""
        idx = np.flatnonzero(bad)
        if not len(idx):
            return
        i = int(idx[0])
        v = (self.numbers(c) if values is None else values)[i]
        more = f" (and {len(idx) - 1} more row{'s' if len(idx) > 2 else ''})" if len(idx) > 1 else ""
        of = f" of {label(i)}" if label else ""
        shown = "" if v != v else f" ({_num(v)})"  # NaN: `what` says it
        raise RunDamaged(f"{self.f}: column {c}, row {i}{of}: {what}{shown}{more}; {why}")

    def finite(self, c: str, why: str, low: float | None = None, missing_ok: bool = False, label=None) -> None:
        """Column `c` (when the table has it) holds finite numbers, none below `low`; NaN where `missing_ok`."""
        if c not in self:
            return
        v = self.numbers(c)
        if v.dtype.kind == "f":
            if not missing_ok:
                self.rows(c, np.isnan(v), "empty or NaN", why, label, v)
            self.rows(c, np.isinf(v), "infinite", why, label, v)
        if low is not None:
            self.rows(c, v < low, "negative" if low == 0 else f"below {low:g}", why, label, v)


def _num(v) -> str:
    if v != v:
        return "NaN"
    return f"{v:g}" if isinstance(v, (float, np.floating)) else str(v)


def _intervals(tab: _Table, what: str) -> None:
    """start_ns, end_ns and duration_ns: finite, duration ≥ 0, and end − start = duration (every writer computes
    one from the others: a row where they disagree was changed after the capture)."""
    why = f"{what}: start_ns, end_ns and duration_ns are finite ns, duration_ns = end_ns − start_ns ≥ 0"
    label = (lambda i: repr(tab.text("name", i)[:60])) if "name" in tab else None
    for c in ("start_ns", "end_ns"):
        tab.finite(c, why, label=label)
    tab.finite("duration_ns", why, low=0, label=label)
    s, e, d = (tab.numbers(c) for c in ("start_ns", "end_ns", "duration_ns"))
    if "f" in (s.dtype.kind, e.dtype.kind, d.dtype.kind):  # float ns near 2^52 hold whole ns only
        s, e, d = s.astype("float64"), e.astype("float64"), d.astype("float64")
    tab.rows("duration_ns", np.abs((e - s) - d) > 1, "not end_ns − start_ns", why, label, d)


def _check_timeline(p: Path, names: list[str]) -> _Table:
    tl = _Table(p, layout.TIMELINE, ["name", "phase", "start_ns", "end_ns", "duration_ns", "step", "rank"], names)
    _intervals(tl, "a kernel's times")
    # launch_ns (the CPU launch) is not read here: NaN there is a GPU event without a launch record, which the
    # timeline places by its GPU start
    tl.finite("step", "a step is a whole number (−1 outside the phases)")
    tl.finite("rank", "a rank is a whole number ≥ 0", low=0)
    return tl


def _check_phases(p: Path, names: list[str]) -> None:
    """phases.parquet: valid intervals, and the phase ranges of one rank do not overlap. Prefill and decode
    steps follow each other (ends may touch); a vision_encode range nests inside the prefill range that runs it
    (the processor's encoder inside the first forward) or lies outside every other range, never across one."""
    ph = _Table(p, layout.PHASES, ["phase", "step", "start_ns", "end_ns", "duration_ns", "rank"], names)
    _intervals(ph, "a phase's range")
    ph.finite("step", "a step is a whole number")
    ph.finite("rank", "a rank is a whole number ≥ 0", low=0)
    phase = np.array(ph.t.column("phase").to_pylist(), dtype=object)
    s, e = ph.numbers("start_ns"), ph.numbers("end_ns")
    rank = ph.numbers("rank") if "rank" in ph else np.zeros(len(ph), dtype="int64")

    def where(i: int) -> str:
        return f"{phase[i]} step {ph.text('step', i)} (row {i})"

    for r in np.unique(rank):
        mine = np.flatnonzero(rank == r)
        top = mine[phase[mine] != "vision_encode"]
        vision = mine[phase[mine] == "vision_encode"]
        for group in (top, vision):
            g = group[np.argsort(s[group], kind="stable")]
            if len(g) < 2:
                continue
            reach = np.maximum.accumulate(e[g])[:-1]  # the latest end among the ranges that start earlier
            over = np.flatnonzero(s[g[1:]] < reach)
            if len(over):
                j = g[over[0] + 1]
                i = g[: over[0] + 1][np.argmax(e[g[: over[0] + 1]])]
                _overlap(ph.f, where(i), where(j), min(e[i], e[j]) - s[j], r, "rank" in ph)
        for j in vision:
            across = top[(s[top] < e[j]) & (s[j] < e[top]) & ~((s[top] <= s[j]) & (e[j] <= e[top]))]
            if len(across):
                i = across[0]
                _overlap(ph.f, where(i), where(j), min(e[i], e[j]) - max(s[i], s[j]), r, "rank" in ph)


def _overlap(f: Path, a: str, b: str, by_ns, rank, ranked: bool) -> None:
    raise RunDamaged(f"{f}: columns start_ns/end_ns: {b} overlaps {a} by {by_ns / 1e6:.3f} ms"
                     f"{f' on rank {rank}' if ranked else ''}; the phases of one rank follow each other (their ends "
                     "may touch), and a vision_encode range lies inside the prefill that runs it or apart from it")


def _check_steps(p: Path, names: list[str]) -> None:
    st = _Table(p, layout.STEPS, ["phase", "step", "wall_ms", "trial"], names)
    st.finite("wall_ms", "a plain step's wall time is a finite number of ms ≥ 0", low=0)
    st.finite("step", "a step is a whole number")
    st.finite("trial", "a timing trial is a whole number ≥ 0", low=0)


def _check_ncu(p: Path, folder: str, columns: dict, tl: _Table | None, complete: bool) -> None:
    """One ncu folder (ncu/, or ncu/rank<r>/ of a tensor-parallel run): each table it holds, and how they refer
    to each other and to the timeline. `columns`: each table's columns by its path in the run (`_schema`)."""
    rel = {t: f"{folder}/{t}" for t in NCU_TABLES if f"{folder}/{t}" in columns}
    names = {t: columns[r] for t, r in rel.items()}
    results = None
    if layout.RESULTS in rel:
        res = _Table(p, rel[layout.RESULTS], ["result_id"], names[layout.RESULTS])
        res.finite("result_id", "a result id is a whole number ≥ 0", low=0)
        rid = res.numbers("result_id")
        res.rows("result_id", _duplicated(rid), "a result id again", "each profiled launch has one id")
        results = set(rid.tolist())
    if layout.METRICS in rel:
        _check_metrics(p, rel[layout.METRICS], names[layout.METRICS], results)
    if layout.KERNELS in rel:
        k = _check_kernels(p, rel[layout.KERNELS], names[layout.KERNELS], results)
        if tl is not None:
            _kernels_ran(p / rel[layout.KERNELS], k, tl)
        if layout.LAUNCHES in rel and complete:  # a partial ncu stage may end between its files
            lp = _Table(p, rel[layout.LAUNCHES], ["kernel_id", "result_id"], names[layout.LAUNCHES])
            lp.finite("result_id", "a launch's result id is a whole number (−1: not profiled)", low=-1)
            if "kernel_id" in lp:
                ids = set(lp.t.column("kernel_id").unique().drop_null().to_pylist()) - set(k["kernel_id"])
                if ids:
                    raise RunDamaged(f"{lp.f}: kernel id(s) {', '.join(sorted(map(str, ids))[:3])} are not in "
                                     f"kernels.parquet")


def _duplicated(v: np.ndarray) -> np.ndarray:
    """True on each value's second and later rows."""
    first = np.zeros(len(v), dtype=bool)
    first[np.unique(v, return_index=True)[1]] = True
    return ~first


def _check_metrics(p: Path, rel: str, names: list[str], results: set | None) -> None:
    """ncu/metrics.parquet: one row per metric ncu measured for a result (the reader leaves out a metric ncu has no
    value for, so NaN is never a measurement here), each value finite; never negative but for ncu's percentages
    of peak (noise a little below 0, `PCT_NOISE`) and the NUMA ids a device attribute reads −1 where the host has
    no NUMA node (CUDA's `CU_DEVICE_ATTRIBUTE_*NUMA_ID`)."""
    m = _Table(p, rel, ["result_id", "metric", "unit", "value"], names)
    v = m.numbers("value")

    def label(i: int) -> str:
        return f"{m.text('metric', i)[:80]!r} (result {m.text('result_id', i)})"

    why = "an ncu counter is a finite number"
    m.finite("result_id", "a result id is a whole number ≥ 0", low=0)
    m.finite("value", why, label=label)
    neg = np.flatnonzero(v < 0)
    if len(neg):
        metric = m.t.column("metric").take(neg).to_pylist()
        unit = m.t.column("unit").take(neg).to_pylist() if "unit" in m else [None] * len(neg)
        pct = np.array([u == "%" or (u is None and "pct" in n) for n, u in zip(metric, unit)], dtype=bool)
        numa = np.array(["numa" in n for n in metric], dtype=bool)
        wrong = ~numa & (~pct | (v[neg] < -PCT_NOISE))
        bad = np.zeros(len(v), dtype=bool)
        bad[neg[wrong]] = True
        m.rows("value", bad, "negative", f"{why} ≥ 0 (a percentage of peak: ≥ −{PCT_NOISE:g})", label, v)
    if results is not None:
        rid = m.numbers("result_id")
        m.rows("result_id", ~np.isin(rid, list(results)), "not a result of results.parquet",
               "the two tables come from one ncu report", values=rid)


def _check_kernels(p: Path, rel: str, names: list[str], results: set | None) -> dict:
    """ncu/kernels.parquet: one row per selected kernel, its id unique; amounts finite where present and never
    negative (`_AMOUNT`), those from the timeline always present. Returns its kernel_id, name and phase columns."""
    amounts = [c for c in names if _AMOUNT.search(c)]
    k = _Table(p, rel, ["kernel_id", "name", "phase", "result_id", *amounts], names)
    ids = k.t.column("kernel_id").to_pylist()
    kid = np.array([str(i) for i in ids], dtype=object)
    k.rows("kernel_id", np.array([i is None for i in ids], dtype=bool), "empty", "every selected kernel has an id",
           values=kid)
    first = {}
    for i, x in enumerate(kid):
        if x in first:
            raise RunDamaged(f"{k.f}: column kernel_id, row {i}: {x[:40]!r} again (first at row {first[x]}); "
                             "each kernel id names one kernel")
        first[x] = i

    def label(i: int) -> str:
        return f"kernel {kid[i][:40]!r}"

    for c in amounts:
        pct = c.endswith("_pct")
        k.finite(c, f"{c} is a finite number ≥ {-PCT_NOISE:g}" if pct else f"{c} is a finite number ≥ 0",
                 low=-PCT_NOISE if pct else 0, missing_ok=c not in _FROM_TIMELINE, label=label)
    if "result_id" in k:
        k.finite("result_id", "a profiled kernel's result id is a whole number ≥ 0", low=0, missing_ok=True,
                 label=label)
        if results is not None:
            rid = k.numbers("result_id")
            k.rows("result_id", ~np.isnan(rid.astype("float64")) & ~np.isin(rid, list(results)),
                   "not a result of results.parquet", "the two tables come from one ncu report", label, rid)
    return {"kernel_id": kid, "name": k.t.column("name").to_pylist(), "phase": k.t.column("phase").to_pylist()}


def _kernels_ran(kp: Path, k: dict, tl: _Table) -> None:
    """Every kernel of the ncu table ran in the timeline, by name and phase."""
    pairs = tl.t.select(["phase", "name"]).group_by(["phase", "name"]).aggregate([])  # a few hundred distinct
    ran = set(zip(pairs.column("phase").to_pylist(), pairs.column("name").to_pylist()))
    lost = [i for i, (ph, n) in enumerate(zip(k["phase"], k["name"])) if (ph, n) not in ran]
    if lost:
        i = lost[0]
        raise RunDamaged(f"{kp}: kernel {str(k['kernel_id'][i])[:40]} ({str(k['name'][i])[:60]!r}, {k['phase'][i]}) "
                         f"is not in timeline.parquet{f' (and {len(lost) - 1} more)' if len(lost) > 1 else ''}: "
                         "the ncu tables belong to another run")


def check_run(path: str | Path) -> dict:
    """The run's manifest after checking the run against its contract, or RunDamaged (RunError when the
    folder is no run at all) with one message naming the file and what is wrong (for a table: its column
    and first bad row). It reads every table a chapter reads, only the columns it checks:

    - manifest.json: valid UTF-8 JSON, an object with `status` (complete | partial) and `params`, its sections
      objects (`SECTIONS`); a device the chapters can price (`_check_device`: `device` a row of
      params/devices.yaml, else the GPU's name one, the two never naming different rows), present in a run
      that holds measurements; `measured_peaks` whole where present;
    - each table present: a readable Parquet file with its columns (`REQUIRED`), numbers where numbers
      belong and known phases; timeline and phases not empty;
    - a complete run holds every part its parameters asked for (timeline and phases; ncu tables unless
      captured with `ncu_top_n: 0`), and a partial one the phases beside its timeline;
    - timeline.parquet and phases.parquet: finite times, durations ≥ 0 and end − start = duration; the phase
      ranges of one rank do not overlap (`_check_phases`); steps.parquet: finite plain step times ≥ 0;
    - each ncu folder (ncu/, ncu/rank<r>/): kernel ids unique, amounts finite and ≥ 0 (`_check_kernels`),
      counters finite and ≥ 0 but for ncu's own noise (`_check_metrics`), result ids unique and shared by
      the tables; every kernel in the ncu tables ran in the timeline (by name and phase), and in a complete
      run every ncu launch names a kernel of the ncu kernel table."""
    p = resolve_path(path)
    if not p.is_dir():
        raise RunError(f"{p} is not a folder: no run there")
    manifest = _read_manifest(p)
    lay = RunLayout(p)
    mf = lay.manifest
    has_tl = lay.timeline.exists()
    complete = manifest["status"] == "complete"
    if complete:
        asked = [lay.timeline, lay.phases]
        prm = manifest["params"]
        if prm.get("ncu_top_n", 0) and prm.get("ncu_phases", ["decode"]):
            asked += [lay.ncu_kernels(), lay.ncu_metrics()]
        lacking = [lay.rel(a) for a in asked if not a.exists()]
        if lacking:
            raise RunDamaged(f"{mf}: says the run is complete, but {', '.join(lacking)} "
                             f"{'is' if len(lacking) == 1 else 'are'} missing")
    elif has_tl and not lay.phases.exists():
        raise RunDamaged(f"{lay.phases}: missing beside {layout.TIMELINE}")
    for key in SECTIONS:
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            raise RunDamaged(f"{mf}: {key} is {type(manifest[key]).__name__}, expected an object (the chapters read "
                             "its keys)")
    _check_device(mf, manifest, needed=complete or has_tl)
    _check_measured_peaks(mf, manifest)
    folders = lay.ncu_folders()
    tables = [layout.TIMELINE, layout.PHASES, layout.STEPS, *(f"{d}/{t}" for d in folders for t in NCU_TABLES)]
    # every table readable, with its columns, before any content is judged
    names = {rel: _schema(p, rel) for rel in tables if (p / rel).exists()}
    tl = _check_timeline(p, names[layout.TIMELINE]) if has_tl else None
    if layout.PHASES in names:
        _check_phases(p, names[layout.PHASES])
    if layout.STEPS in names:
        _check_steps(p, names[layout.STEPS])
    for folder in folders:
        _check_ncu(p, folder, names, tl, complete)
    return manifest


@dataclass
class Run:
    path: Path
    manifest: dict
    timeline: pd.DataFrame
    phases: pd.DataFrame
    rank: int = 0  # the rank `timeline` and `phases` hold (a tensor-parallel run holds one table per rank)
    ranks_timeline: pd.DataFrame | None = None  # every rank's rows, with a `rank` column (None: one GPU)
    ranks_phases: pd.DataFrame | None = None

    @property
    def ranks(self) -> list[int]:
        return [0] if self.ranks_timeline is None else sorted(self.ranks_timeline["rank"].unique().tolist())

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def info(self) -> Manifest:
        """The manifest, typed (`contract.manifest`). Read from `manifest` at each use: the dict stays the source
        while capture and chapter 00's parameter table still read it by key."""
        return read_manifest(self.manifest)

    @property
    def gpu_name(self) -> str:
        return self.info.gpu_name

    @property
    def ncu_dir(self) -> Path:
        """This rank's ncu tables: ncu/ (rank 0, or a one-GPU run), ncu/rank<r>/ for another rank."""
        return RunLayout(self.path).ncu_dir(self.rank)

    def ncu_kernels(self) -> pd.DataFrame | None:
        p = NcuDir(self.ncu_dir).kernels
        return read_table(p) if p.exists() else None  # names cut as the timeline's are

    def ncu_ranges(self) -> pd.DataFrame | None:
        """The range pass's measured ranges (capture.ncu_ranges `RANGE_COLUMNS`: the decode step whole, and each
        profiled kernel's pair and producer), or None where the run has no range pass."""
        p = NcuDir(self.ncu_dir).ranges
        return pd.read_parquet(p) if p.exists() else None

    def ncu_metrics(self) -> pd.DataFrame | None:
        p = NcuDir(self.ncu_dir).metrics
        return pd.read_parquet(p) if p.exists() else None

    def ncu_results(self) -> pd.DataFrame | None:
        """One row per profiled launch (result_id, name, grid, block; `rules` in captures that keep
        NVIDIA's rule results), or None without an ncu stage."""
        p = NcuDir(self.ncu_dir).results
        return read_table(p) if p.exists() else None

    def steps(self) -> pd.DataFrame | None:
        """Every plain step's wall time (trial, phase, step, wall_ms: ms), or None for a run captured before steps
        were timed. A tensor-parallel run holds rank 0's, which stand for the run."""
        p = RunLayout(self.path).steps
        return pd.read_parquet(p) if p.exists() else None


def load_run(path: str | Path, require_timeline: bool = True, rank: int = 0) -> Run:
    """Manifest, timeline and phases of a run; kernel identity recomputed so that naming improvements
    apply to old runs without a new capture. `require_timeline=False`: a run holding only its manifest
    (chapter 00 while the capture chapters after it have not run yet) loads with empty tables. A
    tensor-parallel run's tables hold every rank: `timeline` and `phases` are `rank`'s, every chapter reads
    those, and `ranks_timeline` / `ranks_phases` keep all of them for the cross-rank analysis."""
    p = resolve_path(path)
    key, sig = (p, require_timeline, rank), _signature(p)
    hit = _LOADED.get(key)
    if hit is None or hit[0] != sig:
        _LOADED[key] = (sig, _load_run(p, require_timeline, rank))
        while len(_LOADED) > 8:
            _LOADED.pop(next(iter(_LOADED)))
    return _fresh(_LOADED[key][1])


# Runs loaded in this process, by (path, require_timeline, rank), with the files' signature they were read
# with: chapter 07 reads its baseline once per variant and the what-if once per run; a file changed since is
# read anew. Callers get their own Run (a new manifest, tables copied on write), never the cached one.
_LOADED: dict = {}


def _signature(p: Path) -> tuple:
    """(relative path, mtime, size) of every file in the run directory."""
    return tuple(sorted((str(f.relative_to(p)), st.st_mtime_ns, st.st_size)
                        for f in p.rglob("*") if f.is_file() and (st := f.stat())))


def _fresh(run: Run) -> Run:
    import copy

    def cp(df):
        return None if df is None else df.copy(deep=False)  # copy-on-write: a change never reaches the cache

    return Run(run.path, copy.deepcopy(run.manifest), cp(run.timeline), cp(run.phases), run.rank,
               cp(run.ranks_timeline), cp(run.ranks_phases))


def _load_run(p: Path, require_timeline: bool, rank: int) -> Run:
    from ..contract.kernels import annotate

    manifest = check_run(p)
    lay = RunLayout(p)
    tl = lay.timeline
    if not tl.exists() and not require_timeline:
        return Run(p, manifest, pd.DataFrame(), pd.DataFrame())
    if not tl.exists():
        raise RunError(f"{p} has no {layout.TIMELINE} (status: {manifest.get('status')}, "
                       f"reason: {manifest.get('reason', '-')})")
    timeline = annotate(read_table(tl))
    phases = pd.read_parquet(lay.phases)
    if "rank" not in timeline:
        if rank != 0:
            raise RunError(f"rank: {rank} asked for, but {p.name} is a one-GPU run (rank 0 only)")
        return Run(p, manifest, timeline, phases)
    have = sorted(timeline["rank"].unique().tolist())
    if rank not in have:
        raise RunError(f"rank: {rank} asked for, but {p.name} holds ranks {have}")
    return Run(p, manifest, timeline[timeline["rank"] == rank].reset_index(drop=True),
               phases[phases["rank"] == rank].reset_index(drop=True), rank, timeline, phases)


# The longest name a table keeps, in characters. Real names stay whole: the longest in the bundled runs are
# 1.3 k (a timeline kernel) and 2.9 k (ncu's own name for it, `ncu_name`); a CUTLASS template name is a few
# thousand. A longer one (a generated or hostile name: one of 100 k characters took 6 GB of memory to render)
# keeps its head and a hash of the whole name, so two names alike up to the limit stay two kernels.
NAME_LIMIT = 4096
# the columns that hold names given by whatever ran on the GPU (kernels, ncu's name and function, aten ops,
# modules) and those the capture derived from them; cut alike in every table (`read_table`), so that joins by
# name (timeline ↔ ncu tables) still meet
NAME_COLUMNS = ("name", "ncu_name", "function", "op", "module", "module_class", "short_name", "friendly_name")


def cut_name(name: str, limit: int = NAME_LIMIT) -> str:
    """`name` itself when it holds at most `limit` characters, else its head, '…' and 12 hex digits of its
    BLAKE2b hash, `limit` characters in all: the same name always cuts the same, two differ when the names do."""
    if len(name) <= limit:
        return name
    import hashlib

    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{name[:limit - len(digest) - 1]}…{digest}"


def read_table(f: Path, columns: list[str] | None = None, limit: int = NAME_LIMIT) -> pd.DataFrame:
    """The Parquet table `f` (its `columns`, default all) with the values `pd.read_parquet` gives, two things
    apart, both for memory:

    - every name in `NAME_COLUMNS` cut to `limit` characters (`cut_name`);
    - text columns hold one Python string per distinct value, shared by the rows that hold it (dtype object,
      NaN where empty), not a copy of the text per row: a timeline of 10⁶ rows names a few hundred kernels.

    Text is read as a dictionary, so a long name is read, cut and stored once, whatever its number of rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(f)
    text = [c for c in (schema.names if columns is None else columns) if c in schema.names
            and (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))]
    df = pq.read_table(f, columns=columns, read_dictionary=text).to_pandas()
    for c in text:
        cat = df[c].array  # a Categorical: the distinct values and a code per row (−1 where empty)
        values = [v if len(v) <= limit or c not in NAME_COLUMNS else cut_name(v, limit) for v in cat.categories]
        df[c] = pd.Series(np.array([*values, np.nan], dtype=object)[cat.codes], index=df.index, dtype=object)
    return df
