"""Kernels in the model's terms: the module that launched each kernel (its path and class, recorded by the
capture's shapes pass, see capture.phases), its type (attention, MoE experts, norm, ...) and its layer.

A run captured before module attribution has no `module` column: `has_modules` says so, and the tables are
empty. Pure functions over the timeline; the chapters render what they return.
"""
from __future__ import annotations

import re

import pandas as pd

from ..capture.phases import PROJECTOR_ATTRS, VISION_ATTRS, VISION_CLASS_WORDS

# in the order a reader meets them in a decoder layer; "residual" is a layer's own work between its submodules
# (the residual adds), "outside layers" work of the model's own forwards outside every layer (masks, positions,
# slicing the logits), "other" a module no rule names
MODULE_TYPES = ("vision tower", "projector", "embedding", "norm", "attention", "rotary embedding", "dense MLP",
                "MoE router", "MoE dispatch", "MoE experts", "MoE shared experts", "residual", "lm_head", "other",
                "outside layers")
_LAYER = re.compile(r"\.(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")


def module_type(path: str | None, cls: str | None = None) -> str:
    """The type of the module at `path` (innermost module of a launch) with class `cls`: the innermost part of
    the path that names a type, read from the inside out (a vision tower's attention is attention: the phase
    says it is the vision encode's); a part of a vision tower or projector that names none is `vision tower` /
    `projector`."""
    if not isinstance(path, str) or path == "":
        return "outside layers"
    parts = path.split(".")
    cls = cls if isinstance(cls, str) else ""
    if "Norm" in cls:
        return "norm"
    if "Rotary" in cls:
        return "rotary embedding"
    for i in range(len(parts) - 1, -1, -1):
        p = parts[i].lower()
        innermost = i == len(parts) - 1
        if p == "lm_head":
            return "lm_head"
        if p in ("shared_experts", "shared_expert"):
            return "MoE shared experts"
        if p.endswith("experts"):
            return "MoE experts"
        if p in ("gate", "router"):
            return "MoE router"
        if "rotary" in p:
            return "rotary embedding"
        if "attn" in p or "attention" in p:
            return "attention"
        if "norm" in p or p.startswith("ln"):
            return "norm"
        if "embed" in p or p == "wte":
            return "embedding"
        if p in ("mlp", "feed_forward", "ffn", "block_sparse_moe", "moe"):
            return "MoE dispatch" if innermost and re.search(r"moe|sparse", cls, re.I) else "dense MLP"
    if parts[-1].isdigit():
        return "residual"
    if len(parts) <= 2 and cls.endswith("Model"):  # model, model.language_model
        return "outside layers"
    if _in_vision(parts) or any(w in cls for w in VISION_CLASS_WORDS):
        return "vision tower"
    if any(p in PROJECTOR_ATTRS for p in parts):
        return "projector"
    return "other"


def _in_vision(parts: list[str]) -> bool:
    return any(p in VISION_ATTRS or any(w in p for w in ("vision", "visual", "image_encoder")) for p in parts)


def layer_of(path: str | None) -> int | None:
    """The decoder layer index in `path` (`...layers.7.mlp` -> 7), None outside a numbered layer or in a vision
    tower (whose layers are the encoder's, not the decoder's)."""
    if not isinstance(path, str) or _in_vision(path.split(".")) or any(p in PROJECTOR_ATTRS for p in path.split(".")):
        return None
    m = _LAYER.search(path)
    return int(m.group(1)) if m else None


def has_modules(timeline: pd.DataFrame) -> bool:
    return "module" in timeline and bool(timeline["module"].notna().any())


def with_module_types(kernels: pd.DataFrame) -> pd.DataFrame:
    """`kernels` with `module_type` and `layer` (from `module`, `module_class`); unchanged without modules."""
    if "module" not in kernels:
        return kernels
    cls = kernels["module_class"] if "module_class" in kernels else pd.Series(None, index=kernels.index)
    pairs = pd.Series(list(zip(kernels["module"], cls)), index=kernels.index)
    types = {p: module_type(*p) for p in set(pairs)}
    out = kernels.assign(module_type=pairs.map(types))
    layers = {p: layer_of(p) for p in set(kernels["module"].dropna())}
    return out.assign(layer=kernels["module"].map(layers).astype("Int64"))


def by_module_type(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per phase and module type: kernel time per step (µs), launches per step and the share of the phase's
    kernel time (%), over the steps that recorded modules (the shapes pass's steps). Long format."""
    k = _attributed(timeline)
    if k.empty:
        return pd.DataFrame(columns=["phase", "module_type", "us_per_step", "launches_per_step", "share_pct"])
    steps = k.groupby("phase")["step"].nunique()
    g = k.groupby(["phase", "module_type"], observed=True).agg(ns=("duration_ns", "sum"), n=("name", "size"))
    g = g.reset_index()
    g["us_per_step"] = g["ns"] / 1e3 / g["phase"].map(steps)
    g["launches_per_step"] = g["n"] / g["phase"].map(steps)
    g["share_pct"] = 100 * g["ns"] / g.groupby("phase")["ns"].transform("sum")
    g["module_type"] = pd.Categorical(g["module_type"], MODULE_TYPES, ordered=True)
    return (g.sort_values(["phase", "us_per_step"], ascending=[True, False])
             .drop(columns=["ns", "n"]).reset_index(drop=True))


def by_layer(timeline: pd.DataFrame, phase: str = "decode") -> pd.DataFrame:
    """Per decoder layer of `phase` and module type: kernel time per step (µs). Long format."""
    k = _attributed(timeline)
    k = k[(k.phase == phase) & k["layer"].notna()]
    if k.empty:
        return pd.DataFrame(columns=["layer", "module_type", "us_per_step"])
    steps = k["step"].nunique()
    g = k.groupby(["layer", "module_type"]).duration_ns.sum().reset_index()
    g["us_per_step"] = g.pop("duration_ns") / 1e3 / steps
    return g.sort_values(["layer", "us_per_step"], ascending=[True, False]).reset_index(drop=True)


def _attributed(timeline: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the steps whose launches carry modules (kernels of those steps launched outside every
    submodule are `top level`)."""
    if not has_modules(timeline):
        return timeline.iloc[0:0].assign(module_type=None, layer=None)
    k = timeline[(timeline.kind == "kernel") & timeline.phase.isin(["vision_encode", "prefill", "decode"])]
    recorded = k[k["module"].notna()][["phase", "step"]].drop_duplicates()
    k = k.merge(recorded, on=["phase", "step"])
    return with_module_types(k)
