"""Hugging Face model families through the real loading path, on CPU with tiny checkpoints the tests make.

Each checkpoint is what a hub repository holds, made offline (bench/offline_checkpoints.py, the builders
bench/make_checkpoint.py uses at published sizes on the GPU machine): a config, a processor built from a
`tokenizers` BPE tokenizer (trained here on two sentences) and the model's own image-processor class,
a chat template in the form of the model's published one, and random weights, all written with
`save_pretrained`. The capture then loads it with `load_model` (from_pretrained), builds its inputs the
way its processor wants them and generates under the phase hooks. The image placeholders differ per
family: LLaVA's `<image>` (expanded by the processor to one token per patch), Gemma 3's
`<start_of_image>` (expanded to `<image_soft_token>`s between begin/end-of-image tokens), Qwen2-VL's
`<|vision_start|><|image_pad|><|vision_end|>` (needs torchvision for its video processor: skipped
without it).
"""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kernelbook.capture.inputs import INSTRUCTION  # noqa: E402
from kernelbook.capture.models import load_model  # noqa: E402
from kernelbook.capture.phases import PhaseTracker  # noqa: E402
from kernelbook.contract.names import parse_record_name  # noqa: E402
from kernelbook.capture.common import CaptureError  # noqa: E402
from kernelbook.capture.workload import InputsError, build_workload, check_inputs  # noqa: E402
from kernelbook.contract.config import CaptureConfig  # noqa: E402
from kernelbook.params import load as load_params, validate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
# the checkpoint builders bench/make_checkpoint.py uses on the GPU machine, here at their tiny shape
from offline_checkpoints import FAMILIES, TEXT, FamilyUnavailable, bpe_tokenizer, llava  # noqa: E402

NEW = 4  # decode steps: prefill + 3 decode forwards
PARAMS = CaptureConfig.of(validate({"max_new_tokens": NEW, "batch_size": 2}))


@pytest.fixture(scope="module", params=list(FAMILIES))
def vlm(request, tmp_path_factory):
    """(checkpoint dir, model class name, image token id, image tokens per prompt or None)."""
    path = tmp_path_factory.mktemp("ckpt") / request.param
    try:
        ckpt = FAMILIES[request.param]("tiny")
    except FamilyUnavailable as e:
        pytest.skip(str(e))
    ckpt.save(path)
    return path, ckpt.model_class.__name__, ckpt.image_token_id, ckpt.image_tokens


def phases_of(wl):
    """One generate under the phase hooks: (output ids, sorted (phase, step) ranges, tracker)."""
    from torch.profiler import ProfilerActivity, profile

    tracker = PhaseTracker(wl.loaded.model, nvtx=False).install()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tracker.start()
        out = wl.generate()
        tracker.stop()
    tracker.remove()
    names = {parse_record_name(e.name) for e in prof.events() if e.name.startswith("kb::")}
    return out, sorted(names, key=lambda p: (p[1], p[0])), tracker


def test_an_image_model_gets_its_own_image_tokens_through_its_chat_template(vlm):
    path, cls, image_id, n_image = vlm
    lm = load_model(str(path), "pretrained", "cpu", "float32")
    assert type(lm.model).__name__ == cls and lm.kind == "image-text-to-text" and lm.processor is not None
    wl = build_workload(lm, PARAMS, "cpu")
    assert "chat template" in wl.describe["inputs_built_with"]
    per_prompt = (wl.inputs["input_ids"] == image_id).sum(dim=1).tolist()
    assert per_prompt[0] == per_prompt[1] == wl.describe["image_tokens_per_prompt"] > 0
    if n_image is not None:
        assert per_prompt[0] == n_image
    assert check_inputs(replace(PARAMS, model=str(path), weights="pretrained")) == {
        k: v for k, v in wl.describe.items()}  # the pre-GPU check builds the same inputs from config + processor
    out, phases, tracker = phases_of(wl)
    assert out.shape == (2, wl.describe["prompt_tokens"] + NEW)
    assert tracker.vision_calls >= 1
    assert phases == [("prefill", 0), ("vision_encode", 0), ("decode", 1), ("decode", 2), ("decode", 3)]


