"""Where each artifact of a run directory lies: the one place that names a run's files (DESIGN.md, "Run directory
contract"). Capture writes through it, load reads through it; no other module spells an artifact's name
(tests/test_layout.py holds the package to that).

    <run>/manifest.json             parameters, environment, status; written last and atomically (.manifest.json.tmp)
    <run>/timeline.parquet          one row per GPU event (a tensor-parallel run: every rank, a `rank` column)
    <run>/phases.parquet            the wall-clock range of every phase step
    <run>/steps.parquet             every plain step's wall ms (runs captured before it lack it)
    <run>/capture-error.txt         the traceback of a capture that landed partial
    <run>/raw/                      trace files: trace.json.gz, trace-shapes.json.gz (torch.profiler; a sampled
                                    window's trace-w<i>.json is read and deleted), timeline.nsys-rep / .sqlite
                                    (timeline.<n>.* where nsys wrote a report per capture range: a sampled
                                    long generation's windows, or a bench's `KB_NSYS_PRIME=range`),
                                    nsys.log, params.json and capture-info.json (nsys); tp-params.json and
                                    rank<r>/ (tensor parallel: each rank's tables, shaped like a run, with its
                                    info.json)
    <run>/ncu/                      rank 0's (or a one-GPU run's) ncu tables: kernels, metrics, results, launches
                                    (.parquet); params.json, targets.json (+ .seen.json, .worker.json) for its worker;
                                    ncu.ncu-rep / ncu.log (by op call) or <phase>.ncu-rep / <phase>.log (by name)
    <run>/ncu/rank<r>/              the same for rank r ≥ 1
    <run>/.timeline-staging/        the timeline part being captured (shaped like a run), moved in when done
    <run>/.ncu-staging/             the ncu part being captured (its timeline copy, its ncu/), moved in when done
    <run>/.ncu-rank<r>/             tensor parallel: rank r's ncu stage (its timeline, its ncu/, launch.json)
    <parent>/.<run>.tmp-<pid>/      a whole capture (`python -m kernelbook capture`) before it is renamed to <run>

A study folder (`kernelbook study`) holds `study.json` (its manifest: points, status, GPU), `runs/<point>/` (one
run each; an earlier partial attempt kept as `runs/<point>.attempt-<n>/`) and `points/<point>.yaml` and
`.stderr` (what each capture was given and said); `StudyLayout(root)` names them.

`RunLayout(root)` gives every path of one run; `NcuDir(path)` those of one ncu folder. The bare names (`MANIFEST`,
`TIMELINE`, …) are for code that names a table in a message or compares names. Nothing here reads a file's
content: that is load/'s job; this module lists, at most, which files exist.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
TIMELINE = "timeline.parquet"
PHASES = "phases.parquet"
STEPS = "steps.parquet"
RUN_TABLES = (TIMELINE, PHASES, STEPS)  # the tables beside the manifest
CAPTURE_ERROR = "capture-error.txt"
RAW = "raw"
NCU = "ncu"
TABLE_SUFFIX = ".parquet"  # every table of a run is Parquet

KERNELS = "kernels.parquet"
METRICS = "metrics.parquet"
RESULTS = "results.parquet"
LAUNCHES = "launches.parquet"
NCU_TABLES = (KERNELS, METRICS, RESULTS, LAUNCHES)  # the tables of each ncu folder
NCU_REPORT = ".ncu-rep"  # the suffix ncu gives the report named by `-o <base>`
NCU_BASE = "ncu"  # the report's base name when one ncu process profiles by op call (`<base>.ncu-rep`)
INLOOP = "inloop"  # the range pass's report (capture.ncu_ranges): `inloop.ncu-rep`
RANGES = "ranges"  # the range pass (capture.ncu_ranges): `ranges.json` for the worker, `ranges.parquet` measured
READER_METRICS = ".read_metrics.parquet"  # the ncu report reader's scratch output (load.ncu, in its work folder)
READER_RESULTS = ".read_results.parquet"

TIMELINE_STAGING = ".timeline-staging"
NCU_STAGING = ".ncu-staging"

NSYS_BASE = "timeline"  # raw/timeline.nsys-rep, raw/timeline.sqlite
NSYS_REPORT = ".nsys-rep"
NSYS_SQLITE = ".sqlite"
TRACE = "trace"  # raw/trace.json(.gz): the timeline pass's torch.profiler trace
TRACE_SHAPES = "trace-shapes"  # raw/trace-shapes.json(.gz): the shapes pass's


def rank_folder(rank: int) -> str:
    """The folder of rank `rank` ≥ 1 inside ncu/ or raw/: `rank<r>`."""
    return f"rank{rank}"


def landing(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: `.<name>.tmp` beside it (a reader never sees half
    a file)."""
    return path.with_name(f".{path.name}.tmp")


