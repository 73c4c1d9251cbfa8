"""A study: one workload captured over a grid of capture parameters (the serving study: batch sizes, decode as
CUDA graphs), one run directory per point under `<out>/runs/`, and a study manifest `<out>/study.json` that says
what each point is, where its run lies, its status and reason, how long it took and on which GPU.

The study file (YAML, read with the params file's guards):

    base: variant-static-graphs.yaml   # optional: a params file, relative to the study file's folder
    set: {max_new_tokens: 32}          # optional: capture keys every point shares
    grid: {batch_size: [1, 8, 16, 32]} # one or more capture keys, each a non-empty list of values

Every point is checked as a capture's parameters before anything runs (exit 2 naming the point and key). Each point
is captured as `python -m kernelbook capture` captures a run, so one that fails (out of memory at a large batch) lands
partial with its reason and the study goes on. On one GPU, points that share a model (`MODEL_KEYS`) are chained: one
process (`kernelbook _points`) captures them one after another, the model built once and each point's step compiled
afresh; other points get a process each. A rerun resumes: a point whose run is complete is
skipped; a partial one is moved aside (never deleted) and captured again. With several GPUs (`gpus`), points run
side by side, one per GPU (`CUDA_VISIBLE_DEVICES`), each under its own GPU's profiling lock. For a fleet,
`slurm_script` writes a Slurm array job whose task i runs point i (`--point i`): the scheduler is Slurm's."""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import params as P
from .contract.layout import RunLayout, StudyLayout

STUDY_KEYS = ("base", "set", "grid")


@dataclass(frozen=True)
class Point:
    """One capture of the study: its index, its grid values and its id (the run directory's name)."""
    index: int
    values: dict

    @property
    def id(self) -> str:
        return "_".join(f"{k}-{_token(v)}" for k, v in self.values.items())

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class Study:
    """A validated study file: the base parameters every point shares, and the points of its grid."""
    source: str
    base_file: str | None
    base: dict  # the base file's parameters, read once
    shared: dict
    grid: dict
    points: tuple[Point, ...]

    def params_of(self, point: Point) -> dict:
        """The point's capture parameters as a params file holds them (base file, then `set`, then its grid
        values)."""
        return {**self.base, **self.shared, **point.values}


@dataclass
class PointRecord:
    """What the study manifest says of a point."""
    index: int
    id: str
    values: dict
    run_dir: str
    status: str = "pending"   # pending, running, complete, partial, failed
    reason: str = ""
    seconds: float | None = None
    gpu: str | None = None
    started: str | None = None  # when its capture began (points side by side overlap)
    previous: list = field(default_factory=list)  # partial runs of earlier attempts, moved aside


def _token(v) -> str:
    return str(v).replace("/", "-").replace(" ", "")


def load_study(path: str | Path) -> Study:
    """The study file at `path`, or ParamError listing every problem (the CLI exits 2)."""
    p = Path(path)
    raw = P._read_file(p)
    source = str(p)
    problems = [f"{P.shown(k, bare=True)}: unknown study key (a study file holds {', '.join(STUDY_KEYS)})"
                for k in raw if k not in STUDY_KEYS]
    base_file = None
    if raw.get("base") is not None:
        if not isinstance(raw["base"], str):
            problems.append(f"base: expected the path of a params file, got {P.shown(raw['base'])}")
        else:
            b = (p.parent / raw["base"]).resolve()
            if not P._on_disk(b, "file"):
                problems.append(f"base: params file {P.shown(raw['base'], bare=True)} does not exist (relative to "
                                f"{p.parent})")
            else:
                base_file = str(b)
    shared = raw.get("set") or {}
    if not isinstance(shared, dict):
        problems.append(f"set: expected a mapping of capture key: value, got {P.shown(shared)}")
        shared = {}
    grid = raw.get("grid")
    if not isinstance(grid, dict) or not grid:
        problems.append("grid: empty: give at least one capture key with a list of values, e.g. "
                        "grid: {batch_size: [1, 8, 16, 32]}")
        grid = {}
    for key, vals in grid.items():
        spec = P.SCHEMA.get(key)
        if spec is None:
            problems.append(f"grid: {P.shown(key, bare=True)}: unknown key{P._did_you_mean(key)}")
        elif P.CAPTURE not in spec.feeds:
            problems.append(f"grid: {key}: not a capture key (it changes how the book reads a run, not what is "
                            "captured); a grid's axes are capture parameters")
        if not isinstance(vals, list) or not vals:
            problems.append(f"grid: {P.shown(key, bare=True)}: expected a non-empty list of values, got "
                            f"{P.shown(vals)}")
        elif len(set(map(repr, vals))) != len(vals):
            problems.append(f"grid: {key}: a value appears twice in {P.shown(vals)}")
    for key in shared:
        if key in grid:
            problems.append(f"set: {key}: also a grid axis; give it in one place")
    if problems:
        raise P.ParamError(problems, source)
    axes = list(grid)
    points = tuple(Point(i, dict(zip(axes, combo)))
                   for i, combo in enumerate(itertools.product(*(grid[a] for a in axes))))
    study = Study(source, base_file, dict(P._read_file(Path(base_file))) if base_file else {}, shared, grid, points)
    for pt in points:  # each point as the capture will check it: one message for all of them
        try:
            P.validate(study.params_of(pt), f"point {pt.label}", P.CAPTURE)
        except P.ParamError as e:
            problems += [f"point {pt.index} ({pt.label}): {x}" for x in e.problems]
    if problems:
        raise P.ParamError(problems, source)
    return study


