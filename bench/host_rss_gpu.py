"""Issue 27 control on the GPU: host RSS of a bare HF generate (tiny random Llama, bf16, SDPA) against
max_new_tokens, with cuDNN attention on (torch's default) and off. Usage: python bench/host_rss_gpu.py on|off N   (not yet run: session 11 had no device time; the CPU side is
bench/host_rss_cpu.py, flat per token)"""
import json
import resource
import sys

import torch


def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6


cudnn, n = sys.argv[1] == "on", int(sys.argv[2])
torch.backends.cuda.enable_cudnn_sdp(cudnn)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

cfg = LlamaConfig(hidden_size=1280, intermediate_size=512, num_hidden_layers=2, num_attention_heads=10,
                  num_key_value_heads=10, vocab_size=1000, max_position_embeddings=8192)
m = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
m.config._attn_implementation = "sdpa"
ids = torch.randint(2, 1000, (1, 600), device="cuda")
m.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
torch.cuda.synchronize()
r0 = rss_mb()
m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
torch.cuda.synchronize()
r1 = rss_mb()
print(json.dumps({"cudnn_sdp": cudnn, "new_tokens": n, "rss0_mb": round(r0, 1), "rss1_mb": round(r1, 1),
                  "mb_per_token": round((r1 - r0) / n, 3),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}))
