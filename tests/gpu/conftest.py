"""Fixtures of the GPU suite: tiny checkpoints of two families and one capture per configuration, each shared by
every test that reads it (session scope), so the whole suite runs in minutes on one H100.

The families: a dense causal LM (Llama-shaped, saved whole with `save_pretrained` and loaded with
`weights: pretrained`, as tests/test_capture_cpu.py does on CPU), captured eager by the book's one command and by a
capture stopped mid-ncu; and an MoE (Qwen3-MoE-shaped: its config saved, `weights: random` builds it on the GPU),
captured as deployed (batch 32, CUDA graphs) and over an eager generation sampled in windows. Widths are small but not toy-small: a decode GEMV must read megabytes of
weights for the DRAM-byte check to mean something (below ~1 MB the vector, the output and ncu's own traffic are a
visible share), and the MoE's batch-32 decode gathers every token's experts, the issue-42 regime in which the GPU's
work per step outlasts the host's.

Every capture runs as a user runs it, `python -m kernelbook capture|book` in a subprocess. Skipped, with the reason,
on a machine without an NVIDIA GPU, without ncu on PATH or without torch + transformers: the CPU suite collects
these tests and skips them without importing torch.

`KB_GPU_TEST_BREAK=graph-node` or `graph-detect` breaks a GPU path on purpose (the suite must then fail): the
capture's ncu command profiles a CUDA graph's replay as one result (`--graph-profiling graph`) instead of node by
node, or the ncu stage no longer recognizes the decode steps as graph replays (`BREAKS`).
`KB_GPU_TESTS_RECORD=<file>`: each capture appends its configuration, exit code and wall time there (JSON lines;
bench/gpu_tests.sh puts them in its summary).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Llama-shaped dense decoder: decode GEMVs of 0.5-5.8 MB per layer and a 65.5 MB lm_head
DENSE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2, head_dim=128, vocab_size=32000, max_position_embeddings=4096,
             bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
# Qwen3-MoE-shaped: 64 experts of 4.7 MB, top 8, every layer sparse
MOE = dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=768, num_hidden_layers=2,
           num_attention_heads=8, num_key_value_heads=2, head_dim=128, num_experts=64, num_experts_per_tok=8,
           decoder_sparse_step=1, mlp_only_layers=[], vocab_size=32000, max_position_embeddings=4096,
           bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)

# One parameter set per configuration (overrides of the schema in lib/kernelbook/params.py); `model` is added
# by the fixture. ncu_top_n is small: ncu costs about a second per profiled launch.
DENSE_BOOK = dict(weights="pretrained", prompt_tokens=256, max_new_tokens=8, ncu_top_n=5,
                  ncu_phases=["decode", "prefill"], ncu_inloop=True)
# a 40-token eager generation recorded in windows (decode steps 1-4, 17-20, 33-39), for the agreement check alone
MOE_SAMPLED = dict(weights="random", prompt_tokens=128, max_new_tokens=40, sample_window=4, sample_every=16,
                   ncu_top_n=0, measure_peaks=False)
# the MoE as deployed: batch 32, static cache, each decode step one CUDA-graph replay; ncu on one step, node by node.
# ncu takes every launch configuration of the step's replay whatever the selection, so the top 20 cost nothing
# more and reach below the graph's copy nodes (the copy-node rule then has something to leave out).
MOE_GRAPHS = dict(weights="random", batch_size=32, prompt_tokens=64, max_new_tokens=10,
                  cache_implementation="static", compile_decode=True, ncu_top_n=20, ncu_phases=["vision_encode", "decode"],
                  ncu_inloop=True,
                  timing_trials=2, measure_peaks=False)
DENSE_STOPPED = dict(weights="pretrained", prompt_tokens=256, max_new_tokens=8, ncu_top_n=8,
                     ncu_phases=["decode", "prefill"], timing_trials=1, measure_peaks=False)

BREAKS = {
    "": None,
    # ncu 2025.3.1 refuses this outright (range replay does not support some of the capture's metrics): the
    # capture fails loudly
    "graph-node": ("profile a CUDA graph's replay as one result (--graph-profiling graph), not node by node",
                   "import kernelbook.capture.ncu_stage as stage\n"
                   "_ncu_command = stage.ncu_command\n"
                   "def _whole_graph(*a, **k):\n"
                   "    cmd = _ncu_command(*a, **k)\n"
                   "    return ['graph' if c == 'node' and cmd[i - 1] == '--graph-profiling' else c\n"
                   "            for i, c in enumerate(cmd)]\n"
                   "stage.ncu_command = _whole_graph\n"),
    # a silent regression: the ncu stage no longer sees that the decode steps are graph replays, so it takes them
    # by op call like an eager phase (where a graph step has none) and never profiles them node by node
    "graph-detect": ("the ncu stage does not recognize graph replays (capture.ncu.graph_phase always False)",
                     "import kernelbook.capture.ncu_stage as stage\n"
                     "stage.graph_phase = lambda timeline, sel: False\n"),
}
BREAK = os.environ.get("KB_GPU_TEST_BREAK", "")


def why_no_gpu() -> str | None:
    """Why this machine cannot run the GPU tests (None: it can), decided without importing torch."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux with an NVIDIA GPU (this is {sys.platform})"
    if not (Path("/proc/driver/nvidia/version").exists() or any(Path("/dev").glob("nvidia[0-9]*"))):
        return "no NVIDIA GPU on this machine (no /proc/driver/nvidia/version, no /dev/nvidia*)"
    if shutil.which("ncu") is None:
        return "Nsight Compute (ncu) is not on PATH"
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (the capture extra: pip install -e '.[capture]')"
    return None