# --- the study manifest ---------------------------------------------------------------------------------

def read_manifest(out: Path) -> dict | None:
    f = StudyLayout(out).manifest
    return json.loads(f.read_text()) if f.is_file() else None


def write_manifest(out: Path, doc: dict) -> None:
    lay = StudyLayout(out)
    lay.manifest_tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(lay.manifest_tmp, lay.manifest)  # never half a manifest


def run_status(run_dir: Path) -> tuple[str, str]:
    """(status, reason) of a point's run directory: 'complete' or 'partial' as its manifest says, 'failed' when the
    capture left no run (it stopped before writing one: bad inputs, no GPU), 'pending' when it was never run."""
    mf = RunLayout(run_dir).manifest
    if not mf.is_file():
        return ("failed", "the capture left no run directory") if run_dir.exists() else ("pending", "")
    try:
        m = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        return "partial", f"manifest unreadable: {e}"
    return m.get("status", "partial"), m.get("reason", "") or ""


# --- running the points -----------------------------------------------------------------------------------

def _elapsed(t0: float) -> str:
    s = int(time.perf_counter() - t0)
    return f"{s // 60}m{s % 60:02d}s"


def _say(msg: str) -> None:
    print(f"[study] {msg}", flush=True)


def plan(study: Study, out: Path, only: int | None = None) -> list[PointRecord]:
    """The points to run now and those already complete (resume), as manifest records."""
    old = {r["id"]: r for r in (read_manifest(out) or {}).get("points", [])}
    recs = []
    for pt in study.points:
        if only is not None and pt.index != only:
            continue
        run_dir = StudyLayout(out).run(pt.id)
        status, reason = run_status(run_dir)
        prev = old.get(pt.id, {})
        recs.append(PointRecord(pt.index, pt.id, pt.values, str(run_dir.relative_to(out)), status, reason,
                                prev.get("seconds"), prev.get("gpu"), prev.get("started"),
                                list(prev.get("previous", []))))
    return recs


def _set_aside(out: Path, rec: PointRecord) -> None:
    """A partial run of an earlier attempt is kept, renamed `<id>.attempt-<n>`, and listed in the record."""
    lay = StudyLayout(out)
    run_dir = lay.run(rec.id)
    if not run_dir.exists():
        return
    n = 1
    while (aside := lay.attempt(rec.id, n)).exists():
        n += 1
    run_dir.rename(aside)
    rec.previous.append({"run_dir": str(aside.relative_to(out)), "status": rec.status, "reason": rec.reason})


def point_command(params_file: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "kernelbook", "capture", "--params", str(params_file), "--out", str(run_dir)]


