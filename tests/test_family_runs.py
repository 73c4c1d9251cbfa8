"""The committed GPU runs of model families other than DeepSeek-OCR-2, captured end to end on the H100 by
the capture code (bench/gpu_vlm.sh llava; bench/gpu_capture.sh with params/qwen3-moe-local.yaml): what
they hold, and the whole book rendered from each on this CPU machine."""
import pytest

from conftest import CHAPTERS, REPO, RUN
from kernelbook import params as P
from kernelbook.analyze import summary as S
from kernelbook.load.run import load_run
from kernelbook.runner import render_book

LLAVA = REPO / "data" / "runs" / "llava-h100"
QWEN3_MOE = REPO / "data" / "runs" / "qwen3-moe-h100"


def test_llava_run_went_through_the_processor_chat_template_with_vision_marked():
    r = load_run(LLAVA)
    ti = r.manifest["timeline_info"]
    assert r.manifest["status"] == "complete" and ti["model_class"] == "LlavaForConditionalGeneration"
    assert ti["model_kind"] == "image-text-to-text"
    assert ti["inputs"]["inputs_built_with"] == "the processor's chat template, one image content part"
    # CLIP ViT-L/14 at 336 px: (336 / 14)² = 576 patch tokens, expanded from the one <image> placeholder
    assert ti["inputs"]["image_tokens_per_prompt"] == 576 < ti["inputs"]["prompt_tokens"]
    k = r.timeline[r.timeline.kind == "kernel"]
    assert {"vision_encode", "prefill", "decode"} <= set(k.phase)
    assert k[k.phase == "vision_encode"].duration_ns.sum() > 0
    assert r.phases[r.phases.phase == "decode"].step.nunique() == r.manifest["params"]["max_new_tokens"] - 1


def test_text_moe_run_has_the_asked_prompt_length():
    r = load_run(QWEN3_MOE)
    ti = r.manifest["timeline_info"]
    assert ti["model_class"] == "Qwen3MoeForCausalLM" and ti["inputs"]["prompt_tokens"] == 1024
    assert "vision_encode" not in set(r.phases.phase)


@pytest.mark.parametrize("path", [LLAVA, QWEN3_MOE], ids=lambda p: p.name)
def test_every_selected_kernel_was_profiled(path):
    ncu = load_run(path).manifest["ncu"]
    assert set(ncu["phases"]) == {"decode", "prefill"}
    for ph, v in ncu["phases"].items():
        assert v["profiled"] == v["selected"] == 10 and v["error"] is None, (ph, v)


def test_variants_of_another_model_are_left_out_with_the_reason():
    base = load_run(LLAVA)
    kept, out = S.variants_of(base, [load_run(p) for p in P.VARIANT_RUNS])
    assert kept == [] and len(out) == len(P.VARIANT_RUNS)
    assert "differs in model, weights" in out[0]
    kept, out = S.variants_of(load_run(RUN), [load_run(p) for p in P.VARIANT_RUNS])
    assert len(kept) == len(P.VARIANT_RUNS) and out == []


@pytest.mark.parametrize("path", [LLAVA, QWEN3_MOE], ids=lambda p: p.name)
def test_the_book_renders_every_chapter_of_the_run(path, tmp_path):
    out = render_book(P.validate({"run_dir": str(path.relative_to(REPO))}, consumer="book"), tmp_path / "rep",
                      log=lambda *_: None)
    for stem in CHAPTERS:  # render_book raises on a chapter that fails
        assert "Traceback" not in (out / f"{stem}.html").read_text(), stem
    summary = (out / "07_summary.html").read_text()
    assert "is not a variant of" in summary and "static cache + CUDA graphs measured" not in summary
