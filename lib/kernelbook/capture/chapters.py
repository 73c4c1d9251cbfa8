"""The capture chapters (00 setup, 01 timeline, 02 ncu): capture when asked, read otherwise.

Each chapter owns one part of the run directory — setup: `manifest.json` (environment, device, measured
peaks, clock state); timeline: `timeline.parquet` + `phases.parquet`; ncu: `ncu/` — and calls `part()`
here. `capture` decides per part:
- `never`: read what the run holds;
- `auto`: capture the part when the run lacks it and this machine can (a GPU for setup and timeline,
  also ncu for the ncu part), else read;
- `always`: capture into a new run directory, never over an existing part (so `always` on a run that
  already holds the part stops with exit code 2, and so does any capture on a machine that cannot).

Files land atomically (written beside, renamed into place), the manifest says which chapter and which
command produced each part, and the run stays `status: partial` (with the reason) until its last part
is in. The profiling lock and the clock lock span the capture chapters when the book runner drives
them (it holds them and says so in its session, contract.session); a chapter run alone holds them for its own part.
Both are always released (`clocks.clock_lock`).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from ..contract import session
from ..contract.config import CaptureConfig
from ..contract.layout import RunLayout, landing
from ..env import can_capture
from ..i18n import N_, text, tr
from ..params import resolve_path
from .common import PARQUET, CaptureError, Progress, write_manifest

PARTS = ("setup", "timeline", "ncu")
CHAPTER = {"setup": "00_setup", "timeline": "01_timeline", "ncu": "02_ncu"}
# The book runner's session (contract.session): `pipeline` is set when it starts the capture chapters side by side,
# a folder where it marks each capture chapter's end (`<stem>.ended`). A part then waits for the part before it to
# be in the run (its time in the manifest, written last), so each chapter's kernel start, imports and rendering
# overlap the other chapters' captures; the timeline's timed passes also wait for chapter 00 to end, so no
# rendering runs beside them.
SKIPPED = "not capturing in this rendering"  # the end marker of a capture chapter that reads its part
TIMED = "timeline.timed"  # in the pipeline folder: the timeline's timed passes are over


def present(run_dir: Path, part: str) -> bool:
    """Whether the run directory already holds `part` (`run_dir` resolved as every reader resolves it)."""
    lay = RunLayout(resolve_path(run_dir))
    if part == "setup":
        return lay.manifest.exists()
    if part == "timeline":
        return lay.timeline.exists()
    return lay.ncu_kernels().exists()


# the parts a capture chapter writes, as its decision line names them (in the narrative language)
PART_LABEL = {"setup": N_("setup"), "timeline": N_("timeline"), "ncu": N_("ncu")}


def decide(run_dir: str | Path, part: str, capture: str) -> tuple[bool, str]:
    """(capture this part?, why), or CaptureError (exit code 2) when `always` cannot be honoured. A relative
    `run_dir` is resolved as the chapters read it (`params.resolve_path`: the kernel's working directory if
    it holds it, else the repository), so JupyterLab (kernel in notebooks/), papermill from any folder and
    the runner decide on the same directory, and never capture because a path was read from another one."""
    run_dir = resolve_path(run_dir)
    have = present(run_dir, part)
    if capture == "never":
        return False, tr("capture: never — the chapter reads the run directory")
    if capture == "always":
        if have:
            raise CaptureError(f"capture: always never writes over a run: {run_dir} already holds its {part} part. "
                               "Give a new run_dir, or capture: auto to read it.")
        ok, why_not = can_capture(part)
        if not ok:
            raise CaptureError(f"capture: always, but this machine cannot capture the {part} part: {why_not}. "
                               "Capture on a GPU machine, or capture: auto / never to read an existing run here.")
        return True, tr("capture: always")
    if have:  # decided without importing torch (1.6 s in every capture chapter's kernel)
        return False, tr("capture: auto — the run already holds its {part} part, so the chapter reads it", part=text(PART_LABEL[part]))
    ok, why_not = can_capture(part)
    if not ok:
        return False, tr("capture: auto — the run lacks its {part} part and this machine cannot capture it ({why})",
                         part=text(PART_LABEL[part]), why=why_not)
    return True, tr("capture: auto — the run lacks its {part} part and this machine can capture it", part=text(PART_LABEL[part]))


def part(run_dir: str | Path, which: str, capture: str, params_file: str | None = None,
         progress=None) -> dict:
    """Capture `which` into `run_dir` if `decide` says so; returns {'captured': bool, 'why': str,
    'wall_s': float}. A failure lands the run as partial with the reason and re-raises."""
    from .. import params as P

    run_dir = resolve_path(run_dir)
    do, why = decide(run_dir, which, capture)
    if not do:
        return {"captured": False, "why": why, "wall_s": 0.0}
    try:
        params = CaptureConfig.of(P.load(resolve_path(params_file) if params_file else None, {}, consumer="capture"))
    except P.ParamError as e:
        raise CaptureError(str(e)) from e
    gate = session.current().pipeline or None
    early = _after_prior(run_dir, which, params, Path(gate)) if gate and which != PARTS[0] else None
    try:
        return _capture(run_dir, which, why, params, params_file, progress, gate, early)
    except BaseException:
        if early is not None:  # an ncu started early whose targets never came (an ended one is left as it is)
            early.kill()
        raise


def _capture(run_dir: Path, which: str, why: str, params: CaptureConfig, params_file: str | None, progress, gate: str | None,
             early) -> dict:
    """`part` once it captures: the part itself, its manifest entry and the run's status."""
    if which == "setup" or not present(run_dir, "setup"):
        from .workload import check_inputs

        check_inputs(params)  # a model whose inputs cannot be built stops before any GPU work (exit 2)
    progress = progress or Progress()
    t = time.perf_counter()
    manifest = _begin(run_dir, params, params_file)
    held = session.current().locks_held
    from ..clocks import clock_lock

    runner_state = session.current().clock_state
    lock = nullcontext(runner_state) if held else clock_lock(params.lock_clocks)
    try:
        with lock as clock_state:
            if clock_state is not None:
                manifest.setdefault("clock_state", clock_state)
            progress(f"{which}: start ({why})")
            quiet = (lambda: wait_for(lambda: False, Path(gate) / f"{CHAPTER[PARTS[0]]}.ended", None)) if gate else None
            timed = (lambda: (Path(gate) / TIMED).touch()) if gate else None
            _run(which, params, run_dir, manifest, progress, quiet, timed, early)
    except BaseException as e:
        manifest["status"] = "partial"
        manifest["reason"] = f"{which}: {type(e).__name__}: {e}"
        write_manifest(run_dir, manifest)
        progress(f"{which}: failed; the run is marked partial ({manifest['reason']})")
        raise
    wall = time.perf_counter() - t
    manifest["timings_s"][_timing_key(which)] = wall
    from .run import peak_rss_gb

    manifest.setdefault("peak_rss_gb", {})[_timing_key(which)] = peak_rss_gb()
    manifest.setdefault("produced_by", {})[_timing_key(which)] = {
        "chapter": CHAPTER[which], "command": session.current().command or "the chapter run alone (papermill "
                                                                             "or JupyterLab)"}
    missing = [p for p in PARTS if not _done(run_dir, p, params)]
    if missing:
        manifest["status"], manifest["reason"] = "partial", f"capture in progress: {', '.join(missing)} to come"
    else:
        manifest["status"] = "complete"
        manifest.pop("reason", None)
    write_manifest(run_dir, manifest)
    progress(f"{which}: done in {wall:.1f} s")
    return {"captured": True, "why": why, "wall_s": wall}


