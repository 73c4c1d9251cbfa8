"""The from_pretrained loading path and the phase hooks, on CPU with tiny checkpoints the test saves.

Needs torch and transformers (the `capture` extra); scripts/test.sh installs the CPU build of torch.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kernelbook.capture.inputs import deepseek_ocr2_image_tokens  # noqa: E402
from kernelbook.capture.models import build_random, deepseek_ocr2_config, load_model  # noqa: E402
from kernelbook.capture.phases import PhaseTracker, parse_record_name  # noqa: E402
from kernelbook.capture.workload import build_workload  # noqa: E402

TINY_OCR2 = dict(
    vision_config={"sam_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                  "global_attn_indexes": [1], "downsample_channels": [16, 32], "mlp_dim": 64},
                   "encoder_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                      "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 1000,
                                      "max_position_embeddings": 4096}},
    text_config={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                 "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
                 "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
                 "mlp_layer_types": ["dense", "sparse"], "bos_token_id": 0, "eos_token_id": 1, "topk_method": "greedy"},
    image_token_id=999)
PARAMS = {"batch_size": 1, "max_new_tokens": 4, "base_size": 1024, "seed": 0, "no_repeat_ngram_size": 20}


@pytest.fixture(scope="module")
def tiny_ocr2(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny-deepseek-ocr2"
    build_random(deepseek_ocr2_config(**TINY_OCR2), "cpu", torch.float32).save_pretrained(path)
    return path


def phases_of(workload, model):
    """Phase ranges recorded by the hooks during one generate (torch.profiler, CPU activity)."""
    tracker = PhaseTracker(model, nvtx=False).install()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tracker.start()
        out = workload.generate()
        tracker.stop()
    tracker.remove()
    names = [parse_record_name(e.name) for e in prof.events() if e.name.startswith("kb::")]
    return out, sorted(set(names), key=lambda p: (p[1], p[0]))


def test_a_saved_deepseek_ocr2_checkpoint_loads_with_its_generation_head(tiny_ocr2):
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    assert type(lm.model).__name__ == "DeepseekOcr2ForConditionalGeneration"
    assert lm.kind == "image-text-to-text" and lm.weights == str(tiny_ocr2.resolve())
    assert lm.processor is None  # no processor files saved: inputs are synthesized
    assert next(lm.model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("crop", [False, True])
def test_generate_on_the_tiny_checkpoint_marks_every_phase(tiny_ocr2, crop):
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, {**PARAMS, "crop_mode": crop}, "cpu")
    crops = wl.describe["local_crops_per_image"][0]
    # the synthetic page is 1224x1584: crop mode tiles it (768 px tiles), without crops the global view
    # is the 768 px tile and only 12*12 + 1 image tokens
    assert (crops > 0) == crop
    n_image = int((wl.inputs["input_ids"] == TINY_OCR2["image_token_id"]).sum())
    assert n_image == deepseek_ocr2_image_tokens(crops, 1024, crop=crop)
    assert n_image == (16 * 16 + 12 * 12 * crops + 1 if crop else 12 * 12 + 1)
    out, phases = phases_of(wl, lm.model)
    assert out.shape[1] == wl.inputs["input_ids"].shape[1] + PARAMS["max_new_tokens"]  # min_new_tokens forced
    assert phases == [("prefill", 0), ("vision_encode", 0), ("decode", 1), ("decode", 2), ("decode", 3)]


def test_a_tiny_causal_lm_checkpoint_loads_and_generates(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=500, max_position_embeddings=256)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "tiny-llama")
    lm = load_model(str(tmp_path / "tiny-llama"), "pretrained", "cpu", "float32")
    assert lm.kind == "causal-lm" and type(lm.model).__name__ == "LlamaForCausalLM"
    wl = build_workload(lm, {**PARAMS, "batch_size": 2}, "cpu")
    out, phases = phases_of(wl, lm.model)
    assert out.shape == (2, wl.describe["prompt_tokens"] + 4)
    assert phases == [("prefill", 0), ("decode", 1), ("decode", 2), ("decode", 3)]


def test_custom_code_runs_only_when_params_ask(tmp_path):
    """A checkpoint whose config points at its own code: that code runs only with trust_remote_code."""
    import json

    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path / "custom"
    LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 vocab_size=100)).save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig"}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "configuration_custom.py").write_text("raise RuntimeError('the checkpoint code ran')\n")
    lm = load_model(str(d), "pretrained", "cpu", "float32", trust_remote_code=False)
    assert type(lm.model).__name__ == "LlamaForCausalLM"  # built-in class, the file was not executed
    with pytest.raises(RuntimeError, match="the checkpoint code ran"):
        load_model(str(d), "pretrained", "cpu", "float32", trust_remote_code=True)
