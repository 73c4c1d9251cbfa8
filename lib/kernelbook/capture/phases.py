"""Phase markers added by forward hooks, so transformers itself is never edited.

Each top-level forward of the model during `generate` is one step: the first is `prefill`, the rest
are `decode` steps 1..N. The vision tower's forward (inside prefill) is `vision_encode`. Every phase
gets a torch.profiler `record_function` range named `kb::<phase>#<step>` and an NVTX range named
`<phase>` (what `ncu --nvtx-include` and nsys see). In ncu mode only one NVTX range is pushed, named
`NCU_TARGET`, around the one step ncu should profile, so that the include filter is unambiguous.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("vision_encode", "prefill", "decode")
NCU_TARGET = "kb_ncu_target"
VISION_ATTRS = ("vision_tower", "vision_model", "visual", "vision_encoder", "sam_model", "vision")
PROJECTOR_ATTRS = ("multi_modal_projector", "mm_projector", "projector", "visual_projection")


def record_name(phase: str, step: int) -> str:
    return f"kb::{phase}#{step}"


def parse_record_name(name: str) -> tuple[str, int] | None:
    if not name.startswith("kb::") or "#" not in name:
        return None
    phase, step = name[4:].rsplit("#", 1)
    return phase, int(step)


def vision_modules(model) -> list:
    """The outermost vision-tower and projector modules of a VLM (empty for a text model)."""
    found, seen = [], set()
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in VISION_ATTRS + PROJECTOR_ATTRS and not any(name.startswith(s + ".") for s in seen):
            found.append(mod)
            seen.add(name)
    return found


@dataclass
class PhaseTracker:
    """Hooks that mark phases while `active`. `ncu_target=(phase, step)` switches to ncu mode."""

    model: object
    nvtx: bool = True
    record: bool = True
    ncu_target: tuple[str, int] | None = None
    active: bool = False
    calls: int = 0
    _stack: list = field(default_factory=list)
    _handles: list = field(default_factory=list)

    def install(self) -> "PhaseTracker":
        self._handles.append(self.model.register_forward_pre_hook(self._top_pre))
        self._handles.append(self.model.register_forward_hook(self._top_post))
        for mod in vision_modules(self.model):
            self._handles.append(mod.register_forward_pre_hook(self._vision_pre))
            self._handles.append(mod.register_forward_hook(self._vision_post))
        return self

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def start(self) -> None:
        """Begin marking a new generate call (steps restart at prefill)."""
        self.calls = 0
        self.active = True

    def stop(self) -> None:
        self.active = False

    # hooks -----------------------------------------------------------------
    def _push(self, phase: str, step: int) -> None:
        import torch

        rf = None
        if self.record:
            rf = torch.profiler.record_function(record_name(phase, step))
            rf.__enter__()
        pushed = False
        if self.ncu_target is not None:
            if (phase, step) == tuple(self.ncu_target):
                torch.cuda.nvtx.range_push(NCU_TARGET)
                pushed = True
        elif self.nvtx:
            torch.cuda.nvtx.range_push(phase)
            pushed = True
        self._stack.append((rf, pushed))

    def _pop(self) -> None:
        import torch

        rf, pushed = self._stack.pop()
        if pushed:
            torch.cuda.nvtx.range_pop()
        if rf is not None:
            rf.__exit__(None, None, None)

    def _top_pre(self, module, args):
        if not self.active:
            return
        phase = "prefill" if self.calls == 0 else "decode"
        self._push(phase, self.calls)
        self.calls += 1

    def _top_post(self, module, args, output):
        if self.active and self._stack:
            self._pop()

    def _vision_pre(self, module, args):
        if self.active and self._stack:
            self._push("vision_encode", 0)

    def _vision_post(self, module, args, output):
        if self.active and len(self._stack) > 1:
            self._pop()
