"""A random-weight checkpoint of a published architecture, made on the GPU machine (no hub there), for
captures of model families beyond the default (`model: <dir>`, `weights: pretrained`).

Usage: python bench/make_checkpoint.py qwen3-moe /tmp/ckpt/qwen3-moe
Qwen3-MoE shape: Qwen3-30B-A3B's layer (hidden 2048, 32 heads / 4 KV heads of 128, 128 experts, top 8,
expert width 768, vocab 151936), 8 layers instead of 48 so it builds and saves in seconds. No tokenizer
files: the workload then makes `prompt_tokens` stand-in ids.
"""
from __future__ import annotations

import sys
import time


def qwen3_moe(path: str) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=4,
                         head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                         num_experts_per_tok=8, vocab_size=151936, max_position_embeddings=32768,
                         torch_dtype="bfloat16")
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    print(f"qwen3-moe: {n / 1e9:.2f} B parameters saved to {path} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    {"qwen3-moe": qwen3_moe}[sys.argv[1]](sys.argv[2])
