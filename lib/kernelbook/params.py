"""Run parameters: one flat YAML of overrides, validated by a schema before any work is done.

Every key is declared once here with its type, default, allowed range and the consumers it feeds
(`capture` and/or chapter notebooks by file stem). All problems are collected and reported in one
message; the CLI exits with code 2 and writes nothing.
"""
from __future__ import annotations

import difflib
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from .contract.layout import STUDY_MANIFEST

REPO = Path(__file__).resolve().parents[2]
BUNDLED_RUN = "data/runs/h100-deepseek-ocr-2"
CAPTURE = "capture"
BOOK = "book"  # the book runner itself (keys no chapter reads)
CHAPTERS = ("00_setup", "01_timeline", "02_ncu", "03_histograms", "04_roofline", "05_classification", "06_npu",
            "07_summary")
STUDY_CHAPTER = "08_serving"  # reads a study (`kernelbook study`), not run_dir
ALL_CHAPTERS = CHAPTERS + (STUDY_CHAPTER,)
BUNDLED_STUDY = "data/studies/h100-serving"
VARIANT_RUNS = ["data/runs/h100-variant-static-graphs", "data/runs/h100-variant-batch8",
                "data/runs/h100-variant-eager-attention"]
PHASE_NAMES = ("vision_encode", "prefill", "decode")

# A params file is a page of overrides (the largest in params/ is under 1 KiB). These bounds keep a hostile or
# mistaken file (a YAML alias bomb, a pasted log, a binary) to one short message in well under a second.
MAX_FILE_BYTES = 1024 * 1024
MAX_YAML_VALUES = 10_000  # keys, list items and scalars together; PyYAML builds each in ~10 µs: 0.1 s in all
MAX_YAML_DEPTH = 10  # a value is a scalar or a list of scalars (two levels with the file's mapping); the loader
                     # recurses once per level and would end in a RecursionError near 1000
SHOWN_CHARS = 80  # the most of any one value a message quotes
MAX_PROBLEMS_SHOWN = 20  # lines of a ParamError's message; `problems` keeps them all


class ParamError(ValueError):
    """Bad parameters; `problems` lists every one of them. The message shows the first MAX_PROBLEMS_SHOWN,
    then `footer` (said once, e.g. the known keys, however many problems it concerns)."""

    def __init__(self, problems: list[str], source: str = "parameters", footer: str = ""):
        self.problems = problems
        shown_lines = [f"  - {p}" for p in problems[:MAX_PROBLEMS_SHOWN]]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            shown_lines.append(f"  - ... and {len(problems) - MAX_PROBLEMS_SHOWN} more")
        if footer:
            shown_lines.append(footer)
        lines = "\n".join(shown_lines)
        super().__init__(f"{len(problems)} problem(s) in {source}:\n{lines}")


# reprlib stops at these counts, so quoting a list of a million items or a string of a megabyte reads only the
# part it prints (a plain repr walks the whole value first: 2.1 GB of message for a 1 KB alias bomb)
_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxdict = 4
_REPR.maxstring = _REPR.maxlong = _REPR.maxother = SHOWN_CHARS


def shown(v: Any, bare: bool = False, limit: int = SHOWN_CHARS) -> str:
    """`v` as a message quotes it: its repr, at most `limit` characters with the middle or end cut.
    `bare`: a printable string (a path, a key) as it is, without quotes, cut the same way. Of a string, list
    or mapping it reads only the part it prints, whatever the size."""
    if bare and isinstance(v, str):
        half = limit // 2 - 2
        text = v if len(v) <= limit else f"{v[:half]}...{v[-half:]}"
        if text.isprintable():
            return text
    text = _REPR.repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _on_disk(p: Path, kind: str) -> bool:
    """Whether `p` is a directory ("dir"), a regular file ("file") or anything ("any"); False, not an
    exception, for a name the system refuses (too long, a NUL byte)."""
    try:
        return p.is_dir() if kind == "dir" else p.is_file() if kind == "file" else p.exists()
    except (OSError, ValueError):
        return False


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
        if not _on_disk(resolve_path(v), kind):
            return f"{'directory' if kind == 'dir' else 'file'} {shown(v, bare=True)} does not exist"
        return None
    return check


def _run_dir(v) -> str | None:
    p = resolve_path(v)
    if not _on_disk(p, "dir"):
        return (f"run directory {shown(v, bare=True)} does not exist (capture one with `python -m kernelbook "
                f"capture`, or use {BUNDLED_RUN})")
    from .contract.layout import RunLayout

    if not _on_disk(RunLayout(p).manifest, "file"):
        return f"run directory {shown(v, bare=True)} has no manifest.json: it is not a kernelbook run"
    return None