def test_without_a_chat_template_the_processors_own_placeholder_goes_before_the_text(vlm):
    path, _, image_id, _ = vlm
    lm = load_model(str(path), "pretrained", "cpu", "float32")
    lm.processor.chat_template = None
    lm.processor.tokenizer.chat_template = None
    wl = build_workload(lm, replace(PARAMS, batch_size=1), "cpu")
    assert wl.describe["inputs_built_with"].startswith(f"the processor's image placeholder "
                                                       f"{lm.processor.image_token!r}")
    assert int((wl.inputs["input_ids"] == image_id).sum()) == wl.describe["image_tokens_per_prompt"] > 0
    out, phases, _ = phases_of(wl)
    assert ("vision_encode", 0) in phases and out.shape[1] == wl.describe["prompt_tokens"] + NEW


def test_prompt_tokens_makes_an_image_models_text_exactly_n_tokens(vlm):
    path, _, image_id, _ = vlm
    lm = load_model(str(path), "pretrained", "cpu", "float32")
    base = build_workload(lm, PARAMS, "cpu")
    n_instruction = len(lm.processor.tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"])
    wl = build_workload(lm, replace(PARAMS, prompt_tokens=37), "cpu")
    # image and template tokens as the processor made them; the instruction's tokens replaced by 37
    assert wl.describe["prompt_tokens"] == base.describe["prompt_tokens"] - n_instruction + 37
    assert wl.describe["text_tokens"] == 37
    assert (wl.inputs["input_ids"] == image_id).sum() == (base.inputs["input_ids"] == image_id).sum()
    for key, v in wl.inputs.items():  # every sequence-long tensor stretched alike
        if hasattr(v, "shape") and v.dim() == 2 and key != "input_ids" and v.shape[0] == 2:
            assert v.shape[1] == wl.describe["prompt_tokens"], key
    assert wl.inputs["attention_mask"].all()
    out, phases, _ = phases_of(wl)
    assert out.shape == (2, wl.describe["prompt_tokens"] + NEW) and ("vision_encode", 0) in phases


# made at their published shape on the GPU machine (bench/make_checkpoint.py, bench/gpu_vlm.sh) and captured
# with params/<family>-local.yaml: the published model's size at full text depth, and its image tokens
GPU_FAMILIES = {"llava": (32, 7_063_427_072, 576), "gemma3": (34, 4_300_079_472, 256)}


@pytest.mark.parametrize("family", list(GPU_FAMILIES))
def test_the_gpu_checkpoints_config_and_processor_give_the_published_models_inputs(family, tmp_path):
    """The GPU machine's checkpoint without its weights: config and processor at the published shape go
    through the capture's pre-GPU input check with its params file; parameters counted on the meta device
    (llava-1.5-7b's and gemma-3-4b's own counts at full depth; 8 text layers: 2.2 B and 1.8 B)."""
    full_layers, full_params, n_image = GPU_FAMILIES[family]
    ckpt = FAMILIES[family]("real")
    ckpt.config.architectures = [ckpt.model_class.__name__]
    ckpt.config.save_pretrained(tmp_path)
    ckpt.processor.save_pretrained(tmp_path)
    params = load_params(REPO / "params" / f"{family}-local.yaml", {"model": str(tmp_path)}, consumer="capture")
    assert params["max_new_tokens"] == 32 and params["ncu_top_n"] == 10 and params["weights"] == "pretrained"
    describe = check_inputs(CaptureConfig.of(params))
    assert describe["image_tokens_per_prompt"] == ckpt.image_tokens == n_image
    assert n_image < describe["prompt_tokens"] < n_image + 40
    assert 1.5e9 < ckpt.meta_params() < 2.5e9  # under 5 GB in bfloat16
    assert FAMILIES[family]("real", full_layers).meta_params() == full_params


@pytest.mark.parametrize("family", list(GPU_FAMILIES))
def test_at_the_published_image_layout_the_capture_workload_generates(family, tmp_path):
    """The GPU checkpoint's builder with tiny widths but the published image size, patch size, image-token
    count and vocabulary: its params file's inputs through from_pretrained, build_workload and a generate of
    2 tokens under the phase hooks, as the GPU run will do them."""
    ckpt = FAMILIES[family]("layout")
    ckpt.save(tmp_path)
    params = load_params(REPO / "params" / f"{family}-local.yaml", {"model": str(tmp_path), "max_new_tokens": 2},
                         consumer="capture")
    lm = load_model(params["model"], params["weights"], "cpu", "float32")
    wl = build_workload(lm, CaptureConfig.of(params), "cpu")
    assert wl.describe["image_tokens_per_prompt"] == GPU_FAMILIES[family][2]
    assert wl.inputs["pixel_values"].shape[-2:] == (ckpt.config.vision_config.image_size,) * 2
    out, phases, tracker = phases_of(wl)
    assert out.shape == (1, wl.describe["prompt_tokens"] + 2) and tracker.vision_calls >= 1
    assert phases == [("prefill", 0), ("vision_encode", 0), ("decode", 1)]


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    """A Qwen3-MoE-shaped text checkpoint (4 experts, top 2) with a Llama-style tokenizer that adds BOS."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    path = tmp_path_factory.mktemp("ckpt") / "qwen3-moe"
    tok = bpe_tokenizer(["<|endoftext|>", "<s>"], bos_token="<s>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    cfg = Qwen3MoeConfig(**{**TEXT, "num_hidden_layers": 2}, head_dim=16, moe_intermediate_size=16, num_experts=4,
                         num_experts_per_tok=2, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.parametrize("n", [1, 2, 61, 300])
def test_prompt_tokens_gives_a_text_model_exactly_n_prompt_tokens(qwen3_moe, n):
    lm = load_model(str(qwen3_moe), "pretrained", "cpu", "float32")
    assert type(lm.model).__name__ == "Qwen3MoeForCausalLM" and lm.kind == "causal-lm"
    wl = build_workload(lm, replace(PARAMS, prompt_tokens=n), "cpu")
    ids = wl.inputs["input_ids"]
    assert ids.shape == (2, n) and wl.describe["prompt_tokens"] == n
    assert ids[0, 0] == lm.processor.bos_token_id  # the tokenizer's own BOS counts as one of the n
    if n > 1:
        assert lm.processor.decode(ids[0, 1:]).startswith(INSTRUCTION[:n - 1] if n < 4 else "Convert")


def test_a_text_moe_model_generates_with_prefill_and_decode_phases(qwen3_moe):
    lm = load_model(str(qwen3_moe), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, prompt="Summarize the quick brown fox.", prompt_tokens=24), "cpu")
    out, phases, tracker = phases_of(wl)
    assert out.shape == (2, 24 + NEW)
    assert phases == [("prefill", 0), ("decode", 1), ("decode", 2), ("decode", 3)] and tracker.vision_calls == 0
    assert wl.describe["prompt"] == "Summarize the quick brown fox."


def test_without_a_tokenizer_prompt_tokens_gives_n_stand_in_ids(qwen3_moe, tmp_path):
    bare = _without_processor(qwen3_moe, tmp_path / "bare")
    lm = load_model(str(bare), "pretrained", "cpu", "float32")
    assert lm.processor is None
    wl = build_workload(lm, replace(PARAMS, prompt_tokens=50), "cpu")
    assert wl.inputs["input_ids"].shape == (2, 50) and wl.describe["tokenizer"].startswith("none: 50 stand-in ids")


def test_random_weights_of_a_checkpoint_still_take_its_processor(vlm):
    path, cls, image_id, _ = vlm
    lm = load_model(str(path), "random", "cpu", "float32")
    assert lm.weights == "random" and lm.processor is not None and type(lm.model).__name__ == cls
    wl = build_workload(lm, replace(PARAMS, batch_size=1), "cpu")
    assert int((wl.inputs["input_ids"] == image_id).sum()) > 0


def _without_processor(src, dst):
    """A copy of checkpoint `src` with its weights and config only, as a bare `model.save_pretrained` leaves it."""
    import shutil

    dst.mkdir()
    for f in src.iterdir():
        if f.name in ("config.json", "generation_config.json") or f.suffix == ".safetensors":
            shutil.copy(f, dst / f.name)
    return dst


def test_an_image_model_without_processor_files_cannot_be_fed(vlm, tmp_path):
    path, cls, _, _ = vlm
    bare = _without_processor(path, tmp_path / "bare")
    with pytest.raises(InputsError, match=f"{cls} takes images, and its checkpoint has no processor files"):
        check_inputs(replace(PARAMS, model=str(bare), weights="pretrained"))
    assert issubclass(InputsError, CaptureError)  # what the CLI maps to exit code 2


def test_the_capture_cli_stops_before_any_gpu_work_on_inputs_it_cannot_build(tmp_path):
    """Exit 2, one message naming the class and what is missing, nothing written: the check runs on the
    CPU from config and processor files, before a GPU is asked for (so on this CPU machine too)."""
    ckpt = llava("tiny")
    torch.manual_seed(0)
    ckpt.model_class(ckpt.config).save_pretrained(tmp_path / "bare")  # weights and config, no processor
    params = tmp_path / "p.yaml"
    params.write_text(f"model: {tmp_path / 'bare'}\nweights: pretrained\n")
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "capture", "--params", str(params), "--out",
                           str(tmp_path / "run")], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "LlavaForConditionalGeneration takes images" in proc.stderr and "NVIDIA GPU" not in proc.stderr
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run.tmp-*"))


def test_a_processor_that_does_not_match_the_config_stops_before_any_gpu_work(vlm, tmp_path):
    """The reported failure (`Image features and image tokens do not match, tokens: 0`) caught from
    config + processor: the config's image token is one the processor never writes."""
    import shutil

    path, cls, _, _ = vlm
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    cfg = json.loads((bad / "config.json").read_text())
    key = "image_token_id" if "image_token_id" in cfg else "image_token_index"
    cfg[key] = 511  # inside the model's vocabulary (512), outside the tokenizer's (about 400): never written
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputsError, match=f"{cls}: its inputs carry no image token \\(id 511\\)"):
        check_inputs(replace(PARAMS, model=str(bad), weights="pretrained"))


