"""Load a run directory (the only interface between capture and the chapters)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..params import resolve_path


class RunError(ValueError):
    pass


class RunDamaged(RunError):
    """A run directory whose files contradict the run contract (DESIGN.md): one message naming the file and
    what is wrong with it. The book stops before any chapter runs (exit 2) and writes nothing."""


PHASES = ("vision_encode", "prefill", "decode", "other")
# the columns each table must hold for the chapters to read it
REQUIRED = {"timeline.parquet": ("name", "phase", "start_ns", "end_ns", "duration_ns"),
            "phases.parquet": ("phase", "start_ns", "end_ns"),
            "ncu/kernels.parquet": ("phase", "kernel_id", "name", "status"),
            "ncu/metrics.parquet": ("metric", "value")}
NUMERIC = ("start_ns", "end_ns", "duration_ns", "value")


def _read_manifest(p: Path) -> dict:
    mf = p / "manifest.json"
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


def _schema(p: Path, rel: str) -> list[str]:
    """The columns of the Parquet table `rel`, or RunDamaged naming it (truncated, not Parquet, a folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = p / rel
    if not f.is_file():
        raise RunDamaged(f"{f}: not a file")
    try:
        meta = pq.read_metadata(f)
        names = pq.read_schema(f).names
    except (pa.ArrowException, OSError) as e:
        why = "empty file" if f.stat().st_size == 0 else str(e).splitlines()[0][:160]
        raise RunDamaged(f"{f}: not a readable Parquet table ({why}); the file is truncated or not Parquet") from None
    lacking = [c for c in REQUIRED.get(rel, ()) if c not in names]
    if lacking:
        raise RunDamaged(f"{f}: lacks column(s) {', '.join(lacking)}")
    if meta.num_rows == 0 and rel in ("timeline.parquet", "phases.parquet"):
        raise RunDamaged(f"{f}: has no rows")
    return names


def _table(p: Path, rel: str, columns: list[str]) -> pd.DataFrame:
    import pyarrow as pa

    f = p / rel
    try:
        df = pd.read_parquet(f, columns=columns)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise RunDamaged(f"{f}: its data cannot be read ({str(e).splitlines()[0][:160]}); the file is truncated "
                         "or damaged") from None
    for c in columns:
        if c in NUMERIC and not pd.api.types.is_numeric_dtype(df[c]):
            raise RunDamaged(f"{f}: column {c} holds {df[c].dtype} values, expected numbers")
    if "phase" in df:
        bad = sorted(set(map(str, df.phase.dropna().unique())) - set(PHASES))
        if bad:
            raise RunDamaged(f"{f}: unknown phase(s) {', '.join(repr(b[:40]) for b in bad[:3])}; phases are "
                             f"{', '.join(PHASES)}")
    return df


def check_run(path: str | Path) -> dict:
    """The run's manifest after checking the run against its contract, or RunDamaged (RunError when the
    folder is no run at all) with one message naming the file and what is wrong:

    - manifest.json: valid UTF-8 JSON, an object with `status` (complete | partial) and `params`;
    - each table present: a readable Parquet file with its columns (`REQUIRED`), numbers where numbers
      belong and known phases; timeline and phases not empty;
    - a complete run holds every part its parameters asked for (timeline and phases; ncu tables unless
      captured with `ncu_top_n: 0`), and a partial one the phases beside its timeline;
    - every kernel in the ncu tables ran in the timeline (by name and phase), and in a complete run every
      ncu launch names a kernel of the ncu kernel table."""
    p = resolve_path(path)
    if not p.is_dir():
        raise RunError(f"{p} is not a folder: no run there")
    manifest = _read_manifest(p)
    mf = p / "manifest.json"
    has_tl = (p / "timeline.parquet").exists()
    if manifest["status"] == "complete":
        asked = ["timeline.parquet", "phases.parquet"]
        prm = manifest["params"]
        if prm.get("ncu_top_n", 0) and prm.get("ncu_phases", ["decode"]):
            asked += ["ncu/kernels.parquet", "ncu/metrics.parquet"]
        lacking = [a for a in asked if not (p / a).exists()]
        if lacking:
            raise RunDamaged(f"{mf}: says the run is complete, but {', '.join(lacking)} "
                             f"{'is' if len(lacking) == 1 else 'are'} missing")
    elif has_tl and not (p / "phases.parquet").exists():
        raise RunDamaged(f"{p / 'phases.parquet'}: missing beside timeline.parquet")
    for rel in REQUIRED:
        if (p / rel).exists():
            _schema(p, rel)
    if has_tl:
        tl = _table(p, "timeline.parquet", ["name", "phase", "start_ns", "end_ns", "duration_ns"])
        _table(p, "phases.parquet", ["phase", "start_ns", "end_ns"])
    for kp in sorted(p.glob("ncu/**/kernels.parquet")):
        rel = str(kp.relative_to(p))
        _schema(p, rel)
        k = _table(p, rel, ["phase", "kernel_id", "name", "status"])
        if has_tl:
            ran = set(tl[["phase", "name"]].drop_duplicates().itertuples(index=False, name=None))
            lost = k[[(ph, n) not in ran for ph, n in zip(k.phase, k.name)]]
            if len(lost):
                r = lost.iloc[0]
                raise RunDamaged(f"{kp}: kernel {str(r.kernel_id)[:40]} ({str(r['name'])[:60]!r}, {r.phase}) is not "
                                 f"in timeline.parquet{f' (and {len(lost) - 1} more)' if len(lost) > 1 else ''}: "
                                 "the ncu tables belong to another run")
        lp = kp.with_name("launches.parquet")
        if lp.exists() and manifest["status"] == "complete":  # a partial ncu stage may end between its files
            names = _schema(p, str(lp.relative_to(p)))
            if "kernel_id" in names:
                ids = set(_table(p, str(lp.relative_to(p)), ["kernel_id"]).kernel_id.dropna()) - set(k.kernel_id)
                if ids:
                    raise RunDamaged(f"{lp}: kernel id(s) {', '.join(sorted(map(str, ids))[:3])} are not in "
                                     f"{kp.name}")
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
    def gpu_name(self) -> str:
        gpu = self.manifest.get("environment", {}).get("gpu", {})
        return gpu.get("name", "unknown") if isinstance(gpu, dict) else str(gpu)

    @property
    def ncu_dir(self) -> Path:
        """This rank's ncu tables: ncu/ (rank 0, or a one-GPU run), ncu/rank<r>/ for another rank."""
        return self.path / "ncu" if self.rank == 0 else self.path / "ncu" / f"rank{self.rank}"

    def ncu_kernels(self) -> pd.DataFrame | None:
        p = self.ncu_dir / "kernels.parquet"
        return pd.read_parquet(p) if p.exists() else None

    def ncu_metrics(self) -> pd.DataFrame | None:
        p = self.ncu_dir / "metrics.parquet"
        return pd.read_parquet(p) if p.exists() else None

    def ncu_results(self) -> pd.DataFrame | None:
        """One row per profiled launch (result_id, name, grid, block; `rules` in captures that keep
        NVIDIA's rule results), or None without an ncu stage."""
        p = self.ncu_dir / "results.parquet"
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
    from ..analyze.kernels import annotate

    manifest = check_run(p)
    tl = p / "timeline.parquet"
    if not tl.exists() and not require_timeline:
        return Run(p, manifest, pd.DataFrame(), pd.DataFrame())
    if not tl.exists():
        raise RunError(f"{p} has no timeline.parquet (status: {manifest.get('status')}, "
                       f"reason: {manifest.get('reason', '-')})")
    timeline = annotate(pd.read_parquet(tl))
    phases = pd.read_parquet(p / "phases.parquet")
    if "rank" not in timeline:
        if rank != 0:
            raise RunError(f"rank: {rank} asked for, but {p.name} is a one-GPU run (rank 0 only)")
        return Run(p, manifest, timeline, phases)
    have = sorted(timeline["rank"].unique().tolist())
    if rank not in have:
        raise RunError(f"rank: {rank} asked for, but {p.name} holds ranks {have}")
    return Run(p, manifest, timeline[timeline["rank"] == rank].reset_index(drop=True),
               phases[phases["rank"] == rank].reset_index(drop=True), rank, timeline, phases)
