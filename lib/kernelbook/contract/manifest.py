"""A run's manifest.json as typed, frozen values, with one reader that migrates older runs (DESIGN.md, "Run
directory contract"; issue 40).

`read_manifest(path | dict | Manifest) -> Manifest` is the one way in. Every field the analysis reads has a name
and a type here; a field an older run lacks gets the default written beside it (None: "this run does not record
it"; an empty mapping or tuple for a collection). What the types do not name stays readable, unchanged, in `raw`
(the manifest as read), and the sections whose keys vary with the backend or the capture's version
(`timeline_info.inputs`, `.shapes`, `.sampling`, `ncu.worker`, `produced_by` …) are read-only mappings.

`params` stays a read-only mapping of the parameters as the capture validated them (what two runs' parameter
diffs read: `compare.changed_params`); the analysis reads the workload through `Manifest.workload`, a typed view of
the keys that say what ran (model, weights, dtype, batch, tokens, cache, compiled step, ranks, variant), each with
the schema's default where an older run lacks it.

Versions (`kernelbook_run`, the number capture writes first in every manifest; `schema_version` here):

- 0: no number. Manifests before `kernelbook_run` was written; `environment.gpu` may be the GPU's name alone.
- 1: every committed run (2026-11-22 onward). Sections added since without a new number — `timeline_info
  .plain_phases`, `.shapes`, `.sampling`, `ncu.mode`/`.command`/`.results`…, `produced_by`, `peak_rss_gb`,
  `host_baseline*` — take their defaults when absent (`_defaults_v1`).

A number above `SCHEMA_VERSION` is a run written by a newer kernelbook: `ManifestError`, never a guess.
This module reads no file but the manifest itself and imports nothing of kernelbook.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .layout import RunLayout

SCHEMA_VERSION = 1  # the `kernelbook_run` number this reader knows; capture writes it
STATUSES = ("complete", "partial")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ManifestError(ValueError):
    """A manifest this reader cannot read: not an object, or written by a newer kernelbook."""


def _frozen(v: Any) -> Any:
    """`v` with every dict made a read-only mapping and every list a tuple (a frozen dataclass holds no mutable
    part)."""
    if isinstance(v, dict):
        return MappingProxyType({k: _frozen(x) for k, x in v.items()})
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    return v


def _obj(d: Any, key: str) -> Mapping[str, Any]:
    """`d[key]` where it is an object, else an empty mapping (absent, null, or damaged: load.check_run reports
    the damage)."""
    v = d.get(key) if isinstance(d, Mapping) else None
    return v if isinstance(v, Mapping) else _EMPTY


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


@dataclass(frozen=True)
class Gpu:
    """The GPU the capture ran on (`environment.gpu`)."""

    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_gib: float | None = None
    l2_bytes: int | None = None
    cuda: str | None = None

    @classmethod
    def read(cls, d: Mapping) -> Gpu:
        return cls(_str(d.get("name")), _str(d.get("compute_capability")), _int(d.get("sm_count")),
                   _num(d.get("memory_gib")), _int(d.get("l2_bytes")), _str(d.get("cuda")))


@dataclass(frozen=True)
class Clocks:
    """The GPU's clocks at capture start (`environment.clocks`), MHz."""

    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    applications_sm_clock_mhz: int | None = None

    @classmethod
    def read(cls, d: Mapping) -> Clocks:
        return cls(*(_int(d.get(k)) for k in ("sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz",
                                                "mem_clock_max_mhz", "applications_sm_clock_mhz")))


@dataclass(frozen=True)
class Environment:
    """Software and hardware of the capture (`environment`): versions as text, "absent" for a tool not found."""

    gpu: Gpu = Gpu()
    clocks: Clocks = Clocks()
    host: str | None = None
    python: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    transformers: str | None = None
    ncu: str | None = None
    nsys: str | None = None

    @classmethod
    def read(cls, d: Mapping) -> Environment:
        return cls(Gpu.read(_obj(d, "gpu")), Clocks.read(_obj(d, "clocks")),
                   *(_str(d.get(k)) for k in ("host", "python", "driver", "cuda", "torch", "transformers", "ncu",
                                               "nsys")))


