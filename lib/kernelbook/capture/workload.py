"""The profiled workload: document pages → model inputs → greedy `generate`.

Generation settings follow the reference experiment: greedy, `max_new_tokens` = `min_new_tokens`
(so random weights decode the full length), `no_repeat_ngram_size` 20.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import PROMPT, deepseek_ocr2_image_tokens, omnidocbench_pages, prompt_token_ids, synthetic_pages
from .models import LoadedModel


@dataclass
class Workload:
    loaded: LoadedModel
    inputs: dict
    gen_kwargs: dict
    describe: dict  # what the manifest records about the inputs

    def generate(self):
        import torch

        with torch.inference_mode():
            return self.loaded.model.generate(**self.inputs, **self.gen_kwargs)


def pages_for(params: dict) -> tuple[list, str]:
    n = params["batch_size"]
    if params.get("omnidocbench_dir"):
        return (omnidocbench_pages(params["omnidocbench_dir"], params.get("omnidocbench_subset"), n),
                f"OmniDocBench {params['omnidocbench_dir']}")
    return synthetic_pages(n, seed=params.get("seed", 0)), f"{n} synthetic document page(s) (Pillow, seeded)"


def build_workload(loaded: LoadedModel, params: dict, device: str) -> Workload:
    """Inputs for `loaded` from params: batch_size, crop_mode, base_size, max_new_tokens, prompt."""
    import torch

    prompt = params.get("prompt", PROMPT)
    n_new = params["max_new_tokens"]
    gen = dict(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
               no_repeat_ngram_size=params.get("no_repeat_ngram_size", 20))
    model = loaded.model
    cfg = model.config
    if loaded.kind == "causal-lm":
        text = prompt.replace("<image>", "").strip()
        if loaded.processor is not None:
            enc = loaded.processor([text] * params["batch_size"], return_tensors="pt")
            inputs = {k: v.to(device) for k, v in enc.items()}
        else:
            ids = prompt_token_ids(text, cfg.vocab_size, set())
            inputs = {"input_ids": torch.tensor([ids] * params["batch_size"], device=device),
                      "attention_mask": torch.ones(params["batch_size"], len(ids), dtype=torch.long, device=device)}
        gen["pad_token_id"] = _pad_id(cfg)
        return Workload(loaded, inputs, gen, {"prompt": text, "images": "none (text model)",
                                              "prompt_tokens": int(inputs["input_ids"].shape[1])})

    pages, source = pages_for(params)
    crop = params.get("crop_mode", True)
    if loaded.processor is not None:
        enc = loaded.processor(images=pages, text=[prompt] * len(pages), return_tensors="pt",
                               **({"crop_to_patches": crop} if _is_ocr2(cfg) else {}))
        inputs = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in enc.items()}
        describe = {"prompt_tokens": int(inputs["input_ids"].shape[1]), "tokenizer": "checkpoint's processor"}
    elif _is_ocr2(cfg):
        inputs, describe = _ocr2_inputs_without_tokenizer(pages, prompt, crop, params.get("base_size", 1024),
                                                          cfg, device)
    else:
        raise ValueError(f"{type(model).__name__} with random weights needs a processor for its image "
                         "inputs; give a checkpoint (hub id or local path) as weights")
    dtype = next(model.parameters()).dtype
    for k in ("pixel_values", "pixel_values_local"):
        if k in inputs and inputs[k] is not None:
            inputs[k] = inputs[k].to(dtype)
    gen["pad_token_id"] = _pad_id(cfg)
    describe.update({"prompt": prompt, "images": source, "batch_size": len(pages), "crop_mode": crop})
    return Workload(loaded, inputs, gen, describe)


def _is_ocr2(cfg) -> bool:
    return getattr(cfg, "model_type", "") == "deepseek_ocr2"


def _pad_id(cfg) -> int:
    text = getattr(cfg, "text_config", cfg)
    eos = getattr(text, "eos_token_id", None)
    pad = getattr(text, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return int(eos[0] if isinstance(eos, (list, tuple)) else (eos or 0))


def _ocr2_inputs_without_tokenizer(pages, prompt: str, crop: bool, base_size: int, cfg, device: str):
    """DeepSeek-OCR-2 inputs built with its own image processor and stand-in prompt ids."""
    import torch
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import DeepseekOcr2ImageProcessorPil

    proc = DeepseekOcr2ImageProcessorPil(size={"height": base_size, "width": base_size})
    img = proc(pages, crop_to_patches=crop, return_tensors="pt")
    crops = [int(c) for c in img["num_local_patches"]]
    text_cfg = cfg.text_config
    image_id = cfg.image_token_id
    reserved = {image_id, text_cfg.bos_token_id, _pad_id(cfg)}
    before, after = prompt.split("<image>", 1) if "<image>" in prompt else ("", prompt)
    pre = prompt_token_ids(before, text_cfg.vocab_size, reserved) if before else []
    post = prompt_token_ids(after, text_cfg.vocab_size, reserved)
    rows = [[text_cfg.bos_token_id] + pre + [image_id] * deepseek_ocr2_image_tokens(c, base_size, crop=crop) + post
            for c in crops]
    width = max(map(len, rows))
    pad = _pad_id(cfg)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)  # left padding
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask,
                              "pixel_values": img["pixel_values"].to(device),
                              "num_local_patches": crops}
    if "pixel_values_local" in img:
        inputs["pixel_values_local"] = img["pixel_values_local"].to(device)
    describe = {"prompt_tokens": width, "local_crops_per_image": crops,
                "tokenizer": f"none (random weights): {len(pre) + len(post)} stand-in prompt ids"}
    return inputs, describe