def _after_prior(run_dir: Path, which: str, params: CaptureConfig, gate: Path):
    """Side by side (`PIPELINE`): wait until the part before `which` is in the run (`await_prior`). The ncu part
    first waits until the timeline's timed passes are over and then starts ncu early (capture.ncu_stage
    `early_ncu`) in the staging folder the part lands from, so its worker's model build overlaps the shapes
    pass; returns that ncu, or None."""
    from .ncu_stage import early_ncu

    early = None
    if which == "ncu":
        wait_for(lambda: (gate / TIMED).exists() or part_done(run_dir, "timeline"),
                 gate / f"{CHAPTER['timeline']}.ended", None)
        if not part_done(run_dir, "timeline") and (gate / TIMED).exists():
            early = early_ncu(params, _fresh_ncu_stage(run_dir), gate / TIMED)
    try:
        await_prior(run_dir, which, gate)
    except BaseException:
        if early is not None:
            early.kill()
        raise
    return early


def await_prior(run_dir: Path, which: str, gate: Path) -> None:
    """Side by side (`PIPELINE`): wait until the part before `which` is in the run. A chapter that captured here
    and ended without its part failed (CaptureError); one that does not capture in this rendering ended from the
    start (`SKIPPED`): nothing to wait for, the part goes on as it would alone."""
    prior = PARTS[PARTS.index(which) - 1]
    marker = gate / f"{CHAPTER[prior]}.ended"
    wait_for(lambda: part_done(run_dir, prior), marker,
             f"the {prior} part was not captured (chapter {CHAPTER[prior]} ended without it), so the {which} part "
             "has nothing to build on", lambda: marker.read_text() == SKIPPED)


def part_done(run_dir: Path, which: str) -> bool:
    """Whether `which` was captured into the run and its manifest entry written (the part's last step)."""
    try:
        return _timing_key(which) in json.loads(RunLayout(run_dir).manifest.read_text()).get("timings_s", {})
    except (OSError, ValueError):
        return False