@dataclass(frozen=True)
class Timing:
    """One repeated measurement (`measure.StableMeasurement`'s record): median and spread of its trials, in s."""

    median_s: float | None = None
    spread: float | None = None  # (max − min) / median, a fraction
    trials: int | None = None
    samples_s: tuple[float, ...] = ()
    noisy: bool = False  # spread over 2 %
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)  # what was measured (GEMM n, bytes …)

    @classmethod
    def read(cls, d: Mapping) -> Timing | None:
        if not d:
            return None
        named = ("median_s", "spread", "trials", "samples_s", "noisy")
        return cls(_num(d.get("median_s")), _num(d.get("spread")), _int(d.get("trials")),
                   tuple(float(x) for x in d.get("samples_s") or ()), bool(d.get("noisy")),
                   MappingProxyType({k: v for k, v in d.items() if k not in named}))


@dataclass(frozen=True)
class MeasuredPeaks:
    """The ceilings measured on the capture's GPU (`measured_peaks`): a bf16 GEMM (TFLOP/s) and a device-to-device
    copy (GB/s, read + write)."""

    bf16_gemm_tflops: float
    d2d_copy_gbps: float
    bf16_gemm: Timing | None = None
    d2d_copy: Timing | None = None

    @classmethod
    def read(cls, d: Mapping) -> MeasuredPeaks | None:
        if _num(d.get("bf16_gemm_tflops")) is None or _num(d.get("d2d_copy_gbps")) is None:
            return None  # measure_peaks: false (load.check_run holds a present record whole)
        return cls(float(d["bf16_gemm_tflops"]), float(d["d2d_copy_gbps"]), Timing.read(_obj(d, "bf16_gemm")),
                   Timing.read(_obj(d, "d2d_copy")))


@dataclass(frozen=True)
class PlainPhase:
    """One phase of the plain (unprofiled) generate the capture timed (`timeline_info.plain_phases.<phase>`)."""

    steps: int | None = None
    ms_per_step: float | None = None  # median of the trials; per decode step, per call for the others
    samples_ms_per_step: tuple[float, ...] = ()
    method: str | None = None

    @classmethod
    def read(cls, d: Mapping) -> PlainPhase:
        return cls(_int(d.get("steps")), _num(d.get("ms_per_step")),
                   tuple(float(x) for x in d.get("samples_ms_per_step") or ()), _str(d.get("method")))


@dataclass(frozen=True)
class MoeRouter:
    """One router shape of a MoE's decode steps as the routing pass recorded it (capture.routing): per call, the
    distinct experts its top-k picked among `experts` for `tokens` tokens (mean, min, max over `calls`), and the bound
    min(tokens·k, experts) that a step without the record assumes."""

    tokens: int
    experts: int
    k: int
    calls: int
    steps: int
    distinct_mean: float
    distinct_min: int
    distinct_max: int

    @classmethod
    def read(cls, d: Mapping) -> "MoeRouter | None":
        vals = [_int(d.get(k)) for k in ("tokens", "experts", "k", "calls", "steps")]
        mean, lo, hi = _num(d.get("distinct_mean")), _int(d.get("distinct_min")), _int(d.get("distinct_max"))
        if None in vals or mean is None or lo is None or hi is None:
            return None
        return cls(*vals, mean, lo, hi)


@dataclass(frozen=True)
class MoeRouting:
    """The routing pass's record (`timeline_info.moe_routing`): how it was taken and each router shape."""

    method: str
    routers: tuple[MoeRouter, ...]

    @classmethod
    def read(cls, d: Any) -> "MoeRouting | None":
        if not isinstance(d, Mapping):
            return None
        routers = tuple(r for r in (MoeRouter.read(x) for x in d.get("routers") or () if isinstance(x, Mapping))
                        if r is not None)
        return cls(_str(d.get("method")) or "", routers) if routers else None

    def router(self, tokens: int, experts: int) -> MoeRouter | None:
        """The record of the router over [tokens, experts], None where the pass saw none."""
        return next((r for r in self.routers if (r.tokens, r.experts) == (tokens, experts)), None)