def capture_staging(out_dir: Path, pid: int | None = None) -> Path:
    """The hidden folder a whole capture writes before it is renamed to `out_dir`: `.<name>.tmp-<pid>` beside it."""
    return out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid() if pid is None else pid}")


def report_file(base: Path) -> Path:
    """The `.ncu-rep` ncu writes for `-o <base>`."""
    return base.with_suffix(NCU_REPORT)


def log_file(base: Path) -> Path:
    """The log beside the report `base` (`<base>.log`)."""
    return base.with_suffix(".log")


def seen_file(targets: Path) -> Path:
    """The op calls the ncu worker marked, beside its targets file (`targets.seen.json`)."""
    return targets.with_suffix(".seen.json")


def worker_file(targets: Path) -> Path:
    """How the ncu worker ran the workload, beside its targets file (`targets.worker.json`)."""
    return targets.with_suffix(".worker.json")


def trace_json(base: Path) -> Path:
    """The torch.profiler trace exported for the trace `base` (raw/trace → raw/trace.json; gzip makes it
    .json.gz)."""
    return base.with_suffix(".json")


def window_json(base: Path, window: int) -> Path:
    """The trace of a sampled generation's window `window` (raw/trace-w<i>.json, read then deleted)."""
    return base.with_name(f"{base.name}-w{window}.json")


def is_table(name: str) -> bool:
    """Whether a file name is a table's (Parquet)."""
    return name.endswith(TABLE_SUFFIX)


@dataclass(frozen=True)
class NcuDir:
    """One ncu folder: ncu/ (rank 0) or ncu/rank<r>/."""

    path: Path

    @property
    def kernels(self) -> Path:
        return self.path / KERNELS

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def launches(self) -> Path:
        return self.path / LAUNCHES

    @property
    def params(self) -> Path:
        """The capture's parameters, as the ncu worker reads them."""
        return self.path / "params.json"

    @property
    def targets(self) -> Path:
        """The launches the worker marks for ncu (by op call), written whole (`landing`) before it is read."""
        return self.path / "targets.json"

    @property
    def targets_tmp(self) -> Path:
        return self.targets.with_suffix(".json.tmp")

    @property
    def targets_seen(self) -> Path:
        return seen_file(self.targets)

    @property
    def worker_run(self) -> Path:
        return worker_file(self.targets)

    def report(self, name: str = NCU_BASE) -> Path:
        """The base path ncu's `-o` takes (ncu adds `.ncu-rep`): `ncu` for the process that profiles by op call,
        the phase's name for one that profiles a phase by name."""
        return self.path / name

    def inloop_report(self, phase: str | None = None) -> Path:
        """The base path of the range pass's report (capture.ncu_ranges); `phase`: older runs' per-phase pass."""
        return self.path / (INLOOP if phase is None else f"{phase}-{INLOOP}")

    @property
    def ranges_targets(self) -> Path:
        """The ranges the worker wraps in cudaProfilerStart/Stop for the range pass (capture.ncu_ranges)."""
        return self.path / f"{RANGES}.json"

    @property
    def ranges(self) -> Path:
        """The range pass's measured ranges, one row each (capture.ncu_ranges `RANGE_COLUMNS`)."""
        return self.path / f"{RANGES}{TABLE_SUFFIX}"

    def table(self, name: str) -> Path:
        """The table `name` ("kernels", "metrics", "results", "launches")."""
        return self.path / f"{name}{TABLE_SUFFIX}"


