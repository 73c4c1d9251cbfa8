"""Image-text-to-text checkpoints made offline (no hub), shared by the CPU tests and the GPU machine.

A checkpoint is what a hub repository holds: a config, a processor built from a `tokenizers` BPE
tokenizer (trained here on two sentences) and the model's own image-processor class (the PIL one:
no torchvision needed), a chat template in the form of the model's published one, and random
weights, all written with `save_pretrained`. `tests/test_capture_families.py` makes them tiny and
runs the capture workload on the CPU; `bench/make_checkpoint.py` makes them at a published model's
shape on the GPU machine.

Shapes, per family:
  tiny    widths of 32, one vision layer, 28 px images (a few image tokens): the CPU tests
  layout  tiny widths, but the published image size, patch size, image-token count and vocabulary:
          the real model's inputs, cheap enough for a CPU generate
  real    the published model's widths and vision tower; `text_layers` of its text layers (default 8)
          so that it builds and saves in seconds

Token ids are the tokenizer's own (a few hundred); the model's vocabulary is the published size, so
embedding and LM-head GEMMs have their real shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelbook.capture.inputs import INSTRUCTION

SHAPES = ("tiny", "layout", "real")
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            vocab_size=512, max_position_embeddings=512)  # the tiny text model of every family
TINY_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
REAL_TEXT_LAYERS = 8


class FamilyUnavailable(RuntimeError):
    """The family's processor cannot be built on this machine (Qwen2-VL without a working torchvision)."""


@dataclass
class Checkpoint:
    model_class: type
    config: Any
    processor: Any
    image_token_id: int
    image_tokens: int | None  # image tokens per prompt; None: it depends on the page's shape

    def meta_params(self) -> int:
        """Parameter count of the model, instantiated on the meta device (no memory)."""
        import torch

        with torch.device("meta"):
            return sum(p.numel() for p in self.model_class(self.config).parameters())

    def save(self, path, device: str = "cpu", dtype=None) -> int:
        """Random weights (seeded) built on `device`, cast to `dtype`, saved with the processor; returns the
        parameter count."""
        import torch

        torch.manual_seed(0)
        with torch.device(device):
            model = self.model_class(self.config)
        if dtype is not None:
            model = model.to(dtype)
        model.save_pretrained(path)
        self.processor.save_pretrained(path)
        n = sum(p.numel() for p in model.parameters())
        del model
        return n


