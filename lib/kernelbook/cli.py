"""kernelbook: render a run's chapters into HTML, capture a run on a GPU machine, or open the chapters in
JupyterLab. Exit code 2 for bad parameters (or parameters the run cannot serve), 1 for a failed run."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import time

T0 = time.perf_counter()  # the command's start, for the capture's progress times (its imports come after)

from . import params as P  # noqa: E402

EXIT_BAD_PARAMS = 2


def _err(msg: str) -> None:
    print(f"kernelbook: {msg}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_worker"]:  # the capture's own subprocess entry, not a user command
        return _worker(argv[1:])
    if argv[:1] == ["lab"]:
        from .lab import launch

        return launch(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m kernelbook", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{book,capture,diff,lab}")
    b = sub.add_parser("book", help="render the chapters of a run into HTML")
    b.add_argument("--params", help="params YAML (overrides)")
    b.add_argument("--run", help=f"run directory (default: {P.BUNDLED_RUN})")
    b.add_argument("--out", help="report folder (default: reports/<run-id>)")
    b.add_argument("--chapters", help="comma-separated chapter stems to render (default: all)")
    b.add_argument("--language", choices=P.SCHEMA["language"].choices,
                   help="narrative language of the book (default: the params file's, else en)")
    c = sub.add_parser("capture", help="capture a run on a GPU machine")
    c.add_argument("--params", help="params YAML (overrides)")
    c.add_argument("--out", required=True, help="new run directory, e.g. data/runs/<run-id>")
    d = sub.add_parser("diff", help="compare two runs: per-phase time, category shares, matched kernels, ncu deltas")
    d.add_argument("run_a")
    d.add_argument("run_b")
    sub.add_parser("lab", help="open the chapters in JupyterLab as notebooks (any further arguments go to "
                   "`jupyter lab`, e.g. --no-browser --port 8888)")
    args = ap.parse_args(argv)
    if args.cmd == "diff":
        return _diff(args.run_a, args.run_b)
    # every path the caller gives is resolved once, here, against the caller's folder, and travels on absolute:
    # the chapters run in the repository, where a relative path would name another file
    cwd = Path.cwd()
    params_path = str(cwd / Path(args.params).expanduser()) if args.params else None
    out_dir = cwd / Path(args.out).expanduser() if getattr(args, "out", None) else None
    try:
        overrides = {"run_dir": args.run} if getattr(args, "run", None) else {}
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
        try:
            out = render_book(params, out_dir, chapters=chapters, run_as_given=args.run, params_as_given=args.params)
        except BookError as e:
            _err(str(e))
            return e.exit_code
        except KeyboardInterrupt:
            _err(f"book stopped by the user; nothing replaced: the previous report in {out_dir or 'reports/'} is kept")
            return 130
        print(f"report: {out / 'index.html'}")
        return 0
    if args.cmd == "capture":
        from .capture.run import CaptureError, CaptureStopped, Progress, capture

        try:
            run = capture(params, out_dir, params_source=args.params, progress=Progress(T0))
        except CaptureError as e:
            _err(str(e))
            return EXIT_BAD_PARAMS
        except (CaptureStopped, KeyboardInterrupt) as e:
            _err(f"capture stopped ({type(e).__name__}: {e}); partial run kept at {args.out} (status: partial)")
            return 130
        except Exception as e:  # the run directory is kept, marked partial with the reason
            _err(f"capture failed: {type(e).__name__}: {e}\n  partial run kept at {args.out} (status: partial)")
            return 1
        print(f"run: {run}")
        return 0
    return 1


def _diff(a: str, b: str) -> int:
    from .analyze.compare import text_report
    from .escape import terminal
    from .load.run import RunError, load_run
    from .params import resolve_path

    try:
        runs = [load_run(resolve_path(x)) for x in (a, b)]
    except RunError as e:
        _err(f"diff: {e}")
        return EXIT_BAD_PARAMS
    print(terminal(text_report(*runs)))  # kernel names from the runs: no escape sequence reaches the terminal
    return 0


def _worker(argv: list[str]) -> int:
    w = argparse.ArgumentParser(prog="python -m kernelbook _worker")
    w.add_argument("--params", required=True)
    w.add_argument("--mode", choices=("ncu", "nsys", "tp-timeline", "tp-exec"), required=True)
    w.add_argument("--target")
    w.add_argument("--targets")
    w.add_argument("--early", help="ncu by op call, started before the targets exist: <gate file>:<owner pid>")
    w.add_argument("--profile-gate", action="store_true",
                   help="ncu by op call under --profile-from-start off: cudaProfilerStart/Stop around each target")
    w.add_argument("--out", help="tp-timeline: the folder each rank writes its rank<N> tables into")
    args = w.parse_args(argv)
    from .capture.run import tp_rank_worker, worker

    if args.mode == "tp-exec":  # one torchrun rank of the ncu stage: ncu around the worker, or the worker
        launch = json.loads(Path(args.params).read_text())
        profiled = int(os.environ["RANK"]) == launch["ncu_rank"]
        if not profiled:
            os.environ["KB_NCU_PLAIN_RANK"] = "1"
        cmd = launch["ncu"] if profiled else launch["plain"]
        os.execvp(cmd[0], cmd)
    if args.mode == "tp-timeline":
        tp_rank_worker(json.loads(Path(args.params).read_text()), args.out)
        return 0
    worker(json.loads(Path(args.params).read_text()), args.mode, args.target, args.targets, args.early,
           args.profile_gate)
    # what it wrote is on disk, its output flushed: end without tearing the model down (freeing a model's tensors
    # under ncu's interception only delays the report; H100: the report 0.25 s after the worker's last line).
    # Not a torchrun rank: its process group ends as it was measured on 2x H200.
    if args.mode == "ncu" and "WORLD_SIZE" not in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
