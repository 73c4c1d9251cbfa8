"""The report folder a render writes (`book --out`): the book's alone, never a run, a home or someone's files.

A render writes into a staging folder beside `out` and swaps it in at the end (`runner.render_book`). Before
anything is written, `guard` refuses — `OutRefused`, exit 2, one line saying why and what to pass instead — an
`out` that

- is or contains the filesystem root, the home folder or the kernelbook repository;
- is, contains or lies inside a run directory (a folder holding `manifest.json`, or a run the parameters name);
- exists and is not a folder, or is a folder holding anything but an earlier kernelbook report (one with the
  `MARKER` file the runner writes, or, rendered before the marker existed, only the file names a report has);
  an empty folder is fine;
- lies under a folder this process cannot write;
- would receive some chapters (`--chapters`) of another run, or in another language, than the book it holds
  (a mix of two books).

The swap replaces only what the runner wrote: an entry of the earlier report that its marker does not list (a
reader's notes) moves into the new report. A render stopped hard (SIGKILL) leaves its staging folder behind;
the next render beside it removes it when its process is gone and it holds nothing but the runner's files.
"""
from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .contract.layout import RunLayout
from .params import REPO

MARKER = ".kernelbook-report.json"
# the file names a report holds (before the marker existed, a report was recognised by these alone)
REPORT_FILE = re.compile(r"(index\.html|glossary\.html|timings\.json|report\.md|plotly\.min\.js|\d\d_[A-Za-z0-9_]+\.(html|ipynb))")
STAGING = ".{name}.staging-"
JUPYTER_OWN = (".ipynb_checkpoints",)  # what JupyterLab leaves in a report a reader opened: carried over, never ours
IPC_PREFIX = "kernelbook-ipc-"


class OutRefused(ValueError):
    """`out` cannot take the book: one line, exit code 2, nothing written."""


@dataclass(frozen=True)
class Earlier:
    """The report `out` holds: the entries the runner wrote there, and (when its marker says) which run and
    language it is the book of."""

    files: frozenset[str]
    run_id: str | None
    language: str | None


def _short(p: Path) -> str:
    s = str(p)
    return s if len(s) <= 120 else "…" + s[-119:]


def _within(a: Path, b: Path) -> bool:
    """a is b or lies inside b."""
    return a == b or b in a.parents


def _is_run(q: Path) -> bool:
    """A folder holding a kernelbook run's manifest (another program's manifest.json is no run)."""
    m = RunLayout(q).manifest
    if not m.is_file():  # never open a FIFO or a device
        return False
    try:
        with open(m, "rb") as f:
            return b'"kernelbook_run"' in f.read(4096)
    except OSError:
        return False


def _earlier(p: Path) -> Earlier | None:
    """The report in the existing folder `p`, or None when it holds anything else (empty: an empty Earlier)."""
    entries = list(p.iterdir())
    names = {e.name for e in entries}
    if MARKER in names:
        try:
            m = json.loads((p / MARKER).read_text(encoding="utf-8"))
            if isinstance(m.get("files"), list):
                return Earlier(frozenset(map(str, m["files"])), m.get("run_id"), m.get("language"))
        except (OSError, ValueError, AttributeError):
            pass  # a damaged marker: judged by its file names, as an old report
    if not entries:
        return Earlier(frozenset(), None, None)
    if "index.html" in names and all(REPORT_FILE.fullmatch(e.name) and e.is_file() for e in entries
                                     if e.name not in (MARKER, *JUPYTER_OWN)):
        # a report rendered before the marker: its index is kernelbook's, and it holds only report files
        head = (p / "index.html").read_text(errors="replace")[:4096]
        if "<title>kernelbook — " in head:
            run_id = re.search(r"<h1>kernelbook: (.*?)</h1>", head)
            return Earlier(frozenset(names - {MARKER, *JUPYTER_OWN}), run_id.group(1) if run_id else None, None)
    return None


