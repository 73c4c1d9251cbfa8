"""A study folder as the chapters read it (`kernelbook study` writes it): the study manifest, typed, and the run of
each point that holds one. A point that failed or was never captured is listed with its reason, not dropped."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..contract.layout import StudyLayout
from ..params import resolve_path
from .run import Run, RunError, load_run


class StudyError(ValueError):
    """Not a study folder, or its manifest unreadable: the message says which and how to make one."""


@dataclass(frozen=True)
class StudyPoint:
    index: int
    id: str
    values: dict          # the point's grid values, e.g. {"batch_size": 8}
    status: str           # complete, partial, failed, pending, running
    reason: str
    seconds: float | None  # its capture's wall time
    gpu: str | None        # the GPU index it ran on (None: the one the study process saw)
    run: Run | None        # None: the point holds no readable run
    note: str = ""         # why `run` is None, or what a partial run lacks
    started: str | None = None  # when its capture began (ISO 8601): points side by side overlap


@dataclass(frozen=True)
class StudyRuns:
    path: Path
    grid: dict
    shared: dict
    points: tuple[StudyPoint, ...]

    @property
    def study_id(self) -> str:
        return self.path.name

    @property
    def axis(self) -> str:
        """The grid's first axis: what the chapter's tables and figures run along."""
        return next(iter(self.grid))

    @property
    def held(self) -> list[StudyPoint]:
        """The points that hold a run, in grid order."""
        return [p for p in self.points if p.run is not None]


def open_study(path: str | Path) -> StudyRuns:
    p = resolve_path(path)
    mf = StudyLayout(p).manifest
    if not mf.is_file():
        raise StudyError(f"{path} is not a study folder (no {mf.name}): make one with `python -m kernelbook study "
                         f"--params params/study-serving.yaml --out {path}` on a GPU machine")
    try:
        doc = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise StudyError(f"{mf} cannot be read ({e}); a rerun of the study command rewrites it") from e
    points = []
    for r in doc.get("points", []):
        run, note = None, ""
        run_dir = p / r["run_dir"]
        if r.get("status") in ("complete", "partial") and run_dir.is_dir():
            try:
                run = load_run(run_dir)
            except RunError as e:
                note = str(e)
        else:
            note = r.get("reason") or r.get("status", "")
        points.append(StudyPoint(int(r["index"]), r["id"], dict(r.get("values", {})), r.get("status", "?"),
                                 r.get("reason", "") or "", r.get("seconds"), r.get("gpu"), run, note,
                                 r.get("started")))
    return StudyRuns(p, dict(doc.get("grid", {})), dict(doc.get("set", {})),
                     tuple(sorted(points, key=lambda x: x.index)))
