"""Load a run directory (the only interface between capture and the chapters)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..params import resolve_path


class RunError(ValueError):
    pass


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


def load_run(path: str | Path, require_timeline: bool = True, rank: int = 0) -> Run:
    """Manifest, timeline and phases of a run; kernel identity recomputed so that naming improvements
    apply to old runs without a new capture. `require_timeline=False`: a run holding only its manifest
    (chapter 00 while the capture chapters after it have not run yet) loads with empty tables. A
    tensor-parallel run's tables hold every rank: `timeline` and `phases` are `rank`'s, every chapter reads
    those, and `ranks_timeline` / `ranks_phases` keep all of them for the cross-rank analysis."""
    from ..analyze.kernels import annotate

    p = resolve_path(path)
    mf = p / "manifest.json"
    if not mf.exists():
        raise RunError(f"{p} has no manifest.json: not a kernelbook run (or its capture never started)")
    manifest = json.loads(mf.read_text())
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
