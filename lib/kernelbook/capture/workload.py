"""The profiled workload: a prompt (and document pages for an image model) → model inputs → greedy `generate`.

Inputs are built the way the model's own processor wants them: an image-text-to-text model's user
turn goes through its processor's chat template with an image content part (the template and the
processor put the model's own image tokens: `<|image_pad|>` for Qwen2-VL, `<start_of_image>` and its
soft tokens for Gemma 3, `<image>` for LLaVA); without a chat template, the processor's own image
placeholder (`processor.image_token`) goes before the text. DeepSeek-OCR-2 keeps its reference prompt
`<image>\n...`. A text model's prompt goes through its tokenizer as is (no chat template: a raw
prompt of a known length is what a prefill measurement wants). Without processor files, a text model
and DeepSeek-OCR-2 get stand-in ids (kernel shapes depend on the count, not the values); any other
image model stops with `InputsError` before any GPU work.

`prompt_tokens` makes the prompt exactly that many tokens, by repeating the prompt's own token ids
and cutting: the whole prefill of a text model (its special tokens included), the text beside the
image and template tokens of an image model.

Generation settings follow the reference experiment: greedy, `max_new_tokens` = `min_new_tokens`
(so random weights decode the full length), `no_repeat_ngram_size` 20.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import (INSTRUCTION, deepseek_ocr2_image_tokens, exactly, omnidocbench_pages, prompt_token_ids,
                     synthetic_pages)
from ..contract.config import CaptureConfig
from .models import LoadedModel, ModelSpec, model_spec
from .common import InputsError


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


def pages_for(cfg: CaptureConfig) -> tuple[list, str]:
    n = cfg.batch_size
    if cfg.omnidocbench_dir:
        return (omnidocbench_pages(cfg.omnidocbench_dir, cfg.omnidocbench_subset, n),
                f"OmniDocBench {cfg.omnidocbench_dir}")
    return synthetic_pages(n, seed=cfg.seed), f"{n} synthetic document page(s) (Pillow, seeded)"


def generate_kwargs(params: CaptureConfig, cfg) -> dict:
    """Greedy generation of exactly `max_new_tokens`. `cache_implementation: static` preallocates the KV
    cache; generate then compiles each decode step (mode reduce-overhead: CUDA graphs) unless
    `compile_decode` is false. The prefill step stays eager either way (transformers' own choice)."""
    n_new = params.max_new_tokens
    kw = dict(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
              no_repeat_ngram_size=params.no_repeat_ngram_size, pad_token_id=_pad_id(cfg))
    if params.static_cache:
        kw["cache_implementation"] = "static"
        kw["disable_compile"] = not params.compile_decode
    return kw


def build_workload(loaded: LoadedModel, params: CaptureConfig, device: str) -> Workload:
    """Inputs for `loaded` on `device` from params: prompt, prompt_tokens, batch_size, max_new_tokens,
    crop_mode, base_size. Raises InputsError when the model's inputs cannot be built."""
    model = loaded.model
    inputs, describe = model_inputs(loaded.kind, model.config, loaded.processor, type(model).__name__, params)
    dtype = next(model.parameters()).dtype
    # pixel tensors in the model's dtype (processors return float32); ids, masks and grids stay integer
    inputs = {k: (v.to(device, dtype) if getattr(v, "is_floating_point", lambda: False)() else
                  v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}
    return Workload(loaded, inputs, generate_kwargs(params, model.config), describe)


def check_inputs(params: CaptureConfig) -> dict:
    """Build the model's inputs on the CPU from its config and processor alone (no weights, no GPU), so
    that a model whose inputs cannot be built stops before any GPU work. Returns what the manifest
    would record about them; raises InputsError naming the model class and what is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return {}  # require_gpu says what to install
    try:
        spec = model_spec(params.model, params.weights, params.trust_remote_code)
    except (OSError, ValueError) as e:
        raise InputsError(f"cannot read the config of {params.model!r} (weights: {params.weights}): {e}") from e
    _, describe = model_inputs(spec.kind, spec.config, spec.processor, spec.model_class, params)
    _check_length(spec, describe["prompt_tokens"] + params.max_new_tokens, params.max_new_tokens)
    return describe


def _check_length(spec: ModelSpec, total: int, max_new_tokens: int) -> None:
    text = getattr(spec.config, "text_config", None) or spec.config
    limit = getattr(text, "max_position_embeddings", None)
    if limit and total > limit:
        raise InputsError(f"{spec.model_class}: a prompt of {total - max_new_tokens} tokens plus "
                          f"max_new_tokens {max_new_tokens} is {total} positions, above the model's "
                          f"max_position_embeddings {limit}: lower prompt_tokens or max_new_tokens")


def model_inputs(kind: str, cfg, processor, model_class: str, params: CaptureConfig) -> tuple[dict, dict]:
    """(inputs as CPU tensors, what the manifest records about them). `processor`: the checkpoint's
    processor (image models), tokenizer (text models) or None."""
    text = params.prompt or INSTRUCTION
    n = params.prompt_tokens
    if kind == "causal-lm":
        return _text_inputs(cfg, processor, model_class, text, n, params.batch_size)
    pages, source = pages_for(params)
    crop = params.crop_mode
    if _is_ocr2(cfg):
        prompt = text if "<image>" in text else "<image>\n" + text  # the reference prompt's form
        if processor is None:
            inputs, describe = _ocr2_inputs_without_tokenizer(pages, prompt, crop, params.base_size,
                                                              cfg, n)
        else:
            inputs = dict(processor(images=pages, text=[prompt] * len(pages), return_tensors="pt",
                                    crop_to_patches=crop))
            describe = {"tokenizer": "checkpoint's processor", "inputs_built_with": "reference prompt <image>"}
            if n:
                inputs = _splice_text(inputs, processor.tokenizer, prompt.split("<image>", 1)[1], n, model_class)
    else:
        inputs, describe = _vlm_inputs(cfg, processor, model_class, pages, text, n)
    image_id = _image_token_id(cfg)
    n_image = int((inputs["input_ids"] == image_id).sum()) if image_id is not None else None
    if n_image == 0:
        raise InputsError(f"{model_class}: its inputs carry no image token (id {image_id}), so the model would find "
                          f"no place for the image features ({describe.get('inputs_built_with')}); the checkpoint's "
                          "processor does not match its config")
    describe.update({"prompt": text, "images": source, "batch_size": len(pages), "crop_mode": crop,
                     "prompt_tokens": int(inputs["input_ids"].shape[1]),
                     "image_tokens_per_prompt": None if n_image is None else n_image // len(pages)})
    if n:
        describe["text_tokens"] = n
    return inputs, describe


def _text_inputs(cfg, tokenizer, model_class: str, text: str, n: int | None, batch: int) -> tuple[dict, dict]:
    """A text model's prompt: the tokenizer's ids (special tokens included), or stand-in ids without one."""
    import torch

    text = text.replace("<image>", "").strip()
    if tokenizer is not None:
        ids = _tokenizer_ids(tokenizer, text, n, model_class)
        how = f"checkpoint's tokenizer ({type(tokenizer).__name__})"
    else:
        ids = prompt_token_ids(text, cfg.vocab_size, set())
        ids = exactly(ids, n) if n else ids
        how = f"none: {len(ids)} stand-in ids"
    inputs = {"input_ids": torch.tensor([ids] * batch), "attention_mask": torch.ones(batch, len(ids), dtype=torch.long)}
    describe = {"prompt": text, "images": "none (text model)", "batch_size": batch, "prompt_tokens": len(ids),
                "tokenizer": how}
    if n:
        describe["text_tokens"] = n
    return inputs, describe


def _tokenizer_ids(tok, text: str, n: int | None, model_class: str) -> list[int]:
    """`text` through the tokenizer; with `n`, the text repeated and cut so that the ids, with the
    tokenizer's own special tokens (BOS...) around them, are exactly n."""
    if not n:
        return list(tok(text)["input_ids"])
    one = tok(text, add_special_tokens=False)["input_ids"]
    long = " ".join([text] * (n // max(1, len(one)) + 2))
    full = list(tok(long)["input_ids"])
    plain = list(tok(long, add_special_tokens=False)["input_ids"])
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), 0)
    pre, post = full[:at], full[at + len(plain):]
    body = n - len(pre) - len(post)
    if body < 0:
        raise InputsError(f"{model_class}: prompt_tokens {n} is fewer than the {len(pre) + len(post)} special "
                          "tokens its tokenizer puts around every prompt")
    return pre + plain[:body] + post


def _vlm_inputs(cfg, processor, model_class: str, pages: list, text: str, n: int | None) -> tuple[dict, dict]:
    """An image model's inputs through its own processor: the chat template with an image content part,
    else the processor's image placeholder before the text."""
    if processor is None:
        raise InputsError(f"{model_class} takes images, and its checkpoint has no processor files (processor or "
                          "tokenizer config), so kernelbook cannot know its image tokens: save the processor beside "
                          "the weights (processor.save_pretrained) or give a hub id that has one")
    if _chat_template(processor):
        conv = [[{"role": "user", "content": [{"type": "image", "image": page}, {"type": "text", "text": text}]}]
                for page in pages]
        how = "the processor's chat template, one image content part"

        def build():
            return processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, return_dict=True,
                                                 return_tensors="pt")
    elif getattr(processor, "image_token", None):
        how = f"the processor's image placeholder {processor.image_token!r} before the text (no chat template)"

        def build():
            return processor(images=[[p] for p in pages], text=[f"{processor.image_token}\n{text}"] * len(pages),
                             return_tensors="pt")
    else:
        raise InputsError(f"{model_class}: its processor {type(processor).__name__} has neither a chat template nor "
                          "an image placeholder (image_token), so kernelbook cannot tell where the image goes: add "
                          "the model's chat_template to the checkpoint's processor")
    try:
        inputs = dict(build())
    except Exception as e:  # noqa: BLE001 - whatever the processor raises, the capture cannot start
        raise InputsError(f"{model_class}: its processor {type(processor).__name__} could not build inputs with "
                          f"{how}: {type(e).__name__}: {e}") from e
    if n:
        inputs = _splice_text(inputs, processor.tokenizer, text, n, model_class)
    return inputs, {"tokenizer": "checkpoint's processor", "inputs_built_with": how}


def _chat_template(processor) -> bool:
    return bool(getattr(processor, "chat_template", None)
                or getattr(getattr(processor, "tokenizer", None), "chat_template", None))


def _splice_text(inputs: dict, tok, text: str, n: int, model_class: str) -> dict:
    """Replace the ids of `text` in the processor's output by exactly `n` ids of the text repeated (every
    sequence-long tensor beside input_ids — attention mask, token types — takes the value it had at the
    text), so image and template tokens stay the processor's own."""
    import torch

    seed = list(tok(text, add_special_tokens=False)["input_ids"])
    ids = inputs["input_ids"]
    rows = ids.tolist()
    starts = {max((i for i in range(len(r) - len(seed) + 1) if r[i:i + len(seed)] == seed), default=None)
              for r in rows}
    if len(starts) != 1 or None in starts:
        raise InputsError(f"{model_class}: prompt_tokens needs the prompt's own tokens at one place in every "
                          f"prompt of the batch, and the processor's output has them at {sorted(map(str, starts))} "
                          "(pages with different image token counts, or the template merged the text with its "
                          "neighbours)")
    at = starts.pop()
    new = torch.tensor(exactly(list(tok(" ".join([text] * (n // max(1, len(seed)) + 2)),
                                        add_special_tokens=False)["input_ids"]), n), dtype=ids.dtype)
    out = {}
    for k, v in inputs.items():
        if hasattr(v, "shape") and tuple(v.shape) == tuple(ids.shape):
            mid = new.expand(ids.shape[0], n) if k == "input_ids" else v[:, at:at + 1].expand(-1, n)
            v = torch.cat([v[:, :at], mid, v[:, at + len(seed):]], dim=1)
        out[k] = v
    return out


def _image_token_id(cfg) -> int | None:
    for key in ("image_token_id", "image_token_index"):
        v = getattr(cfg, key, None)
        if isinstance(v, int):
            return v
    return None


def _is_ocr2(cfg) -> bool:
    return getattr(cfg, "model_type", "") == "deepseek_ocr2"


def _pad_id(cfg) -> int:
    text = getattr(cfg, "text_config", cfg)
    eos = getattr(text, "eos_token_id", None)
    pad = getattr(text, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return int(eos[0] if isinstance(eos, (list, tuple)) else (eos or 0))


def _ocr2_inputs_without_tokenizer(pages, prompt: str, crop: bool, base_size: int, cfg, n: int | None = None):
    """DeepSeek-OCR-2 inputs built with its own image processor and stand-in prompt ids (CPU tensors);
    `n`: the text after the image as exactly n stand-in ids."""
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
    if n:
        pre, post = [], exactly(post, n)
    rows = [[text_cfg.bos_token_id] + pre + [image_id] * deepseek_ocr2_image_tokens(c, base_size, crop=crop) + post
            for c in crops]
    width = max(map(len, rows))
    pad = _pad_id(cfg)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])  # left padding
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "pixel_values": img["pixel_values"],
                              "num_local_patches": crops}
    if "pixel_values_local" in img:
        inputs["pixel_values_local"] = img["pixel_values_local"]
    describe = {"local_crops_per_image": crops, "inputs_built_with": "reference prompt <image>",
                "tokenizer": f"none (no processor files): {len(pre) + len(post)} stand-in prompt ids"}
    return inputs, describe
