"""Speed work leaves the book's numbers as they were: every numeric column of every table the chapters
show for the bundled run, recomputed by the current code, against the numbers the code gave before the
speed changes (tests/fixtures/bundled_numbers.json, written by bench/book_numbers.py on commit 4686b81:
the explorer with a card per profiled kernel, before any speed change; rewritten in session 12 when the graph
runs' decode selection took its 20th kernel in place of the driver's copy-node kernel, which moved chapter 06's
as-deployed decode row: scaled time 6.54 → 5.99 %, predicted wall 1.9349 → 1.9347 ms; rewritten in session 14 when
the static-graphs variant was re-captured beside its own baseline (chapters 06 and 07's variant and as-deployed rows),
the what-if took the device chapters 04 and 05 use (ncu's measured DRAM peak, 3337 against 3350 GB/s), the bytes
ledger took ncu's bytes only for launches of the profiled launch's shapes and no floor under 1 MB of must-move
bytes, chapter 07's metric comparison took units (duration in µs), and chapter 01's growth table kept only kernels
that grew by 5 % or more (none in the bundled 64-token run); rewritten when table cells became named quantities
(issue 41): chapter 06's replay table took the decode GPU-busy time every other chapter prints, the union of the
launches' intervals, for the sum of their durations, 2.26931 → 2.26928 ms on the eager run); rewritten in session 20
when chapter 07 opened with the first page (two tables before its others: the ordinals moved, no number), chapter 01's
appendix became one table per phase, and the what-if's batch lever read a MoE's gathered experts once per token's choice
as the run does (issue 42: the deployed step's batch-8 lever −75.3 → −69.9 % per token; the study measured −64 %); rewritten in session 22 when a launch whose work is unknown (bytes derived from its
time) kept its measured time at any batch and the deployed run's batch lever took the host time between replays the
serving study measured (issue 42: that lever −69.9 → −70.8 % per token, its device time 4.66 → 4.07 ms a step against
the study's 4.88 ms; the eager batch-8 variant's prefill gain error +16.7 → +18.7 %); rewritten in session 23 when the
serving study was re-captured with the routing pass (one H100 lease, its points chained in one process) and the batch
lever's host growth was read on the study's steady step, each generate's first decode step left out (issue 42: that
lever −70.8 → −70.3 % per token; the study's steady steps −62.8 % from batch 1 to 8); rewritten in session 26 when
chapter 01's phase table split its "Kernel time", which had summed the copies' and memsets' durations too, into the
kernels' time and a column of its own for copies and memsets (kernel time, vision encode 50.99 → 50.80 ms, prefill
9.50 → 9.01, decode 142.79 → 142.64, other 7.31 → 6.45; the copies 0.19, 0.49, 0.15, 0.86 ms); rewritten in session 27
when chapter 07 showed the run as deployed's own decode kernel time by category (a table more: the ordinals after it
moved) and cuDNN's convolutions were named apart from cuBLAS's GEMMs (the SIMT `implicit_convolve_sgemm` and the
tensor-core `xmma_fprop_implicit_gemm` kernels had shared the family 'cuBLAS GEMM (BF16)' under
aten::cudnn_convolution: that row of the family match 1275.76 → 1161.58 µs per step, the SIMT convolution alone).

A change that means to change a figure rewrites the fixture (`python bench/book_numbers.py`) in the same
commit, so the diff shows which numbers moved."""
import json
import math
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))


def _key(r):
    return r["chapter"], r["table"], r["column"]


def test_bundled_run_numbers_unchanged(monkeypatch):
    from book_numbers import book_numbers

    monkeypatch.chdir(REPO)
    want = {_key(r): r for r in json.loads((REPO / "tests/fixtures/bundled_numbers.json").read_text())}
    got = {_key(r): r for r in book_numbers("data/runs/h100-deepseek-ocr-2")}
    assert sorted(got) == sorted(want), "tables or columns differ: " + str(sorted(set(got) ^ set(want))[:5])
    moved = []
    for k, w in want.items():
        a, b = w["values"], got[k]["values"]
        same = len(a) == len(b) and all(
            (x is None and y is None) or (isinstance(x, str) and x == y)
            or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12))
            for x, y in zip(a, b))
        if not same:
            moved.append(f"{k} {w['caption'][:60]!r}: {a[:4]} -> {b[:4]}")
    assert not moved, f"{len(moved)} of {len(want)} numeric columns moved:\n" + "\n".join(moved[:10])
