"""The report folder is the book's alone (issue 39): an --out that is, contains or lies inside a run, the
repository, the home folder or the root, an existing file or a folder of someone's files is refused before
anything is written (exit 2, one line, no traceback), and every bystander file survives byte for byte; the swap
replaces only what the runner wrote; SIGTERM, a hard kill and a full disk leave nothing behind."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, RUN, earlier_report
from kernelbook import outdir

QWEN = REPO / "data" / "runs" / "qwen3-moe-h100"


def _book(cwd, *args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "kernelbook", "book", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


def _tree(folder: Path) -> dict:
    """Every file under `folder` by relative path → its bytes' hash (folders as entries too)."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def _bystanders(folder: Path) -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "src" / "analysis.py").write_text("print('mine')\n")
    return folder


def _refused(proc, *says):
    msg = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, msg)
    assert "Traceback" not in msg and proc.stdout == "", msg
    assert len(msg.splitlines()) <= 2 and msg.startswith("kernelbook: "), msg  # one line, then 'nothing rendered'
    assert all(s in msg for s in says), msg
    return msg


@pytest.fixture
def run_copy(tmp_path):
    dst = tmp_path / "runs" / "X"
    shutil.copytree(RUN, dst, ignore=shutil.ignore_patterns("raw"))
    return dst


def test_out_is_the_run(tmp_path, run_copy):
    before = _tree(run_copy)
    _refused(_book(tmp_path, "--run", "runs/X", "--chapters", "00_setup", "--out", "runs/X"), "is the run")
    assert _tree(run_copy) == before
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["X"]  # no staging folder beside it


def test_out_inside_or_around_a_run(tmp_path, run_copy):
    before = _tree(tmp_path)
    _refused(_book(tmp_path, "--run", "runs/X", "--chapters", "00_setup", "--out", "runs/X/report"), "lies inside")
    _refused(_book(tmp_path, "--run", "runs/X", "--chapters", "00_setup", "--out", "runs"), "contains the run")
    assert _tree(tmp_path) == before


def test_out_dot_in_a_folder_of_files(tmp_path):
    work = _bystanders(tmp_path / "work")
    before = _tree(work)
    _refused(_book(work, "--chapters", "00_setup", "--out", "."), "did not write", "notes.txt")
    assert _tree(work) == before


def test_out_home_root_repository_and_parent(tmp_path):
    home = _bystanders(tmp_path / "home")
    before = _tree(tmp_path)
    _refused(_book(tmp_path, "--chapters", "00_setup", "--out", "~", env={"HOME": str(home)}), "home folder")
    _refused(_book(tmp_path, "--chapters", "00_setup", "--out", "/"), "filesystem root")
    _refused(_book(tmp_path, "--chapters", "00_setup", "--out", str(REPO)), "is the kernelbook repository")
    # the folder above the repository: named as what it is first (the root or a home folder where the clone is there)
    msg = _refused(_book(tmp_path, "--chapters", "00_setup", "--out", str(REPO.parent)))
    assert any(s in msg for s in ("contains the kernelbook repository", "filesystem root", "home folder")), msg
    _refused(_book(home / "src", "--chapters", "00_setup", "--out", ".."), "did not write")
    assert _tree(tmp_path) == before  # nothing written, no staging folder in the working directory


def test_out_an_existing_file(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me\n")
    _refused(_book(tmp_path, "--chapters", "00_setup", "--out", "notes.txt"), "is a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"


def test_some_chapters_into_another_runs_book(tmp_path):
    out = earlier_report(tmp_path / "book", "the DeepSeek book", run_id=RUN.name)
    before = _tree(out)
    _refused(_book(tmp_path, "--run", str(QWEN), "--chapters", "00_setup", "--out", "book"),
             "would mix two books", RUN.name, QWEN.name)
    _refused(_book(tmp_path, "--chapters", "00_setup", "--language", "zh", "--out", "book"), "would mix two books")
    assert _tree(out) == before


def test_some_chapters_over_a_damaged_timings_file(tmp_path):
    out = earlier_report(tmp_path / "book", "the book")
    (out / "timings.json").write_text("[{")
    outdir.mark(out, RUN.name, "en")
    before = _tree(out)
    _refused(_book(tmp_path, "--chapters", "00_setup", "--out", "book"), "timings.json is damaged",
             "render every chapter")
    assert _tree(out) == before


def test_the_swap_replaces_only_what_the_runner_wrote(tmp_path):
    """A reader's notes in an earlier report survive the next render byte for byte; a report rendered before the
    marker existed (its index kernelbook's, only report files) is replaced like a marked one."""
    out = tmp_path / "book"
    proc = _book(tmp_path, "--chapters", "00_setup", "--out", "book")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / outdir.MARKER).read_text())["files"] == sorted(
        ["00_setup.html", "00_setup.ipynb", "glossary.html", "index.html", "plotly.min.js", "timings.json"])
    (out / "notes.txt").write_text("what I found\n")
    (out / "00_setup.html.orig").write_text("my copy")
    proc = _book(tmp_path, "--chapters", "00_setup", "--out", "book")
    assert proc.returncode == 0, proc.stderr
    assert (out / "notes.txt").read_text() == "what I found\n" and (out / "00_setup.html.orig").read_text() == "my copy"
    assert (out / "00_setup.html").stat().st_mtime > (out / "notes.txt").stat().st_mtime  # the chapter rendered anew
    (out / outdir.MARKER).unlink()
    (out / "notes.txt").unlink()
    (out / "00_setup.html.orig").unlink()
    (out / ".ipynb_checkpoints").mkdir()  # a reader opened the old report in JupyterLab
    (out / ".ipynb_checkpoints" / "00_setup-checkpoint.ipynb").write_text("{}")
    proc = _book(tmp_path, "--chapters", "00_setup", "--out", "book")  # a report from before the marker
    assert proc.returncode == 0, proc.stderr
    assert (out / outdir.MARKER).exists() and (out / ".ipynb_checkpoints" / "00_setup-checkpoint.ipynb").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book"]  # no staging or old folder left