@dataclass(frozen=True)
class _Rooted:
    """A folder's layout: every path below `root` (which need not exist yet), `root` a Path whatever it was given as."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))


@dataclass(frozen=True)
class RunLayout(_Rooted):
    """Every path of the run directory `root` (which need not exist yet)."""

    @classmethod
    def holding(cls, raw_file: Path) -> "RunLayout":
        """The run whose raw/ folder holds `raw_file`."""
        return cls(Path(raw_file).parent.parent)

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def manifest_tmp(self) -> Path:
        """Where the manifest is written before it is renamed into place."""
        return landing(self.manifest)

    @property
    def timeline(self) -> Path:
        return self.root / TIMELINE

    @property
    def phases(self) -> Path:
        return self.root / PHASES

    @property
    def steps(self) -> Path:
        return self.root / STEPS

    @property
    def capture_error(self) -> Path:
        return self.root / CAPTURE_ERROR

    @property
    def raw(self) -> Path:
        return self.root / RAW

    @property
    def timeline_staging(self) -> Path:
        return self.root / TIMELINE_STAGING

    @property
    def ncu_staging(self) -> Path:
        return self.root / NCU_STAGING

    def rel(self, path: Path) -> str:
        """`path` relative to the run, as messages name it (`ncu/kernels.parquet`)."""
        return Path(path).relative_to(self.root).as_posix()

    # ncu, per rank
    def ncu_dir(self, rank: int = 0) -> Path:
        """Rank `rank`'s ncu tables: ncu/ for rank 0 (and a one-GPU run), ncu/rank<r>/ for another rank."""
        return self.root / NCU if rank == 0 else self.root / NCU / rank_folder(rank)

    def ncu(self, rank: int = 0) -> NcuDir:
        return NcuDir(self.ncu_dir(rank))

    def ncu_kernels(self, rank: int = 0) -> Path:
        return self.ncu(rank).kernels

    def ncu_metrics(self, rank: int = 0) -> Path:
        return self.ncu(rank).metrics

    def ncu_results(self, rank: int = 0) -> Path:
        return self.ncu(rank).results

    def ncu_launches(self, rank: int = 0) -> Path:
        return self.ncu(rank).launches

    def ncu_folders(self) -> list[str]:
        """Every folder under ncu/ (itself included) that holds an ncu table, relative to the run, sorted."""
        return sorted({str(f.parent.relative_to(self.root)) for t in NCU_TABLES
                       for f in self.root.glob(f"{NCU}/**/{t}")})

    def table_files(self) -> list[Path]:
        """Every Parquet table of the run: beside the manifest (sorted), then under ncu/ (sorted; a folder named
        like a table counts too). The walk below ncu/ follows no link, so a link loop cannot keep it walking."""
        files = sorted(self.root.glob(f"*{TABLE_SUFFIX}"))
        ncu = self.root / NCU
        if ncu.is_dir():
            files += sorted(Path(d) / n for d, dirs, names in os.walk(ncu) for n in dirs + names if is_table(n))
        return files

    # the capture's staging
    def tp_ncu_stage(self, rank: int) -> "RunLayout":
        """Tensor parallel: where rank `rank`'s ncu stage runs, shaped like a run (`.ncu-rank<r>/`)."""
        return RunLayout(self.root / f".ncu-{rank_folder(rank)}")

    @property
    def tp_launch(self) -> Path:
        """Tensor parallel, in a rank's ncu stage: which rank runs under ncu and the commands (`launch.json`)."""
        return self.root / "launch.json"

    # raw/
    def trace_base(self, shapes: bool = False) -> Path:
        """raw/trace (the timeline pass) or raw/trace-shapes (the shapes pass); see `trace_json`."""
        return self.raw / (TRACE_SHAPES if shapes else TRACE)

    @property
    def nsys_params(self) -> Path:
        return self.raw / "params.json"

    @property
    def nsys_base(self) -> Path:
        """The base nsys's `-o` takes: raw/timeline (.nsys-rep, exported to .sqlite)."""
        return self.raw / NSYS_BASE

    @property
    def nsys_report(self) -> Path:
        return self.nsys_base.with_suffix(NSYS_REPORT)

    @property
    def nsys_sqlite(self) -> Path:
        return self.nsys_base.with_suffix(NSYS_SQLITE)

    @property
    def nsys_log(self) -> Path:
        return self.raw / "nsys.log"

    @property
    def nsys_capture_info(self) -> Path:
        """The one-process nsys capture's record of its workload and plain generates, written by the process under
        nsys for the stage that reads its report (raw/capture-info.json)."""
        return self.raw / "capture-info.json"

    @property
    def tp_params(self) -> Path:
        """Tensor parallel: the capture's parameters, as each torchrun rank reads them."""
        return self.raw / "tp-params.json"

    def tp_rank(self, rank: int) -> "RunLayout":
        """Tensor parallel: rank `rank`'s timeline pass, shaped like a run (raw/rank<r>/)."""
        return rank_run(self.raw, rank)

    @property
    def info(self) -> Path:
        """In a rank's folder (`tp_rank`): that rank's timeline information."""
        return self.root / "info.json"

    @property
    def shaped(self) -> Path:
        """In a rank's folder (`tp_rank`), under nsys: that rank's shapes pass timeline, joined to its nsys timeline."""
        return self.root / "shaped.parquet"


