"""A random-weight checkpoint of a published architecture, made on the GPU machine (no hub there), for
captures of model families beyond the default (`model: <dir>`, `weights: pretrained`).

Usage: python bench/make_checkpoint.py <qwen3-moe|deepseek-ocr2-decoder|llava|gemma3> <dir> [text layers]
Qwen3-MoE shape: Qwen3-30B-A3B's layer (hidden 2048, 32 heads / 4 KV heads of 128, 128 experts, top 8,
expert width 768, vocab 151936), 8 layers instead of 48 so it builds and saves in seconds. No tokenizer
files: the workload then makes `prompt_tokens` stand-in ids.
llava, gemma3: image-text-to-text at llava-1.5-7b's and gemma-3-4b's shape (vision tower in full, 8 text
layers unless given), saved with a processor made offline (tokenizer, PIL image processor: no torchvision,
chat template): the builders tests/test_capture_families.py runs at a tiny shape (bench/offline_checkpoints.py).
Weights are built on the GPU (float32 init, saved as bfloat16).
"""
from __future__ import annotations

import sys
import time

import _common  # noqa: F401  (puts lib/ on sys.path: the image builders use kernelbook's prompt)


def qwen3_moe(path: str, layers: int | None = None) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=layers or 8, num_attention_heads=32,
                         num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                         num_experts=128, num_experts_per_tok=8, vocab_size=151936, max_position_embeddings=32768,
                         torch_dtype="bfloat16")
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    print(f"qwen3-moe: {n / 1e9:.2f} B parameters saved to {path} in {time.perf_counter() - t:.1f} s")


def deepseek_ocr2_decoder(path: str, layers: int | None = None) -> None:
    """DeepSeek-OCR-2's own language decoder (its published text config: 12 layers of hidden 1280, 64 routed
    + 2 shared experts, top 6, vocabulary 129280) as a DeepseekV2ForCausalLM, random weights, no tokenizer:
    the default family's decoder as a text model, which transformers can shard (tensor_parallel)."""
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    from kernelbook.capture.models import DEEPSEEK_OCR2_ARCH

    text = {k: v for k, v in DEEPSEEK_OCR2_ARCH["text_config"].items() if k != "model_type"}
    if layers:
        text.update(num_hidden_layers=layers, mlp_layer_types=text["mlp_layer_types"][:layers])
    cfg = DeepseekV2Config(**text, torch_dtype="bfloat16")
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = DeepseekV2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    print(f"deepseek-ocr2-decoder: {n / 1e9:.2f} B parameters saved to {path} in {time.perf_counter() - t:.1f} s")


def image_text(family: str):
    def make(path: str, layers: int | None = None) -> None:
        import torch

        from offline_checkpoints import FAMILIES

        t = time.perf_counter()
        ckpt = FAMILIES[family]("real", layers)
        text = ckpt.config.text_config
        print(f"{family}: {ckpt.model_class.__name__}, {text.num_hidden_layers} text layers of hidden "
              f"{text.hidden_size}, vocabulary {text.vocab_size}, vision {ckpt.config.vision_config.num_hidden_layers}"
              f" layers at {ckpt.config.vision_config.image_size} px, {ckpt.image_tokens} image tokens per image; "
              f"building on {torch.cuda.get_device_name()}", flush=True)
        n = ckpt.save(path, device="cuda", dtype=torch.bfloat16)
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"{family}: {n / 1e9:.2f} B parameters ({n * 2 / 2**30:.1f} GiB bf16) saved with its processor to "
              f"{path} in {time.perf_counter() - t:.1f} s (GPU peak {peak:.1f} GiB)", flush=True)
    return make


MAKERS = {"qwen3-moe": qwen3_moe, "deepseek-ocr2-decoder": deepseek_ocr2_decoder, "llava": image_text("llava"), "gemma3": image_text("gemma3")}

if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in MAKERS:
        sys.exit(f"usage: python bench/make_checkpoint.py <{'|'.join(MAKERS)}> <dir> [text layers]")
    MAKERS[sys.argv[1]](sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else None)