# The order the captures run in: the stopped capture's book renders in the background (CPU only) while the graph
# capture starts, and its test comes last (test_gpu_stop.py).
MODULE_ORDER = ("test_gpu_book", "test_gpu_stop", "test_gpu_eager", "test_gpu_graphs", "test_gpu_sampled")
LAST = "test_the_book_renders_the_stopped_capture"


def pytest_collection_modifyitems(config, items):
    at = [n for n, i in enumerate(items) if HERE in Path(str(i.path)).parents]
    mine = [items[n] for n in at]
    why = why_no_gpu() if mine else None
    if why:
        skip = pytest.mark.skip(reason=f"GPU test: {why}")
        for item in mine:
            item.add_marker(skip)
    if mine and BREAK not in BREAKS:
        raise pytest.UsageError(f"KB_GPU_TEST_BREAK={BREAK!r}: known breaks are {sorted(k for k in BREAKS if k)}")

    def rank(item):
        stem = Path(str(item.path)).stem
        return (item.name == LAST, MODULE_ORDER.index(stem) if stem in MODULE_ORDER else len(MODULE_ORDER))
    for n, item in zip(at, sorted(mine, key=rank)):
        items[n] = item


def kernelbook_command(*args: str) -> list[str]:
    """`python -m kernelbook ARGS`, or the same entry point with the on-purpose break applied first."""
    brk = BREAKS[BREAK]
    if brk is None:
        return [sys.executable, "-m", "kernelbook", *args]
    return [sys.executable, "-c", brk[1] + "import sys\nfrom kernelbook.cli import main\nsys.exit(main(sys.argv[1:]))\n",
            *args]


def tail(path: Path, n: int = 40) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])
    except OSError:
        return f"({path} was not written)"


def record(**row) -> None:
    where = os.environ.get("KB_GPU_TESTS_RECORD")
    if where:
        with open(where, "a") as f:
            f.write(json.dumps(row) + "\n")


@dataclass
class Ran:
    """One `python -m kernelbook ...` of the suite: what it wrote and how it ended."""
    name: str
    run: Path
    rc: int | None  # None: it outlasted its time limit and was stopped
    wall_s: float
    log: Path
    report: Path | None = None

    def why(self) -> str:
        return (f"{self.name}: `kernelbook` exited {self.rc} after {self.wall_s:.0f} s "
                f"(log {self.log}); its last lines:\n{tail(self.log)}")


