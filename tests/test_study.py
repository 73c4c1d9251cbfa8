"""`python -m kernelbook study` (issue 42): the grid is checked like the book's parameters (exit 2 naming the key or
the point), a point that fails lands with its reason and the study goes on, a rerun skips complete points and keeps
the failed attempt, points are placed side by side one per GPU with their own profiling lock, and the Slurm array
job is a dry run. The captures here are the real `kernelbook capture` on this CPU machine: they stop before any GPU
work with the capture's own message; a complete point is a real committed H100 run."""
import json
import shutil
import subprocess
import sys
from datetime import datetime

import pytest
import yaml

from conftest import REPO
from kernelbook import study as S

GRAPH_RUN = REPO / "data" / "runs" / "h100-variant-static-graphs"


def study_cli(tmp_path, spec: dict | str, *extra: str) -> subprocess.CompletedProcess:
    f = tmp_path / "study.yaml"
    f.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    return subprocess.run([sys.executable, "-m", "kernelbook", "study", "--params", str(f), "--out",
                           str(tmp_path / "out"), *extra], capture_output=True, text=True, timeout=600, cwd=REPO)


@pytest.mark.parametrize("spec,message", [
    ({"grid": {"batch_sise": [1, 8]}}, "grid: batch_sise: unknown key (did you mean batch_size"),
    ({"grid": {}}, "grid: empty: give at least one capture key"),
    ({"set": {"max_new_tokens": 8}}, "grid: empty"),
    ({"grid": {"top_n": [5, 10]}}, "grid: top_n: not a capture key"),
    ({"grid": {"batch_size": []}}, "grid: batch_size: expected a non-empty list of values"),
    ({"grid": {"batch_size": 8}}, "grid: batch_size: expected a non-empty list of values, got 8"),
    ({"grid": {"batch_size": [1, 1]}}, "grid: batch_size: a value appears twice"),
    ({"grid": {"batch_size": [1, 0]}}, "point 1 (batch_size=0): batch_size: 0 is below the minimum 1"),
    ({"grid": {"batch_size": [1]}, "set": {"batch_size": 2}}, "set: batch_size: also a grid axis"),
    ({"grid": {"batch_size": [1]}, "sett": {}}, "sett: unknown study key"),
    ({"grid": {"batch_size": [1]}, "base": "nope.yaml"}, "base: params file nope.yaml does not exist"),
    ({"grid": {"batch_size": [1, 2], "max_new_tokens": [8, 0]}},
     "point 1 (batch_size=1, max_new_tokens=0): max_new_tokens: 0 is below the minimum 1"),
])
def test_bad_study_exits_2_naming_the_key(tmp_path, spec, message):
    proc = study_cli(tmp_path, spec)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists(), "a bad study writes nothing"


def test_bundled_study_file_is_valid():
    st = S.load_study(REPO / "params" / "study-serving.yaml")
    sizes = [p.values["batch_size"] for p in st.points]
    assert len(sizes) >= 4 and min(sizes) == 1 and max(sizes) >= 32
    for p in st.points:  # decode as CUDA graphs: the static cache compiles each decode step
        assert st.params_of(p)["cache_implementation"] == "static"


def test_command_line_problems_exit_2(tmp_path):
    spec = {"grid": {"batch_size": [1, 8]}}
    for extra, message in ((("--point", "5"), "--point: 5 is not a point of this study (0 to 1)"),
                           (("--gpus", "0,0"), "--gpus: 0,0 is not a list of distinct GPU indices")):
        proc = study_cli(tmp_path, spec, *extra)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_slurm_dry_run_writes_an_array_job(tmp_path):
    proc = study_cli(tmp_path, {"grid": {"batch_size": [1, 8, 16]}}, "--slurm")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "out" / "slurm.sh").read_text()
    assert "#SBATCH --array=0-2" in script and "#SBATCH --gpus-per-task=1" in script
    assert '--point "$SLURM_ARRAY_TASK_ID"' in script
    assert subprocess.run(["bash", "-n", str(tmp_path / "out" / "slurm.sh")]).returncode == 0
    assert not (tmp_path / "out" / "runs").exists(), "a dry run captures nothing"