def _study_dir(v) -> str | None:
    if not isinstance(v, str) or not _on_disk(resolve_path(v) / STUDY_MANIFEST, "file"):
        return (f"{shown(v, bare=True)} is not a study folder (no {STUDY_MANIFEST}): make one with `python -m kernelbook "
                "study --params params/study-serving.yaml --out <folder>` on a GPU machine")
    return None


def _model(v) -> str | None:
    from .contract.names import BUILTIN_MODELS

    if v in BUILTIN_MODELS or _on_disk(resolve_path(v), "dir"):
        return None
    parts = v.split("/")
    if len(parts) == 2 and all(parts) and " " not in v:
        return None  # a hub id: checked when loaded (the capture machine may have a cache)
    return (f"unknown model {shown(v)}: use one of {', '.join(BUILTIN_MODELS)}, a Hugging Face hub id "
            "(org/name) or a local checkpoint directory")


def _weights(v) -> str | None:
    if v in ("random", "pretrained") or _on_disk(resolve_path(v), "dir"):
        return None
    parts = v.split("/")
    if len(parts) == 2 and all(parts) and not v.startswith((".", "/")):
        return None
    return f"weights {shown(v)} is neither 'random', 'pretrained', a hub id nor an existing checkpoint directory"


def _nonblank(v) -> str | None:
    return "must not be blank (write null instead)" if not v.strip() else None


def _device(v) -> str | None:
    from .devices import UnknownDeviceError, lookup

    try:
        lookup(v)
    except UnknownDeviceError as e:
        # devices.lookup quotes the name whole; the message here quotes it as every other value
        return str(e).splitlines()[0].replace(repr(v), shown(v), 1)
    return None


