"""Run parameters: one flat YAML of overrides, validated by a schema before any work is done.

Every key is declared once here with its type, default, allowed range and the consumers it feeds
(`capture` and/or chapter notebooks by file stem). All problems are collected and reported in one
message; the CLI exits with code 2 and writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
BUNDLED_RUN = "data/runs/h100-deepseek-ocr-2"
CAPTURE = "capture"
BOOK = "book"  # the book runner itself (keys no chapter reads)
CHAPTERS = ("00_setup", "01_timeline", "02_ncu", "03_histograms", "04_roofline", "05_classification", "06_npu",
            "07_summary")
ALL_CHAPTERS = CHAPTERS
VARIANT_RUNS = ["data/runs/h100-variant-static-graphs", "data/runs/h100-variant-batch8",
                "data/runs/h100-variant-eager-attention"]
PHASE_NAMES = ("vision_encode", "prefill", "decode")


class ParamError(ValueError):
    """Bad parameters; `problems` lists every one of them."""

    def __init__(self, problems: list[str], source: str = "parameters"):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in {source}:\n{lines}")


@dataclass(frozen=True)
class Param:
    type: type | tuple
    default: Any
    feeds: tuple[str, ...]
    doc: str
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns a problem or None
    nullable: bool = False
    items: type | None = None  # a list's element type


def _exists(kind: str) -> Callable[[Any], str | None]:
    def check(v):
        p = resolve_path(v)
        if kind == "dir" and not p.is_dir():
            return f"directory {v} does not exist"
        if kind == "file" and not p.is_file():
            return f"file {v} does not exist"
        return None
    return check


def _run_dir(v) -> str | None:
    p = resolve_path(v)
    if not p.is_dir():
        return f"run directory {v} does not exist (capture one with `python -m kernelbook capture`, or use {BUNDLED_RUN})"
    if not (p / "manifest.json").is_file():
        return f"run directory {v} has no manifest.json: it is not a kernelbook run"
    return None


def _model(v) -> str | None:
    from .capture.models import BUILTIN_MODELS

    if v in BUILTIN_MODELS or resolve_path(v).is_dir():
        return None
    parts = v.split("/")
    if len(parts) == 2 and all(parts) and " " not in v:
        return None  # a hub id: checked when loaded (the capture machine may have a cache)
    return (f"unknown model {v!r}: use one of {', '.join(BUILTIN_MODELS)}, a Hugging Face hub id "
            "(org/name) or a local checkpoint directory")


def _weights(v) -> str | None:
    if v in ("random", "pretrained") or resolve_path(v).is_dir():
        return None
    parts = v.split("/")
    if len(parts) == 2 and all(parts) and not v.startswith((".", "/")):
        return None
    return f"weights {v!r} is neither 'random', 'pretrained', a hub id nor an existing checkpoint directory"


def _nonblank(v) -> str | None:
    return "must not be blank (write null instead)" if not v.strip() else None


def _device(v) -> str | None:
    from .devices import UnknownDeviceError, lookup

    try:
        lookup(v)
    except UnknownDeviceError as e:
        return str(e).splitlines()[0]
    return None


def _phases(v) -> str | None:
    bad = [p for p in v if p not in PHASE_NAMES]
    return f"unknown phase(s) {bad}; phases are {list(PHASE_NAMES)}" if bad else None


SCHEMA: dict[str, Param] = {
    # --- capture (GPU machine) ---
    "model": Param(str, "deepseek-ocr-2", (CAPTURE,), "model: deepseek-ocr-2, a hub id or a local checkpoint",
                   check=_model),
    "weights": Param(str, "random", (CAPTURE,), "'random', 'pretrained' (the model id's own), a hub id or a path",
                     check=_weights),
    "trust_remote_code": Param(bool, False, (CAPTURE,), "allow custom model code (DeepSeek-OCR v1 needs it)"),
    "dtype": Param(str, "bfloat16", (CAPTURE,), "weights and activations dtype",
                   choices=("bfloat16", "float16", "float32")),
    "batch_size": Param(int, 1, (CAPTURE,), "prompts per generate call (one page each for an image model)",
                        min=1, max=64),
    "prompt": Param(str, None, (CAPTURE,), "text of the prompt; null: the reference request 'Convert the document "
                    "to markdown.' (an image model's image goes where its chat template puts it)",
                    check=_nonblank, nullable=True),
    "prompt_tokens": Param(int, None, (CAPTURE,), "prompt made exactly this many tokens (the prompt repeated and "
                           "cut): a text model's whole prefill, an image model's text beside its image tokens; "
                           "null: the prompt as written", min=1, max=131072, nullable=True),
    "max_new_tokens": Param(int, 64, (CAPTURE,), "decode steps; min_new_tokens is set equal", min=1, max=4096),
    "attn_implementation": Param(str, None, (CAPTURE,), "attention implementation the model is built with "
                                 "(transformers' attn_implementation); null: the model's default",
                                 choices=("sdpa", "eager"), nullable=True),
    "cache_implementation": Param(str, "dynamic", (CAPTURE,), "KV cache of generate: dynamic grows per token; "
                                  "static is preallocated to the full length (transformers' StaticCache)",
                                  choices=("dynamic", "static")),
    "compile_decode": Param(bool, True, (CAPTURE,), "with a static cache, generate compiles each decode step "
                            "(torch.compile, mode reduce-overhead: CUDA graphs); false keeps it eager"),
    "tensor_parallel": Param(int, 1, (CAPTURE,), "GPUs the model is split over (tensor parallelism: torchrun with "
                             "this many ranks, transformers' DistributedConfig); needs a checkpoint (weights: "
                             "pretrained or a path) and that many GPUs", min=1, max=8),
    "variant": Param(str, None, (CAPTURE,), "label of this run as a variant of a baseline run (what was changed, "
                     "e.g. 'batch 8'); null: not a variant", check=_nonblank, nullable=True),
    "no_repeat_ngram_size": Param(int, 20, (CAPTURE,), "as in the reference experiment", min=0, max=1000),
    "crop_mode": Param(bool, True, (CAPTURE,), "local 768 crops beside the global view"),
    "base_size": Param(int, 1024, (CAPTURE,), "global view size (px)", choices=(512, 640, 1024, 1280)),
    "omnidocbench_dir": Param(str, None, (CAPTURE,), "folder of OmniDocBench images; synthetic pages when null",
                              check=_exists("dir"), nullable=True),
    "omnidocbench_subset": Param(str, None, (CAPTURE,), "file listing image names (dev-20)",
                                 check=_exists("file"), nullable=True),
    "seed": Param(int, 0, (CAPTURE,), "seed for synthetic pages and random weights", min=0),
    "warmup": Param(int, 1, (CAPTURE,), "warmup generate calls excluded from capture", min=0, max=20),
    "timing_trials": Param(int, 3, (CAPTURE,), "plain generate calls timed for the overhead ratio", min=1, max=50),
    "shapes_pass": Param(bool, True, (CAPTURE,), "torch backend: time the timeline without record_shapes and "
                         "take aten shapes from a second pass (less host overhead in the timed pass)"),
    "sample_window": Param(int, 0, (CAPTURE,), "long generations: decode steps per profiled window (the profiler "
                           "records the prefill and windows of this many steps, every sample_every steps, and a last "
                           "window ending at the last step; every step is still timed plain); 0: profile every step",
                           min=0, max=4095),
    "sample_every": Param(int, 256, (CAPTURE,), "decode steps from one profiled window's start to the next "
                          "(with sample_window > 0)", min=1, max=4095),
    "ncu_step": Param(int, None, (CAPTURE,), "decode step whose kernels ncu profiles (the recorded step nearest to "
                      "it); null: the middle of a sampled long generation (sample_window > 0), else the step covering most "
                      "selected kernels (the middle one on ties)", min=1, max=4095, nullable=True),
    "timeline_backend": Param(str, "auto", (CAPTURE,), "auto | torch | nsys", choices=("auto", "torch", "nsys")),
    "ncu_phases": Param(list, ["decode", "prefill"], (CAPTURE,), "phases whose top kernels ncu profiles", check=_phases,
                        items=str),
    "ncu_top_n": Param(int, 20, (CAPTURE,), "kernels per phase sent to ncu (0 = no ncu)", min=0, max=500),
    "clock_control": Param(str, "none", (CAPTURE,), "ncu --clock-control (shared GPU machines need none)",
                           choices=("none", "base")),
    "cache_control": Param(str, "all", (CAPTURE,), "ncu --cache-control: all flushes caches between replay "
                           "passes (changes no GPU setting); none leaves later passes a warm L2 and falsifies "
                           "DRAM bytes", choices=("none", "all")),
    "capture_timeout_s": Param(int, 3600, (CAPTURE,), "time limit of the capture's other subprocesses (torchrun's "
                               "ranks, nsys profile, nsys export): one past it is ended with its process group",
                               min=10, max=86400),
    "ncu_timeout_s": Param(int, 1800, (CAPTURE,), "ncu stage time limit", min=10, max=86400),
    "measure_peaks": Param(bool, True, (CAPTURE,), "measure bf16 GEMM and copy peaks into the manifest"),
    "lock_clocks": Param(bool, False, (CAPTURE, "00_setup"),
                         "lock GPU clocks with scripts/lock-gpu-clock.sh for the capture (own machines only)"),
    # --- book (any machine) ---
    "run_dir": Param(str, BUNDLED_RUN, CHAPTERS, "run directory the chapters read", check=_run_dir),
    "variant_runs": Param(list, VARIANT_RUNS, ("07_summary",), "variant runs of run_dir (captured with a `variant` "
                          "label) whose measured gains chapter 07 sets against the what-if's predictions",
                          check=lambda v: next((p for p in map(_run_dir, v) if p), None), items=str),
    "chapter_timeout_s": Param(int, 1800, (BOOK,), "time limit of one chapter in the book runner (seconds); a "
                               "chapter that captures gets ncu_timeout_s more. A chapter past it, or whose kernel "
                               "stops answering, is ended and run once more, then reported failed", min=10,
                               max=86400),
    "render_jobs": Param(int, 0, (BOOK,), "chapters the book runner renders at the same time after the capture "
                         "chapters, each in its own kernel; 0: one per CPU core, at most 4; 1: one after another",
                         min=0, max=64),
    "baseline_run": Param(str, "", ("07_summary",), "a run to compare run_dir against (chapter 07's comparison "
                          "section, as `python -m kernelbook diff baseline_run run_dir`); empty: no comparison",
                          check=lambda v: _run_dir(v) if v else None),
    "deployed_run": Param(str, "data/runs/h100-variant-static-graphs", ("06_npu",), "a run of the same workload "
                          "as deployed (decode as CUDA graphs), whose validation and headline chapter 06 sets beside "
                          "run_dir's; empty: none", check=lambda v: _run_dir(v) if v else None),
    "cross_run": Param(str, "data/runs/h200-deepseek-ocr-2", ("06_npu", "07_summary"), "the same workload captured "
                       "on another GPU: chapter 06 fits its model on run_dir, predicts that GPU (and back) and prints "
                       "the errors as the what-if's uncertainty (chapter 07's what-if line carries them too); a run on run_dir's own GPU or of another workload is named and "
                       "left out; empty: none", check=lambda v: _run_dir(v) if v else None),
    "language": Param(str, "en", ALL_CHAPTERS, "narrative language of the chapters, index and report.md: en | zh",
                      choices=("en", "zh")),
    "device": Param(str, None, ("00_setup",), "device name for spec peaks; the run's GPU when null",
                    check=lambda v: _device(v) if v else None, nullable=True),
    "rank": Param(int, 0, CHAPTERS, "in a tensor-parallel run, the rank whose kernels the chapters show (0 = the "
                  "first GPU); a one-GPU run has rank 0 only", min=0, max=7),
    "one_gpu_run": Param(str, "", ("01_timeline",), "for a tensor-parallel run_dir: the same model captured on one "
                         "GPU, set beside it in chapter 01's tensor-parallel section; empty: no comparison",
                         check=lambda v: _run_dir(v) if v else None),
    "top_n": Param(int, 15, ("01_timeline",), "kernels per phase in the top-kernel tables", min=1, max=200),
    "phase": Param(str, "decode", ("03_histograms", "04_roofline", "05_classification"),
                   "phase whose profiled kernels the analysis chapters show", choices=PHASE_NAMES),
    "measure_here": Param(bool, False, ("00_setup",), "chapter 00 also measures this machine's GPU peaks now"),
    "capture": Param(str, "auto", ("00_setup", "01_timeline", "02_ncu"),
                     "auto: the capture chapters capture what run_dir lacks when this machine can (GPU, ncu), else "
                     "read; never: read; always: capture into a new run_dir", choices=("auto", "never", "always")),
    "params_file": Param(str, "", ("00_setup", "01_timeline", "02_ncu"),
                         "capture parameters (YAML) the capture chapters use when they capture; empty: defaults",
                         check=lambda v: _exists("file")(v) if v else None),
    "kernel": Param(str, "", ("05_classification",), "kernel id (d000 …, p000 …) the explorer opens on; empty = the one "
                    "with the most time"),
    "high_pct": Param((int, float), 60.0, ("05_classification",), "throughput % counted as high", min=0, max=100),
    "low_pct": Param((int, float), 30.0, ("05_classification",), "throughput % counted as low", min=0, max=100),
    "l2_hit_min_pct": Param((int, float), 80.0, ("05_classification",), "L2 hit % below which locality is flagged",
                            min=0, max=100),
    "mem_latency_cycles": Param((int, float), 800.0, ("05_classification",),
                                "global-memory latency assumed by S_min and Little's law (SM cycles)",
                                min=50, max=10000),
}


# parameters that name a file or folder: the command line makes them absolute once, against the caller's folder
PATH_KEYS = ("run_dir", "variant_runs", "baseline_run", "one_gpu_run", "cross_run", "params_file", "omnidocbench_dir",
             "omnidocbench_subset")
# parameters that name a path or something else (a hub id): absolute only where the caller's folder holds it
MAYBE_PATH_KEYS = ("model", "weights")


def absolute_paths(values: dict, base: Path) -> dict:
    """`values` with every path parameter the caller gave made absolute against `base` (the caller's folder),
    so the chapters, which run in the repository, read the same files; `~` expanded. Empty strings stay
    empty (no comparison run), and a model or weights value is made absolute only when `base` holds it
    (else it is a hub id or a built-in name)."""
    def one(v, maybe=False):
        if not isinstance(v, str) or not v:
            return v
        p = Path(v).expanduser()
        if p.is_absolute():
            return str(p)
        if maybe and not (base / p).exists():
            return v
        return str(base / p)

    out = dict(values)
    for k in PATH_KEYS + MAYBE_PATH_KEYS:
        if k in out:
            v, want = out[k], SCHEMA[k].type
            if isinstance(v, list) and want is list:
                out[k] = [one(x) for x in v]
            elif isinstance(v, str) and want is str:  # a value of the wrong type stays as given, for its message
                out[k] = one(v, k in MAYBE_PATH_KEYS)
    return out


def resolve_path(v: str | Path) -> Path:
    p = Path(v).expanduser()
    return p if p.is_absolute() else (Path.cwd() / p if (Path.cwd() / p).exists() else REPO / p)


def _check_one(key: str, spec: Param, v: Any, consumer: str | None = None) -> list[str]:
    if v is None:
        return [] if spec.nullable else [f"{key}: must not be null"]
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    if (bool not in types and isinstance(v, bool)) or not isinstance(v, types):
        want = " or ".join(t.__name__ for t in types)
        return [f"{key}: expected {want}, got {type(v).__name__} ({v!r})"]
    if spec.items is not None:
        bad = [x for x in v if (spec.items is not bool and isinstance(x, bool)) or not isinstance(x, spec.items)]
        if bad:
            return [f"{key}: expected a list of {spec.items.__name__}, got {bad[0]!r} ({type(bad[0]).__name__})"]
    if spec.choices is not None and v not in spec.choices:
        return [f"{key}: {v!r} is not one of {list(spec.choices)}"]
    if spec.min is not None and v < spec.min:
        return [f"{key}: {v} is below the minimum {spec.min:g}"]
    if spec.max is not None and v > spec.max:
        return [f"{key}: {v} is above the maximum {spec.max:g}"]
    if spec.check is not None and _feeds(spec, consumer):
        problem = spec.check(v)
        if problem:
            return [f"{key}: {problem}"]
    return []


def _feeds(spec: Param, consumer: str | None) -> bool:
    """Whether `consumer` ("capture", "book" or None = everything) reads this key, so its existence
    checks apply (a capture does not need the book's run directory to exist, and vice versa)."""
    if consumer is None:
        return True
    if consumer == "book":
        return any(f != CAPTURE for f in spec.feeds)
    return consumer in spec.feeds


def validate(values: dict, source: str = "parameters", consumer: str | None = None) -> dict:
    """Defaults overlaid with `values`, or ParamError listing every problem."""
    problems = []
    for key in values:
        if key not in SCHEMA:
            near = [k for k in SCHEMA if k.split("_")[0] == key.split("_")[0]]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            problems.append(f"{key}: unknown key{hint}; known keys: {', '.join(sorted(SCHEMA))}")
    merged = {k: spec.default for k, spec in SCHEMA.items()}
    capturing = values.get("capture", SCHEMA["capture"].default) in ("auto", "always")
    for key, v in values.items():
        if key in SCHEMA:
            # a run directory the capture chapters will create need not exist yet: see _run_to_capture
            skip_check = key == "run_dir" and capturing and consumer != CAPTURE
            problems += _check_one(key, SCHEMA[key], v, CAPTURE if skip_check else consumer)
            merged[key] = v
    if capturing and consumer in (None, "book") and not _check_one("run_dir", SCHEMA["run_dir"], merged["run_dir"], CAPTURE):
        problems += _run_to_capture(merged)
    if not any(p.startswith(("max_new_tokens:", "sample_")) for p in problems):
        from .capture.sampling import sample_problems

        problems += sample_problems(merged["max_new_tokens"], merged["sample_window"], merged["sample_every"])
    if all(_check_one(k, SCHEMA[k], merged[k]) == [] for k in ("low_pct", "high_pct")) \
            and merged["low_pct"] >= merged["high_pct"]:
        problems.append(f"low_pct: {merged['low_pct']:g} must be below high_pct ({merged['high_pct']:g}): a kernel "
                        "is low below low_pct and high at or above high_pct")
    if merged.get("omnidocbench_subset") and not merged.get("omnidocbench_dir"):
        problems.append("omnidocbench_subset: needs omnidocbench_dir")
    if merged.get("tensor_parallel", 1) > 1 and (merged.get("weights") == "random" or merged.get("model") == "deepseek-ocr-2"):
        problems.append("tensor_parallel: shards a checkpoint, and random weights are built on one GPU: make one with "
                        "`python bench/make_checkpoint.py deepseek-ocr2-decoder <dir>` (or give any local checkpoint) "
                        "and set model: <dir>, weights: pretrained")
    if problems:
        raise ParamError(problems, source)
    return merged


def load(path: str | Path | None, overrides: dict | None = None, consumer: str | None = None,
         base: Path | None = None) -> dict:
    """Read and validate a params YAML (None = defaults only). `base`: the caller's folder; every path
    parameter given (in the file or the overrides) is made absolute against it before the check
    (`absolute_paths`), and the defaults (the bundled runs) against the repository."""
    values: dict = {}
    source = "parameters"
    if path is not None:
        p = Path(path)
        source = str(p)
        if not p.is_file():
            raise ParamError([f"params file {p} does not exist"], source)
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ParamError([f"not valid YAML: {e}"], source) from e
        if not isinstance(loaded, dict):
            raise ParamError([f"expected a mapping of key: value, got {type(loaded).__name__}"], source)
        values.update(loaded)
    values.update(overrides or {})
    if base is None:
        return validate(values, source, consumer)
    values = absolute_paths(values, base)
    merged = validate(values, source, consumer)
    return {**merged, **absolute_paths({k: merged[k] for k in PATH_KEYS if k not in values}, REPO)}


def _run_to_capture(merged: dict) -> list[str]:
    """run_dir under capture auto/always: an existing run is read (auto) or refused (always); a new one
    needs a machine that can capture it."""
    v = merged["run_dir"]
    p = resolve_path(v)
    if merged["capture"] == "always":
        if p.exists():
            return [f"run_dir: {v} exists; capture: always never writes over a run. Give a new run_dir."]
    elif p.exists():
        problem = _run_dir(v)
        return [f"run_dir: {problem}"] if problem else []
    from .capture.chapters import can_capture

    ok, why = can_capture("setup")
    return [] if ok else [f"run_dir: {v} does not exist and this machine cannot capture it ({why}). Capture "
                          f"on a GPU machine, or set run_dir to an existing run such as {BUNDLED_RUN}."]


def for_consumer(params: dict, consumer: str) -> dict:
    return {k: v for k, v in params.items() if consumer in SCHEMA[k].feeds}
