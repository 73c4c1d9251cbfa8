"""Long generations in bounded memory (contract.sampling): which decode steps the profiler records, the
parameter checks on the windows, the agreement check, and a sampled timeline pass on a tiny checkpoint."""
import json
import subprocess
import sys

import pytest

from kernelbook.analyze.steps import agreement
from kernelbook.contract.sampling import plan, sample_problems
from kernelbook.params import ParamError, validate


def test_windows_start_at_the_first_step_repeat_and_end_at_the_last():
    s = plan(2048, 8, 256)  # 2047 decode steps
    assert s.windows[0] == (1, 8) and s.windows[1] == (257, 264)
    assert s.windows[-1] == (2040, 2047)  # the last window ends at the last decode step
    assert len(s.windows) == 9  # 1, 257, …, 1793, then the last
    assert s.steps == {0} | {st for a, b in s.windows for st in range(a, b + 1)}
    assert len(s.steps) - 1 == 9 * 8
    starts = [a for a, _ in s.windows]
    assert all(b < a2 for (_, b), a2 in zip(s.windows, starts[1:]))  # no overlap


def test_a_last_window_that_would_overlap_joins_the_one_before():
    s = plan(21, 4, 8)  # 20 decode steps: windows at 1 and 9; the last, 17..20, fits after 9..12
    assert s.windows == ((1, 4), (9, 12), (17, 20))
    s = plan(19, 4, 8)  # 18 decode steps: 17..18 would cut 15..18, which overlaps nothing: 9..12, then 15..18
    assert s.windows == ((1, 4), (9, 12), (15, 18))
    s = plan(14, 4, 8)  # 13 decode steps: 9..12 then 10..13 overlaps it, so the window before runs to 13
    assert s.windows == ((1, 4), (9, 13))


def test_sampling_off_profiles_every_step():
    assert plan(64, 0, 256) is None


def test_the_profiler_schedule_records_windows_and_hands_each_over_at_its_end():
    torch = pytest.importorskip("torch")
    A = torch.profiler.ProfilerAction
    s = plan(30, 3, 10)  # 29 decode steps: 1-3, 11-13, 21-23, 27-29
    assert [s.action(i) for i in range(0, 5)] == [A.RECORD, A.RECORD, A.RECORD, A.RECORD_AND_SAVE, A.NONE]
    assert s.action(10) == A.NONE and s.action(11) == A.RECORD and s.action(13) == A.RECORD_AND_SAVE
    assert s.action(29) == A.RECORD_AND_SAVE


@pytest.mark.parametrize("values, key", [
    ({"max_new_tokens": 64, "sample_window": 80}, "sample_window: 80 steps run past"),
    ({"max_new_tokens": 64, "sample_window": 8, "sample_every": 4}, "sample_every: 4 is shorter"),
    ({"max_new_tokens": 1, "sample_window": 1}, "sample_window: 1 asks for decode windows"),
    ({"sample_every": 0}, "sample_every: 0 is below the minimum"),
    ({"sample_window": -1}, "sample_window: -1 is below the minimum"),
])
def test_bad_sampling_parameters_name_the_key(values, key):
    with pytest.raises(ParamError) as e:
        validate({**values, "capture": "never"}, consumer="capture")
    assert key in str(e.value)