def _phases(v) -> str | None:
    bad = [p for p in v if p not in PHASE_NAMES]
    return f"unknown phase(s) {shown(bad)}; phases are {list(PHASE_NAMES)}" if bad else None


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
    "ncu_phases": Param(list, ["vision_encode", "prefill", "decode"], (CAPTURE,), "phases whose top kernels ncu "
                        "profiles (a phase the run does not have, e.g. vision_encode of a text model, is skipped and "
                        "named in the manifest)", check=_phases, items=str),
    "ncu_top_n": Param(int, 20, (CAPTURE,), "kernels per phase sent to ncu (0 = no ncu)", min=0, max=500),
    "ncu_inloop": Param(bool, True, (CAPTURE,), "the range pass: ncu again in app-range replay, caches flushed "
                        "before each range as in the main pass, over the profiled decode step as one range (the DRAM "
                        "bytes the step reads in the loop) and, by op call, each profiled decode kernel with the op "
                        "call before it and that producer alone (the kernel's reads in the loop: their difference)"),
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
                         "chapters, each in its own kernel; 0: one more than the CPU cores, at most 4; 1: one after another",
                         min=0, max=64),
    "baseline_run": Param(str, "", ("07_summary",), "a run to compare run_dir against (chapter 07's comparison "
                          "section, as `python -m kernelbook diff baseline_run run_dir`); empty: no comparison",
                          check=lambda v: _run_dir(v) if v else None),
    "deployed_run": Param(str, "data/runs/h100-variant-static-graphs", ("06_npu",), "a run of the same workload "
                          "as deployed (decode as CUDA graphs), whose validation and headline chapter 06 sets beside "
                          "run_dir's; empty: none", check=lambda v: _run_dir(v) if v else None),
    "study_dir": Param(str, BUNDLED_STUDY, (STUDY_CHAPTER, "06_npu", "07_summary"), "a study folder "
                       "(`python -m kernelbook study`): the serving chapter reads its points together, and chapters 06 "
                       "and 07 take the host time per decode step it measured batch by batch into the batch lever "
                       "of the run as deployed (same model and GPU); empty: the chapter says none was given",
                       check=lambda v: _study_dir(v) if v else None),
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
    "kernel": Param(str, "", ("05_classification",), "kernel id (d000 …, p000 …, v000 …) the explorer opens on; empty = the one "
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
PATH_KEYS = ("run_dir", "study_dir", "variant_runs", "baseline_run", "one_gpu_run", "cross_run", "params_file", "omnidocbench_dir",
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
        try:
            p = Path(v).expanduser()
        except RuntimeError:  # ~name of no user: left as given, and its check says it does not exist
            return v
        if p.is_absolute():
            return str(p)
        if maybe and not _on_disk(base / p, "any"):
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
    try:
        p = Path(v).expanduser()
    except RuntimeError:  # ~name of no user: the path as written, which does not exist
        p = Path(v)
    return p if p.is_absolute() else (Path.cwd() / p if _on_disk(Path.cwd() / p, "any") else REPO / p)


_NOTHING = object()


def _check_one(key: str, spec: Param, v: Any, consumer: str | None = None) -> list[str]:
    if v is None:
        return [] if spec.nullable else [f"{key}: must not be null"]
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    if (bool not in types and isinstance(v, bool)) or not isinstance(v, types):
        want = " or ".join(t.__name__ for t in types)
        return [f"{key}: expected {want}, got {type(v).__name__} ({shown(v)})"]
    if spec.items is not None:
        wrong = (x for x in v if (spec.items is not bool and isinstance(x, bool)) or not isinstance(x, spec.items))
        bad = next(wrong, _NOTHING)
        if bad is not _NOTHING:
            return [f"{key}: expected a list of {spec.items.__name__}, got {shown(bad)} ({type(bad).__name__})"]
    if isinstance(v, float) and v != v:  # NaN passes every comparison below
        return [f"{key}: must be a number, not {shown(v)}"]
    if spec.choices is not None and v not in spec.choices:
        return [f"{key}: {shown(v)} is not one of {list(spec.choices)}"]
    if spec.min is not None and v < spec.min:
        return [f"{key}: {shown(v)} is below the minimum {spec.min:g}"]
    if spec.max is not None and v > spec.max:
        return [f"{key}: {shown(v)} is above the maximum {spec.max:g}"]
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
    unknown = [key for key in values if key not in SCHEMA]
    for i, key in enumerate(unknown):
        # hints only where the message shows them: difflib takes milliseconds a key, and a file may hold thousands
        hint = _did_you_mean(key) if i < MAX_PROBLEMS_SHOWN else ""
        problems.append(f"{shown(key, bare=True)}: unknown key{hint}")
    footer = f"known keys: {', '.join(sorted(SCHEMA))}" if unknown else ""
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
        from .contract.sampling import sample_problems

        problems += sample_problems(merged["max_new_tokens"], merged["sample_window"], merged["sample_every"])
    if all(_check_one(k, SCHEMA[k], merged[k]) == [] for k in ("low_pct", "high_pct")) \
            and merged["low_pct"] >= merged["high_pct"]:
        problems.append(f"low_pct: {merged['low_pct']:g} must be below high_pct ({merged['high_pct']:g}): a kernel "
                        "is low below low_pct and high at or above high_pct")
    tp = merged["tensor_parallel"]  # compared only once it is an int: a wrong type has its own problem above
    if merged.get("omnidocbench_subset") and not merged.get("omnidocbench_dir"):
        problems.append("omnidocbench_subset: needs omnidocbench_dir")
    if isinstance(tp, int) and tp > 1 and (merged.get("weights") == "random"
                                           or merged.get("model") == "deepseek-ocr-2"):
        problems.append("tensor_parallel: shards a checkpoint, and random weights are built on one GPU: make one with "
                        "`python bench/make_checkpoint.py deepseek-ocr2-decoder <dir>` (or give any local checkpoint) "
                        "and set model: <dir>, weights: pretrained")
    if problems:
        raise ParamError(problems, source, footer)
    return merged


def _did_you_mean(key: Any) -> str:
    """` (did you mean a, b?)` for an unknown key: the keys sharing its first word, else the close spellings."""
    if not isinstance(key, str):
        return ""
    key = key[:SHOWN_CHARS]
    near = [k for k in SCHEMA if k.split("_")[0] == key.split("_")[0]] or difflib.get_close_matches(key, SCHEMA, n=3)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def load(path: str | Path | None, overrides: dict | None = None, consumer: str | None = None,
         base: Path | None = None) -> dict:
    """Read and validate a params YAML (None = defaults only). `base`: the caller's folder; every path
    parameter given (in the file or the overrides) is made absolute against it before the check
    (`absolute_paths`), and the defaults (the bundled runs) against the repository."""
    values: dict = {}
    source = "parameters"
    if path is not None:
        source = str(path)
        values.update(_read_file(Path(path)))
    values.update(overrides or {})
    if base is None:
        return validate(values, source, consumer)
    values = absolute_paths(values, base)
    merged = validate(values, source, consumer)
    return {**merged, **absolute_paths({k: merged[k] for k in PATH_KEYS if k not in values}, REPO)}


def _read_file(p: Path) -> dict:
    """The mapping a params file holds, or ParamError with one problem: not a regular file, over
    MAX_FILE_BYTES, not UTF-8, not YAML, a YAML alias, more than MAX_YAML_VALUES values or MAX_YAML_DEPTH
    levels, or not a mapping."""
    def refuse(problem: str):
        raise ParamError([problem], str(p))

    if not _on_disk(p, "file"):
        refuse(f"params file {shown(str(p), bare=True)} "
               f"{'is not a regular file' if _on_disk(p, 'any') else 'does not exist'}")
    try:
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # no more than the limit is ever read, whatever the file
    except OSError as e:
        refuse(f"cannot read params file: {e.strerror}")
    if len(data) > MAX_FILE_BYTES:
        refuse(f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB: a params file is a page of key: value "
               "overrides (see params/default.yaml)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        refuse(f"byte 0x{data[e.start]:02x} at line {line}, column {column} is not UTF-8: save the file as UTF-8")
    try:
        problem = _shape_problem(text)
        if problem:
            refuse(problem)
        loaded = yaml.load(text, Loader=_Loader)  # noqa: S506 (_Loader is a SafeLoader)
    except yaml.YAMLError as e:
        refuse(_yaml_problem(e, text))
    if loaded is None:  # an empty file, or comments only
        return {}
    if not isinstance(loaded, dict):
        refuse(f"expected a mapping of key: value, got {type(loaded).__name__}")
    return loaded


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where the wheel has it: 10x faster


class _Loader(_BaseLoader):
    """SafeLoader whose errors in a value (a date like 2024-13-01, an integer of more than 4300 digits) are
    YAML errors at the value's line, not a bare ValueError."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except ValueError as e:
            reason = str(e).split(";")[0]  # Python's int limit goes on to suggest sys.set_int_max_str_digits
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {reason}",
                                                    node.start_mark) from None


def _shape_problem(text: str) -> str | None:
    """What in `text` would make the loaded value larger than its file (an alias) or costly to build (more
    than MAX_YAML_VALUES values, more than MAX_YAML_DEPTH levels), found before anything is built; else None.

    Aliases are refused outright. With them a 1 KB file stands for a list of 10^9 items (each *name shares its
    anchor's value, nine of them nine levels deep), and whatever walks the value (a repr, a check, the
    manifest) expands it; a cap on their number would not help, as 81 aliases make that bomb. A params file
    has no use for them: each value is written once, so the message says to write it out."""
    depth = count = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        where = f"line {event.start_mark.line + 1}, column {event.start_mark.column + 1}"
        if isinstance(event, yaml.AliasEvent):
            return (f"{where}: YAML aliases (*{shown(event.anchor, bare=True)}) are not accepted in a params "
                    "file: write the value out")
        if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            count += 1
            if count > MAX_YAML_VALUES:
                return f"{where}: more than {MAX_YAML_VALUES} values: a params file is a page of key: value overrides"
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                return f"{where}: nested more than {MAX_YAML_DEPTH} levels deep: a value is a scalar or a list"
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return None


def _yaml_problem(e: yaml.YAMLError, text: str) -> str:
    """A YAML error (in `text`) as one line: where, what, and inside what. Without PyYAML's snippet of the
    line, and its text cut, since a line, a tag or an anchor may be a megabyte long."""
    if isinstance(e, yaml.reader.ReaderError):  # a control character: PyYAML gives its offset in the text
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        return (f"not valid YAML at line {line}, column {column}: character #x{e.character:04x} is not allowed "
                f"({e.reason})")
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        where = f"line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}"
        inside = (f" ({shown(e.context, bare=True)} at line {e.context_mark.line + 1})"
                  if e.context and e.context_mark is not None else "")
        return f"not valid YAML at {where}: {shown(e.problem, bare=True, limit=3 * SHOWN_CHARS)}{inside}"
    return f"not valid YAML: {shown(' '.join(str(e).split()), bare=True, limit=3 * SHOWN_CHARS)}"


def _run_to_capture(merged: dict) -> list[str]:
    """run_dir under capture auto/always: an existing run is read (auto) or refused (always); a new one
    needs a machine that can capture it."""
    v = merged["run_dir"]
    p = resolve_path(v)
    if merged["capture"] == "always":
        if _on_disk(p, "any"):
            return [f"run_dir: {shown(v, bare=True)} exists; capture: always never writes over a run. Give a new "
                    "run_dir."]
    elif _on_disk(p, "any"):
        problem = _run_dir(v)
        return [f"run_dir: {problem}"] if problem else []
    from .env import can_capture

    ok, why = can_capture("setup")
    return [] if ok else [f"run_dir: {shown(v, bare=True)} does not exist and this machine cannot capture it "
                          f"({why}). Capture on a GPU machine, or set run_dir to an existing run such as "
                          f"{BUNDLED_RUN}."]


def for_consumer(params: dict, consumer: str) -> dict:
    return {k: v for k, v in params.items() if consumer in SCHEMA[k].feeds}