@dataclass(frozen=True)
class TimelineInfo:
    """What the timeline stage recorded (`timeline_info`): the model, its inputs, the plain generate against the
    profiled one."""

    plain_generate: Timing | None = None  # None: captured before plain generates were timed
    plain_phases: Mapping[str, PlainPhase] = field(default_factory=lambda: _EMPTY)
    profiled_generate_s: float | None = None
    overhead_ratio: float | None = None  # profiled ÷ plain generate
    model_class: str | None = None
    model_kind: str | None = None
    n_params: int | None = None
    weights: str | None = None
    warmup: str | None = None
    routing_note: str | None = None
    model_load_s: float | None = None
    trace_export_s: float | None = None
    ingest_s: float | None = None
    kernels: int | None = None
    vision_forwards_marked: int | None = None
    tensor_parallel: int | None = None
    inputs: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    generate_kwargs: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    shapes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)  # the shapes pass; empty before it existed
    sampling: Mapping[str, Any] | None = None  # the sampled decode windows; None: every step profiled
    ranks: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    moe_routing: MoeRouting | None = None  # the experts a MoE's routers picked per decode step; None: not recorded

    @classmethod
    def read(cls, d: Mapping) -> TimelineInfo:
        sampling = d.get("sampling")
        return cls(
            Timing.read(_obj(d, "plain_generate")),
            MappingProxyType({ph: PlainPhase.read(v) for ph, v in _obj(d, "plain_phases").items()
                              if isinstance(v, Mapping)}),
            _num(d.get("profiled_generate_s")), _num(d.get("overhead_ratio")),
            _str(d.get("model_class")), _str(d.get("model_kind")), _int(d.get("n_params")), _str(d.get("weights")),
            _str(d.get("warmup")), _str(d.get("routing_note")), _num(d.get("model_load_s")),
            _num(d.get("trace_export_s")), _num(d.get("ingest_s")), _int(d.get("kernels")),
            _int(d.get("vision_forwards_marked")), _int(d.get("tensor_parallel")),
            _frozen(dict(_obj(d, "inputs"))), _frozen(dict(_obj(d, "generate_kwargs"))),
            _frozen(dict(_obj(d, "shapes"))), _frozen(dict(sampling)) if isinstance(sampling, Mapping) else None,
            _frozen(dict(_obj(d, "ranks"))), MoeRouting.read(d.get("moe_routing")))

    @property
    def prompt_tokens(self) -> int:
        """Tokens in the KV cache at decode step 1 (the prompt, image tokens included); 0 where not recorded."""
        return int(self.inputs.get("prompt_tokens") or 0)

    def plain_ms_per_step(self) -> dict[str, float]:
        """Per phase, the plain wall ms per step the capture timed; empty for a run captured before."""
        return {ph: v.ms_per_step for ph, v in self.plain_phases.items() if v.ms_per_step is not None}


@dataclass(frozen=True)
class LeftOut:
    """A kernel that ranked among a phase's top but ncu cannot profile (`ncu.phases.<phase>.left_out[]`): its name,
    its share of the phase's GPU time (a fraction) and why."""

    name: str
    share: float
    reason: str

    @classmethod
    def read(cls, d: Mapping) -> LeftOut:
        return cls(str(d.get("name")), _num(d.get("share")) or 0.0, str(d.get("reason")))