def test_a_prompt_longer_than_the_model_takes_stops_before_any_gpu_work(qwen3_moe):
    with pytest.raises(InputsError, match="Qwen3MoeForCausalLM: a prompt of 600 tokens plus max_new_tokens 4 is "
                                          "604 positions, above the model's max_position_embeddings 512"):
        check_inputs(replace(PARAMS, model=str(qwen3_moe), weights="pretrained", prompt_tokens=600))


def test_a_processor_that_needs_a_missing_library_says_so(tmp_path):
    """Issue 29, item 7: the files are there, a library they need is not. A checkpoint whose processor files
    name Qwen2-VL's processor (its video processor needs torchvision), on a machine without torchvision: the
    input check names the missing library, not "no processor files"."""
    try:
        import torchvision  # noqa: F401

        pytest.skip("torchvision is importable here: nothing is missing")
    except Exception:  # noqa: BLE001 - absent, or a build whose ops fail to register: both unusable
        pass
    path = tmp_path / "needs-torchvision"
    llava("tiny").save(path)
    cfg = path / "processor_config.json"
    proc = json.loads(cfg.read_text())
    pixels = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    proc.update(processor_class="Qwen2VLProcessor",
                image_processor={"image_processor_type": "Qwen2VLImageProcessor", **pixels},
                video_processor={"video_processor_type": "Qwen2VLVideoProcessor", **pixels})
    cfg.write_text(json.dumps(proc))
    with pytest.raises(InputsError) as e:
        check_inputs(replace(PARAMS, model=str(path), weights="pretrained"))
    msg = str(e.value)
    assert "orchvision" in msg and "cannot be loaded on this machine" in msg and "no processor files" not in msg


