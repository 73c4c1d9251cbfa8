"""Issue 29's reliability, privacy and sharing fixes, each on real data or real processes: the chapters'
paths resolve the same from any working directory, notebook parameters are checked like the CLI's, the
profiling lock holds under a race, no shared temp path, subprocesses end at their limit, list elements
are type-checked, and a missing optional library is named as such."""
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURE_REP, REPO
from kernelbook import notebook as kb
from kernelbook import params as P
from kernelbook.capture.chapters import decide
from kernelbook.runner import _kernel_manager, list_chapters, notebook_parameters, to_ipynb
from kernelbook.watch import execute_chapter

BUNDLED = "data/runs/h100-deepseek-ocr-2"  # as the chapters name it: relative to the repository


# --- 2: paths resolve the same wherever the kernel runs ---------------------------------------------

@pytest.mark.parametrize("where", ["notebooks", "elsewhere"])
def test_capture_decision_reads_the_bundled_run_from_any_working_directory(where, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO / "notebooks" if where == "notebooks" else tmp_path)
    for part in ("setup", "timeline", "ncu"):
        do, why = decide(BUNDLED, part, "auto")
        assert not do and f"already holds its {part} part" in why


def test_a_chapter_run_with_its_kernel_in_notebooks_reads_the_bundled_run(tmp_path):
    """JupyterLab starts a chapter's kernel in notebooks/: chapter 00, with its defaults, says it reads the run."""
    src = to_ipynb(REPO / "notebooks" / "00_setup.py", tmp_path / "00_setup.ipynb")
    error = execute_chapter(src, tmp_path / "out.ipynb", {}, _kernel_manager(str(tmp_path)), limit_s=300,
                            cwd=str(REPO / "notebooks"))
    assert error is None, error
    text = json.dumps(json.loads((tmp_path / "out.ipynb").read_text())["cells"])
    assert "the run already holds its setup part, so the chapter reads it" in text and "cannot capture" not in text


# --- 3: notebook parameters checked by the CLI's schema -----------------------------------------------

def test_every_chapter_hands_every_parameter_to_the_check():
    for nb in list_chapters():
        declared = set(notebook_parameters(nb))
        calls = [n for n in ast.walk(ast.parse(nb.read_text())) if isinstance(n, ast.Call)
                 and getattr(n.func, "attr", "") == "setup" and getattr(n.func.value, "id", "") == "kb"]
        assert len(calls) == 1, nb.stem
        [call] = calls
        passed = {k.arg for k in call.keywords} | {a.id for a in call.args}
        assert passed == declared, f"{nb.stem}: kb.setup gets {sorted(passed)}, the chapter declares {sorted(declared)}"
        assert all(isinstance(k.value, ast.Name) and k.value.id == k.arg for k in call.keywords)


def _bad_values(key: str, spec: P.Param) -> list:
    """Values the schema refuses for `key`: a wrong type, and past each bound or choice it has."""
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    bad = [3.5 if str in types else "3"]
    if spec.min is not None:
        bad.append(spec.min - 1)
    if spec.max is not None:
        bad.append(spec.max + 1)
    if spec.choices is not None:
        bad.append("fr" if str in types else 3)
    if spec.items is not None:
        bad.append([1])
    return bad


BOOK_KEYS = sorted(k for k, s in P.SCHEMA.items() if any(f in P.CHAPTERS for f in s.feeds))


@pytest.mark.parametrize("key", BOOK_KEYS)
def test_each_chapter_parameter_is_checked_with_the_clis_message(key, tmp_path):
    """Every key a chapter reads, refused in the notebook with the message the book command prints."""
    for bad in _bad_values(key, P.SCHEMA[key]):
        with pytest.raises(kb.ChapterStop) as stop:
            kb.setup("en", **{key: bad}) if key != "language" else kb.setup(bad)
        yml = tmp_path / "bad.yaml"
        yml.write_text(json.dumps({key: bad}))
        cli = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(yml), "--out",
                              str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO) if bad == \
            _bad_values(key, P.SCHEMA[key])[0] and key != "params_file" else None  # the CLI sets it from --params
        note = str(stop.value)
        assert note.startswith("1 problem(s) in parameters:\n  - " + key) and "Traceback" not in note
        if cli is not None:  # one CLI call per key: the same problem line, exit 2
            assert cli.returncode == 2 and note.splitlines()[1] in cli.stderr


def test_a_relation_between_parameters_is_checked():
    with pytest.raises(kb.ChapterStop, match=r"low_pct: 90 must be below high_pct \(60\)"):
        kb.setup("en", low_pct=90.0, high_pct=60.0)
    with pytest.raises(P.ParamError, match="low_pct: 90 must be below high_pct"):
        P.validate({"low_pct": 90, "high_pct": 60})
    P.validate({"low_pct": 20, "high_pct": 60})