@dataclass(frozen=True)
class NcuPhase:
    """One phase's ncu stage (`ncu.phases.<phase>`): the step profiled, kernels selected and profiled, ncu results,
    wall time (s) and the error that stopped it (None: none)."""

    step: int | None = None
    selected: int | None = None
    profiled: int | None = None
    results: int | None = None
    wall_s: float | None = None
    error: str | None = None
    graph_replay: bool = False  # the phase replays a CUDA graph: an ncu process of its own, not by position
    command: str | None = None
    left_out: tuple[LeftOut, ...] = ()  # ranked among the top but not profilable; empty before it was recorded

    @classmethod
    def read(cls, d: Mapping) -> NcuPhase:
        return cls(_int(d.get("step")), _int(d.get("selected")), _int(d.get("profiled")), _int(d.get("results")),
                   _num(d.get("wall_s")), _str(d.get("error")), bool(d.get("graph_replay")), _str(d.get("command")),
                   tuple(LeftOut.read(x) for x in d.get("left_out") or () if isinstance(x, Mapping)))


@dataclass(frozen=True)
class InLoop:
    """The ncu stage's in-loop pass (`ncu.inloop`). `mode` "range" (capture.ncu_ranges): app-range replay, caches
    flushed before each range; runs captured before it had a pass with `--cache-control none`, one replay pass
    per kernel (`mode` None)."""

    cache_control: str | None = None
    processes: int | None = None
    wall_s: float | None = None
    passes: int | None = None  # the most replay passes a kernel (range) needed
    kernels: int | None = None  # kernels with in-loop figures
    error: str | None = None
    mode: str | None = None  # "range": the range pass; None: the older `--cache-control none` pass
    ranges: int | None = None  # ranges measured (the range pass)

    @classmethod
    def read(cls, d: Mapping) -> InLoop | None:
        if not d:
            return None
        return cls(_str(d.get("cache_control")), _int(d.get("processes")), _num(d.get("wall_s")),
                   _int(d.get("passes")), _int(d.get("kernels")), _str(d.get("error")), _str(d.get("mode")),
                   _int(d.get("ranges")))


@dataclass(frozen=True)
class NcuInfo:
    """How the ncu stage ran (`ncu`): its controls, selection mode, command, and each phase's account."""

    clock_control: str | None = None
    cache_control: str | None = None
    phases: Mapping[str, NcuPhase] = field(default_factory=lambda: _EMPTY)
    mode: str | None = None
    command: str | None = None
    processes: int | None = None  # None: before it was recorded (one process per phase then)
    wall_s: float | None = None
    expected_launches: int | None = None
    results: int | None = None
    selected: int | None = None
    results_per_selected: float | None = None
    worker: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    op_check: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    nccl: str | None = None
    ranks: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    op_calls_marked_by_worker: int | None = None
    inloop: InLoop | None = None  # None: the run has no in-loop pass (ncu_inloop: false, or captured before it)
    phases_absent: tuple[str, ...] = ()  # asked phases the run's timeline does not have

    @classmethod
    def read(cls, d: Mapping) -> NcuInfo | None:
        if not d:
            return None  # no ncu stage (ncu_top_n: 0, or a run captured without one)
        return cls(_str(d.get("clock_control")), _str(d.get("cache_control")),
                   MappingProxyType({ph: NcuPhase.read(v) for ph, v in _obj(d, "phases").items()
                                     if isinstance(v, Mapping)}),
                   _str(d.get("mode")), _str(d.get("command")), _int(d.get("processes")), _num(d.get("wall_s")),
                   _int(d.get("expected_launches")), _int(d.get("results")), _int(d.get("selected")),
                   _num(d.get("results_per_selected")), _frozen(dict(_obj(d, "worker"))),
                   _frozen(dict(_obj(d, "op_check"))), _str(d.get("nccl")), _frozen(dict(_obj(d, "ranks"))),
                   _int(d.get("op_calls_marked_by_worker")), InLoop.read(_obj(d, "inloop")),
                   tuple(str(p) for p in (d.get("phases_absent") or ()) if isinstance(p, str)))

    @property
    def total_wall_s(self) -> float:
        """The stage's wall time (s): as recorded, else the sum of its phases' (older runs)."""
        return self.wall_s or sum(p.wall_s or 0 for p in self.phases.values())


@dataclass(frozen=True)
class ClockState:
    """Whether the capture locked the GPU's clocks (`clock_state`), and why."""

    locked: bool | None = None
    note: str | None = None

    @classmethod
    def read(cls, d: Mapping) -> ClockState:
        locked = d.get("locked")
        return cls(None if locked is None else bool(locked), _str(d.get("note")))


