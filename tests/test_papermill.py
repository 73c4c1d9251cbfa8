"""The README's papermill commands, run as written (on a copy of the chapters, so the paired notebooks
they make land outside the work tree): each chapter with its -p parameters, kernel taken from the
notebook itself."""
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIGURES, REPO

BIN = Path(sys.executable).parent


def readme_commands(tool: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Papermill"):]
    return [ln.strip() for ln in block.splitlines() if ln.strip().startswith(tool + " ")]


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(line)
    exe = shutil.which(argv[0], path=str(BIN)) or shutil.which(argv[0])
    args = [a for p in argv[1:] for a in (sorted(glob.glob(p, root_dir=cwd)) if "*" in p else [p])]
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    root = tmp_path_factory.mktemp("pm")
    (root / "reports").mkdir()
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    [sync] = readme_commands("jupytext")
    proc = _run(sync, root)
    assert proc.returncode == 0, proc.stderr
    return root


def test_paired_notebooks_carry_their_kernel(synced):
    for py in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        nb = json.loads((synced / "notebooks" / f"{py.stem}.ipynb").read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3" and nb["metadata"]["kernelspec"]["language"] == "python"


COMMANDS = readme_commands("papermill")


def test_readme_has_one_command_per_chapter():
    stems = [shlex.split(c)[1].split("/")[-1].removesuffix(".ipynb") for c in COMMANDS]
    assert stems == [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))]


@pytest.mark.parametrize("line", COMMANDS, ids=[shlex.split(c)[1].split("/")[-1] for c in COMMANDS])
def test_readme_papermill_command_runs_as_written(synced, line):
    proc = _run(line, synced)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((synced / shlex.split(line)[2]).read_text())
    outputs = [o for c in out["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    params = dict(zip(shlex.split(line)[4::3], shlex.split(line)[5::3]))
    injected = [c for c in out["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and all(k in "".join(injected[0]["source"]) for k in params)
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    # JupyterLab draws the JSON; nbconvert draws the HTML, the first figure carrying plotly.js itself
    assert all("text/html" in o["data"] for o in figures)
    sizes = [len("".join(o["data"]["text/html"])) for o in figures]
    assert not sizes or (sizes[0] > 1_000_000 and all(n < 1_000_000 for n in sizes[1:]))  # plotly.js once, first
    assert all(o["data"]["application/vnd.plotly.v1+json"]["config"]["showSendToCloud"] is False for o in figures)
    if "01_timeline" in line:
        assert len(figures) == FIGURES["01_timeline"]


def test_papermill_phase_the_run_lacks_gives_the_note_not_a_traceback(synced):
    # the bundled run profiles vision_encode too; this committed run's ncu stage profiled decode and prefill only
    proc = _run("papermill notebooks/03_histograms.ipynb reports/03_vision.ipynb -p phase vision_encode "
                "-p run_dir data/runs/h100-long-generation-2048", synced)
    assert proc.returncode == 1
    out = json.loads((synced / "reports" / "03_vision.ipynb").read_text())
    [err] = [o for c in out["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert err["ename"] == "ChapterStop" and "it profiled decode (20 kernels) and prefill" in err["evalue"]
    assert "no ncu counters for 'vision_encode'" in err["evalue"]
    assert len(err["traceback"]) == 1 and "Traceback" not in err["traceback"][0]