def test_papermill_gives_the_note_not_a_traceback(tmp_path):
    src = to_ipynb(REPO / "notebooks" / "05_classification.py", tmp_path / "05.ipynb")
    error = execute_chapter(src, tmp_path / "out.ipynb", {"low_pct": 90.0, "high_pct": 60.0, "top_n": 0},
                            _kernel_manager(str(tmp_path)), limit_s=300, cwd=str(tmp_path))
    assert getattr(error, "ename", None) == "ChapterStop"
    assert error.evalue.startswith("1 problem(s) in parameters:\n  - low_pct: 90 must be below high_pct (60)")


# --- 9: the profiling lock under a race ------------------------------------------------------------

RACER = """
import sys, time
from pathlib import Path
from kernelbook.clocks import ProfilingBusy, profiling_lock
lock, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
try:
    with profiling_lock(lock):
        print("won", flush=True)
        time.sleep(1.5)
except ProfilingBusy as e:
    print("busy:", e, flush=True)
"""


def test_two_processes_racing_for_the_lock_one_wins_the_other_is_told_who(tmp_path):
    for round_ in range(4):
        lock, go = tmp_path / f"lock{round_}", tmp_path / f"go{round_}"
        procs = [subprocess.Popen([sys.executable, "-c", RACER, str(lock), str(go)], stdout=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        time.sleep(1.0)  # both importing done and spinning on the start line
        go.touch()
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
        winners = [i for i, o in enumerate(outs) if o == "won"]
        assert len(winners) == 1, outs
        [loser] = [o for o in outs if o != "won"]
        assert loser.startswith("busy: another profiling holds") and f"pid {procs[winners[0]].pid}" in loser
        assert not lock.exists()


def test_a_killed_holder_leaves_the_lock_free(tmp_path):
    lock = tmp_path / "lock"
    code = ("import sys, time\nfrom pathlib import Path\nfrom kernelbook.clocks import profiling_lock\n"
            "with profiling_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.kill()
    proc.wait(timeout=30)
    assert lock.exists()  # SIGKILL runs no cleanup, and the kernel released the flock
    from kernelbook.clocks import profiling_lock

    with profiling_lock(lock):
        assert json.loads(lock.read_text())["pid"] == os.getpid()


# --- 10: no shared temp path -----------------------------------------------------------------------

def test_inspecting_a_chapter_follows_no_planted_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (tmp_path / "kb-inspect-06_npu.ipynb").symlink_to(victim)
    assert "run_dir" in notebook_parameters(REPO / "notebooks" / "06_npu.py")
    assert victim.read_text() == "untouched"


def test_two_renders_at_once_both_finish(tmp_path):
    cmd = [sys.executable, "-m", "kernelbook", "book", "--chapters", "00_setup", "--out"]
    procs = [subprocess.Popen(cmd + [str(tmp_path / f"out{i}")], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert (tmp_path / f"out{i}" / "00_setup.html").exists()


# --- 11: subprocesses end at their limit -----------------------------------------------------------

def test_a_subprocess_that_never_returns_is_ended_at_its_limit_with_its_children(tmp_path):
    from kernelbook.proc import TimeLimitExceeded, run_limited

    pid_file = tmp_path / "child.pid"
    # a parent that ignores SIGTERM, and a child of its own: the whole group must go
    script = f"trap '' TERM; sleep 3600 & echo $! > {pid_file}; wait"
    t = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match=r"a hung job did not finish within 2 s; it was ended"):
        run_limited(["bash", "-c", script], 2, "a hung job")
    assert time.monotonic() - t < 60
    child = Path(f"/proc/{int(pid_file.read_text())}/stat")
    time.sleep(0.5)  # gone, or a zombie (killed, waiting for init to reap it)
    assert not child.exists() or child.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_the_ncu_report_reader_is_ended_at_its_limit(tmp_path):
    from kernelbook.load.ncu import NcuReportError, read_ncu_report_isolated

    with pytest.raises(NcuReportError, match=r"the ncu report reader on .* did not finish within 0.2 s"):
        read_ncu_report_isolated(FIXTURE_REP, tmp_path, timeout_s=0.2)


def test_the_capture_subprocesses_have_a_limit_parameter():
    assert P.validate({})["capture_timeout_s"] == 3600
    with pytest.raises(P.ParamError, match="capture_timeout_s: 1 is below the minimum 10"):
        P.validate({"capture_timeout_s": 1})


# --- 12: list elements are type-checked ------------------------------------------------------------

def test_variant_runs_of_numbers_is_exit_2_with_the_problem(tmp_path):
    yml = tmp_path / "p.yaml"
    yml.write_text("variant_runs: [1]\nncu_phases: [decode, 2]\n")
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(yml), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "variant_runs: expected a list of str, got 1 (int)" in proc.stderr
    assert "ncu_phases: expected a list of str, got 2 (int)" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 6: the capture command speaks first --------------------------------------------------------------

def test_the_capture_command_prints_its_first_line_before_any_slow_step(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "capture", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, cwd=REPO)
    first = proc.stderr.splitlines()[0]
    assert first.startswith("[") and "checking that the model's inputs can be built" in first, proc.stderr
