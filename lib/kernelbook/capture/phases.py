"""Phase markers added by forward hooks, so transformers itself is never edited.

Each top-level forward of the model during `generate` is one step: the first is `prefill`, the rest
are `decode` steps 1..N. Every forward of a vision module (tower or projector) is `vision_encode`,
wherever it runs: inside the top-level forward (transformers 5.17), in `get_image_features`, or in
`generate`'s input preparation before the first forward (5.18 and later encode images there). So the
vision hooks never depend on a top-level step being open. Every phase
gets a torch.profiler `record_function` range named `kb::<phase>#<step>` and an NVTX range named
`<phase>` (what `ncu --nvtx-include` and nsys see). In ncu mode only one NVTX range is pushed, named
`NCU_TARGET`, around the one step ncu should profile, so that the include filter is unambiguous.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("vision_encode", "prefill", "decode")
NCU_TARGET = "kb_ncu_target"
VISION_ATTRS = ("vision_tower", "vision_model", "visual", "vision_encoder", "sam_model", "vision")
PROJECTOR_ATTRS = ("multi_modal_projector", "mm_projector", "projector", "visual_projection", "connector")
# Class names of vision towers for models whose attribute is named otherwise (e.g. `image_encoder`).
VISION_CLASS_WORDS = ("VisionModel", "VisionTransformer", "VisionEncoder", "VisualEncoder", "ImageEncoder")


def record_name(phase: str, step: int) -> str:
    return f"kb::{phase}#{step}"


def parse_record_name(name: str) -> tuple[str, int] | None:
    if not name.startswith("kb::") or "#" not in name:
        return None
    phase, step = name[4:].rsplit("#", 1)
    return phase, int(step)


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
    """Hooks that mark phases while `active`. `ncu_target=(phase, step)` switches to ncu mode."""

    model: object
    nvtx: bool = True
    record: bool = True
    ncu_target: tuple[str, int] | None = None
    active: bool = False
    calls: int = 0
    vision_calls: int = 0  # vision-module forwards marked since `start` (0 on an image model = no vision work)
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
        self.vision_calls = 0
        self.active = True

    def stop(self) -> None:
        self.active = False

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
                torch.cuda.nvtx.range_push(NCU_TARGET)
                pushed = True
        elif self.nvtx:
            torch.cuda.nvtx.range_push(phase)
            pushed = True
        self._stack.append(_Open(phase, rf, pushed, owner))

    def _pop(self) -> None:
        import torch

        top = self._stack.pop()
        if top.nvtx_pushed:
            torch.cuda.nvtx.range_pop()
        if top.rf is not None:
            top.rf.__exit__(None, None, None)

    def _top_pre(self, module, args):
        if not self.active:
            return
        phase = "prefill" if self.calls == 0 else "decode"
        self._push(phase, self.calls, owner=module)
        self.calls += 1

    def _top_post(self, module, args, output):
        if self._stack and self._stack[-1].owner is module:
            self._pop()

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
    rf: object
    nvtx_pushed: bool
    owner: object
