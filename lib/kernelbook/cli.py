"""kernelbook: render a run's chapters into HTML, capture a run on a GPU machine, or open the chapters in
JupyterLab. Exit code 2 for bad parameters (or parameters the run cannot serve), 1 for a failed run."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import time

T0 = time.perf_counter()  # the command's start, for the capture's progress times (its imports come after)

from . import params as P  # noqa: E402

EXIT_BAD_PARAMS = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM: the book stops as on Ctrl-C (its staging folder removed, the previous report kept)."""


def _terminated(signum, frame):
    raise Terminated()


def _err(msg: str) -> None:
    print(f"kernelbook: {msg}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_worker"]:  # the capture's own subprocess entry, not a user command
        return _worker(argv[1:])
    if argv[:1] == ["_points"]:  # the study's own subprocess entry: points chained in one process
        return _points(argv[1:])
    if argv[:1] == ["lab"]:
        from .lab import launch

        return launch(argv[1:])
    prog = "kernelbook" if Path(sys.argv[0]).name == "kernelbook" else "python -m kernelbook"  # the console command
    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{book,capture,study,diff,lab}")
    b = sub.add_parser("book", help="render the chapters of a run into HTML")
    b.add_argument("--params", help="params YAML (overrides)")
    b.add_argument("--run", help=f"run directory (default: {P.BUNDLED_RUN})")
    b.add_argument("--out", help="report folder (default: reports/<run-id>)")
    b.add_argument("--chapters", help="comma-separated chapter stems to render (default: all)")
    b.add_argument("--study", help=f"study folder the serving chapter reads (default: {P.BUNDLED_STUDY})")
    b.add_argument("--language", choices=P.SCHEMA["language"].choices,
                   help="narrative language of the book (default: the params file's, else en)")
    c = sub.add_parser("capture", help="capture a run on a GPU machine")
    c.add_argument("--params", help="params YAML (overrides)")
    c.add_argument("--out", required=True, help="new run directory, e.g. data/runs/<run-id>")
    s = sub.add_parser("study", help="capture a grid of capture parameters (e.g. batch sizes), one run per point")
    s.add_argument("--params", required=True, help="study YAML: base, set, grid (see params/study-serving.yaml)")
    s.add_argument("--out", required=True, help="study folder, e.g. data/studies/<id> (a rerun resumes it)")
    s.add_argument("--gpus", help="comma-separated GPU indices: points side by side, one per GPU")
    s.add_argument("--point", type=int, help="run only this point (0-based; a Slurm array task)")
    s.add_argument("--slurm", action="store_true",
                   help="write <out>/slurm.sh, a Slurm array job of the points, and run nothing (a dry run)")
    d = sub.add_parser("diff", help="compare two runs: per-phase time, category shares, matched kernels, ncu deltas")
    d.add_argument("run_a")
    d.add_argument("run_b")
    sub.add_parser("lab", help="open the chapters in JupyterLab as notebooks (any further arguments go to "
                   "`jupyter lab`, e.g. --no-browser --port 8888)")
    args = ap.parse_args(argv)
    if args.cmd == "diff":
        return _diff(args.run_a, args.run_b)
    if args.cmd == "study":
        return _study(args)
    # every path the caller gives is resolved once, here, against the caller's folder, and travels on absolute:
    # the chapters run in the repository, where a relative path would name another file
    cwd = Path.cwd()
    params_path = str(cwd / Path(args.params).expanduser()) if args.params else None
    out_dir = cwd / Path(args.out).expanduser() if getattr(args, "out", None) else None
    try:
        overrides = {"run_dir": args.run} if getattr(args, "run", None) else {}
        if getattr(args, "study", None) is not None:  # "" asks for none
            overrides["study_dir"] = args.study
        if args.cmd == "book" and args.params:  # the capture chapters take their capture parameters from it
            overrides["params_file"] = args.params
        if getattr(args, "language", None):
            overrides["language"] = args.language
        params = P.load(params_path, overrides, consumer=args.cmd, base=cwd)
    except P.ParamError as e:
        _err(str(e))
        return EXIT_BAD_PARAMS
    if args.cmd == "book":
        from .runner import BookError, render_book

        chapters = args.chapters.split(",") if args.chapters else None
        signal.signal(signal.SIGTERM, _terminated)  # a SIGTERM stops the book as Ctrl-C does
        kept = f"nothing replaced: the previous report in {out_dir or 'reports/'} is kept"
        try:
            out = render_book(params, out_dir, chapters=chapters, run_as_given=args.run, params_as_given=args.params)
        except BookError as e:
            _err(str(e))
            return e.exit_code
        except Terminated:
            _err(f"book stopped (SIGTERM); {kept}")
            return 143
        except KeyboardInterrupt:
            _err(f"book stopped by the user; {kept}")
            return 130
        except OSError as e:  # the machine, not the parameters: a full disk, a folder gone under the render
            where = f" ({e.filename})" if e.filename else ""
            _err(f"book failed writing the report: {e.strerror or e}{where}; {kept}, its staging folder removed")
            return 1
        print(f"report: {out / 'index.html'}")
        return 0
    if args.cmd == "capture":
        return _capture(params, out_dir, args.params, args.out, T0)
    return 1


