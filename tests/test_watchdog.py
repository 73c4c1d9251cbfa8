"""The book runner's watchdog (`kernelbook.watch`): a chapter that hangs is ended at its limit, run once
more, then reported failed with the cell it was running, the previous report kept; a kernel that stops
answering is ended without waiting for the limit; capture progress reaches the runner as it is written."""
import os
import shutil
import time

import nbformat
import pytest

from conftest import REPO, earlier_report
from kernelbook import params as P
from kernelbook.runner import BookError, _kernel_manager, render_book
from kernelbook.watch import ChapterHung, execute_chapter


def _chapters_with(tmp_path, stem: str, code: str):
    """A copy of the chapters where `stem` runs `code` right after its setup cell."""
    folder = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", folder, ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    py = folder / f"{stem}.py"
    text = py.read_text()
    first_md = text.index("\n# %% [markdown]", text.index("kb.setup("))
    py.write_text(text[:first_md] + f"\n# %%\n{code}\n" + text[first_md:])
    return folder


def _notebook(tmp_path, *cells: str):
    src = tmp_path / "src.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src)
    return src


def test_a_hung_chapter_is_ended_retried_and_reported_with_the_previous_report_kept(tmp_path):
    notebooks = _chapters_with(tmp_path, "06_npu", "import time\ntime.sleep(3600)  # a hang, on purpose")
    out = earlier_report(tmp_path / "report", "the previous report")
    t = time.monotonic()
    with pytest.raises(BookError) as e:
        render_book(P.validate({"chapter_timeout_s": 15}, consumer="book"), out, chapters=["06_npu"],
                    log=lambda *_: None, notebooks=notebooks)
    took = time.monotonic() - t
    msg = str(e.value)
    assert "chapter 06_npu failed: ended twice by the watchdog: it ran past its limit of 15 s" in msg
    assert "while running `import time`" in msg and e.value.exit_code == 1
    assert took < 150  # two tries of 15 s each, kernel starts and HTML included; without a limit: forever
    assert sorted(p.name for p in out.iterdir()) == [".kernelbook-report.json", "index.html"] and (out / "index.html").read_text() == "the previous report"
    assert (tmp_path / "report.failed" / "06_npu.ipynb").exists()


def test_a_kernel_that_stops_answering_is_ended_before_the_limit(tmp_path):
    src = _notebook(tmp_path, "x = 1", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)  # the kernel freezes")
    retries = []
    t = time.monotonic()
    error = execute_chapter(src, tmp_path / "out.ipynb", {}, _kernel_manager(str(tmp_path)), limit_s=3600,
                            dead_s=5, on_retry=retries.append)
    assert isinstance(error, ChapterHung)
    assert "its kernel stopped answering (no heartbeat for 5 s) while running `import os, signal`" in str(error)
    assert len(retries) == 1 and "stopped answering" in retries[0]
    assert time.monotonic() - t < 180  # two tries; the limit (an hour) was not what ended them


def test_capture_progress_reaches_the_runner_while_the_chapter_runs(tmp_path):
    """The cell waits for a file that only the runner's progress callback writes: if progress lines
    arrived only when the chapter ended, the chapter could not end (the watchdog's limit would)."""
    flag = tmp_path / "seen"
    src = _notebook(tmp_path, "import time\nfrom pathlib import Path\nfrom kernelbook.capture.common import Progress\n"
                    f"say = Progress()\nsay('timeline: start')\nwhile not Path({str(flag)!r}).exists():\n"
                    "    time.sleep(0.1)\nsay('timeline: done')")
    lines = []

    def seen(line):
        lines.append(line)
        flag.touch()

    error = execute_chapter(src, tmp_path / "out.ipynb", {}, _kernel_manager(str(tmp_path)), limit_s=120,
                            on_progress=seen, cwd=str(REPO))
    assert error is None, error
    assert [ln.split("] ", 1)[1] for ln in lines] == ["timeline: start", "timeline: done"]
    assert lines[0].startswith("[") and " s] " in lines[0]
