"""The from_pretrained loading path and the phase hooks, on CPU with tiny checkpoints the test saves.

Needs torch and transformers (the `capture` extra); scripts/test.sh installs the CPU build of torch.
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kernelbook.capture.inputs import deepseek_ocr2_image_tokens  # noqa: E402
from kernelbook.capture.models import build_random, deepseek_ocr2_config, load_model  # noqa: E402
from kernelbook.capture.phases import PhaseTracker  # noqa: E402
from kernelbook.contract.names import parse_op_range, parse_record_name  # noqa: E402
from kernelbook.capture.workload import build_workload  # noqa: E402
from kernelbook.contract.config import CaptureConfig  # noqa: E402
from kernelbook.params import validate  # noqa: E402

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
PARAMS = CaptureConfig.of(validate({"batch_size": 1, "max_new_tokens": 4, "base_size": 1024, "seed": 0,
                                     "no_repeat_ngram_size": 20}, consumer="capture"))


@pytest.fixture(scope="module")
def tiny_ocr2(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny-deepseek-ocr2"
    build_random(deepseek_ocr2_config(**TINY_OCR2), "cpu", torch.float32).save_pretrained(path)
    return path


def profiled(fn, model):
    """Run `fn` with the phase hooks on, under torch.profiler (CPU activity): (result, events, tracker)."""
    tracker = PhaseTracker(model, nvtx=False).install()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tracker.start()
        out = fn()
        tracker.stop()
    tracker.remove()
    return out, prof.events(), tracker


def phases_of(workload, model):
    """Phase ranges recorded by the hooks during one generate."""
    out, events, _ = profiled(workload.generate, model)
    names = [parse_record_name(e.name) for e in events if e.name.startswith("kb::")]
    return out, sorted(set(names), key=lambda p: (p[1], p[0]))


def innermost_phase_of_ops(events, op: str) -> set[str]:
    """The innermost phase range (by CPU time) around every call of aten `op`: where the timeline's
    ingest would put the kernels that op launches."""
    ranges = [(e.time_range.start, e.time_range.end, parse_record_name(e.name)[0])
              for e in events if e.name.startswith("kb::")]
    found = set()
    for e in events:
        if e.name == op:
            inside = [r for r in ranges if r[0] <= e.time_range.start and e.time_range.end <= r[1]]
            found.add(min(inside, key=lambda r: r[1] - r[0])[2] if inside else "other")
    return found


def test_a_saved_deepseek_ocr2_checkpoint_loads_with_its_generation_head(tiny_ocr2):
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    assert type(lm.model).__name__ == "DeepseekOcr2ForConditionalGeneration"
    assert lm.kind == "image-text-to-text" and lm.weights == str(tiny_ocr2.resolve())
    assert lm.processor is None  # no processor files saved: inputs are synthesized
    assert next(lm.model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("crop", [False, True])
def test_generate_on_the_tiny_checkpoint_marks_every_phase(tiny_ocr2, crop):
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=crop), "cpu")
    crops = wl.describe["local_crops_per_image"][0]
    # the synthetic page is 1224x1584: crop mode tiles it (768 px tiles), without crops the global view
    # is the 768 px tile and only 12*12 + 1 image tokens
    assert (crops > 0) == crop
    n_image = int((wl.inputs["input_ids"] == TINY_OCR2["image_token_id"]).sum())
    assert n_image == deepseek_ocr2_image_tokens(crops, 1024, crop=crop)
    assert n_image == (16 * 16 + 12 * 12 * crops + 1 if crop else 12 * 12 + 1)
    out, phases = phases_of(wl, lm.model)
    assert out.shape[1] == wl.inputs["input_ids"].shape[1] + PARAMS.max_new_tokens  # min_new_tokens forced
    assert phases == [("prefill", 0), ("vision_encode", 0), ("decode", 1), ("decode", 2), ("decode", 3)]


@pytest.mark.parametrize("crop", [False, True])
def test_vision_work_lands_in_vision_encode_whichever_way_generate_calls_it(tiny_ocr2, crop):
    """transformers 5.17 runs the vision tower inside the first forward, 5.18+ in generate's input
    preparation before it: either way every convolution (SAM's patch embedding and neck, used only by
    the vision tower) is inside a vision_encode range, and the language model's matmuls are not."""
    import transformers

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=crop), "cpu")
    _, events, tracker = profiled(wl.generate, lm.model)
    assert tracker.vision_calls >= 1, transformers.__version__
    assert innermost_phase_of_ops(events, "aten::convolution") == {"vision_encode"}
    assert {"prefill", "decode"} <= innermost_phase_of_ops(events, "aten::mm") | innermost_phase_of_ops(
        events, "aten::linear")