def _capture(params: dict, out_dir: Path, params_source: str | None, shown_out: str, t0: float) -> int:
    """One capture as the `capture` command runs it: its exit code, its messages on stderr."""
    from .capture.common import CaptureError, CaptureStopped, Progress
    from .capture.ncu import NcuStopped
    from .capture.run import capture
    from .contract.config import CaptureConfig

    try:
        run = capture(CaptureConfig.of(params), out_dir, params_source=params_source, progress=Progress(t0))
    except CaptureError as e:
        _err(str(e))
        return EXIT_BAD_PARAMS
    except (CaptureStopped, NcuStopped, KeyboardInterrupt) as e:
        _err(f"capture stopped ({type(e).__name__}: {e}); partial run kept at {shown_out} (status: partial)")
        return 130
    except Exception as e:  # the run directory is kept, marked partial with the reason
        _err(f"capture failed: {type(e).__name__}: {e}\n  partial run kept at {shown_out} (status: partial)")
        return 1
    print(f"run: {run}", flush=True)
    return 0


def _points(argv: list[str]) -> int:
    """`kernelbook _points <chain.json>`: the study's points captured one after another in this process (`study`
    chains points that share a model on one GPU), the model built once (`capture.models.KEEP_MODEL`) and each step
    compiled afresh. Each point's messages go to its own stderr file; a marker file says when it started and how it
    ended. Stops at a stopped point (exit 130), or where the GPU is no longer usable after a failure (the study
    starts the points left in a new process)."""
    from .capture import models

    models.KEEP_MODEL = True
    for i, e in enumerate(json.loads(Path(argv[0]).read_text())):
        sys.stderr.flush()
        fd = os.open(e["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
        t0 = time.perf_counter()
        Path(e["started"]).write_text(json.dumps({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        if i:
            models.fresh_compile()
        try:
            params = P.load(e["params"], {}, consumer="capture", base=Path.cwd())
        except P.ParamError as err:
            _err(str(err))
            rc = EXIT_BAD_PARAMS
        else:
            rc = _capture(params, Path(e["out"]), e["params"], e["out"], t0)
        Path(e["ended"]).write_text(json.dumps({"rc": rc, "seconds": round(time.perf_counter() - t0, 1)}))
        if rc == 130:
            return rc
        if rc not in (0, EXIT_BAD_PARAMS) and not _gpu_usable():
            _err("the GPU is not usable after this point's failure; the study captures the points left in a new "
                 "process")
            return rc
    return 0


def _gpu_usable() -> bool:
    try:
        import torch

        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def _study(args) -> int:
    from . import study as S

    cwd = Path.cwd()
    out = cwd / Path(args.out).expanduser()
    try:
        st = S.load_study(cwd / Path(args.params).expanduser())
    except P.ParamError as e:
        _err(str(e))
        return EXIT_BAD_PARAMS
    problems = []
    gpus = [g.strip() for g in args.gpus.split(",")] if args.gpus else None
    if gpus is not None and (not all(g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus)):
        problems.append(f"--gpus: {P.shown(args.gpus, bare=True)} is not a list of distinct GPU indices (e.g. 0,1)")
    if args.point is not None and not 0 <= args.point < len(st.points):
        problems.append(f"--point: {args.point} is not a point of this study (0 to {len(st.points) - 1})")
    if out.exists() and not out.is_dir():
        problems.append(f"--out: {args.out} exists and is not a folder")
    if problems:
        _err(str(P.ParamError(problems, "the command line")))
        return EXIT_BAD_PARAMS
    if args.slurm:
        out.mkdir(parents=True, exist_ok=True)
        script = out / "slurm.sh"
        script.write_text(S.slurm_script(args.params, args.out, len(st.points)))
        print(f"slurm job: {script} ({len(st.points)} array tasks; submit with `sbatch {script}`)")
        return 0
    signal.signal(signal.SIGTERM, _terminated)  # a SIGTERM stops the running captures, which land partial
    try:
        return S.run_study(st, out, gpus=gpus, only=args.point)
    except KeyboardInterrupt as e:
        _err(f"study stopped ({'SIGTERM' if isinstance(e, Terminated) else 'by the user'}); the points it held are "
             f"kept in {args.out} (see study.json), a rerun resumes")
        return 143 if isinstance(e, Terminated) else 130


# diff's own door, before the run's door check (load_run → check_run) reads anything: limits on what it opens
DIFF_MANIFEST_MAX_BYTES = 4 << 20  # the bundled manifests are 8–20 kB
DIFF_TABLE_MAX_BYTES = 512 << 20   # per Parquet table: the bundled timelines are ~1 MB for 53 000 rows
DIFF_TABLE_MAX_ROWS = 10_000_000   # a table compressed small can still unfold into more rows than memory holds
DIFF_TIME_S = 300  # the whole diff (the bundled pair: ~1.5 s); KERNELBOOK_DIFF_TIME_S sets another limit


def _diff_files(run: Path) -> None:
    """RunError unless every file of `run` the diff opens (manifest.json, the Parquet tables beside it and under
    ncu/) is a regular file within its limit: a FIFO blocks its reader for ever, a device (a link to /dev/zero)
    is read without end, a folder named like a table is read as a dataset."""
    import stat

    import pyarrow.parquet as pq

    from .contract.layout import RunLayout
    from .load.run import RunError

    try:
        is_dir = run.is_dir()
    except (ValueError, OSError) as e:  # a NUL byte, a name too long
        raise RunError(f"{str(run)[:200]!r} is no path ({e})") from None
    if not is_dir:
        raise RunError(f"{run} is not a folder: no run there")
    mf = RunLayout(run).manifest
    if not mf.exists():
        raise RunError(f"{run} has no {mf.name}: not a kernelbook run (or its capture never started)")
    files = [mf] + RunLayout(run).table_files()  # no link followed below ncu/: a link loop cannot keep it walking
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue  # a link to nothing: the door check finds the table missing
        if not stat.S_ISREG(st.st_mode):
            what = next((w for test, w in kinds if test(st.st_mode)), "not a plain file")
            via = f" (a link to {str(os.readlink(f))[:80]})" if f.is_symlink() else ""
            raise RunError(f"{f}: {what}{via}, not a regular file; a run holds plain files only: not read")
        limit = DIFF_MANIFEST_MAX_BYTES if f == mf else DIFF_TABLE_MAX_BYTES
        if st.st_size > limit:
            raise RunError(f"{f}: {st.st_size / 2**20:.1f} MiB, over diff's limit of {limit >> 20} MiB for this "
                           "file: not read")
        if f != mf:
            try:
                rows = pq.read_metadata(f).num_rows
            except Exception:
                continue  # not Parquet: the door check names it
            if rows > DIFF_TABLE_MAX_ROWS:
                raise RunError(f"{f}: {rows:,} rows, over diff's limit of {DIFF_TABLE_MAX_ROWS:,}: not read")


def _diff(a: str, b: str) -> int:
    """Compare two runs (`analyze.compare.text_report`). Each run passes diff's own file check (`_diff_files`)
    and the run's door check before anything is compared; the whole diff has a time limit (`DIFF_TIME_S`).
    Exit 2: a run refused (one line naming the file); 1: past the time limit, or the comparison failed."""
    import signal
    import threading

    from .analyze.compare import text_report
    from .escape import terminal
    from .load.run import RunError, load_run
    from .params import resolve_path

    def one_line(s) -> str:
        return " ".join(terminal(s).split())[:400]

    try:
        limit = float(os.environ.get("KERNELBOOK_DIFF_TIME_S", DIFF_TIME_S))
        if not 0 < limit <= 86400:
            raise ValueError
    except ValueError:
        _err(f"diff: KERNELBOOK_DIFF_TIME_S is {one_line(os.environ['KERNELBOOK_DIFF_TIME_S'])[:40]!r}, expected "
             "seconds, more than 0 and at most 86400")
        return EXIT_BAD_PARAMS
    doing = ["checking the runs' files"]  # what the time limit cut short, for its message

    class TimeUp(BaseException):  # not an Exception: no `except Exception` on the way swallows it
        pass

    def time_up(*_):
        raise TimeUp

    # the alarm stops Python code; a read stuck in native code never returns to it, so a watchdog ends the process
    def stuck():
        _err(f"diff: stopped after {limit:g} s (the time limit) while {doing[0]}; a read did not return")
        os._exit(1)

    alarm = threading.current_thread() is threading.main_thread()
    if alarm:
        before = signal.signal(signal.SIGALRM, time_up)
        signal.setitimer(signal.ITIMER_REAL, limit)
    watchdog = threading.Timer(limit + 10, stuck)
    watchdog.daemon = True
    watchdog.start()
    try:
        paths = [resolve_path(x) for x in (a, b)]
        for p in paths:
            _diff_files(p)
        runs = []
        for tag, p in zip("AB", paths):
            doing[0] = f"loading run {tag} ({one_line(p)[:200]})"
            runs.append(load_run(p))
        doing[0] = "comparing the runs"
        report = text_report(*runs)
    except TimeUp:
        _err(f"diff: stopped after {limit:g} s (the time limit) while {doing[0]}; KERNELBOOK_DIFF_TIME_S sets "
             "another limit")
        return 1
    except RunError as e:  # RunDamaged too: the file and what is wrong with it
        _err(f"diff: {one_line(e)}")
        return EXIT_BAD_PARAMS
    except KeyboardInterrupt:
        _err("diff stopped by the user")
        return 130
    except Exception as e:  # a run the checks let through, or a bug: one line, not a traceback
        _err(f"diff: failed while {doing[0]}: {type(e).__name__}: {one_line(e)[:200]} (a damage the door check "
             "misses, or a bug: please report it with both runs)")
        return 1
    finally:
        watchdog.cancel()
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
    try:
        print(terminal(report))  # kernel names from the runs: no escape sequence reaches the terminal
        sys.stdout.flush()
    except BrokenPipeError:  # `diff A B | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _worker(argv: list[str]) -> int:
    w = argparse.ArgumentParser(prog="python -m kernelbook _worker")
    w.add_argument("--params", required=True)
    w.add_argument("--mode", choices=("ncu", "nsys", "nsys-capture", "tp-timeline", "tp-shapes", "tp-nsys", "tp-exec"),
                   required=True)
    w.add_argument("--target")
    w.add_argument("--targets")
    w.add_argument("--early", help="ncu by op call, started before the targets exist: <gate file>:<owner pid>; "
                   "nsys, nsys-capture: the go file its timed generates wait for: <go file>:<owner pid>")
    w.add_argument("--profile-gate", action="store_true",
                   help="ncu by op call under --profile-from-start off: cudaProfilerStart/Stop around each target")
    w.add_argument("--ranges", help="ncu's range pass: the steps and spans of op calls to measure as ranges")
    w.add_argument("--out", help="tp-timeline, tp-shapes, tp-nsys: the raw/ folder each rank writes its rank<N> "
                   "tables into; nsys: the file the measured generate's seconds go to; nsys-capture: the run folder "
                   "of the timeline stage")
    args = w.parse_args(argv)
    from .capture.ncu_worker import worker
    from .capture.torch_backend import tp_rank_worker
    from .contract.config import CaptureConfig

    if args.mode == "tp-exec":  # one torchrun rank of the ncu stage: ncu around the worker, or the worker
        launch = json.loads(Path(args.params).read_text())
        profiled = int(os.environ["RANK"]) == launch["ncu_rank"]
        if not profiled:
            os.environ["KB_NCU_PLAIN_RANK"] = "1"
        cmd = launch["ncu"] if profiled else launch["plain"]
        os.execvp(cmd[0], cmd)
    if args.mode == "tp-nsys":  # one torchrun rank of an nsys timeline: nsys around the rank's worker
        from .capture.nsys import tp_rank_exec

        tp_rank_exec(Path(args.params), Path(args.out))
    if args.mode == "nsys-capture":  # the timeline stage's own process under nsys
        from .capture.torch_backend import nsys_capture_worker

        nsys_capture_worker(CaptureConfig.of(json.loads(Path(args.params).read_text())), Path(args.out), args.early)
        return 0
    if args.mode in ("tp-timeline", "tp-shapes"):
        tp_rank_worker(CaptureConfig.of(json.loads(Path(args.params).read_text())), args.out, args.mode)
        return 0
    worker(CaptureConfig.of(json.loads(Path(args.params).read_text())), args.mode, args.target, args.targets, args.early,
           args.profile_gate, args.ranges, args.out)
    # what it wrote is on disk, its output flushed: end without tearing the model down (freeing a model's tensors
    # under ncu's interception only delays the report; H100: the report 0.25 s after the worker's last line).
    # Not a torchrun rank: its process group ends as it was measured on 2x H200.
    if args.mode == "ncu" and "WORLD_SIZE" not in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if "WORLD_SIZE" in os.environ:  # a tensor-parallel rank (ncu or nsys): it ends with the other ranks
        from .capture.torch_backend import end_rank

        end_rank()
    return 0


def _console() -> None:
    """The `kernelbook` command an install puts on PATH (pyproject's [project.scripts])."""
    sys.exit(main())
