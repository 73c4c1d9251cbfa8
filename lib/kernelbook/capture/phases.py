"""Phase markers added by forward hooks, so transformers itself is never edited.

Each top-level forward of the model during `generate` is one step: the first is `prefill`, the rest
are `decode` steps 1..N. Every forward of a vision module (tower or projector) is `vision_encode`,
wherever it runs: inside the top-level forward (transformers 5.17), in `get_image_features`, or in
`generate`'s input preparation before the first forward (5.18 and later encode images there). So the
vision hooks never depend on a top-level step being open. Every phase
gets a torch.profiler `record_function` range named `kb::<phase>#<step>` and an NVTX range named
`<phase>` (what `ncu --nvtx-include` and nsys see). In ncu mode only one NVTX range is pushed, named
`NCU_TARGET`, around the one step ncu should profile, so that the include filter is unambiguous.

Kernel identity by position (`op_record` / `op_targets`): a dispatch mode numbers the aten op calls
inside each phase range (`op_index`, counted per (phase, step), aten namespace only, so the profiler's
own ops never shift the count). The shapes pass records each call as a `kbop#<i>` range, which gives
every kernel of the timeline its op call; the ncu worker replays the same generate and pushes
`NCU_TARGET` around exactly the op calls whose kernels were selected, so ncu profiles those launches
whatever name they carry (mangled, stale-named, Triton) and nothing that merely shares a name.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..contract.names import (MODULE_RANGE, NCU_TARGET, OP_RANGE, PROJECTOR_ATTRS, VISION_ATTRS, VISION_CLASS_WORDS, record_name)


def vision_modules(model) -> list:
    """The outermost vision-tower and projector modules of a VLM (empty for a text model): found by
    attribute name (`vision_tower`, `visual`, `multi_modal_projector`, ...) or by class name."""
    found, seen = [], set()
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        hit = leaf in VISION_ATTRS + PROJECTOR_ATTRS or any(w in type(mod).__name__ for w in VISION_CLASS_WORDS)
        if name and hit and not any(name.startswith(s + ".") for s in seen):
            found.append(mod)
            seen.add(name)
    return found


@dataclass
class PhaseTracker:
    """Hooks that mark phases while `active`. `ncu_target=(phase, step)` switches to ncu mode by step;
    `op_targets={(phase, step): {op_index, ...}}` to ncu mode by op call; `op_record` numbers op calls."""

    model: object
    nvtx: bool = True
    record: bool = True
    ncu_target: tuple[str, int] | None = None
    op_record: bool = False
    # the op and module ranges of `op_record` as NVTX ranges (the shapes pass under Nsight Systems, beside
    # emit_nvtx's op ranges) rather than torch.profiler record_function ranges
    op_nvtx: bool = False
    op_targets: dict | None = None
    op_seen: list = field(default_factory=list)  # ncu mode by op call: (phase, step, op_index, aten op) marked
    active: bool = False
    calls: int = 0
    vision_calls: int = 0  # vision-module forwards marked since `start` (0 on an image model = no vision work)
    clock: list | None = None  # plain timing: (phase, step, start s, end s) per range, GPU synchronized at its end
    # ncu mode by op call: decode steps before the last profiled one that are not profiled themselves run
    # SDPA without cuDNN (see `_attention_for`); how many did
    cudnn_free_prefix: bool = False
    cudnn_free_steps: int = 0
    # long generations (contract.sampling): the profiler whose schedule `step()` advances at each top-level
    # forward, and the steps it records (op calls are numbered only there)
    prof: object = None
    sample_steps: frozenset | None = None
    # nsys over a long generation: the steps whose kernels it records (`Sampling.steps`); the profiler (cudaProfilerStart/
    # Stop, nsys's capture range) runs over each run of them, `capturing` while it is on
    capture_steps: frozenset | None = None
    capturing: bool = False
    capture_toggle_s: float = 0.0  # host seconds inside those start/stop calls (nsys writes a window's report there)
    # the ncu worker: the last step it needs; the next top-level forward raises `EnoughSteps` (a static cache
    # keeps the timeline's length, so generate itself would run every step of it)
    stop_after: int | None = None
    # tensor parallelism under ncu (`torch_backend.rank_barrier`): every rank idles its GPU and meets the others on the
    # host before and after each target op call, so no rank's collective spins on its GPU, waiting for the rank under
    # ncu, while ncu replays that rank's target kernels
    rank_barrier: object = None
    # the ncu worker under `--profile-from-start off`: cudaProfilerStart/Stop around each target op call (by op
    # call) or the target step (by step: a CUDA-graph replay), so ncu intercepts the launches before and between
    # targets (the model's warmup, torch.compile, the graph's recording) only lightly (capture.ncu PROFILE_GATE)
    profile_gate: bool = False
    # the ncu worker of the range pass (capture.ncu_ranges): {(phase, step): "step" | [(first op, last op), ...]}:
    # cudaProfilerStart/Stop around the whole step, or around each span of op calls, which ncu's app-range replay
    # measures as one result each; `ranges_seen` lists the ranges closed, in order (phase, step, first, last, the
    # aten ops at first and last; -1 for a whole step)
    ranges: dict | None = None
    ranges_seen: list = field(default_factory=list)
    _span_ops: list = field(default_factory=lambda: [""])  # the aten op that opened the span now measured
    _cudnn_sdp: bool | None = None  # the flag as it was before `start`, restored at `stop`
    _last_profiled: int = -1  # the ncu worker by op call: its last profiled decode step
    _lead_up_until: int = -1  # the same with `cudnn_free_prefix` (steps before it may lead up to it)
    _stack: list = field(default_factory=list)
    _handles: list = field(default_factory=list)
    _op_counts: dict = field(default_factory=dict)
    _mode: object = None
    _mode_on: bool = False
    _paths: dict = field(default_factory=dict)  # id(module) -> its path in the model, for the module ranges
    _mod_handles: list = field(default_factory=list)
    _mod_stack: list = field(default_factory=list)

    def install(self) -> "PhaseTracker":
        """Hooks on the top-level forward and the vision modules. They run eagerly also when generate
        compiles the decode step (static cache): torch.compile does not trace into them (it would guard
        on the step counter and recompile every step), so the marks stay outside the compiled graph."""
        from torch.compiler import disable

        self._handles.append(self.model.register_forward_pre_hook(disable(self._top_pre)))
        self._handles.append(self.model.register_forward_hook(disable(self._top_post)))
        for mod in vision_modules(self.model):
            self._handles.append(mod.register_forward_pre_hook(disable(self._vision_pre)))
            self._handles.append(mod.register_forward_hook(disable(self._vision_post)))
        return self

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def start(self) -> None:
        """Begin marking a new generate call (steps restart at prefill)."""
        self.calls = 0
        self.vision_calls = 0
        self._op_counts = {}
        self.op_seen = []
        self.ranges_seen = []
        self.cudnn_free_steps = 0
        self._last_profiled = max((st for ph, st in self.op_targets if ph == "decode"), default=-1) \
            if self.op_targets else -1
        self._lead_up_until = self._last_profiled if self.cudnn_free_prefix else -1
        if self._lead_up_until > 0:
            import torch

            self._cudnn_sdp = torch.backends.cuda.cudnn_sdp_enabled()
        self.active = True
        if self.op_record or self.op_targets:
            from .opindex import OpNumbering

            self._mode = OpNumbering(self)
            self._numbering(True)

    def stop(self) -> None:
        self.active = False
        if self._cudnn_sdp is not None:
            import torch

            torch.backends.cuda.enable_cudnn_sdp(self._cudnn_sdp)
            self._cudnn_sdp = None
        if self._mode is not None:
            self._numbering(False)
            self._mode = None

    def _numbering(self, on: bool) -> None:
        """Op numbering (the dispatch mode) on or off; in the pass that records shapes (`op_record`), every
        submodule's forward is also a `kbmod#<path>` profiler range while numbering is on, so each kernel is tied
        to the module that launched it. The module hooks are global and live only as long as the numbering:
        with the dispatch mode on the step runs eagerly, and a compiled step never sees them."""
        if on == self._mode_on:
            return
        if on:
            self._mode.__enter__()
        else:
            self._mode.__exit__(None, None, None)
        self._mode_on = on
        if self.op_record:
            self._module_ranges(on)

    def _module_ranges(self, on: bool) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        if on and not self._mod_handles:
            if not self._paths:
                self._paths = {id(m): f"{name}|{type(m).__name__}" for name, m in self.model.named_modules() if name}
            self._mod_handles = [register_module_forward_pre_hook(self._module_pre),
                                 register_module_forward_hook(self._module_post)]
        elif not on:
            for h in self._mod_handles:
                h.remove()
            self._mod_handles = []
            while self._mod_stack:  # a range left open (numbering switched off inside a module) is closed
                self._mod_stack.pop()[1].__exit__(None, None, None)

    def _module_pre(self, module, args):
        path = self._paths.get(id(module))
        if path is not None:
            import torch

            rf = self._range(f"{MODULE_RANGE}{path}")
            rf.__enter__()
            self._mod_stack.append((module, rf))

    def _module_post(self, module, args, output):
        if self._mod_stack and self._mod_stack[-1][0] is module:
            self._mod_stack.pop()[1].__exit__(None, None, None)

    def _range(self, name: str):
        """An op or module range of the shapes pass: NVTX under Nsight Systems (`op_nvtx`), else a profiler range."""
        import torch

        return torch.cuda.nvtx.range(name) if self.op_nvtx else torch.profiler.record_function(name)

    def op_call(self, func, args, kwargs):
        """Run one aten op call (from the dispatch mode), numbered within the innermost open phase range."""
        import torch

        if not self._stack or getattr(func, "namespace", "aten") != "aten":
            return func(*args, **kwargs)
        top = self._stack[-1]
        key = (top.phase, top.step)
        i = self._op_counts.get(key, 0)
        self._op_counts[key] = i + 1
        if self.op_record and (self.sample_steps is None or top.step in self.sample_steps):
            with self._range(f"{OP_RANGE}{i}"):
                return func(*args, **kwargs)
        spans = self.ranges.get(key) if self.ranges else None
        if isinstance(spans, list) and torch.cuda.is_available():
            return self._in_range(spans, key, i, func, args, kwargs)
        if self.op_targets and i in self.op_targets.get(key, ()):
            self.op_seen.append((top.phase, top.step, i, str(func)))
            if not torch.cuda.is_available():  # no ncu without a GPU: the call is only noted
                return func(*args, **kwargs)
            if self.rank_barrier is not None:
                self.rank_barrier()
            if self.profile_gate:
                torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(NCU_TARGET)
            try:  # ncu reads the NVTX stack at each launch (host side): the op's launches are inside
                return func(*args, **kwargs)
            finally:
                torch.cuda.nvtx.range_pop()
                if self.profile_gate:
                    torch.cuda.profiler.stop()
                if self.rank_barrier is not None:
                    self.rank_barrier()
        return func(*args, **kwargs)

    def _in_range(self, spans: list, key: tuple, i: int, func, args, kwargs):
        """One op call of a step whose spans of op calls the range pass measures: the profiler starts before the
        first op of a span and stops after its last (spans of one step never overlap)."""
        import torch

        starts = [s for s in spans if s[0] == i]
        if starts:
            torch.cuda.profiler.start()
            self._span_ops = [str(func)]
        try:
            return func(*args, **kwargs)
        finally:
            for first, last in spans:
                if last == i and first <= i:
                    torch.cuda.profiler.stop()
                    self.ranges_seen.append((*key, first, last, self._span_ops[0], str(func)))

    # hooks -----------------------------------------------------------------
    def _push(self, phase: str, step: int, owner=None) -> None:
        import torch

        rf = None
        if self.record:
            rf = torch.profiler.record_function(record_name(phase, step))
            rf.__enter__()
        pushed = False
        if self.ncu_target is not None:
            if (phase, step) == tuple(self.ncu_target):
                if self.profile_gate and torch.cuda.is_available():
                    torch.cuda.profiler.start()
                torch.cuda.nvtx.range_push(NCU_TARGET)
                pushed = True
        elif self.nvtx:
            torch.cuda.nvtx.range_push(phase)
            pushed = True
        ranged = bool(self.ranges) and self.ranges.get((phase, step)) == "step" and torch.cuda.is_available()
        if ranged:
            torch.cuda.profiler.start()
        self._stack.append(_Open(phase, step, rf, pushed, owner, time.perf_counter() if self.clock is not None else None,
                                 ranged))

    def _pop(self) -> None:
        import torch

        top = self._stack.pop()
        if self.clock is not None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # the range ends when its GPU work has
            self.clock.append((top.phase, top.step, top.t0, time.perf_counter()))
        if top.ranged:
            torch.cuda.profiler.stop()
            self.ranges_seen.append((top.phase, top.step, -1, -1, "", ""))
        if top.nvtx_pushed:
            torch.cuda.nvtx.range_pop()
            if self.profile_gate and self.ncu_target is not None and torch.cuda.is_available():
                torch.cuda.profiler.stop()
        if top.rf is not None:
            top.rf.__exit__(None, None, None)

    def _top_pre(self, module, args):
        if not self.active:
            return
        phase = "prefill" if self.calls == 0 else "decode"
        if self.stop_after is not None and self.calls > self.stop_after:
            raise EnoughSteps(f"step {self.calls}: the worker needs steps up to {self.stop_after} only")
        if self.capture_steps is not None and self.calls > 0:
            self._gate_capture(self.calls)
        if self.prof is not None and self.calls > 0:
            self._advance_profiler(self.calls)
            if self._mode is not None and self.op_record:
                # op calls are numbered in the recorded steps only: the dispatch mode costs host time on every
                # op, and a long generation runs thousands of steps between its windows
                self._numbering(self.calls in self.sample_steps)
        if self._mode is not None and self.op_targets and not self.op_record and phase == "decode":
            # the ncu worker numbers op calls only in the decode steps it profiles (numbering restarts in each
            # step, so the steps that lead up to one need none): the dispatch mode costs host time on every op.
            # It stays on after the last profiled step: generate's guards restore, when it returns, the dispatch
            # state they found, which had the mode on (start), and a mode off by then would leave it half on.
            self._numbering((phase, self.calls) in self.op_targets or self.calls > self._last_profiled)
        if self._lead_up_until > 0:
            self._attention_for(phase, self.calls)
        self._push(phase, self.calls, owner=module)
        self.calls += 1

    def _top_post(self, module, args, output):
        if self._stack and self._stack[-1].owner is module:
            self._pop()

    def _gate_capture(self, step: int) -> None:
        """nsys over a sampled generation: the profiler starts where a window of recorded steps begins and stops
        where one ends, the GPU synchronized first, so every kernel of the window's last step is in its report."""
        import torch

        want = step in self.capture_steps
        if want == self.capturing:
            return
        if not want:
            torch.cuda.synchronize()
        t = time.perf_counter()
        (torch.cuda.profiler.start if want else torch.cuda.profiler.stop)()
        self.capture_toggle_s += time.perf_counter() - t
        self.capturing = want

    def _advance_profiler(self, step: int) -> None:
        """Sampled profiling: the profiler's step becomes `step`. Where a recorded window ends, the GPU is
        synchronized first, so every kernel of the window's last step is in the trace handed over."""
        if self.sample_steps is not None and step - 1 in self.sample_steps and step not in self.sample_steps:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
        self.prof.step()

    def _attention_for(self, phase: str, step: int) -> None:
        """cuDNN's SDPA builds a graph, with kernels compiled for it, for every KV length, so each decode step
        loads modules of its own; ncu's cost per profiled launch grows with the modules the process holds
        (bench/ncu_floor.py, H100: 0.5 s per launch before a generate, 4.8 s after a 64-token one, 0.7 s when
        attention did not use cuDNN). Decode steps that only lead up to a profiled one therefore run SDPA's
        other backends; a profiled step runs as the timeline's did (the ncu stage checks its op calls and
        kernels launch for launch). The steps' results differ only in rounding, their shapes not at all."""
        import torch

        lead_up = phase == "decode" and step < self._lead_up_until and (phase, step) not in self.op_targets
        self.cudnn_free_steps += lead_up
        torch.backends.cuda.enable_cudnn_sdp(self._cudnn_sdp and not lead_up)

    def _vision_pre(self, module, args):
        # one range per outermost vision forward (a vision module called inside another is part of it);
        # opened whether or not a top-level step is open: newer transformers encode images in generate's
        # input preparation, before the first forward
        if self.active and not any(o.phase == "vision_encode" for o in self._stack):
            self._push("vision_encode", 0, owner=module)
            self.vision_calls += 1

    def _vision_post(self, module, args, output):
        if self._stack and self._stack[-1].owner is module:
            self._pop()


