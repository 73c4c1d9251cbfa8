"""ncu by op call profiles inside the worker's cudaProfilerStart/Stop only (capture.ncu PROFILE_GATE): ncu runs
with `--profile-from-start off`, the worker brackets each target op call with the profiler's start and stop,
so the launches between targets (a decode lead-up of 31 steps) run without ncu's profiling. Measured on an H100
(bench/ncu_stage.py, bench/gpu_book_pair.sh); here the command lines and the worker's order of calls."""
import pytest
import torch

from kernelbook.capture import ncu as N
from kernelbook.capture.phases import PhaseTracker, _Open
from kernelbook.contract.names import NCU_TARGET


def test_the_gated_ncu_starts_with_profiling_off_and_its_worker_opens_the_gate(monkeypatch):
    monkeypatch.setattr(N.shutil, "which", lambda exe: "/opt/ncu/ncu")
    worker = N.worker_command("params.json", targets_file="targets.json", gated=True)
    cmd = N.ncu_command("report", None, worker)
    at = cmd.index("--profile-from-start")
    assert cmd[at + 1] == "off" and at < cmd.index("-o") and cmd[-len(worker):] == worker
    assert worker[-1] == "--profile-gate"
    plain = N.ncu_command("report", None, N.worker_command("params.json", targets_file="targets.json"))
    assert "--profile-from-start" not in plain and "--profile-gate" not in plain


class _Op:
    namespace = "aten"

    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def __call__(self):
        self.calls.append(self.name)

    def __str__(self):
        return f"aten.{self.name}.default"


@pytest.fixture
def calls(monkeypatch):
    """The profiler and NVTX calls the worker makes, in order (a GPU stood in for by these records)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append("pop"))
    return calls


def test_the_worker_profiles_inside_its_target_op_calls_only(calls):
    for gate, inside in ((True, ["start", f"push {NCU_TARGET}", "mm", "pop", "stop"]),
                         (False, [f"push {NCU_TARGET}", "mm", "pop"])):
        calls.clear()
        t = PhaseTracker(torch.nn.Linear(1, 1), nvtx=False, record=False, op_targets={("decode", 3): {1}},
                         profile_gate=gate)
        t._stack.append(_Open("decode", 3, None, False, None))
        for name in ("add", "mm", "mul"):  # op calls 0, 1, 2 of decode step 3: only call 1 is a target
            t.op_call(_Op(calls, name), (), {})
        assert calls == ["add", *inside, "mul"]
        assert t.op_seen == [("decode", 3, 1, "aten.mm.default")]


def test_chapter_02_says_that_ncu_profiled_inside_the_gate_only():
    from kernelbook.analyze.provenance import _worker
    from kernelbook.i18n import in_language
    from kernelbook.narrate import say

    w = {"started_early": True, "warmup_generates": 1, "warmup_tokens": 1, "max_new_tokens": 33,
         "cudnn_free_decode_steps": 31, "profile_gate": True}
    assert _worker(w).endswith("; ncu profiled only while the worker had the profiler started, around each target "
                               "op call")
    assert "profiler started" not in _worker({**w, "profile_gate": False})  # and in runs captured before it
    with in_language("zh"):
        assert "启动分析器" in say(_worker(w)) and "profiler" not in say(_worker(w))


def test_a_graph_step_is_profiled_inside_the_gate_only(monkeypatch, calls):
    """By step (a CUDA-graph replay): ncu runs with profiling off and the worker starts it at the target step's
    mark and stops it at the step's end, so the warmup, compile and graph recording before it run unprofiled."""
    monkeypatch.setattr(N.shutil, "which", lambda exe: "/opt/ncu/ncu")
    worker = N.worker_command("params.json", "decode", 5, gated=True)
    cmd = N.ncu_command("decode", ["k"], worker, graph=True)
    assert cmd[cmd.index("--profile-from-start") + 1] == "off" and "--graph-profiling" in cmd
    for gate, marks in ((True, ["start", f"push {NCU_TARGET}", "pop", "stop"]), (False, [f"push {NCU_TARGET}", "pop"])):
        calls.clear()
        t = PhaseTracker(torch.nn.Linear(1, 1), nvtx=False, record=False, ncu_target=("decode", 5), profile_gate=gate)
        for step in (4, 5, 6):
            t._push("decode", step)
            calls.append(f"step {step}")
            t._pop()
        assert calls == ["step 4", *marks[:-2 if gate else -1], "step 5", *marks[-2 if gate else -1:], "step 6"]


def test_the_capture_starts_ncu_early_for_a_graph_step_as_for_op_calls(monkeypatch, tmp_path):
    """`early_ncu`: by op call (eager) its report is `ncu`; for a static cache whose ncu phase is decode (the serving
    study's points) it is the graph step's ncu (node by node, gated, report `decode`), told its step through the
    targets file; a static cache with an eager phase to profile, or no ncu, gets none."""
    from kernelbook.capture import ncu_stage as S
    from kernelbook.contract.config import CaptureConfig
    from kernelbook.params import validate

    monkeypatch.setattr(N.shutil, "which", lambda exe: "/opt/ncu/ncu")
    monkeypatch.setattr(S, "NcuProcess", lambda cmd: cmd)
    cfg = lambda **kw: CaptureConfig.of(validate(kw))  # noqa: E731
    eager = S.early_ncu(cfg(), tmp_path, tmp_path / "gate")
    graph = S.early_ncu(cfg(cache_implementation="static", ncu_phases=["decode"]), tmp_path, tmp_path / "gate")
    assert eager[eager.index("-o") + 1] == str(tmp_path / "ncu" / "ncu") and "--graph-profiling" not in eager
    assert graph[graph.index("-o") + 1] == str(tmp_path / "ncu" / "decode")
    assert "--graph-profiling" in graph and graph[graph.index("--profile-from-start") + 1] == "off"
    assert "--targets" in graph and "--early" in graph and graph[-1] == "--profile-gate"
    for no in ({"cache_implementation": "static", "ncu_phases": ["prefill", "decode"]}, {"ncu_top_n": 0}):
        assert S.early_ncu(cfg(**no), tmp_path, tmp_path / "gate") is None


def test_under_tensor_parallelism_every_rank_meets_the_others_around_a_target_op_call(calls):
    """The ncu stage's ranks (`torch_backend.rank_barrier`): before a target op call every rank idles its GPU and
    meets the others, and again once ncu has profiled the call, so no plain rank's collective spins on its GPU while
    ncu replays the profiled rank's kernels. Other op calls pass without a barrier."""
    t = PhaseTracker(torch.nn.Linear(1, 1), nvtx=False, record=False, op_targets={("decode", 3): {1}},
                     profile_gate=True, rank_barrier=lambda: calls.append("barrier"))
    t._stack.append(_Open("decode", 3, None, False, None))
    for name in ("add", "mm", "mul"):
        t.op_call(_Op(calls, name), (), {})
    assert calls == ["add", "barrier", "start", f"push {NCU_TARGET}", "mm", "pop", "stop", "barrier", "mul"]
