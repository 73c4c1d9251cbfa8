"""The validated parameters as frozen, typed configurations, one per consumer, built once at an entry point.

`kernelbook.params` checks a run's parameters against its schema (`params.SCHEMA`) and returns a plain dict; the
entry points (the CLI's `capture` and `_worker`, the capture chapters' `part`, the book runner) turn it into the
configuration their floor reads, and nothing below them reads a parameter by key:

- `CaptureConfig`: every schema key that feeds the capture (`"capture" in Param.feeds`), in the schema's order;
- `BookConfig`: every key the book reads (the runner's own and the chapters' keys), with `ncu_timeout_s`, which the
  runner adds to a capturing chapter's time limit.

A variant is `dataclasses.replace(cfg, warmup=0)`. Where the parameters must travel as a dict (the ncu worker's and
the torchrun ranks' params.json, the manifest's `params`), `as_dict()` gives the same dict, key for key and in the
same order, that the schema's check returned, so those files stay as they were. Lists are tuples here (the
configuration is frozen) and lists again in `as_dict()`.

This module does not import the schema (it sits one floor below it); tests/test_config.py fails when a schema key
has no field here, or a field no key.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping


def _frozen(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _thawed(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


class _Config:
    """`of` and `as_dict` of the configurations below (each a frozen dataclass of schema keys)."""

    @classmethod
    def of(cls, params: Mapping[str, Any]):
        """The configuration of a validated parameter dict (`params.validate` / `params.load`, or the params.json a
        worker is given). KeyError for a key it lacks: a dict that was not checked by the schema."""
        own = {f.name for f in fields(cls) if f.init and f.name != "other_params"}
        values = {name: _frozen(params[name]) for name in own}
        if any(f.name == "other_params" for f in fields(cls)):
            values["other_params"] = tuple((k, _frozen(v)) for k, v in params.items() if k not in own)
        return cls(**values)

    def schema_dict(self) -> dict[str, Any]:
        """The schema keys of this configuration, in the schema's order, as the validated dict held them."""
        return {f.name: _thawed(getattr(self, f.name)) for f in fields(self) if f.name != "other_params"}

    def as_dict(self) -> dict[str, Any]:
        """The validated dict this configuration was built from (with any change `replace` made)."""
        return self.schema_dict()


@dataclass(frozen=True)
class CaptureConfig(_Config):
    """What a capture reads: the schema keys that feed `capture` (their meaning, unit and range: `params.SCHEMA`).

    `other_params`: the validated parameters no capture code reads (the book's), carried only so that the
    params.json a worker is given (`as_dict()`) is the validated dict it always was; `capture_params()` is the
    capture's own, the manifest's `params`."""

    model: str
    weights: str
    trust_remote_code: bool
    dtype: str
    batch_size: int
    prompt: str | None
    prompt_tokens: int | None
    max_new_tokens: int
    attn_implementation: str | None
    cache_implementation: str
    compile_decode: bool
    tensor_parallel: int
    variant: str | None
    no_repeat_ngram_size: int
    crop_mode: bool
    base_size: int
    omnidocbench_dir: str | None
    omnidocbench_subset: str | None
    seed: int
    warmup: int
    timing_trials: int
    shapes_pass: bool
    sample_window: int
    sample_every: int
    ncu_step: int | None
    timeline_backend: str
    ncu_phases: tuple[str, ...]
    ncu_top_n: int
    ncu_inloop: bool
    clock_control: str
    cache_control: str
    capture_timeout_s: int
    ncu_timeout_s: int
    measure_peaks: bool
    lock_clocks: bool
    other_params: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)

    def capture_params(self) -> dict[str, Any]:
        """The capture's parameters, as the manifest records them (`params.for_consumer(params, "capture")`)."""
        return self.schema_dict()

    def as_dict(self) -> dict[str, Any]:
        """The whole validated dict (the capture's keys, then the others), as a worker's params.json holds it."""
        return {**self.schema_dict(), **{k: _thawed(v) for k, v in self.other_params}}

    @property
    def static_cache(self) -> bool:
        """generate runs with a preallocated cache (and, with `compile_decode`, CUDA graphs)."""
        return self.cache_implementation == "static"


# keys of the capture the book runner reads as well (a capturing chapter may run its ncu stage on top of its limit)
BOOK_READS_FROM_CAPTURE = ("ncu_timeout_s",)


@dataclass(frozen=True)
class BookConfig(_Config):
    """What the book reads: the runner's keys and the chapters' (every schema key that feeds `book` or a chapter),
    and `BOOK_READS_FROM_CAPTURE`. Paths are as the entry point made them (`params.load(..., base=...)`: absolute)."""

    ncu_timeout_s: int
    lock_clocks: bool
    run_dir: str
    variant_runs: tuple[str, ...]
    chapter_timeout_s: int
    render_jobs: int
    baseline_run: str
    deployed_run: str
    cross_run: str
    study_dir: str
    language: str
    device: str | None
    rank: int
    one_gpu_run: str
    top_n: int
    phase: str
    measure_here: bool
    capture: str
    params_file: str
    kernel: str
    high_pct: float
    low_pct: float
    l2_hit_min_pct: float
    mem_latency_cycles: float

    def runs(self) -> list[str]:
        """Every run the parameters name, run_dir first (empty ones left out): the door checks each, and the
        report folder must lie in, around or on none of them."""
        return [v for v in (self.run_dir, *self.variant_runs, self.baseline_run, self.one_gpu_run, self.cross_run,
                            self.deployed_run) if v]