def test_a_vision_tower_called_outside_any_forward_is_marked(tiny_ocr2):
    """The vision tower run on its own (as `generate` does before the first forward in newer
    transformers, or a user's `get_image_features`), then a forward on the text: two phases, each
    holding its own work."""
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")
    model = lm.model

    def encode_then_forward():
        with torch.inference_mode():
            model.get_image_features(wl.inputs["pixel_values"], num_local_patches=wl.inputs["num_local_patches"])
            model(input_ids=wl.inputs["input_ids"][:, -4:])

    _, events, tracker = profiled(encode_then_forward, model)
    names = [parse_record_name(e.name) for e in events if e.name.startswith("kb::")]
    # the tower and then the projector: one range each, none inside the prefill step
    assert tracker.vision_calls == names.count(("vision_encode", 0)) == 2
    assert names.count(("prefill", 0)) == 1
    assert innermost_phase_of_ops(events, "aten::convolution") == {"vision_encode"}


def test_an_image_model_with_no_vision_work_stops_the_capture(tiny_ocr2):
    """A text-only forward of an image model: the capture must not pass it off as a VLM run."""
    from kernelbook.capture.phases import NoVisionWork, require_vision_work

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")

    def text_only():
        with torch.inference_mode():
            lm.model(input_ids=wl.inputs["input_ids"][:, -4:])

    _, _, tracker = profiled(text_only, lm.model)
    with pytest.raises(NoVisionWork, match="DeepseekOcr2ForConditionalGeneration .* no vision module forward"):
        require_vision_work(lm.kind, tracker, type(lm.model).__name__)


def test_a_tiny_causal_lm_checkpoint_loads_and_generates(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=500, max_position_embeddings=256)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "tiny-llama")
    lm = load_model(str(tmp_path / "tiny-llama"), "pretrained", "cpu", "float32")
    assert lm.kind == "causal-lm" and type(lm.model).__name__ == "LlamaForCausalLM"
    wl = build_workload(lm, replace(PARAMS, batch_size=2), "cpu")
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


def _op_ranges_with_ops(events):
    """(phase, step, op_index) -> the aten op called inside that numbered op call (record pass)."""
    phases = [(e.time_range.start, e.time_range.end, parse_record_name(e.name)) for e in events
              if e.name.startswith("kb::")]
    calls = [(e.time_range.start, e.time_range.end, parse_op_range(e.name)) for e in events
             if parse_op_range(e.name) is not None]
    out = {}
    for s, e, i in calls:
        inner = [p for p in phases if p[0] <= s and e <= p[1]]
        ph = min(inner, key=lambda p: p[1] - p[0])[2]
        ops = sorted((x for x in events if x.name.startswith("aten::") and s <= x.time_range.start
                      and x.time_range.end <= e), key=lambda x: (x.time_range.start, -x.time_range.end))
        out[(ph[0], ph[1], i)] = ops[0].name if ops else None
    return out


