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

BUILTIN_MODELS = ("deepseek-ocr-2",)

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
    processor: Any | None  # None for random weights: inputs are built without a tokenizer
    weights: str           # what the report states: "random", a hub id or a local path
    n_params: int
    kind: str              # "image-text-to-text" | "causal-lm"


def deepseek_ocr2_config(**overrides: Any):
    from transformers import DeepseekOcr2Config

    arch = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEEPSEEK_OCR2_ARCH.items()}
    for key, val in overrides.items():
        arch[key] = val
    return DeepseekOcr2Config(**arch)


def build_random(config, device: str, dtype) -> Any:
    """Instantiate `config` with random weights directly on `device` (no CPU copy)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoModelForCausalLM

    torch.manual_seed(0)
    auto = AutoModelForImageTextToText if _is_vlm_config(config) else AutoModelForCausalLM
    with torch.device(device):
        model = auto.from_config(config, dtype=dtype)
    return model.eval()


def _is_vlm_config(config) -> bool:
    return hasattr(config, "vision_config")


def load_model(model: str, weights: str, device: str, dtype_name: str = "bfloat16",
               trust_remote_code: bool = False) -> LoadedModel:
    """Load `model` with `weights` ("random", a hub id, or a local path).

    For `deepseek-ocr-2`, weights="random" builds the published architecture; any other weights
    value is a checkpoint for `from_pretrained`. For other model names, `model` itself is the
    checkpoint unless weights="random", which builds its config with random weights.
    """
    import torch
    from transformers import AutoConfig

    dtype = getattr(torch, dtype_name)
    if model == "deepseek-ocr-2" and weights == "random":
        m = build_random(deepseek_ocr2_config(), device, dtype)
        return LoadedModel(m, None, "random", _count(m), "image-text-to-text")
    source = model if (weights == "random" or model not in BUILTIN_MODELS) else weights
    if model not in BUILTIN_MODELS and weights not in ("random", "pretrained"):
        source = weights
    if weights == "random":
        cfg = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        m = build_random(cfg, device, dtype)
        return LoadedModel(m, None, "random", _count(m),
                           "image-text-to-text" if _is_vlm_config(cfg) else "causal-lm")
    return _from_pretrained(source, device, dtype, trust_remote_code)


def _from_pretrained(source: str, device: str, dtype, trust_remote_code: bool) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    cfg = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    vlm = _is_vlm_config(cfg)
    auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
    import importlib.util

    # device_map places weights straight on the GPU but needs accelerate; without it, load then move
    place = {"device_map": device} if importlib.util.find_spec("accelerate") else {}
    try:
        m = auto.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code, **place)
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
        # custom-code models (DeepSeek-OCR v1) register only AutoModel
        from transformers import AutoModel

        m = AutoModel.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code)
        vlm = True
        place = {}
    if not place:
        m = m.to(device)
    if not hasattr(m, "generate"):
        raise ValueError(f"{source} loads as {type(m).__name__}, which has no generate(): kernelbook profiles "
                         "generation, so give a causal-LM or image-text-to-text checkpoint")
    try:
        proc = AutoProcessor.from_pretrained(source, trust_remote_code=trust_remote_code) if vlm else \
            AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception:  # a checkpoint without processor files: inputs are synthesized like random weights
        proc = None
    label = str(Path(source).resolve()) if Path(source).exists() else source
    return LoadedModel(m.eval(), proc, label, _count(m), "image-text-to-text" if vlm else "causal-lm")


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())