def guard(out: Path, runs: list[Path], run_id: str, language: str, some_chapters: bool) -> tuple[Path, Earlier | None]:
    """`out` resolved (symbolic links followed), and the earlier report it holds (None when it does not exist or is
    empty), or OutRefused saying why and what to pass instead. `runs`: every run the parameters name;
    `some_chapters`: only some chapters are rendered (`--chapters`), which keeps the others of the earlier report."""
    instead = f"pass a new folder, e.g. --out reports/{run_id}"
    p = Path(os.path.abspath(Path(out).expanduser())).resolve()
    if p == Path(p.anchor):
        raise OutRefused(f"--out {_short(p)} is the filesystem root: the book writes only into a folder of its own; "
                         f"{instead}")
    for what, q in (("your home folder", Path.home().resolve()), ("the kernelbook repository", REPO.resolve())):
        if _within(q, p):
            raise OutRefused(f"--out {_short(p)} {'is' if p == q else 'contains'} {what}: the book replaces the "
                             f"whole folder it writes; {instead}")
    for r in runs:
        r = Path(r).resolve()
        if _within(p, r) or _within(r, p):
            where = "is" if p == r else ("lies inside" if _within(p, r) else "contains")
            raise OutRefused(f"--out {_short(p)} {where} the run {_short(r)}: a report never goes into or around a "
                             f"run; {instead}")
    for q in (p, *p.parents):
        if _is_run(q):
            raise OutRefused(f"--out {_short(p)} {'is' if q == p else 'lies inside'} the run directory {_short(q)} "
                             f"(it holds manifest.json); {instead}")
    earlier = None
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise OutRefused(f"--out {_short(p)} is a file, not a folder: the book is a folder of HTML pages; "
                             f"{instead}")
        earlier = _earlier(p)
        if earlier is None:
            foreign = sorted(e.name for e in p.iterdir() if e.name not in (MARKER, *JUPYTER_OWN)
                             and not REPORT_FILE.fullmatch(e.name))
            shown = ", ".join(n[:40] for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise OutRefused(f"--out {_short(p)} holds files kernelbook did not write ({shown}): the book writes "
                             f"only into a new or empty folder or over an earlier kernelbook report; {instead}")
        if not earlier.files:
            earlier = None
    if some_chapters and earlier is not None:
        if earlier.run_id is not None and earlier.run_id != run_id or \
                earlier.language is not None and earlier.language != language:
            raise OutRefused(
                f"--out {_short(p)} holds the book of {earlier.run_id or '?'} ({earlier.language or '?'}); adding "
                f"chapters of {run_id} ({language}) would mix two books: render every chapter (no --chapters) or "
                f"{instead}")
        if "timings.json" in earlier.files:
            try:
                json.loads((p / "timings.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise OutRefused(f"{_short(p / 'timings.json')} is damaged, so the chapters --chapters leaves out "
                                 "cannot be kept: render every chapter (no --chapters) to rebuild the book") from None
    parent = next(q for q in p.parents if q.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise OutRefused(f"--out {_short(p)}: cannot write in {_short(parent)} (no permission, or a read-only "
                         f"filesystem); {instead} where you can write")
    return p, earlier


def stage(out: Path, run_id: str, language: str) -> Path:
    """A new staging folder beside `out` (its parents made), marked as the runner's; leftovers of renders whose
    process is gone are swept first. OutRefused when the folder cannot be made (no permission), OSError for
    the environment (a full disk)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep(out)
        s = Path(tempfile.mkdtemp(prefix=STAGING.format(name=out.name) + f"{os.getpid()}-", dir=out.parent))
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise OutRefused(f"--out {_short(out)}: cannot write in {_short(out.parent)} ({e.strerror}); pass a "
                             "folder you can write") from None
        raise
    mark(s, run_id, language)
    return s


def mark(folder: Path, run_id: str, language: str) -> None:
    """The marker: this folder is a kernelbook report, and these are the entries the runner wrote in it."""
    files = sorted(e.name for e in folder.iterdir() if e.name != MARKER)
    (folder / MARKER).write_text(json.dumps({"kernelbook_report": 1, "run_id": run_id, "language": language,
                                             "files": files}, indent=1), encoding="utf-8")


def swap(stage_dir: Path, out: Path, earlier: Earlier | None, run_id: str, language: str) -> None:
    """The staging folder becomes `out`. Of the earlier report only what the runner wrote goes: anything else in it
    moves into the new report (renamed `<name>.kept` where the new report has an entry of that name). Ctrl-C and
    SIGTERM wait until the swap is done; a failure half-way puts the earlier report back as it was."""
    mark(stage_dir, run_id, language)
    if not out.exists():
        os.replace(stage_dir, out)
        return
    wrote = (earlier.files if earlier is not None else frozenset()) | {MARKER}
    with _signals_held():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
        prev = old / "report"
        os.replace(out, prev)
        moved = []
        try:
            for e in list(prev.iterdir()):
                if e.name not in wrote:
                    to = stage_dir / e.name
                    while to.exists() or to.is_symlink():
                        to = to.with_name(to.name + ".kept")
                    os.replace(e, to)
                    moved.append((e, to))
            os.replace(stage_dir, out)
        except BaseException:
            for e, to in reversed(moved):
                os.replace(to, e)
            os.replace(prev, out)
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back (delivered when the block ends); in the main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def failed_dest(out: Path) -> Path:
    """Where a failed render's staging folder goes: `<out>.failed`, replacing an earlier one only when that is the
    runner's own (else `<out>.failed-<n>`)."""
    dest = out.with_name(out.name + ".failed")
    n = 1
    while dest.exists() or dest.is_symlink():
        if dest.is_dir() and not dest.is_symlink() and _ours(dest):
            shutil.rmtree(dest)
            break
        n += 1
        dest = out.with_name(f"{out.name}.failed-{n}")
    return dest


def _ours(folder: Path) -> bool:
    """The folder holds the marker and nothing but the runner's files (report files, chapter sources)."""
    names = [e.name for e in folder.iterdir()]
    return MARKER in names and all(n == MARKER or REPORT_FILE.fullmatch(n) or n.endswith(".src.ipynb")
                                   for n in names)


def _gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweep(out: Path) -> list[Path]:
    """Remove what renders stopped hard (SIGKILL) left: staging folders beside `out` and IPC folders in the temp
    folder, of processes that are gone. A staging folder holding anything but the runner's files is kept."""
    removed = []
    prefix = STAGING.format(name=out.name)
    candidates = [d for d in out.parent.glob(f"{glob.escape(prefix)}*") if d.is_dir() and _ours(d)]
    candidates += [d for d in Path(tempfile.gettempdir()).glob(f"{IPC_PREFIX}*") if d.is_dir()]
    for d in candidates:
        tail = d.name.split("staging-", 1)[1] if d.name.startswith(prefix) else d.name[len(IPC_PREFIX):]
        pid = tail.split("-", 1)[0]
        if pid.isdigit() and _gone(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