def wait_for(ready, ended: Path, failed: str | None, there=None, poll_s: float = 0.2) -> None:
    """Block until `ready()` or the chapter whose end `ended` marks has ended (the runner marks a chapter that is
    not capturing in this rendering ended from the start); then, unless `(there or ready)()`, raise
    CaptureError(`failed`) (`failed=None`: waiting for the chapter's end was the point)."""
    while not ready():
        if ended.exists():
            if failed is None or (there or ready)():
                return
            raise CaptureError(failed)
        time.sleep(poll_s)


def _timing_key(which: str) -> str:
    return {"setup": "measure_peaks"}.get(which, which)


def _done(run_dir: Path, which: str, params: CaptureConfig) -> bool:
    if which == "ncu" and params.ncu_top_n == 0:
        return True
    return present(run_dir, which)


def _begin(run_dir: Path, params: CaptureConfig, params_file: str | None) -> dict:
    """The run's manifest, created with the capture's parameters when the run does not exist yet."""
    from .. import env as envmod

    lay = RunLayout(run_dir)
    if lay.manifest.exists():
        return json.loads(lay.manifest.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    lay.raw.mkdir(exist_ok=True)
    manifest = {"kernelbook_run": 1, "run_id": run_dir.name, "status": "partial", "reason": "capture in progress",
                "params": params.capture_params(),
                "params_source": session.current().params_as_given or params_file,
                "git_revision": envmod.git_revision(Path(__file__).parent), "timings_s": {},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_manifest(run_dir, manifest)
    return manifest


def _run(which: str, params: CaptureConfig, run_dir: Path, manifest: dict, progress, quiet=None, timed=None,
         early=None) -> None:
    if which == "setup":
        from .. import env as envmod
        from ..devices import UnknownDeviceError, lookup

        manifest["environment"] = envmod.environment()
        try:
            manifest["device"] = lookup(manifest["environment"]["gpu"]["name"]).key
        except UnknownDeviceError as e:
            manifest["device"], manifest["device_note"] = None, str(e)
        if params.measure_peaks:
            from ..measure import measure_peaks

            manifest["measured_peaks"] = measure_peaks()
        return
    if which == "timeline":
        from .run import timeline_stage

        stage = RunLayout(run_dir).timeline_staging
        if stage.exists():
            shutil.rmtree(stage)
        RunLayout(stage).raw.mkdir(parents=True)
        try:
            timeline_stage(params, stage, manifest, progress, quiet, timed)
        except BaseException:  # stopped mid-way: what the stage holds (e.g. a long generation's windows) lands
            if not RunLayout(stage).timeline.exists():
                raise
            _land_timeline(stage, run_dir)
            raise
        _land_timeline(stage, run_dir)
        return
    _run_ncu(params, run_dir, manifest, progress, early)


def _land_timeline(stage: Path, run_dir: Path) -> None:
    """Move the timeline stage's files into the run, the parquet files last: their presence marks the part."""
    src, dst = RunLayout(stage), RunLayout(run_dir)
    for a, b in ((src.timeline, dst.timeline), (src.phases, dst.phases)):
        os.replace(a, landing(b))
    for f in src.raw.iterdir():
        os.replace(f, dst.raw / f.name)
    if src.steps.exists():  # every plain step's time (long generations: the whole curve)
        os.replace(src.steps, dst.steps)
    for b in (dst.phases, dst.timeline):
        os.replace(landing(b), b)
    shutil.rmtree(stage)


def _fresh_ncu_stage(run_dir: Path) -> Path:
    """An empty staging folder for the ncu part (it lands in the run from there)."""
    stage = RunLayout(run_dir).ncu_staging
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    return stage


def _run_ncu(params: CaptureConfig, run_dir: Path, manifest: dict, progress, early=None) -> None:
    """`early`: the ncu `_start_early_ncu` started in the staging folder."""
    from .ncu_stage import ncu_stage

    run = RunLayout(run_dir)
    stage = run.ncu_staging if early is not None else _fresh_ncu_stage(run_dir)
    shutil.copy(run.timeline, RunLayout(stage).timeline)
    try:
        ncu_stage(params, stage, manifest, say=progress, early=early)
    finally:  # what ncu wrote lands even when it failed half-way (the manifest says partial)
        staged = RunLayout(stage).ncu_dir()
        if staged.exists():
            if run.ncu_dir().exists():
                shutil.rmtree(run.ncu_dir())
            os.replace(staged, run.ncu_dir())
        shutil.rmtree(stage, ignore_errors=True)


def notebook_progress():
    """Progress for a chapter: a line per step on stderr, and an ipywidgets bar for ncu's launches
    when the chapter runs in a kernel."""
    plain = Progress()
    try:
        import ipywidgets as w
        from IPython.display import display
    except ImportError:
        return plain
    bar = {}

    def report(msg: str) -> None:
        plain(msg)
        if msg.strip().startswith("ncu") and "/" in msg and "launches," in msg:
            done, total = msg.split(":", 1)[1].split("launches")[0].strip().split("/")
            if "w" not in bar:
                bar["w"] = w.IntProgress(min=0, max=int(total), description="ncu launches")
                display(bar["w"])
            bar["w"].value = int(done)

    return report
