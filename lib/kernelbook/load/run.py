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

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def gpu_name(self) -> str:
        gpu = self.manifest.get("environment", {}).get("gpu", {})
        return gpu.get("name", "unknown") if isinstance(gpu, dict) else str(gpu)

    def ncu_kernels(self) -> pd.DataFrame | None:
        p = self.path / "ncu" / "kernels.parquet"
        return pd.read_parquet(p) if p.exists() else None

    def ncu_metrics(self) -> pd.DataFrame | None:
        p = self.path / "ncu" / "metrics.parquet"
        return pd.read_parquet(p) if p.exists() else None


def load_run(path: str | Path, require_timeline: bool = True) -> Run:
    """Manifest, timeline and phases of a run; kernel identity recomputed so that naming improvements
    apply to old runs without a new capture. `require_timeline=False`: a run holding only its manifest
    (chapter 00 while the capture chapters after it have not run yet) loads with empty tables."""
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
    return Run(p, manifest, timeline, pd.read_parquet(p / "phases.parquet"))