def bpe_tokenizer(special: list[str], **kwargs):
    """A byte-level BPE tokenizer (the kind Qwen, Llama 3 and Gemma ship), trained here on two sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([INSTRUCTION, "The quick brown fox jumps over the lazy dog."] * 5, trainer)
    if kwargs.get("bos_token"):  # Llama-style: the tokenizer puts BOS before every prompt
        from tokenizers.processors import TemplateProcessing

        bos = kwargs["bos_token"]
        tok.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def _check(shape: str, text_layers: int | None) -> int:
    if shape not in SHAPES:
        raise ValueError(f"shape {shape!r}: one of {', '.join(SHAPES)}")
    return text_layers or REAL_TEXT_LAYERS


def llava(shape: str = "tiny", text_layers: int | None = None) -> Checkpoint:
    """LLaVA-1.5 form: CLIP tower, `USER: <image>\\n... ASSISTANT:`, the processor expands `<image>` to one
    token per patch. tiny: 28 px, 14 px patches (4 image tokens); layout and real: llava-1.5-7b's CLIP
    ViT-L/14 at 336 px (576 image tokens), Llama-2-7B text (real: hidden 4096, 32 heads, MLP 11008),
    vocabulary 32064."""
    from transformers import CLIPImageProcessorPil, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    layers = _check(shape, text_layers)
    if shape == "real":
        vision = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                      image_size=336, patch_size=14, projection_dim=768)
        text = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers, num_attention_heads=32,
                    num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096, rms_norm_eps=1e-5)
    elif shape == "layout":
        vision = dict(TINY_VISION, image_size=336, patch_size=14, projection_dim=32)
        text = dict(TEXT, vocab_size=32064, max_position_embeddings=4096, rms_norm_eps=1e-5)
    else:
        vision = dict(TINY_VISION, image_size=28, patch_size=14, projection_dim=32)
        text = TEXT
    px, patch = vision["image_size"], vision["patch_size"]
    tok = bpe_tokenizer(["<unk>", "<s>", "</s>", "<image>", "<pad>"], bos_token="<s>", eos_token="</s>",
                        pad_token="<pad>", unk_token="<unk>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>", "<image>")}
    template = ("{% for m in messages %}{% if m['role'] == 'user' %}USER: {% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<image>\n{% endif %}{% endfor %}{% for c in m['content'] %}"
                "{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %} {% endif %}{% endfor %}"
                "{% if add_generation_prompt %}ASSISTANT:{% endif %}")
    proc = LlavaProcessor(image_processor=CLIPImageProcessorPil(size={"shortest_edge": px},
                                                                crop_size={"height": px, "width": px}),
                          tokenizer=tok, patch_size=patch, vision_feature_select_strategy="default",
                          num_additional_image_tokens=1, chat_template=template)
    cfg = LlavaConfig(vision_config=dict(model_type="clip_vision_model", **vision),
                      text_config=dict(model_type="llama", bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                                       pad_token_id=ids["<pad>"], **text),
                      image_token_index=ids["<image>"], vision_feature_select_strategy="default",
                      image_seq_length=(px // patch) ** 2)
    return Checkpoint(LlavaForConditionalGeneration, cfg, proc, ids["<image>"], (px // patch) ** 2)


def gemma3(shape: str = "tiny", text_layers: int | None = None) -> Checkpoint:
    """Gemma 3 form: SigLIP tower whose patches are pooled to `mm_tokens_per_image` soft tokens,
    `<start_of_image>` in the user turn, which the processor expands to
    `\\n\\n<start_of_image><image_soft_token>xN<end_of_image>\\n\\n`. tiny: 28 px, 7 px patches pooled to 4;
    layout and real: gemma-3-4b's SigLIP-So400m at 896 px, 14 px patches pooled to 256, vocabulary 262208
    (real: hidden 2560, 8 heads / 4 KV heads of 256, MLP 10240, 5 sliding-window layers to 1 global)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessorPil, Gemma3Processor

    layers = _check(shape, text_layers)
    if shape == "real":
        vision = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                      image_size=896, patch_size=14)
        text = dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=layers, num_attention_heads=8,
                    num_key_value_heads=4, head_dim=256, vocab_size=262208, max_position_embeddings=131072,
                    sliding_window=1024, query_pre_attn_scalar=256,
                    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
        n_image = 256
    elif shape == "layout":
        vision = dict(TINY_VISION, image_size=896, patch_size=14)
        text = dict(TEXT, head_dim=16, sliding_window=1024, vocab_size=262208, max_position_embeddings=131072)
        n_image = 256
    else:
        vision = dict(TINY_VISION, image_size=28, patch_size=7)
        text = dict(TEXT, head_dim=16, sliding_window=16)
        n_image = 4
    px = vision["image_size"]
    special = ["<pad>", "<eos>", "<bos>", "<start_of_image>", "<end_of_image>", "<image_soft_token>",
               "<start_of_turn>", "<end_of_turn>"]
    tok = bpe_tokenizer(special, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                              "image_token": "<image_soft_token>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in special}
    template = ("{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
                "{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>{% elif c['type'] == 'text' %}"
                "{{ c['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
                "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(size={"height": px, "width": px}), tokenizer=tok,
                           chat_template=template, image_seq_length=n_image)
    cfg = Gemma3Config(vision_config=dict(model_type="siglip_vision_model", vision_use_head=False, **vision),
                       text_config=dict(bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"],
                                        pad_token_id=ids["<pad>"], **text),
                       mm_tokens_per_image=n_image, boi_token_index=ids["<start_of_image>"],
                       eoi_token_index=ids["<end_of_image>"], image_token_index=ids["<image_soft_token>"])
    return Checkpoint(Gemma3ForConditionalGeneration, cfg, proc, ids["<image_soft_token>"], n_image)


def qwen2_vl(shape: str = "tiny", text_layers: int | None = None) -> Checkpoint:
    """Qwen2-VL form (tiny only): its ViT (14 px patches, 2x2 merge) with the image processor's pixel budget
    cut to 16 merged tokens, `<|vision_start|><|image_pad|><|vision_end|>` in the user turn (the reported
    case: an `<image>` string there gave `tokens: 0, features: 252`). Its processor needs a working
    torchvision for the video processor: FamilyUnavailable without one."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor, Qwen2VLProcessor

    if shape != "tiny":
        raise ValueError(f"qwen2_vl: shape {shape!r}: only tiny is made (its processor needs torchvision)")
    try:  # PyPI's torchvision is a CUDA build: beside the CPU torch its ops fail to register
        from transformers import Qwen2VLVideoProcessor

        video = Qwen2VLVideoProcessor()
    except (ImportError, RuntimeError) as e:
        raise FamilyUnavailable(f"Qwen2VLProcessor needs a working torchvision for its video processor: "
                                f"{type(e).__name__}") from e
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
               "<|video_pad|>"]
    tok = bpe_tokenizer(special, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in special}
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
                "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16),
                            tokenizer=tok, video_processor=video, chat_template=template)
    cfg = Qwen2VLConfig(vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2),
                        text_config=dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "mrope_section": [2, 3, 3]},
                                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], **TEXT),
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    return Checkpoint(Qwen2VLForConditionalGeneration, cfg, proc, ids["<|image_pad|>"], None)


FAMILIES = {"llava": llava, "gemma3": gemma3, "qwen2_vl": qwen2_vl}
