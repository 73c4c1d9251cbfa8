"""The eager run and the run as deployed of one workload: whichever the book is given, it finds the other.

Serving stacks decode under CUDA graphs (a static cache and a compiled step: `Workload.graph_decode`); HF's
eager loop is what a capture gets by default. The book's conclusions are about the run as deployed, with the
eager run beside it as "what HF's eager loop adds" (issue 41). Two runs are twins when they ran the same work
(`SAME`: model, weights, dtype, batch, prompt, tokens, ranks, attention) on the same GPU model, complete, and exactly one
of them decoded as graphs.

`twins(run, named=None)` looks in this order, and says which it took (`Twins.found`):
1. `named`: the run a parameter names (`deployed_run`), when it is the twin;
2. the run's same-host link: its manifest's `host_baseline`, or a sibling whose `host_baseline` names it (a
   pair captured minutes apart in one lease, whose plain times compare the change rather than two hosts);
3. a sibling run directory (the folder `run` lies in) of the same work, the one captured closest in time.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..contract.layout import RunLayout
from ..contract.manifest import Manifest, ManifestError, read_manifest

SAME = ("model", "weights", "dtype", "batch_size", "prompt", "prompt_tokens", "max_new_tokens", "tensor_parallel",
        "attn_implementation", "crop_mode", "base_size")

FOUND_NAMED = "named by deployed_run"
FOUND_HOST = "captured beside it on one host (host_baseline)"
FOUND_SIBLING = "a run of the same workload in the same folder"


@dataclass(frozen=True)
class Twins:
    """`eager` and `deployed` (either None where the workload has no such run); `given` is the run the book was
    given; `found` how the other was found (None: no twin)."""

    given: object
    eager: object | None
    deployed: object | None
    found: str | None
    same_host: bool

    @property
    def subject(self):
        """The run the book draws its conclusions from: the run as deployed where there is one."""
        return self.deployed if self.deployed is not None else self.eager

    @property
    def other(self):
        """The twin of the run the book was given (None: none)."""
        return self.eager if self.given is self.deployed else self.deployed


def _params(m: Manifest) -> dict:
    return {k: m.params.get(k) for k in SAME}


def is_twin(a: Manifest, b: Manifest) -> bool:
    """Same work on the same GPU model, both complete, exactly one decoding as CUDA graphs."""
    return (a.complete and b.complete and _params(a) == _params(b) and a.gpu_name == b.gpu_name
            and (a.device or None) == (b.device or None) and a.workload.graph_decode != b.workload.graph_decode)


def _created(m: Manifest) -> datetime | None:
    try:
        return datetime.strptime(m.created or "", "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def _siblings(path: Path) -> list[tuple[Path, Manifest]]:
    out = []
    for d in sorted(path.parent.iterdir()) if path.parent.is_dir() else []:
        if d == path or not RunLayout(d).manifest.is_file():
            continue
        try:
            out.append((d, read_manifest(d)))
        except (ManifestError, OSError, ValueError):
            continue  # a damaged sibling is no twin; the door check speaks for it when it is opened
    return out


def find_twin(path: str | Path, named: str | Path | None = None) -> tuple[Path | None, str | None, bool]:
    """(the twin's folder, how it was found, whether it ran on the same host) of the run at `path`."""
    path = Path(path).resolve()
    me = read_manifest(path)
    if named:
        n = Path(named).resolve()
        if n != path and RunLayout(n).manifest.is_file() and is_twin(me, read_manifest(n)):
            return n, FOUND_NAMED, _linked(path, me, n, read_manifest(n))
    twins = [(d, m) for d, m in _siblings(path) if is_twin(me, m)]
    linked = [(d, m) for d, m in twins if _linked(path, me, d, m)]
    if linked:
        return linked[0][0], FOUND_HOST, True
    if not twins:
        return None, None, False
    t0 = _created(me)
    twins.sort(key=lambda dm: abs((_created(dm[1]) - t0).total_seconds()) if t0 and _created(dm[1]) else float("inf"))
    return twins[0][0], FOUND_SIBLING, False


def _linked(pa: Path, a: Manifest, pb: Path, b: Manifest) -> bool:
    return a.host_baseline == pb.name or b.host_baseline == pa.name


def twins(run, named: str | Path | None = None, open_run=None) -> Twins:
    """The `Twins` of a loaded run (`load.run.Run`). `open_run(path)` loads the twin (a chapter passes its own,
    which checks the run at the door first); `load.run.load_run` by default."""
    from .run import load_run

    path, found, same_host = find_twin(run.path, named)
    other = (open_run or load_run)(str(path)) if path is not None else None
    graph = run.info.workload.graph_decode
    eager, deployed = (other, run) if graph else (run, other)
    return Twins(run, eager, deployed, found, same_host)


def backend_twin(path: str | Path) -> Path | None:
    """The same work on the same GPU, decoded the same way, captured with the other timeline backend (nsys ↔ the
    torch profiler), in the same folder: the one captured closest in time; None where there is none (issue 46:
    chapter 01 sets the two side by side)."""
    path = Path(path).resolve()
    me = read_manifest(path)
    if not me.complete:
        return None
    cands = [(d, m) for d, m in _siblings(path)
             if m.complete and _params(m) == _params(me) and m.gpu_name == me.gpu_name
             and m.workload.graph_decode == me.workload.graph_decode
             and m.timeline_profiler != me.timeline_profiler]
    t0 = _created(me)
    cands.sort(key=lambda dm: abs((_created(dm[1]) - t0).total_seconds()) if t0 and _created(dm[1]) else float("inf"))
    return cands[0][0] if cands else None
