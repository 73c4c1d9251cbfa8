"""The capture chapters side by side (runner: more than one capture chapter; capture.chapters PIPELINE): each
part waits until the part before it is in the run, and the CLI's lines stay readable when two chapters print.
The capture itself needs a GPU (measured on the H100: bench/gpu_book_pair.sh); here the waiting and the lines."""
import json
import threading
import time

import pytest

from kernelbook.capture.chapters import part_done, wait_for
from kernelbook.capture.common import CaptureError
from kernelbook.runner import _ChapterLines


def _manifest(run, timings):
    (run / "manifest.json").write_text(json.dumps({"timings_s": timings}))


def test_a_part_waits_until_the_part_before_it_is_written(tmp_path):
    run, ipc = tmp_path / "run", tmp_path / "ipc"
    run.mkdir(), ipc.mkdir()
    _manifest(run, {})
    order = []

    def chapter_00():
        time.sleep(0.3)
        order.append("setup written")
        _manifest(run, {"measure_peaks": 0.3})

    t = threading.Thread(target=chapter_00)
    t.start()
    wait_for(lambda: part_done(run, "setup"), ipc / "00_setup.ended", "no setup part")
    order.append("timeline starts")
    t.join()
    assert order == ["setup written", "timeline starts"]


def test_a_part_whose_chapter_ended_without_it_stops_the_next_one(tmp_path):
    from kernelbook.capture.chapters import SKIPPED, await_prior

    run, ipc = tmp_path / "run", tmp_path / "ipc"
    run.mkdir(), ipc.mkdir()
    _manifest(run, {"measure_peaks": 0.3})
    (run / "timeline.parquet").touch()  # a timeline stage stopped in its shapes pass lands what it holds
    (ipc / "01_timeline.ended").touch()  # and its chapter failed: no timeline time in the manifest
    with pytest.raises(CaptureError, match="the timeline part was not captured"):
        await_prior(run, "ncu", ipc)
    # a chapter that does not capture in this rendering: nothing to wait for (the part goes on as it would alone)
    (ipc / "01_timeline.ended").write_text(SKIPPED)
    await_prior(run, "ncu", ipc)


def test_the_timed_passes_wait_for_chapter_00_to_end(tmp_path):
    """quiet(): the timeline's plain generates start only once chapter 00 (rendering beside it) has ended."""
    ended = tmp_path / "00_setup.ended"
    order = []

    def chapter_00_renders():
        time.sleep(0.3)
        order.append("00 ended")
        ended.touch()

    t = threading.Thread(target=chapter_00_renders)
    t.start()
    wait_for(lambda: False, ended, None)
    order.append("plain generates")
    t.join()
    assert order == ["00 ended", "plain generates"]


@pytest.fixture
def lines_state():
    _ChapterLines._last, _ChapterLines._open = None, False
    yield
    _ChapterLines._last, _ChapterLines._open = None, False


def test_one_chapter_prints_as_before(capsys, lines_state):
    a = _ChapterLines("[1/8] 00_setup")
    a.start()
    a.end("ok (1.0 s)")
    b = _ChapterLines("[2/8] 01_timeline")
    b.start()
    b.progress("[   3.9 s] timeline: start")
    b.end("ok (70.6 s)")
    assert capsys.readouterr().out == ("[1/8] 00_setup ... ok (1.0 s)\n[2/8] 01_timeline ...\n"
                                       "    [   3.9 s] timeline: start\n[2/8] 01_timeline ok (70.6 s)\n")


def test_chapters_side_by_side_name_themselves_when_their_lines_interleave(capsys, lines_state):
    a, b = _ChapterLines("[1/8] 00_setup", lazy=True), _ChapterLines("[2/8] 01_timeline", lazy=True)
    a.start(), b.start()  # lazy: nothing yet (01 waits for the setup part)
    a.progress("[   9.2 s] setup: start")
    a.progress("[   9.5 s] setup: done in 0.3 s")
    b.progress("[   3.9 s] timeline: start")
    a.end("ok (21.8 s)")
    b.progress("[  59.3 s] timeline: done in 55.4 s")
    _ChapterLines.say("[5/8] 04_roofline ... ok (7.0 s)")
    b.end("ok (70.6 s)")
    assert capsys.readouterr().out == (
        "[1/8] 00_setup ...\n    [   9.2 s] setup: start\n    [   9.5 s] setup: done in 0.3 s\n"
        "[2/8] 01_timeline ...\n    [   3.9 s] timeline: start\n"
        "[1/8] 00_setup ok (21.8 s)\n"
        "[2/8] 01_timeline ...\n    [  59.3 s] timeline: done in 55.4 s\n"
        "[5/8] 04_roofline ... ok (7.0 s)\n"
        "[2/8] 01_timeline ok (70.6 s)\n")


def test_an_ncu_started_before_its_targets_reports_its_launches_once_waited_for(tmp_path):
    """The ncu stage may start ncu early (its worker builds the model beside the timeline's shapes pass) and
    wait for it later: the launches it profiles after that are counted against the expected number."""
    import sys

    from kernelbook.capture.ncu import NcuProcess, finish_ncu

    cmd = [sys.executable, "-c", "import time; time.sleep(0.5); print('==PROF== Profiling \"a\" - 0: 0%'); "
           "print('==PROF== Profiling \"b\" - 1: 0%')"]
    run = NcuProcess(cmd)
    seen = []
    finish_ncu(run, tmp_path / "ncu.log", 60, expected=2,
               progress=lambda done, expected, s: seen.append((done, expected)))
    assert seen == [(1, 2), (2, 2)]
    assert (tmp_path / "ncu.log").read_text().count("==PROF== Profiling") == 2


def test_an_early_ncu_is_only_for_one_worker_by_op_call(tmp_path):
    """Graph steps (static cache), tensor parallelism and a capture without ncu profile otherwise: nothing starts."""
    from kernelbook import params as P
    from kernelbook.capture.ncu_stage import early_ncu

    from dataclasses import replace

    from kernelbook.contract.config import CaptureConfig

    base = CaptureConfig.of(P.load(None, {}, consumer="capture"))
    for change in ({"cache_implementation": "static"}, {"ncu_top_n": 0}, {"tensor_parallel": 2}):
        assert early_ncu(replace(base, **change), tmp_path, tmp_path / "gate") is None
    assert not (tmp_path / "ncu").exists()


def test_chapter_02_says_when_the_ncu_worker_started_early():
    from kernelbook.analyze.provenance import _worker
    from kernelbook.i18n import in_language
    from kernelbook.narrate import say

    w = {"started_early": True, "warmup_generates": 1, "warmup_tokens": 1, "max_new_tokens": 33,
         "cudnn_free_decode_steps": 31}
    assert _worker(w).endswith("started once the timeline's timed passes were over, its model built beside the "
                               "shapes pass")
    assert "started once" not in _worker({**w, "started_early": False})
    with in_language("zh"):
        assert "形状采集轮" in say(_worker(w)) and "started" not in say(_worker(w))