def test_failed_points_resume_and_side_by_side(tmp_path):
    """Two points on 'GPUs' 0 and 1 side by side: both fail on this CPU machine with the capture's reason, the study
    goes on and exits 1. Then point 0's run is made complete (a real H100 run copied in): the rerun skips it and
    captures point 1 again, keeping the failed attempt's record."""
    spec = {"base": str(REPO / "params" / "variant-static-graphs.yaml"), "set": {"max_new_tokens": 8},
            "grid": {"batch_size": [1, 8]}}
    proc = study_cli(tmp_path, spec, "--gpus", "0,1")
    assert proc.returncode == 1, proc.stderr
    out = tmp_path / "out"
    doc = json.loads((out / "study.json").read_text())
    pts = doc["points"]
    assert [p["id"] for p in pts] == ["batch_size-1", "batch_size-8"]
    assert all(p["status"] == "failed" and "needs an NVIDIA GPU" in p["reason"] for p in pts), pts
    assert sorted(p["gpu"] for p in pts) == ["0", "1"]
    # side by side: the second started before the first ended
    t = sorted((datetime.fromisoformat(p["started"]).timestamp(), p["seconds"]) for p in pts)
    assert t[1][0] < t[0][0] + t[0][1]
    for p in pts:  # what each point was asked, as a params file the capture read
        assert yaml.safe_load((out / "points" / f"{p['id']}.yaml").read_text())["batch_size"] == p["values"]["batch_size"]
    assert "[study] point" in proc.stdout and "study elapsed" in proc.stdout

    shutil.copytree(GRAPH_RUN, out / "runs" / "batch_size-1")
    proc = study_cli(tmp_path, spec, "--point", "1")
    assert proc.returncode == 1
    assert "0 complete already" in proc.stdout  # --point: only point 1 is considered
    proc = study_cli(tmp_path, spec)
    assert "1 complete already (skipped), 1 to capture" in proc.stdout, proc.stdout
    doc = json.loads((out / "study.json").read_text())
    p0, p1 = doc["points"]
    assert p0["status"] == "complete"
    assert p1["status"] == "failed" and "needs an NVIDIA GPU" in p1["reason"]


def test_sigterm_stops_the_running_captures(tmp_path):
    """SIGTERM (a scheduler's time limit) stops the study and its running capture; the manifest says which point
    was stopped, and the exit code is 143."""
    import signal
    import time

    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump({"grid": {"batch_size": [1, 8]}}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "kernelbook", "study", "--params", str(f), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    for _ in range(200):  # until the first point's capture is running
        if (out / "study.json").exists() and any(p["status"] == "running" for p in
                                                 json.loads((out / "study.json").read_text())["points"]):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 143, err
    assert "study stopped (SIGTERM)" in err
    pts = json.loads((out / "study.json").read_text())["points"]
    assert pts[0]["status"] == "failed" and pts[0]["reason"], pts
    assert pts[1]["status"] == "pending"


def test_points_of_one_model_are_chained_in_one_process(tmp_path):
    """On one GPU, points that share a model are captured one after another by one process (`kernelbook _points`,
    the model built once): here both stop on this CPU machine with the capture's own reason, each in its own stderr
    file, each with its start and seconds, and the study goes on to the second and exits 1. Points of two models, or
    on several GPUs, are not chained."""
    spec = {"base": str(REPO / "params" / "variant-static-graphs.yaml"), "set": {"max_new_tokens": 8},
            "grid": {"batch_size": [1, 8]}}
    proc = study_cli(tmp_path, spec)
    assert proc.returncode == 1, proc.stderr
    assert "2 points share one model: captured one after another in one process" in proc.stdout, proc.stdout
    out = tmp_path / "out"
    pts = json.loads((out / "study.json").read_text())["points"]
    assert all(p["status"] == "failed" and "needs an NVIDIA GPU" in p["reason"] for p in pts), pts
    assert all(p["started"] and p["seconds"] is not None for p in pts)
    for p in pts:
        assert "needs an NVIDIA GPU" in (out / "points" / f"{p['id']}.stderr").read_text()
        assert json.loads((out / "points" / f"{p['id']}.ended").read_text())["rc"] == 2
    chain = json.loads((out / "points" / "chain.json").read_text())
    assert [e["id"] for e in chain] == ["batch_size-1", "batch_size-8"]
    st = S.load_study(tmp_path / "study.yaml")
    recs = S.plan(st, out)
    assert S.chained(st, recs, [None]) and not S.chained(st, recs, ["0", "1"]) and not S.chained(st, recs[:1], [None])
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({"grid": {"weights": ["random", "pretrained"]}}))
    two = S.load_study(tmp_path / "two.yaml")
    assert not S.chained(two, S.plan(two, tmp_path / "two"), [None])
