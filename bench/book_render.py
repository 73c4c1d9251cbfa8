"""Wall time of the whole book render on the bundled run, per chapter (CPU machine).

Usage: python bench/book_render.py  → prints per-chapter seconds and the total; target ≤ 20 s on 2 cores (issue 30).
"""
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts lib/ on sys.path)
from kernelbook import params as P  # noqa: E402
from kernelbook.runner import render_book  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    t = time.perf_counter()
    out = render_book(P.validate({}, consumer="book"), Path(tmp) / "report", log=lambda *_: None)
    total = time.perf_counter() - t
    rows = json.loads((out / "timings.json").read_text())
for r in rows:
    print(f"{r['stem']:16s} {r['seconds']:6.1f} s")
print(f"{'total':16s} {total:6.1f} s (target ≤ 20 s)")