def test_op_calls_are_numbered_the_same_in_the_record_pass_and_the_ncu_worker(tiny_ocr2):
    """Identity by position: the shapes pass numbers each aten op call per phase range (kbop#i); the ncu
    worker, replaying the same generate with op_targets, marks exactly the calls with those numbers.
    Checked on the tiny DeepSeek-OCR-2: the ops the worker marks are the ops the record pass saw there."""
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")
    tracker = PhaseTracker(lm.model, nvtx=False, op_record=True).install()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tracker.start()
        wl.generate()
        tracker.stop()
    tracker.remove()
    recorded = _op_ranges_with_ops(prof.events())
    counts = {}
    for ph, st, i in recorded:
        counts[(ph, st)] = max(counts.get((ph, st), 0), i + 1)
    assert {k[0] for k in counts} == {"vision_encode", "prefill", "decode"}
    assert all(len([1 for (p, s, _) in recorded if (p, s) == k]) == n for k, n in counts.items())  # 0..n-1, no gap
    # pick calls in every phase: the first, a middle one and the last of each range
    targets = {k: {0, n // 2, n - 1} for k, n in counts.items()}
    worker = PhaseTracker(lm.model, nvtx=False, record=False, op_targets=targets).install()
    worker.start()
    wl.generate()
    worker.stop()
    worker.remove()
    seen = {(p, s, i): "::".join(op.split(".")[:2]) for p, s, i, op in worker.op_seen}
    assert set(seen) == {(k[0], k[1], i) for k, idx in targets.items() for i in idx}
    assert all(seen[c] == recorded[c] for c in seen), {c: (seen[c], recorded[c]) for c in seen}


def test_ncu_worker_runs_lead_up_decode_steps_without_cudnn_attention(tiny_ocr2):
    """The ncu worker's decode steps that only lead up to a profiled one run SDPA without cuDNN (each KV length
    would load cuDNN kernels of its own, and ncu's cost per profiled launch grows with loaded modules); the
    prefill and every profiled step run with the flag as it was, the flag is restored at the end, and the
    op calls the worker marks are the ones it marks without the switch."""
    import torch

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False, max_new_tokens=6), "cpu")
    targets = {("prefill", 0): {1}, ("decode", 2): {0, 3}, ("decode", 4): {2}}
    seen = {}
    for lead_up in (False, True):
        worker = PhaseTracker(lm.model, nvtx=False, record=False, op_targets=targets,
                              cudnn_free_prefix=lead_up).install()
        flags = []
        hook = lm.model.register_forward_pre_hook(lambda m, a: flags.append(torch.backends.cuda.cudnn_sdp_enabled()))
        before = torch.backends.cuda.cudnn_sdp_enabled()
        worker.start()
        wl.generate()
        worker.stop()
        worker.remove()
        hook.remove()
        seen[lead_up] = worker.op_seen
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
    # steps: prefill 0, decode 1..5; lead-ups are decode 1 and 3 (before the last profiled step 4, not profiled)
    assert flags == [before, False, before, False, before, before]
    assert worker.cudnn_free_steps == 2
    assert seen[True] == seen[False] and len(seen[True]) == 4


def test_ncu_worker_numbers_op_calls_only_in_the_decode_steps_it_profiles(tiny_ocr2):
    """The dispatch mode that numbers op calls costs host time on every op; the ncu worker turns it off in the
    decode steps that only lead up to a profiled one (numbering restarts in each step, so they need none)."""
    import torch

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False, max_new_tokens=6), "cpu")
    worker = PhaseTracker(lm.model, nvtx=False, record=False, op_targets={("prefill", 0): {1}, ("decode", 3): {2}})
    numbered = set()
    call = worker.op_call

    def counting(func, args, kwargs):
        if worker._stack:
            numbered.add((worker._stack[-1].phase, worker._stack[-1].step))
        return call(func, args, kwargs)
    worker.op_call = counting
    worker.install()
    worker.start()
    wl.generate()
    worker.stop()
    worker.remove()
    # lead-up steps 1 and 2 unnumbered; on again after the last profiled step (the worker stops there; a generate
    # that goes on must end with the mode on, as it began, or its guards leave the dispatch state half on)
    assert {st for ph, st in numbered if ph == "decode"} == {3, 4, 5}
    assert not torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.Python)
    assert ("prefill", 0) in numbered and [(p, s) for p, s, _, _ in worker.op_seen] == [("prefill", 0), ("decode", 3)]