@dataclass(frozen=True)
class TimelineBackend:
    """Which profiler took the timeline (`timeline_backend`: torch | nsys) and why."""

    backend: str | None = None
    why: str | None = None

    @classmethod
    def read(cls, d: Mapping) -> TimelineBackend | None:
        return cls(_str(d.get("backend")), _str(d.get("why"))) if d else None


@dataclass(frozen=True)
class Workload:
    """What ran, from the manifest's `params` (the schema's defaults where an older run lacks a key)."""

    model: str | None = None
    weights: str | None = None
    dtype: str = "bfloat16"
    batch_size: int = 1
    max_new_tokens: int | None = None
    cache_implementation: str = "dynamic"
    compile_decode: bool = True
    tensor_parallel: int = 1
    variant: str | None = None

    # a variant of a run keeps these (and the GPU model): it changes how the work runs, not what it is; a longer
    # generation is other work (its KV cache and the limit of its steps grow with the tokens)
    SAME = ("model", "weights", "dtype", "max_new_tokens")

    @classmethod
    def read(cls, p: Mapping[str, Any]) -> "Workload":
        return cls(model=_str(p.get("model")), weights=_str(p.get("weights")), dtype=_str(p.get("dtype")) or "bfloat16",
                   batch_size=_int(p.get("batch_size")) or 1, max_new_tokens=_int(p.get("max_new_tokens")),
                   cache_implementation=_str(p.get("cache_implementation")) or "dynamic",
                   compile_decode=bool(p.get("compile_decode", True)), tensor_parallel=_int(p.get("tensor_parallel")) or 1,
                   variant=_str(p.get("variant")))

    @property
    def static_cache(self) -> bool:
        return self.cache_implementation == "static"

    @property
    def graph_decode(self) -> bool:
        """Decode steps ran as CUDA graphs: a static cache and a compiled step."""
        return self.static_cache and self.compile_decode

    def differs(self, other: "Workload") -> list[str]:
        """The `SAME` keys in which `other` is another workload."""
        return [k for k in self.SAME if getattr(self, k) != getattr(other, k)]


@dataclass(frozen=True)
class Manifest:
    """A run's manifest.json, typed (`read_manifest` builds it; the module docstring lists the versions)."""

    schema_version: int
    run_id: str | None
    status: str  # complete | partial
    params: Mapping[str, Any]  # as the capture validated them (see the module docstring: why a mapping)
    reason: str | None = None  # why a partial run is partial
    created: str | None = None  # ISO 8601, UTC
    git_revision: str | None = None  # "absent" where the capture had no git
    params_source: str | None = None
    device: str | None = None  # the row of params/devices.yaml the run is priced against
    environment: Environment = Environment()
    measured_peaks: MeasuredPeaks | None = None  # None: measure_peaks: false
    timeline_backend: TimelineBackend | None = None
    timeline_info: TimelineInfo = TimelineInfo()
    ncu: NcuInfo | None = None  # None: no ncu stage
    clock_state: ClockState = ClockState()
    timings_s: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # wall s of each capture step
    produced_by: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)  # chapter (or CLI) that ran each step
    peak_rss_gb: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    host_baseline: str | None = None  # a variant: the sibling run timed on the same host
    host_baseline_note: str | None = None
    host_baseline_of: str | None = None  # a host baseline: the run it was timed for
    captured_as: str | None = None
    note: str | None = None
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, repr=False, compare=False)  # the manifest as read

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def workload(self) -> Workload:
        return Workload.read(self.params)

    @property
    def ncu_top_n(self) -> int | None:
        """How many kernels per phase the capture was asked to profile under ncu (None: not recorded)."""
        return _int(self.params.get("ncu_top_n"))

    @property
    def gpu_name(self) -> str:
        return self.environment.gpu.name or "unknown"

    @property
    def timeline_profiler(self) -> str:
        """Which profiler took the timeline: nsys or torch (a run that records none predates nsys: torch)."""
        return (self.timeline_backend.backend if self.timeline_backend else None) or "torch"

    def plain_ms_per_step(self) -> dict[str, float]:
        return self.timeline_info.plain_ms_per_step()

    @property
    def overhead_ratio(self) -> float:
        """Profiled ÷ plain generate; 1.0 where the run did not time a plain generate."""
        return self.timeline_info.overhead_ratio or 1.0

    @property
    def cache_control(self) -> str | None:
        """ncu's --cache-control: the stage's record, else the parameter it was asked with."""
        return (self.ncu.cache_control if self.ncu else None) or _str(self.params.get("cache_control"))


