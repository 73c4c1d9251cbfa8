"""Issue 27: does kernelbook's capture make host memory grow per decode step? On the CPU, the tiny DeepSeek-OCR-2
of tests/test_capture_cpu.py, one configuration per process: the capture's own profiled pass (timeline or shapes,
sampled windows of 4 steps at the start and the end), its plain trial, the phase hooks alone, a bare generate
(the control), and the profiled pass with sampling off (the check that the method sees a per-step leak).
Prints one JSON line: RSS and peak RSS before and after the measured call.

Usage: python bench/host_rss_cpu.py bare|tracked|plain|timeline|shapes|full N     (N = max_new_tokens)
Session 11 (this 2-core CPU, N = 64 / 256 / 512 / 1024): every sampled mode flat, like the control (<= 0.003 MB per
token); sampling off 1.31 MB per token. The H100's 2.8 / 3.7 / 5.0 GB at 256 / 1024 / 2048 tokens is then not the
capture's own state; bench/host_rss_gpu.py is the GPU control (cuDNN attention on / off), not yet run.
"""
import gc
import json
import resource
import sys
import tempfile
import time

from _common import ROOT

sys.path.insert(0, str(ROOT / "tests"))
import torch
torch.set_num_threads(1)
from pathlib import Path
from kernelbook.capture.models import build_random, deepseek_ocr2_config, load_model
from kernelbook.capture.workload import build_workload
from kernelbook.capture.phases import PhaseTracker
from kernelbook.capture.torch_backend import _profiled_pass, _plain_trials
from kernelbook.contract.sampling import plan
from dataclasses import replace
from test_capture_cpu import PARAMS, TINY_OCR2

mode, n = sys.argv[1], int(sys.argv[2])
win, every = 4, 100000
base = Path(tempfile.gettempdir()) / "kb-host-rss"
tmp = base / f"run-{mode}-{n}"
(tmp / "raw").mkdir(parents=True, exist_ok=True)
ckpt = base / "tiny"
if not ckpt.exists():
    build_random(deepseek_ocr2_config(**TINY_OCR2), "cpu", torch.float32).save_pretrained(ckpt)
lm = load_model(str(ckpt), "pretrained", "cpu", "float32")
wl = build_workload(lm, replace(PARAMS, crop_mode=False, max_new_tokens=n), "cpu")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
tracker = PhaseTracker(lm.model, nvtx=False).install()
# warmup: short generate with the same path, so one-time allocations are out of the way
from dataclasses import replace
w = replace(wl, gen_kwargs={**wl.gen_kwargs, "max_new_tokens": 8, "min_new_tokens": 8})
tracker.start(); w.generate(); tracker.stop()
s = plan(n, win, every)
if mode in ("shapes", "timeline"):  # one warm pass of the profiler at tiny length, too
    s8 = plan(8, 2, 100)
    tracker.op_record = mode == "shapes"
    _profiled_pass(w, tracker, mode == "shapes", tmp / "raw" / "warm", s8)
gc.collect()
r0, p0 = rss(), peak()
t = time.perf_counter()
if mode == "bare":
    wl.generate()
elif mode == "tracked":  # phase hooks on, no clock
    tracker.start(); wl.generate(); tracker.stop()
elif mode == "plain":
    _plain_trials(wl, tracker, 1)
elif mode == "timeline":
    tracker.op_record = False
    _profiled_pass(wl, tracker, False, tmp / "raw" / "trace", s)
elif mode == "shapes":
    tracker.op_record = True
    _profiled_pass(wl, tracker, True, tmp / "raw" / "trace-shapes", s)
elif mode == "full":  # profiler with schedule, every step recorded? no: sampling off
    _profiled_pass(wl, tracker, False, tmp / "raw" / "trace", None)
dt = time.perf_counter() - t
r1, p1 = rss(), peak()
print(json.dumps(dict(mode=mode, n=n, s=round(dt,1), rss0=round(r0,1), rss1=round(r1,1), drss=round(r1-r0,1), peak0=round(p0,1), peak1=round(p1,1), dpeak=round(p1-p0,1), windows=s.windows)))
