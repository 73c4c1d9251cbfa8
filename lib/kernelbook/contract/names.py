"""Names capture writes into a run and load parses back: the phases, the range grammar of the profiler trace
(`kb::<phase>#<step>`, `kbop#<i>`, `kbmod#<path>|<class>`), the NVTX range ncu is filtered on, and the module
attributes that mark a model's vision tower and projector, the phases' reader names. Pure strings: no torch, nothing above
the base floor."""
from __future__ import annotations

from .phrase import phrase

BUILTIN_MODELS = ("deepseek-ocr-2",)  # models capture builds from a published configuration (capture.models)
PHASES = ("vision_encode", "prefill", "decode")
NCU_TARGET = "kb_ncu_target"
VISION_ATTRS = ("vision_tower", "vision_model", "visual", "vision_encoder", "sam_model", "vision")
PROJECTOR_ATTRS = ("multi_modal_projector", "mm_projector", "projector", "visual_projection", "connector")
# Class names of vision towers for models whose attribute is named otherwise (e.g. `image_encoder`).
VISION_CLASS_WORDS = ("VisionModel", "VisionTransformer", "VisionEncoder", "VisualEncoder", "ImageEncoder")


OP_RANGE = "kbop#"
MODULE_RANGE = "kbmod#"
# the one-process Nsight Systems capture marks each generate of its report as an NVTX range `kbpass#<pass>`
PASS_RANGE = "kbpass#"
PROFILED_PASS, SHAPES_PASS = "profiled", "shapes"


def record_name(phase: str, step: int) -> str:
    return f"kb::{phase}#{step}"


def parse_op_range(name: str) -> int | None:
    """`kbop#12` -> 12 (the op call's index in its phase range), else None."""
    return int(name[len(OP_RANGE):]) if name.startswith(OP_RANGE) else None


def parse_module_range(name: str) -> str | None:
    """`kbmod#model.layers.7.mlp|DeepseekV2Moe` -> "model.layers.7.mlp|DeepseekV2Moe" (the path and class of the
    module whose forward the range spans), else None."""
    return name[len(MODULE_RANGE):] if name.startswith(MODULE_RANGE) else None


def parse_record_name(name: str) -> tuple[str, int] | None:
    if not name.startswith("kb::") or "#" not in name:
        return None
    phase, step = name[4:].rsplit("#", 1)
    return phase, int(step)


# a phase as a reader names it: English phrases (catalog keys), shown in the reader's language by the narration and
# by display.phase_label
PHASE_NAMES = {"vision_encode": phrase("vision encode"), "prefill": phrase("prefill"), "decode": phrase("decode"),
               "other": phrase("other")}