def run_kernelbook(name: str, args: list[str], log: Path, timeout_s: float, run: Path,
                   report: Path | None = None) -> Ran:
    """Run the command to its end (or to `timeout_s`: then SIGTERM, which lands a capture as partial, and
    SIGKILL 90 s later), its output in `log`."""
    t = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(kernelbook_command(*args), cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
        except BaseException:  # pytest interrupted (Ctrl-C, timeout -s INT): the capture must not outlive it, holding
            # the machine's profiling lock for the next one
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    ran = Ran(name, run, rc, time.monotonic() - t, log, report)
    record(config=name, command=" ".join(["python -m kernelbook", *args]), rc=rc, wall_s=round(ran.wall_s, 1),
           **({"break": BREAK} if BREAK else {}))
    print(f"{name}: exit {rc} in {ran.wall_s:.1f} s; last lines of {log}:\n{tail(log, 25)}")
    return ran


def write_params(path: Path, values: dict) -> Path:
    path.write_text(json.dumps(values, indent=1) + "\n")  # JSON is YAML
    return path


@pytest.fixture(scope="session")
def gpu_name() -> str:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("GPU test: torch sees no GPU (torch.cuda.is_available() is False)")
    return torch.cuda.get_device_name()


@pytest.fixture(scope="session")
def work(tmp_path_factory, gpu_name) -> Path:
    return tmp_path_factory.mktemp("kb-gpu")


@pytest.fixture(scope="session")
def dense_checkpoint(work) -> Path:
    """The dense model as a hub repository holds it (config + bf16 weights, no tokenizer: stand-in prompt ids),
    made on the CPU; the capture loads it with from_pretrained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = work / "ckpt" / "tiny-llama"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**DENSE)).to(torch.bfloat16).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def moe_checkpoint(work) -> Path:
    """The MoE model's config alone: `weights: random` builds it on the GPU (seeded), no 1.3 GB written."""
    from transformers import Qwen3MoeConfig

    path = work / "ckpt" / "tiny-qwen3-moe"
    cfg = Qwen3MoeConfig(**MOE)
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    cfg.save_pretrained(path)
    return path


def capture(work: Path, name: str, params: dict, timeout_s: float) -> Ran:
    pfile = write_params(work / f"{name}.yaml", params)
    out = work / "runs" / name
    return run_kernelbook(name, ["capture", "--params", str(pfile), "--out", str(out)], work / f"{name}.log",
                          timeout_s, out)


def load(ran: Ran):
    """The run a command wrote, read as the chapters read it; a command that failed fails its tests with its log."""
    from kernelbook.load.run import load_run

    if ran.rc != 0 or not (ran.run / "manifest.json").exists():
        pytest.fail(ran.why(), pytrace=False)
    return load_run(ran.run)


@pytest.fixture(scope="session")
def dense_book(work, dense_checkpoint) -> Ran:
    """The book's one GPU command on the dense model: chapters 00-02 capture the run (eager, ncu on the top
    decode and prefill kernels), 03-07 render it."""
    pfile = write_params(work / "dense-book.yaml", {"model": str(dense_checkpoint), **DENSE_BOOK})
    run, report = work / "runs" / "dense-book", work / "reports" / "dense-book"
    return run_kernelbook("dense-book", ["book", "--params", str(pfile), "--run", str(run), "--out", str(report)],
                          work / "dense-book.log", 480, run, report)


@pytest.fixture(scope="session")
def dense_run(dense_book):
    return load(dense_book)


@pytest.fixture(scope="session")
def moe_sampled(work, moe_checkpoint) -> Ran:
    """`python -m kernelbook capture` of the MoE model, eager, a 40-token generation recorded in windows, no ncu."""
    return capture(work, "moe-sampled", {"model": str(moe_checkpoint), **MOE_SAMPLED}, 300)


@pytest.fixture(scope="session")
def moe_sampled_run(moe_sampled):
    return load(moe_sampled)


@pytest.fixture(scope="session")
def moe_graphs(work, moe_checkpoint) -> Ran:
    """`python -m kernelbook capture` of the MoE model at batch 32, static cache, decode compiled into CUDA graphs,
    ncu on one decode step's graph replay."""
    name = "moe-graphs" + (f"-broken-{BREAK}" if BREAK else "")
    return capture(work, name, {"model": str(moe_checkpoint), **MOE_GRAPHS}, 480)


@pytest.fixture(scope="session")
def moe_graphs_run(moe_graphs):
    return load(moe_graphs)
