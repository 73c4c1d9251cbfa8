"""What a run holds against what the parameters ask of it, checked before a chapter runs.

Two outcomes, each one message in words (never a traceback):

- `parameter_problems`: a parameter names something the run does not hold although it holds that
  kind of thing (a phase ncu did not profile when it profiled another, a kernel that is not among the
  profiled ones). The book CLI stops before any chapter runs (exit 2); a chapter opened in JupyterLab
  stops at its first cell with the same message.
- `missing`: the run lacks a whole stage a chapter needs (no ncu counters: a partial capture, or
  `ncu_top_n: 0`). The chapter shows what the run holds and says what is missing, with the
  manifest's status and reason; the book still renders.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from .contract.layout import RunLayout
from .contract.manifest import read_manifest
from .params import resolve_path
from .escape import md

CAPTURE_CMD = "python -m kernelbook capture --params <your.yaml> --out data/runs/<new-run-id>"


def ncu_table(run_dir: str | Path, rank: int = 0) -> pd.DataFrame | None:
    """Rank `rank`'s ncu kernel rows (phase, kernel_id, name, status), or None when it has no ncu stage: the
    table the chapters read (`load.run.Run.ncu_dir`, both through contract.layout)."""
    p = RunLayout(resolve_path(run_dir)).ncu_kernels(rank)
    if not p.exists():
        return None
    cols = [c for c in ("phase", "kernel_id", "name", "status", "share") if c in _columns(p)]
    return pd.read_parquet(p, columns=cols)


def _columns(p: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(p).names


def profiled_phases(run_dir: str | Path, rank: int = 0) -> dict[str, int]:
    """Phase → number of profiled kernels, in rank `rank`'s ncu tables (empty when none)."""
    k = ncu_table(run_dir, rank)
    if k is None or "status" not in k or "phase" not in k:
        return {}
    return k[k.status == "profiled"].groupby("phase", sort=False).size().to_dict()


def _list(xs) -> str:
    xs = list(xs)
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def run_ranks(run_dir) -> list[int]:
    """The ranks a run's timeline holds ([0] for a one-GPU run or an unreadable one)."""
    import pyarrow.parquet as pq

    from .params import resolve_path

    try:
        f = pq.ParquetFile(RunLayout(resolve_path(run_dir)).timeline)
        if "rank" not in f.schema_arrow.names:
            return [0]
        return sorted(set(f.read(columns=["rank"]).column("rank").to_pylist()))
    except Exception:
        return [0]


@dataclass(frozen=True)
class Asked:
    """What a book or a chapter asks of its run: `rank`, `phase` and `kernel`, each None where no chapter given
    the parameters reads it (a chapter that was not given a key does not ask it)."""

    run_dir: str
    rank: int | None = None
    phase: str | None = None
    kernel: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any], chapters: list[str] | None = None) -> "Asked":
        """From validated parameters (`params.validate`): the keys among rank, phase and kernel that `params`
        holds and that feed one of `chapters` (all when None)."""
        from .params import SCHEMA

        def fed(key):
            if key in params and (chapters is None or any(c in SCHEMA[key].feeds for c in chapters)):
                return params[key]
            return None

        kernel = fed("kernel")
        return cls(str(params["run_dir"]), fed("rank"), fed("phase"), str(kernel) if kernel else None)

    @property
    def ncu_rank(self) -> int:
        """The rank whose ncu tables the chapters read."""
        return self.rank or 0


def parameter_problems(asked: Asked) -> list[str]:
    """Parameters that ask the run for a rank, phase or kernel it does not hold (each problem names what the
    run has and how to capture the rest). A run without any ncu counters is not a parameter problem: see
    `missing`."""
    run_dir, rank = asked.run_dir, asked.ncu_rank
    problems = []
    if rank != 0:
        ranks = run_ranks(run_dir)
        if rank not in ranks:
            problems.append(f"rank: {run_dir} holds rank(s) {ranks}; set rank to one of them (a one-GPU run has "
                            "rank 0 only; tensor_parallel: N captures ranks 0 to N-1)")
    if asked.phase is None and asked.kernel is None:
        return problems
    try:
        phases = profiled_phases(run_dir, rank)
    except Exception:  # unreadable tables: the chapters that read them fail and show why
        return problems
    if not phases:
        return problems
    phase = asked.phase
    if phase is not None and phase not in phases:
        have = _list(f"{p} ({n} kernels)" for p, n in phases.items())
        want = sorted(set(phases) | {phase}, key=["vision_encode", "prefill", "decode"].index)
        problems.append(
            f"phase: {run_dir} has no ncu counters for {phase!r}; it profiled {have}. Set phase to "
            f"{_list(repr(p) for p in phases)}, or capture {phase} on a GPU machine: `ncu_phases: "
            f"[{', '.join(want)}]` in a params YAML, then `{CAPTURE_CMD}`.")
    elif asked.kernel:
        kernel = asked.kernel
        k = ncu_table(run_dir, rank)
        k = k[(k.status == "profiled") & (k.phase == phase)]
        if not (k.kernel_id == kernel).any():
            ids = k.kernel_id.tolist()
            problems.append(
                f"kernel: {kernel!r} is not a profiled {phase} kernel of {run_dir}; it has {len(ids)}: "
                f"{ids[0]} … {ids[-1]} (chapter 05's table lists them). Use one of these ids, or capture more "
                f"{phase} kernels with a larger `ncu_top_n` (now {len(ids)}): `{CAPTURE_CMD}`.")
    return problems


def missing(run_dir: str | Path, needs: str, renders_without: bool = False, rank: int = 0) -> str | None:
    """Why the run cannot serve a chapter that needs `needs` ("ncu"), in words with the manifest's
    status and reason (in the narrative language), or None when it can. `renders_without`: the note
    of a chapter that renders without them. `rank`: whose ncu tables the chapter reads. The note's first
    clause, up to its first colon, names what is missing (the index's 'Not shown' line)."""
    from .i18n import tr

    if needs != "ncu":
        raise ValueError(f"unknown need {needs!r}")
    if profiled_phases(run_dir, rank):
        return None
    m = read_manifest(resolve_path(run_dir))
    status = m.status
    why = (tr("The run's capture is **{status}**: {reason}.", status=md(status), reason=md(m.reason))
           if m.reason else tr("The run's capture is **{status}**.", status=md(status)))
    k = ncu_table(run_dir, rank)
    if k is not None and len(k) and "status" in k:
        reasons = k.status.value_counts()
        held = tr("It selected {n} kernels for ncu and profiled none of them ({reasons}).", n=len(k),
                  reasons="; ".join(f"{n}: {md(s)}" for s, n in reasons.items()))
    elif m.ncu_top_n == 0:
        held = tr("It was captured with `ncu_top_n: 0`, so it holds no ncu counters.")
    else:
        held = tr("It holds no ncu tables (`ncu/kernels.parquet`).")
    values = dict(run=md(Path(str(run_dir)).name), why=why, held=held, command=CAPTURE_CMD)
    if renders_without:
        return tr("**No Nsight Compute counters in {run}**: this chapter renders without them, from the timeline "
                  "alone. {why} {held} The timeline chapters (00, 01, 06) still read the run. To get counters, capture "
                  "again on a GPU machine where ncu can read them, with `ncu_top_n` > 0: `{command}`.", **values)
    return tr("**No Nsight Compute counters in {run}**: this chapter needs them. {why} {held} The timeline chapters "
              "(00, 01, 06) still read the run. To get counters, capture again on a GPU machine where ncu can read "
              "them, with `ncu_top_n` > 0: `{command}`.", **values)