def test_attention_implementation_is_a_capture_parameter(tiny_ocr2):
    """`attn_implementation: eager` builds the language model with eager attention: its decode then runs
    matmul + softmax, and no SDPA op at all."""
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32", attn_implementation="eager")
    assert lm.model.config.text_config._attn_implementation == "eager"
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")
    _, events, _ = profiled(wl.generate, lm.model)
    ops = {e.name for e in events}
    assert "aten::scaled_dot_product_attention" not in ops and "aten::softmax" in ops
    default = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    assert default.model.config.text_config._attn_implementation == "sdpa"


def test_a_static_cache_with_a_compiled_decode_step_keeps_every_phase_mark(tiny_ocr2):
    """`cache_implementation: static`: generate preallocates the cache and compiles each decode step
    (on a GPU with CUDA graphs; here with dynamo's eager backend, forced on the CPU). The phase hooks run
    outside the compiled graph: every step is marked, and the step counter does not make dynamo
    recompile the decode step once per token."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    from kernelbook.capture.workload import generate_kwargs

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    params = replace(PARAMS, crop_mode=False, cache_implementation="static", max_new_tokens=6)
    wl = build_workload(lm, params, "cpu")
    assert wl.gen_kwargs["cache_implementation"] == "static" and wl.gen_kwargs["disable_compile"] is False
    assert generate_kwargs(replace(params, compile_decode=False), lm.model.config)["disable_compile"] is True
    cc = CompileConfig(backend="eager", fullgraph=False)
    cc._compile_all_devices = True  # transformers compiles the decode step on GPUs only
    wl.gen_kwargs["compile_config"] = cc
    torch._dynamo.reset()
    counters.clear()
    out, phases = phases_of(wl, lm.model)
    assert out.shape[1] == wl.inputs["input_ids"].shape[1] + 6
    assert phases == [("prefill", 0), ("vision_encode", 0)] + [("decode", i) for i in range(1, 6)]
    assert counters["stats"]["calls_captured"] > 0  # the decode step was compiled
    assert counters["stats"]["unique_graphs"] <= 6  # not one graph per token


def test_plain_generate_calls_time_each_phase(tiny_ocr2):
    """The plain (unprofiled) trials time every phase with host clocks at the hooks: each phase's
    exclusive time, decode per step, and together no more than the whole call."""
    import time

    from kernelbook.capture.torch_backend import _plain_trials

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")
    tracker = PhaseTracker(lm.model).install()
    t = time.perf_counter()
    totals, phases, steps = _plain_trials(wl, tracker, 2)
    wall = time.perf_counter() - t
    tracker.remove()
    # every step of each plain generate timed on its own: decode steps 1..N once per trial, and their sum is
    # the decode phase's exclusive time of that trial
    dec = steps[steps.phase == "decode"]
    assert sorted(dec[dec.trial == 0].step) == list(range(1, PARAMS.max_new_tokens))
    assert dec.groupby("trial").wall_ms.sum().median() == pytest.approx(
        phases["decode"]["ms_per_step"] * phases["decode"]["steps"], rel=0.5)
    assert set(phases) == {"vision_encode", "prefill", "decode"}
    assert phases["decode"]["steps"] == PARAMS.max_new_tokens - 1 and phases["prefill"]["steps"] == 1
    assert all(len(p["samples_ms_per_step"]) == 2 and p["ms_per_step"] > 0 for p in phases.values())
    per_call = sum(p["ms_per_step"] * p["steps"] for p in phases.values()) / 1e3
    assert per_call <= max(totals) and sum(totals) <= wall
    assert tracker.record and tracker.nvtx and tracker.clock is None  # the timed pass marks as before


def op_calls_with_modules(wl, trace_path):
    """One generate with the shapes pass's marks (op numbering and module ranges) under torch.profiler (CPU),
    read back from the exported trace: every numbered op call (phase, step, op_index, aten op) with the module
    whose forward launched it, found by the ingest's own search (`load.trace._assign_module`) at the call's
    start, as it is for a kernel at its launch."""
    import json

    import pandas as pd
    from torch.profiler import ProfilerActivity, profile

    from kernelbook.analyze.modules import with_module_types
    from kernelbook.contract.names import parse_module_range
    from kernelbook.load.trace import _assign_module

    tracker = PhaseTracker(wl.loaded.model, nvtx=False, op_record=True).install()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tracker.start()
        wl.generate()
        tracker.stop()
    tracker.remove()
    assert not tracker._mod_handles and not tracker._mod_stack  # the global module hooks are gone
    prof.export_chrome_trace(str(trace_path))
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("cat") == "user_annotation"]
    steps = [(e["ts"], e["ts"] + e["dur"], parse_record_name(e["name"])) for e in events
             if parse_record_name(e["name"])]
    mods = [(e["ts"], e["ts"] + e["dur"], parse_module_range(e["name"])) for e in events
            if parse_module_range(e["name"]) is not None]
    rows = []
    for e in events:
        i = parse_op_range(e["name"])
        if i is not None:
            inside = [s for s in steps if s[0] <= e["ts"] <= s[1]]
            ph, st = min(inside, key=lambda s: s[1] - s[0])[2]
            rows.append((ph, st, i, e["ts"] * 1e3))
    calls = pd.DataFrame(rows, columns=["phase", "step", "op_index", "launch_ns"])
    found = pd.Series(_assign_module(calls, mods), dtype=object).str.rsplit("|", n=1)
    calls["module"], calls["module_class"] = found.str[0], found.str[1]
    # the brute-force innermost range for each call, against which the ingest's search is checked
    calls["innermost"] = [min(((b - a, p) for a, b, p in mods if a * 1e3 <= t <= b * 1e3), default=(0, None))[1]
                          for t in calls.launch_ns]
    return with_module_types(calls)


def test_every_op_call_of_a_step_is_tied_to_the_module_that_called_it(tiny_ocr2, tmp_path):
    """Module attribution (the shapes pass): each numbered op call of the tiny DeepSeek-OCR-2 gets the innermost
    module whose forward holds it; decode calls fall in the decoder's attention, MLP, MoE, norm and lm_head
    modules by layer, and the vision encode's in the vision tower."""
    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, crop_mode=False), "cpu")
    calls = op_calls_with_modules(wl, tmp_path / "t.json")
    assert ((calls.module + "|" + calls.module_class).fillna("-") == calls.innermost.fillna("-")).all()
    dec = calls[calls.phase == "decode"]
    assert dec.module.notna().mean() > 0.9
    per_step = dec.groupby("step").module_type.agg(set)
    want = {"attention", "norm", "dense MLP", "MoE router", "MoE experts", "MoE shared experts", "lm_head",
            "embedding"}
    assert all(want <= s for s in per_step), per_step.to_dict()
    assert "other" not in set(dec.module_type)
    assert set(dec.layer.dropna()) == {0, 1}  # two decoder layers; layer 1 holds the MoE
    assert set(dec[dec.module_type == "MoE experts"].layer) == {1}
    vis = calls[calls.phase == "vision_encode"]
    assert vis.module.str.startswith(("model.vision_tower", "model.multi_modal_projector")).all()
    assert vis.layer.isna().all() and "projector" in set(vis.module_type)