def _decode_modules(wl, tmp_path):
    from test_capture_cpu import op_calls_with_modules

    calls = op_calls_with_modules(wl, tmp_path / "trace.json")
    dec = calls[calls.phase == "decode"]
    assert len(dec) and dec.module.notna().mean() > 0.8, dec.module.isna().mean()
    assert "other" not in set(dec.module_type), dec[dec.module_type == "other"].module.unique()
    return dec


def test_every_decode_op_call_of_an_image_model_has_its_module(vlm, tmp_path):
    """Module attribution for each image-text family: the decode step's op calls fall in attention, MLP, norm
    and lm_head modules of numbered decoder layers."""
    lm = load_model(str(vlm[0]), "pretrained", "cpu", "float32")
    dec = _decode_modules(build_workload(lm, PARAMS, "cpu"), tmp_path)
    assert {"attention", "dense MLP", "norm", "lm_head"} <= set(dec.module_type)
    assert dec.layer.dropna().nunique() == lm.model.config.get_text_config().num_hidden_layers


def test_every_decode_op_call_of_a_moe_model_has_its_module(qwen3_moe, tmp_path):
    lm = load_model(str(qwen3_moe), "pretrained", "cpu", "float32")
    dec = _decode_modules(build_workload(lm, replace(PARAMS, prompt_tokens=24), "cpu"), tmp_path)
    assert {"attention", "MoE router", "MoE experts", "norm", "lm_head"} <= set(dec.module_type)