def run_study(study: Study, out: Path, gpus: list[str] | None = None, only: int | None = None) -> int:
    """Capture every point not yet complete; 0 when all points are complete, 1 when any is not. `gpus`: the GPU
    indices to place points on, one point per GPU at a time (None: the one the process sees). `only`: one point's
    index (a Slurm array task)."""
    lay = StudyLayout(out)
    lay.points.mkdir(parents=True, exist_ok=True)
    lay.runs.mkdir(exist_ok=True)
    recs = plan(study, out, only)
    doc = read_manifest(out) or {}
    doc.update({"kernelbook_study": 1, "source": study.source, "base": study.base_file, "set": study.shared,
                "grid": study.grid, "created": doc.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))})
    by_id = {r["id"]: r for r in doc.get("points", [])}

    def save():
        # under a file lock, over the manifest as it is now: Slurm's tasks (`only`) each write their own point
        with open(lay.lock, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            now = read_manifest(out) or {}
            by_id.update({r["id"]: r for r in now.get("points", []) if r["id"] not in {x.id for x in recs}})
            for r in recs:
                by_id[r.id] = asdict(r)
            doc["points"] = [by_id[p.id] for p in study.points if p.id in by_id]
            write_manifest(out, doc)

    todo = [r for r in recs if r.status != "complete"]
    done = len(recs) - len(todo)
    t0 = time.perf_counter()
    _say(f"{len(recs)} point(s) in {out}: {done} complete already (skipped), {len(todo)} to capture"
         + (f" on GPUs {','.join(gpus)}" if gpus else ""))
    save()
    slots = list(gpus) if gpus else [None]
    running: dict = {}  # slot -> (record, process, start); record None: a chain between its points
    try:
        if chained(study, todo, slots):
            _say(f"{len(todo)} points share one model: captured one after another in one process, the model built "
                 "once")
            _chain(study, out, todo, running, save, t0)
        else:
            _loop(study, out, todo, slots, running, save, t0)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the CLI: each running capture stops and lands partial
        for rec, proc, start in running.values():
            proc.terminate()
        for rec, proc, start in running.values():
            _wait_out(proc, 120)
            if rec is None:
                continue
            rec.seconds = round(time.perf_counter() - start, 1)
            status, reason = run_status(lay.run(rec.id))
            rec.status = status if status not in ("pending", "complete") else "failed"
            rec.reason = reason or "the study was stopped while this point was captured"
        for rec in recs:  # stopped between its record and its launch: no capture of it runs
            if rec.status == "running":
                rec.status, rec.reason = "failed", "the study was stopped as this point was starting"
        save()
        raise
    left = [r for r in recs if r.status != "complete"]
    _say(f"done in {_elapsed(t0)}: {len(recs) - len(left)}/{len(recs)} point(s) complete"
         + (f"; not complete: {', '.join(r.id for r in left)} (rerun the same command to capture them again)"
            if left else ""))
    return 0 if not left else 1


def _wait_out(proc: subprocess.Popen, seconds: float) -> None:
    """Wait up to `seconds` for a stopping capture to write its partial run, whatever further Ctrl-C or SIGTERM
    arrives meanwhile; then kill it."""
    end = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < end:
        try:
            proc.wait(max(0.1, end - time.monotonic()))
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:
        proc.kill()


def _prepare(study: Study, out: Path, rec: PointRecord) -> Path:
    """Before `rec`'s capture: an earlier attempt's run set aside, its parameters written; the params file."""
    if rec.status in ("partial", "failed"):
        _set_aside(out, rec)
    pfile = StudyLayout(out).params(rec.id)
    pfile.write_text(P.yaml.safe_dump(study.params_of(study.points[rec.index]), sort_keys=False))
    return pfile


def _start(study: Study, out: Path, rec: PointRecord, slot, t0: float, save, running: dict) -> None:
    """Launch `rec`'s capture (on GPU `slot`, under that GPU's own profiling lock) into `running[slot]`."""
    pfile = _prepare(study, out, rec)
    pt = study.points[rec.index]
    lay = StudyLayout(out)
    env = dict(os.environ)
    if slot is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(slot)
        env["KERNELBOOK_LOCK"] = f"/tmp/kernelbook-profiling-gpu{slot}.lock"
    rec.status, rec.reason, rec.gpu = "running", "", slot
    rec.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    _say(f"point {rec.index + 1}/{len(study.points)} ({pt.label}) started"
         + (f" on GPU {slot}" if slot is not None else "") + f"; study elapsed {_elapsed(t0)}")
    with open(lay.stderr(rec.id), "w") as err:  # the capture's messages: its reason if it fails
        # its own process group: the capture stops its ncu and worker by signalling its group, which must not
        # reach the study (a SIGTERM reaches a capture through the study, `run_study`)
        running[slot] = (rec, subprocess.Popen(point_command(pfile, lay.run(rec.id)), env=env, stderr=err,
                                               start_new_session=True), time.perf_counter())


def _finish(out: Path, rec: PointRecord, rc: int, start: float) -> None:
    """Record how `rec`'s capture ended: the run's own status and reason, else the capture's last message."""
    rec.seconds = round(time.perf_counter() - start, 1)
    lay = StudyLayout(out)
    status, reason = run_status(lay.run(rec.id))
    rec.status = status if status != "pending" else "failed"
    said = [ln for ln in lay.stderr(rec.id).read_text(errors="replace").splitlines() if ln.strip()]
    if rc != 0 and said:
        print("\n".join(said[-20:]), file=sys.stderr, flush=True)
    last = said[-1].strip() if said else ""
    rec.reason = reason or ("" if rc == 0 else f"capture exited {rc} before writing a run" + (f": {last}" if last else ""))
    if rc != 0 and rec.status == "complete":
        rec.status, rec.reason = "partial", f"capture exited {rc}"


def _loop(study: Study, out: Path, todo: list, slots: list, running: dict, save, t0: float) -> None:
    """Keep every slot busy with the next point until all are done."""
    queue, finished = list(todo), 0
    while queue or running:
        for slot in [s for s in slots if s not in running]:
            if queue:
                _start(study, out, queue.pop(0), slot, t0, save, running)
        time.sleep(0.2)
        for slot, (rec, proc, start) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del running[slot]
            finished += 1
            _finish(out, rec, rc, start)
            save()
            _say(f"point {rec.index + 1}/{len(study.points)} ({study.points[rec.index].label}) {rec.status} in "
                 f"{rec.seconds:.0f} s{': ' + rec.reason if rec.reason else ''}; {finished}/{len(todo)} done, "
                 f"study elapsed {_elapsed(t0)}")


# --- points chained in one process -------------------------------------------------------------------------

# capture keys that make the model: points equal in these share one (`capture.models.KEEP_MODEL`)
MODEL_KEYS = ("model", "weights", "dtype", "trust_remote_code", "attn_implementation", "tensor_parallel")


def chained(study: Study, todo: list, slots: list) -> bool:
    """Whether the points to capture run one after another in one process (`kernelbook _points`), the model built
    once: on one GPU, more than one point, every one of them the same model on one GPU (no tensor parallelism)."""
    if len(slots) != 1 or len(todo) < 2:
        return False
    full = [P.validate(study.params_of(study.points[r.index]), "point", P.CAPTURE) for r in todo]
    return len({tuple(repr(f.get(k)) for k in MODEL_KEYS) for f in full}) == 1 and full[0]["tensor_parallel"] == 1


def chain_command(chain_file: Path) -> list[str]:
    return [sys.executable, "-m", "kernelbook", "_points", str(chain_file)]


def _chain(study: Study, out: Path, todo: list, running: dict, save, t0: float) -> None:
    """Capture `todo` in one process (`chain_command`), following its points by their marker files; points a chain
    left (it stopped where the GPU was no longer usable) go to a new one."""
    lay = StudyLayout(out)
    queue, finished, n = list(todo), 0, len(study.points)
    while queue:
        entries = []
        for rec in queue:
            pfile = _prepare(study, out, rec)
            for f in (lay.started(rec.id), lay.ended(rec.id)):
                f.unlink(missing_ok=True)
            entries.append({"id": rec.id, "params": str(pfile), "out": str(lay.run(rec.id)),
                            "stderr": str(lay.stderr(rec.id)), "started": str(lay.started(rec.id)),
                            "ended": str(lay.ended(rec.id))})
        lay.chain.write_text(json.dumps(entries, indent=1))
        # its own process group, as a point's capture has (see `_start`)
        proc = subprocess.Popen(chain_command(lay.chain), start_new_session=True)
        running[None] = (None, proc, time.perf_counter())
        left, current = list(queue), None
        while True:
            rc = proc.poll()
            if current is None and left and lay.started(left[0].id).exists():
                current = left.pop(0)
                current.status, current.reason, current.gpu = "running", "", None
                current.started = json.loads(lay.started(current.id).read_text())["started"]
                running[None] = (current, proc, time.perf_counter())
                save()
                _say(f"point {current.index + 1}/{n} ({study.points[current.index].label}) started in the chain; "
                     f"study elapsed {_elapsed(t0)}")
            if current is not None and (lay.ended(current.id).exists() or rc is not None):
                end = json.loads(lay.ended(current.id).read_text()) if lay.ended(current.id).exists() else {}
                _finish(out, current, end.get("rc", rc), running[None][2])
                current.seconds = end.get("seconds", current.seconds)
                finished += 1
                save()
                _say(f"point {current.index + 1}/{n} ({study.points[current.index].label}) {current.status} in "
                     f"{current.seconds:.0f} s{': ' + current.reason if current.reason else ''}; "
                     f"{finished}/{len(todo)} done, study elapsed {_elapsed(t0)}")
                current = None
                running[None] = (None, proc, time.perf_counter())
                continue
            if rc is not None and current is None:
                break
            time.sleep(0.2)
        del running[None]
        if left and len(left) == len(queue):  # the chain ended before its first point began: not again
            rec = left.pop(0)
            rec.status, rec.reason = "failed", f"the capture process exited {rc} before this point began"
            save()
        queue = left


def slurm_script(study_file: str, out: str, n_points: int, gpus_per_task: int = 1) -> str:
    """A Slurm array job running the study's points as independent tasks, one GPU each (`sbatch` it; each task
    resumes like a rerun, so a failed task is requeued by running the script again)."""
    return "\n".join([
        "#!/bin/bash",
        "#SBATCH --job-name=kernelbook-study",
        f"#SBATCH --array=0-{n_points - 1}",
        f"#SBATCH --gpus-per-task={gpus_per_task}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --output={out}/slurm-%A_%a.log",
        "set -euo pipefail",
        f"python -m kernelbook study --params {study_file} --out {out} --point \"$SLURM_ARRAY_TASK_ID\"",
        ""])
