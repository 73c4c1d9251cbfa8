"""Build the model a run profiles.

`deepseek-ocr-2` is built from the published architecture (values below; see DESIGN.md) so that a
machine with no model hub still profiles the real kernel mix. Kernel shapes, counts and times do not
depend on weight values; MoE routing balance does, and the report says so when weights are random.
Any other name is a Hugging Face hub id or a local checkpoint loaded with `from_pretrained`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.names import BUILTIN_MODELS  # noqa: F401 (the models this module builds)
from .inputs import INSTRUCTION

# The published DeepSeek-OCR-2 architecture: SAM ViT-B + a Qwen2-0.5B-sized encoder with learned
# queries, and the DeepSeek-3B-MoE decoder of DeepSeek-OCR v1.
DEEPSEEK_OCR2_ARCH: dict[str, Any] = {
    "vision_config": {
        "sam_config": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                       "global_attn_indexes": [2, 5, 8, 11], "downsample_channels": [512, 896]},
        "encoder_config": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                           "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
                           "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default",
                                                                                  "rope_theta": 1000000.0}},
    },
    "text_config": {"hidden_size": 1280, "num_hidden_layers": 12, "num_attention_heads": 10,
                    "num_key_value_heads": 10, "intermediate_size": 6848, "moe_intermediate_size": 896,
                    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                    "vocab_size": 129280, "max_position_embeddings": 8192, "topk_method": "greedy",
                    "mlp_layer_types": ["dense"] + ["sparse"] * 11, "bos_token_id": 0, "eos_token_id": 1,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "image_token_id": 128815,
}


@dataclass
class LoadedModel:
    model: Any
    processor: Any | None  # the checkpoint's processor/tokenizer; None without one (stand-in ids)
    weights: str           # what the report states: "random", a hub id or a local path
    n_params: int
    kind: str              # "image-text-to-text" | "causal-lm"


def deepseek_ocr2_config(**overrides: Any):
    from transformers import DeepseekOcr2Config

    arch = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEEPSEEK_OCR2_ARCH.items()}
    for key, val in overrides.items():
        arch[key] = val
    return DeepseekOcr2Config(**arch)


def build_random(config, device: str, dtype, attn_implementation: str | None = None) -> Any:
    """Instantiate `config` with random weights directly on `device` (no CPU copy)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoModelForCausalLM

    torch.manual_seed(0)
    auto = AutoModelForImageTextToText if _is_vlm_config(config) else AutoModelForCausalLM
    with torch.device(device):
        model = auto.from_config(config, dtype=dtype, **_attn(attn_implementation))
    return model.eval()


def _attn(impl: str | None) -> dict:
    """transformers' attn_implementation argument; none given keeps the model's default."""
    return {"attn_implementation": impl} if impl else {}


def _is_vlm_config(config) -> bool:
    return hasattr(config, "vision_config")


@dataclass
class ModelSpec:
    """What a model's inputs are built from, without its weights (CPU only, no GPU work): its config,
    its own processor (AutoProcessor for image-text-to-text, AutoTokenizer for a causal LM, None when
    the checkpoint has no processor files), its kind and the class `generate` will run."""

    config: Any
    processor: Any | None
    kind: str
    model_class: str
    source: str | None  # where weights come from (None: the built-in architecture, random weights)


def _source(model: str, weights: str) -> str | None:
    """The checkpoint that config, processor and (unless random) weights come from."""
    if model in BUILTIN_MODELS:
        return None if weights == "random" else weights
    return model if weights in ("random", "pretrained") else weights


def model_spec(model: str, weights: str, trust_remote_code: bool = False) -> ModelSpec:
    """Config and processor of `model` (see `load_model` for the arguments), without its weights."""
    from transformers import AutoConfig

    source = _source(model, weights)
    if source is None:
        return ModelSpec(deepseek_ocr2_config(), None, "image-text-to-text", "DeepseekOcr2ForConditionalGeneration",
                         None)
    cfg = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    vlm = _is_vlm_config(cfg)
    return ModelSpec(cfg, _processor(source, vlm, trust_remote_code), "image-text-to-text" if vlm else "causal-lm",
                     _class_name(cfg, vlm), source)


def _processor(source: str, vlm: bool, trust_remote_code: bool):
    """The checkpoint's own processor (image models) or tokenizer (text models); None without its files:
    a text model then gets stand-in ids, an image model other than DeepSeek-OCR-2 cannot be fed."""
    from transformers import AutoProcessor, AutoTokenizer

    try:
        proc = (AutoProcessor if vlm else AutoTokenizer).from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - a missing or unreadable processor file means "no processor"
        missing = missing_dependency(e)
        if missing:  # the files are there: a library they need is not, and that is what to say
            from .common import InputsError

            raise InputsError(f"the processor of {source} cannot be loaded on this machine: {missing}. Install "
                              "it (pip install <package>) and capture again") from e
        return None
    # an image processor alone (no tokenizer) cannot write the prompt either
    return proc if _usable(proc if not vlm else getattr(proc, "tokenizer", None)) else None