def plain_phase_times(clock: list) -> dict:
    """Per phase, from one generate's `clock`: steps and exclusive wall seconds (the sum of `plain_step_times`)."""
    steps = plain_step_times(clock)
    return {ph: {"steps": int(g.step.nunique()), "s": float(g.wall_ms.sum()) / 1e3}
            for ph, g in steps.groupby("phase", sort=False)}


def plain_step_times(clock: list):
    """Every step of one generate's `clock`: a table of phase, step and exclusive wall ms (a range's span
    less the ranges opened inside it)."""
    import pandas as pd

    spans = sorted(clock, key=lambda c: (c[2], -c[3]))
    rows = []
    for i, (ph, step, t0, t1) in enumerate(spans):
        inner = 0.0
        for _, _, s, e in spans[i + 1:]:  # sorted by start: the ranges inside this one come right after it
            if s >= t1:
                break
            inner += e - s if e <= t1 else 0.0
        rows.append((ph, step, 1e3 * ((t1 - t0) - inner)))
    return pd.DataFrame(rows, columns=["phase", "step", "wall_ms"])


class EnoughSteps(Exception):
    """Raised at the first top-level forward past `PhaseTracker.stop_after`: ends the worker's generate there."""


class NoVisionWork(RuntimeError):
    """An image model generated without any vision module forward being marked."""


def require_vision_work(kind: str, tracker: PhaseTracker, model_class: str) -> None:
    """Stop a capture that would fold an image model's vision encoder into another phase."""
    if kind == "image-text-to-text" and tracker.vision_calls == 0:
        found = [type(m).__name__ for m in vision_modules(tracker.model)]
        raise NoVisionWork(
            f"{model_class} is an image-text-to-text model, but no vision module forward ran while the phases "
            f"were marked (hooked: {found or 'none found'}), so vision work cannot be told from prefill. "
            "If the model's vision tower has another attribute or class name, add it to VISION_ATTRS / "
            "VISION_CLASS_WORDS in kernelbook/capture/phases.py; if the inputs carry no image, give one.")


@dataclass
class _Open:
    """One open phase range: which hook opened it (`owner`) closes it."""

    phase: str
    step: int
    rf: object
    nvtx_pushed: bool
    owner: object
    t0: float | None = None
    ranged: bool = False  # the range pass measures this whole step (cudaProfilerStart at its push, Stop at its pop)