def test_bad_sampling_parameters_exit_2_from_the_cli(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("max_new_tokens: 64\nsample_window: 100\n")
    r = subprocess.run([sys.executable, "-m", "kernelbook", "capture", "--params", str(p), "--out",
                        str(tmp_path / "run")], capture_output=True, text=True)
    assert r.returncode == 2 and "sample_window: 100 steps run past" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr and not (tmp_path / "run").exists()


def test_the_agreement_check_sets_the_windows_estimate_against_the_plain_total():
    plain = {s: 10.0 + (s % 2) for s in range(1, 101)}  # alternating 10 and 11 ms
    a = agreement(plain, [1, 2, 3, 4])
    assert a["plain_total_ms"] == pytest.approx(1050.0)
    assert a["sampled_estimate_ms"] == pytest.approx(10.5 * 100)
    assert a["error_pct"] == pytest.approx(0.0)
    b = agreement(plain, [1, 3])  # only the 11 ms steps
    assert b["error_pct"] == pytest.approx(100 * (1100 - 1050) / 1050)


def tiny_workload(tmp_path, max_new_tokens: int):
    """A tiny DeepSeek-OCR-2 checkpoint saved and loaded on the CPU, and its workload: (loaded model, workload)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kernelbook.capture.models import build_random, deepseek_ocr2_config, load_model
    from kernelbook.capture.workload import build_workload
    from dataclasses import replace

    from test_capture_cpu import PARAMS, TINY_OCR2

    ckpt = tmp_path / "tiny"
    build_random(deepseek_ocr2_config(**TINY_OCR2), "cpu", torch.float32).save_pretrained(ckpt)
    lm = load_model(str(ckpt), "pretrained", "cpu", "float32")
    return lm, build_workload(lm, replace(PARAMS, crop_mode=False, max_new_tokens=max_new_tokens), "cpu")


def test_a_sampled_timeline_pass_records_only_the_windows(tmp_path):
    """The profiled pass of a long generation on a tiny DeepSeek-OCR-2 (CPU): the trace holds the vision
    encode, the prefill and exactly the windows' decode steps, each window read as it ended and its raw
    trace deleted; op calls are numbered in the recorded steps only."""
    from kernelbook.capture.phases import PhaseTracker
    from kernelbook.capture.torch_backend import _profiled_pass

    lm, wl = tiny_workload(tmp_path, 12)
    sampling = plan(12, 2, 5)  # 11 decode steps: 1-2, 6-7, 10-11
    assert sampling.windows == ((1, 2), (6, 7), (10, 11))
    tracker = PhaseTracker(lm.model, nvtx=False, op_record=True).install()
    (tmp_path / "raw").mkdir()
    said = []
    timeline, phases, gen_s, _, _ = _profiled_pass(wl, tracker, True, tmp_path / "raw" / "trace", sampling,
                                                    said.append)
    tracker.remove()
    assert gen_s > 0 and len([m for m in said if "window" in m]) == 3
    recorded = set(zip(phases.phase, phases.step))
    assert {st for ph, st in recorded if ph == "decode"} == {1, 2, 6, 7, 10, 11}
    assert ("prefill", 0) in recorded and ("vision_encode", 0) in recorded
    assert list((tmp_path / "raw").iterdir()) == []  # each window's trace read, then deleted
    assert tracker.prof is None and tracker.sample_steps is None


def test_op_calls_are_numbered_only_in_the_recorded_steps(tmp_path):
    """The shapes pass of a sampled generation numbers op calls (kbop# ranges) in the vision encode, the prefill
    and the windows only; between windows the dispatch mode is off (it costs host time on every op)."""
    from kernelbook.capture.phases import PhaseTracker
    from kernelbook.contract.names import parse_op_range, parse_record_name

    lm, wl = tiny_workload(tmp_path, 8)
    sampling = plan(8, 2, 4)  # 7 decode steps: 1-2, 5-6, then 6-7 joins: (1,2), (5,7)
    tracker = PhaseTracker(lm.model, nvtx=False, op_record=True).install()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:  # every step recorded: where were ops numbered?
        tracker.prof, tracker.sample_steps = type("P", (), {"step": lambda self: None})(), sampling.steps
        tracker.start()
        wl.generate()
        tracker.stop()
    tracker.remove()
    ev = prof.events()
    ranges = [(e.time_range.start, e.time_range.end, parse_record_name(e.name)) for e in ev if e.name.startswith("kb::")]
    numbered = set()
    for e in ev:
        if parse_op_range(e.name) is not None:
            inside = [r for r in ranges if r[0] <= e.time_range.start <= r[1]]
            numbered.add(min(inside, key=lambda r: r[1] - r[0])[2] if inside else None)
    steps = {st for ph, st in numbered if ph == "decode"}
    assert steps == {st for st in sampling.steps if st > 0} == {1, 2, 5, 6, 7}
    assert ("prefill", 0) in numbered and not tracker._mode_on


def test_a_generation_stopped_mid_way_keeps_the_windows_it_read(tmp_path):
    """A capture stopped (SIGTERM → CaptureStopped) during a long generate: the windows already read land as
    the run's timeline, so the partial run holds them (capture.torch_backend._profiled_pass)."""
    import pandas as pd

    from kernelbook.capture.phases import PhaseTracker
    from kernelbook.capture.common import CaptureStopped
    from kernelbook.capture.torch_backend import _profiled_pass

    lm, wl = tiny_workload(tmp_path, 12)
    sampling = plan(12, 2, 5)  # windows 1-2, 6-7, 10-11
    tracker = PhaseTracker(lm.model, nvtx=False).install()
    seen = []

    def stop_at_step_8(module, args):  # the signal arrives while step 8 runs, between the second and third window
        seen.append(1)
        if len(seen) == 9:
            raise CaptureStopped("stopped by signal SIGTERM")

    h = lm.model.register_forward_pre_hook(stop_at_step_8)
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    with pytest.raises(CaptureStopped):
        _profiled_pass(wl, tracker, False, run / "raw" / "trace", sampling)
    h.remove()
    tracker.remove()
    phases = pd.read_parquet(run / "phases.parquet")
    assert sorted(phases[phases.phase == "decode"].step.unique()) == [1, 2, 6, 7]
    assert (run / "timeline.parquet").exists()


def test_nsys_records_a_sampled_generation_window_by_window(tmp_path, monkeypatch):
    """The nsys worker over a long generation on a tiny DeepSeek-OCR-2 (CPU): the profiler (nsys's capture range,
    `--capture-range-end=repeat`) stops where a window ends, the GPU synchronized first so the window's last step is
    in its report, and starts where the next window begins; nsys writes one report per run of recorded steps."""
    import torch

    from kernelbook.capture.nsys import window_starts
    from kernelbook.capture.phases import PhaseTracker

    lm, wl = tiny_workload(tmp_path, 12)
    sampling = plan(12, 2, 5)  # windows 1-2, 6-7, 10-11; step 0 (vision encode, prefill) runs into the first
    tracker = PhaseTracker(lm.model, nvtx=False).install()
    said = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: said.append(("start", tracker.calls)))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: said.append(("stop", tracker.calls)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: said.append(("sync", tracker.calls)))
    tracker.capture_steps, tracker.capturing = sampling.steps, True  # the worker starts the profiler before generate
    tracker.start()
    wl.generate()
    tracker.stop()
    tracker.remove()
    assert said == [("sync", 3), ("stop", 3), ("start", 6), ("sync", 8), ("stop", 8), ("start", 10)]
    assert tracker.capturing  # the last window runs to the generate's end: the worker stops the profiler there
    assert window_starts(sampling.steps) == [0, 6, 10]  # one report each, in this order