def missing_dependency(e: BaseException) -> str | None:
    """The missing optional library named by a loading error (transformers says "Missing optional
    dependencies: torchvision", or raises ImportError / "requires the X library"), else None."""
    import re

    for err in (e, e.__cause__, e.__context__):
        if err is None:
            continue
        text = str(err)
        m = re.search(r"Missing optional dependencies: [^.]+", text)
        if m:
            return m.group(0)
        m = re.search(r"requires the (\S+) librar", text)
        if m:
            return f"missing optional dependency: {m.group(1)}"
        if isinstance(err, ModuleNotFoundError) and err.name:
            return f"missing optional dependency: {err.name.split('.')[0]}"
    return None


def _usable(tokenizer) -> bool:
    """Whether `tokenizer` has a vocabulary: transformers 5 builds an empty tokenizer (a vocabulary of 1)
    for a checkpoint without tokenizer files instead of failing, and it turns any prompt into no ids,
    or into unknown tokens only."""
    if tokenizer is None:
        return False
    ids = tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    return bool(len(tokenizer) > 1 and ids and any(i != unk for i in ids))


def _class_name(cfg, vlm: bool) -> str:
    """The class `from_pretrained` will build, named before any weights are read (for error messages)."""
    if getattr(cfg, "architectures", None):
        return cfg.architectures[0]
    from transformers.models.auto import modeling_auto as ma

    names = ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES if vlm else ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return names.get(getattr(cfg, "model_type", ""), type(cfg).__name__.replace("Config", "Model"))


# A process that captures several points of a study one after another (`study` chains them, `kernelbook _points`)
# keeps the last model it built and hands it to the next point that asks for the same one: the points differ in
# what they run (batch, tokens), not in the model. Each point still compiles its own step (`fresh_compile`).
KEEP_MODEL = False
_kept: dict = {}


def fresh_compile() -> None:
    """Forget every compiled step and CUDA graph of the points before (a kept model's next point compiles as a new
    process would: for its own shapes, not as a dynamic-shape graph over the points' batches)."""
    import torch

    torch._dynamo.reset()


def load_model(model: str, weights: str, device: str, dtype_name: str = "bfloat16",
               trust_remote_code: bool = False, attn_implementation: str | None = None,
               tp_size: int = 1) -> LoadedModel:
    """`_load_model`, or with `KEEP_MODEL` the model the last point built with the same arguments."""
    key = (model, weights, device, dtype_name, trust_remote_code, attn_implementation, tp_size)
    if not KEEP_MODEL or tp_size > 1:
        return _load_model(*key)
    if key not in _kept:
        _kept.clear()  # one model at a time: the one before leaves the GPU first
        _kept[key] = _load_model(*key)
    return _kept[key]


def _load_model(model: str, weights: str, device: str, dtype_name: str = "bfloat16",
                trust_remote_code: bool = False, attn_implementation: str | None = None,
                tp_size: int = 1) -> LoadedModel:
    """Load `model` with `weights` ("random", "pretrained", a hub id, or a local path).

    For `deepseek-ocr-2`, weights="random" builds the published architecture; any other weights
    value is a checkpoint for `from_pretrained`. For other model names, `model` itself is the
    checkpoint unless weights names another; weights="random" builds its config with random weights
    and still takes the checkpoint's own processor, so inputs are what the model expects.
    `attn_implementation` ("sdpa", "eager"; None: the model's default) is transformers' own argument.
    `tp_size` > 1: this process is one rank of a torchrun group and loads its shard of the checkpoint
    (transformers' DistributedConfig(tp_size=...), the model's own tensor-parallel plan).
    """
    import torch

    dtype = getattr(torch, dtype_name)
    source = _source(model, weights)
    if source is None:
        m = build_random(deepseek_ocr2_config(), device, dtype, attn_implementation)
        return LoadedModel(m, None, "random", _count(m), "image-text-to-text")
    if weights == "random":
        spec = model_spec(model, weights, trust_remote_code)
        m = build_random(spec.config, device, dtype, attn_implementation)
        return LoadedModel(m, spec.processor, "random", _count(m), spec.kind)
    # tp_size > 1 reaches here only with a checkpoint: params.validate refuses it with random weights
    return _from_pretrained(source, device, dtype, trust_remote_code, attn_implementation, tp_size)


def _from_pretrained(source: str, device: str, dtype, trust_remote_code: bool,
                     attn_implementation: str | None = None, tp_size: int = 1) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    cfg = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    vlm = _is_vlm_config(cfg)
    auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
    import importlib.util

    # device_map places weights straight on the GPU but needs accelerate; without it, load then move
    place = {"device_map": device} if importlib.util.find_spec("accelerate") else {}
    if tp_size > 1:  # each rank loads its shard straight onto its own GPU (torchrun's LOCAL_RANK)
        from transformers import DistributedConfig

        place = {"distributed_config": DistributedConfig(tp_size=tp_size)}
    try:
        m = auto.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code, **place,
                                 **_attn(attn_implementation))
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
        # custom-code models (DeepSeek-OCR v1) register only AutoModel
        from transformers import AutoModel

        m = AutoModel.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code,
                                      **_attn(attn_implementation))
        vlm = True
        place = {}
    if not place:
        m = m.to(device)
    if not hasattr(m, "generate"):
        raise ValueError(f"{source} loads as {type(m).__name__}, which has no generate(): kernelbook profiles "
                         "generation, so give a causal-LM or image-text-to-text checkpoint")
    proc = _processor(source, vlm, trust_remote_code)
    label = str(Path(source).resolve()) if Path(source).exists() else source
    return LoadedModel(m.eval(), proc, label, _count(m), "image-text-to-text" if vlm else "causal-lm")


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())