@pytest.mark.parametrize("batch", [1, 3])
def test_the_routing_pass_counts_the_experts_each_decode_step_picks(tiny_ocr2, batch):
    """Issue 42: the physical limit of a batched MoE step counts each expert the batch touches once; the routing pass
    records how many its routers picked. Checked against the router module's own output in another generate of the
    same inputs: per decode call, its distinct top-k indices (the tiny model: 4 experts, top-2, one sparse layer)."""
    from kernelbook.capture.routing import routing_pass

    lm = load_model(str(tiny_ocr2), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, batch_size=batch, max_new_tokens=6), "cpu")
    rec = routing_pass(wl, batch, 6)
    (r,) = rec["routers"]
    assert (r["tokens"], r["experts"], r["k"], r["steps"]) == (batch, 4, 2, 5)
    gates = [m for n, m in lm.model.named_modules() if n.endswith("mlp.gate")]
    assert len(gates) == 1  # mlp_layer_types: dense, sparse
    seen = []
    hook = gates[0].register_forward_hook(
        lambda mod, args, out: seen.append(int(torch.unique(out[2]).numel())) if out[2].shape[0] == batch else None)
    try:
        replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": 6, "min_new_tokens": 6}).generate()
    finally:
        hook.remove()
    assert r["calls"] == len(seen) == 5
    assert r["distinct_mean"] == pytest.approx(sum(seen) / len(seen))
    assert (r["distinct_min"], r["distinct_max"]) == (min(seen), max(seen))
    assert 2 <= r["distinct_min"] <= r["distinct_max"] <= r["bound"] == min(2 * batch, 4)
    if batch == 1:
        assert r["distinct_mean"] == 2  # one token picks k experts