# -- migration: each step takes a manifest dict of version n to version n + 1 (a copy; the input is left as is)

def _v0_to_v1(m: dict) -> dict:
    """Before `kernelbook_run`: `environment.gpu` could be the GPU's name alone."""
    env = m.get("environment")
    if isinstance(env, dict) and isinstance(env.get("gpu"), str):
        m["environment"] = {**env, "gpu": {"name": env["gpu"]}}
    m["kernelbook_run"] = 1
    return m


MIGRATIONS = {0: _v0_to_v1}  # from version → the step to the next


def migrate(m: dict) -> dict:
    """`m` (any version up to `SCHEMA_VERSION`) brought to `SCHEMA_VERSION`, step by step (`MIGRATIONS`)."""
    v = m.get("kernelbook_run", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ManifestError(f"kernelbook_run is {v!r}, expected a whole number ≥ 0")
    if v > SCHEMA_VERSION:
        raise ManifestError(f"kernelbook_run {v}: written by a newer kernelbook (this one reads up to "
                            f"{SCHEMA_VERSION}); update kernelbook to read this run")
    m = dict(m)
    while v < SCHEMA_VERSION:
        m = MIGRATIONS[v](m)
        v += 1
    return m


def read_manifest(source: str | Path | Mapping | Manifest) -> Manifest:
    """The typed manifest of `source`: a run directory or its manifest.json, the manifest's dict, or a Manifest
    (returned as it is). Older versions are migrated (`migrate`); a field an older run lacks takes its default."""
    if isinstance(source, Manifest):
        return source
    if isinstance(source, (str, Path)):
        p = Path(source)
        p = RunLayout(p).manifest if p.is_dir() else p
        source = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(source, Mapping):
        raise ManifestError(f"a manifest is a JSON object, got {type(source).__name__}")
    m = migrate(dict(source))
    params = m.get("params")
    return Manifest(
        schema_version=m["kernelbook_run"], run_id=_str(m.get("run_id")), status=str(m.get("status", "partial")),
        params=_frozen(dict(params)) if isinstance(params, Mapping) else _EMPTY,
        reason=_str(m.get("reason")), created=_str(m.get("created")), git_revision=_str(m.get("git_revision")),
        params_source=_str(m.get("params_source")), device=_str(m.get("device")),
        environment=Environment.read(_obj(m, "environment")),
        measured_peaks=MeasuredPeaks.read(_obj(m, "measured_peaks")),
        timeline_backend=TimelineBackend.read(_obj(m, "timeline_backend")),
        timeline_info=TimelineInfo.read(_obj(m, "timeline_info")),
        ncu=NcuInfo.read(_obj(m, "ncu")), clock_state=ClockState.read(_obj(m, "clock_state")),
        timings_s=MappingProxyType({k: float(v) for k, v in _obj(m, "timings_s").items() if _num(v) is not None}),
        produced_by=_frozen(dict(_obj(m, "produced_by"))), peak_rss_gb=_frozen(dict(_obj(m, "peak_rss_gb"))),
        host_baseline=_str(m.get("host_baseline")), host_baseline_note=_str(m.get("host_baseline_note")),
        host_baseline_of=_str(m.get("host_baseline_of")), captured_as=_str(m.get("captured_as")),
        note=_str(m.get("note")), raw=_frozen(m))