def rank_run(raw: Path, rank: int) -> RunLayout:
    """Rank `rank`'s folder inside the raw/ folder `raw` (`RunLayout.tp_rank`; a torchrun rank knows raw/ only)."""
    return RunLayout(Path(raw) / rank_folder(rank))


STUDY_MANIFEST = "study.json"


@dataclass(frozen=True)
class StudyLayout(_Rooted):
    """Every path of the study folder `root` (which need not exist yet)."""

    @property
    def manifest(self) -> Path:
        return self.root / STUDY_MANIFEST

    @property
    def manifest_tmp(self) -> Path:
        return landing(self.manifest)

    @property
    def lock(self) -> Path:
        """The file lock writers of the manifest take (Slurm's tasks write their own points)."""
        return self.root / f"{STUDY_MANIFEST}.lock"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def points(self) -> Path:
        return self.root / "points"

    def run(self, point_id: str) -> Path:
        return self.runs / point_id

    def attempt(self, point_id: str, n: int) -> Path:
        """Where an earlier, partial attempt at a point is kept."""
        return self.runs / f"{point_id}.attempt-{n}"

    def params(self, point_id: str) -> Path:
        """The params file the point's capture was given."""
        return self.points / f"{point_id}.yaml"

    def stderr(self, point_id: str) -> Path:
        """What the point's capture wrote to stderr (its reason, if it failed)."""
        return self.points / f"{point_id}.stderr"

    @property
    def chain(self) -> Path:
        """The points a chain captures in one process (study `_chain`): what each is given and writes."""
        return self.points / "chain.json"

    def started(self, point_id: str) -> Path:
        """Written by the chain when the point's capture begins (when)."""
        return self.points / f"{point_id}.started"

    def ended(self, point_id: str) -> Path:
        """Written by the chain when the point's capture ends (its exit code and seconds)."""
        return self.points / f"{point_id}.ended"