def test_a_dense_model_has_no_routing_record(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from kernelbook.capture.routing import routing_pass

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, vocab_size=100, bos_token_id=0, eos_token_id=1)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "tiny-llama")
    lm = load_model(str(tmp_path / "tiny-llama"), "pretrained", "cpu", "float32")
    wl = build_workload(lm, replace(PARAMS, max_new_tokens=4, prompt_tokens=8), "cpu")
    assert routing_pass(wl, 1, 4) is None


def test_the_routing_record_counts_the_experts_of_the_whole_batch():
    """The recorder counts, per router call, the distinct experts over all the batch's tokens (not per token, not the
    first row): three tokens picking {0, 1}, {1, 2}, {0, 3} of 4 experts touch all 4."""
    from kernelbook.capture.routing import summarize, topk_recorder

    scores = torch.tensor([[0.9, 0.8, 0.1, 0.0], [0.1, 0.9, 0.8, 0.0], [0.8, 0.0, 0.1, 0.9]])
    with topk_recorder(3) as calls:
        torch.topk(scores, k=2, dim=-1, sorted=False)
        torch.topk(scores[:, :2], k=1, dim=-1)  # [3, 2], k=1: another shape, kept apart
        torch.topk(scores[:2], k=2, dim=-1)  # 2 rows: not this batch's router
    (two, four) = summarize(calls, 1)
    assert (four["experts"], four["k"], four["distinct_mean"], four["bound"]) == (4, 2, 4, 4)
    assert (two["experts"], two["k"], two["distinct_mean"], two["calls"]) == (2, 1, 2, 1)


def test_a_routing_pass_that_fails_is_recorded_and_the_capture_goes_on(monkeypatch):
    """The routing pass adds to a run: where it fails (a model whose generate refuses an eager decode, say), the
    timeline keeps its error and the run reads as one without a record (the limit takes the bound)."""
    from kernelbook.capture import routing, torch_backend
    from kernelbook.contract.manifest import MoeRouting

    def refuse(*a, **k):
        raise ValueError("generate() got an unexpected keyword argument 'disable_compile'")

    monkeypatch.setattr(routing, "routing_pass", refuse)
    said = []
    got = torch_backend._routing(None, PARAMS, said.append)
    assert got == {"error": "ValueError: generate() got an unexpected keyword argument 'disable_compile'"}
    assert any("routing pass failed" in s for s in said)
    assert MoeRouting.read(got) is None


def test_a_chained_study_keeps_its_model_between_points(tiny_ocr2, monkeypatch):
    """`capture.models.KEEP_MODEL` (a study's points chained in one process): the same model asked for again is the
    one built before; another model replaces it (one at a time); without it, each call builds its own."""
    from kernelbook.capture import models

    monkeypatch.setattr(models, "_kept", {})
    args = (str(tiny_ocr2), "random", "cpu", "float32")
    assert models.load_model(*args).model is not models.load_model(*args).model
    monkeypatch.setattr(models, "KEEP_MODEL", True)
    first = models.load_model(*args)
    assert models.load_model(*args) is first
    other = models.load_model(str(tiny_ocr2), "random", "cpu", "bfloat16")
    assert other is not first and list(models._kept.values()) == [other]