def test_a_failed_renders_folder_never_replaces_someone_elses(tmp_path):
    out = tmp_path / "book"
    mine = _bystanders(tmp_path / "book.failed")
    before = _tree(mine)
    dest = outdir.failed_dest(out)
    assert dest == tmp_path / "book.failed-2" and _tree(mine) == before
    ours = tmp_path / "other.failed"
    ours.mkdir()
    (ours / "index.html").write_text("a failed render")
    outdir.mark(ours, "r", "en")
    assert outdir.failed_dest(tmp_path / "other") == ours and not ours.exists()  # the runner's own: replaced


def _mount_tmpfs(where: Path, *opts: str) -> bool:
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_full_disk_is_one_line_exit_1_and_leaves_nothing(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "size=1m"):
        pytest.skip("cannot mount a 1 MiB tmpfs here (needs root): no full disk to write to")
    try:
        earlier_report(disk / "book", "the previous report")
        proc = _book(tmp_path, "--chapters", "00_setup", "--out", str(disk / "book"))
        msg = proc.stderr.strip()
        assert proc.returncode == 1 and "Traceback" not in msg and len(msg.splitlines()) == 1, msg
        assert "No space left on device" in msg and "previous report" in msg
        assert sorted(p.name for p in disk.iterdir()) == ["book"]  # the staging folder is gone
        assert (disk / "book" / "index.html").read_text() == "the previous report"
    finally:
        subprocess.run(["umount", str(disk)])


def test_an_unwritable_parent_is_exit_2(tmp_path):
    ro = tmp_path / "ro"
    if not _mount_tmpfs(ro, "size=1m", "ro"):
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        _refused(_book(tmp_path, "--chapters", "00_setup", "--out", str(ro / "book")), "cannot write in")
    finally:
        subprocess.run(["umount", str(ro)])


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_what_a_hard_kill_left_is_swept_by_the_next_render(tmp_path):
    pid = _dead_pid()
    stale = tmp_path / f".book.staging-{pid}-abc"
    stale.mkdir()
    (stale / "index.html").write_text("half a render")
    outdir.mark(stale, RUN.name, "en")
    kept = tmp_path / f".book.staging-{pid}-def"  # not the runner's files alone: kept
    _bystanders(kept)
    outdir.mark(kept, RUN.name, "en")
    ipc = Path(tempfile.gettempdir()) / f"{outdir.IPC_PREFIX}{pid}-xyz"
    ipc.mkdir(exist_ok=True)
    proc = _book(tmp_path, "--chapters", "00_setup", "--out", "book")
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists() and not ipc.exists() and (kept / "notes.txt").read_text() == "my notes\n"


def test_sigterm_stops_like_ctrl_c(tmp_path):
    """SIGTERM to the book command: one line, exit 143, its chapter kernels ended, staging and IPC folders
    removed, the previous report kept."""
    out = earlier_report(tmp_path / "out", "the previous report")
    proc = subprocess.Popen([sys.executable, "-m", "kernelbook", "book", "--out", str(out), "--chapters",
                             "06_npu,07_summary"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob(".out.staging-*/*.src.ipynb")):
        time.sleep(0.3)  # a chapter has started
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)  # what `kill` and a batch scheduler send
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines() == [f"kernelbook: book stopped (SIGTERM); nothing replaced: the previous "
                                           f"report in {out} is kept"]
    assert (out / "index.html").read_text() == "the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "a staging folder was left"
    assert not list(Path(tempfile.gettempdir()).glob(f"{outdir.IPC_PREFIX}{proc.pid}-*")), "IPC folder left"
