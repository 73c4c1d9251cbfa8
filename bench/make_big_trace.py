"""A trace 10× the bundled one, made from the real capture, for bench/ingest.py.

What it is: the bundled run's raw/trace.json.gz (torch.profiler/Kineto, DeepSeek-OCR-2 on an H100, one generate
of 64 tokens: prefill with vision encode, 63 decode steps; 424 k events) played `--copies` times (10) back to
back, as ten generates in one profiled session would be. Copy k is the original's event text, byte for byte in
Kineto's layout, with:
- every ts shifted by k × (the original's span + 1 ms), so copy k starts after copy k-1 ends (exact: ts are
  µs with three decimals, shifted as integer ns);
- External id, correlation, flow id (a flow's id is its launch's correlation) and Ev Idx offset by k × (the
  largest + 1), so each stays unique and every kernel still meets its launch and its aten op;
- phase ranges (`kb::<phase>#<step>`, CPU and GPU side) renumbered so (phase, step) stays unique: decode steps
  1-63 of copy k become 63k+1 ... 63k+63, prefill and vision encode #0 become #k.
Metadata events (process and thread names) are written once. The header and footer are the original's.
Output: gzipped (as the capture writes it), default bench/out/trace-10x.json.gz (bench/out is not committed).

Usage: python bench/make_big_trace.py [--copies 10] [--src trace.json.gz] [--out path]
"""
from __future__ import annotations

import argparse
import gzip
import re
import time
from pathlib import Path

from _common import OUT, ROOT

SRC = ROOT / "data/runs/h100-deepseek-ocr-2/raw/trace.json.gz"
TS = re.compile(rb'"ts": (\d+)\.(\d{3})(?=[,\n])')
IDS = re.compile(rb'"(External id|correlation|id|Ev Idx)": (\d+)')
PHASE = re.compile(rb'"name": "kb::(\w+)#(\d+)"')


def split(text: bytes) -> tuple[bytes, list[bytes], bytes]:
    """Kineto's JSON as (header, events' text, footer)."""
    start = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = text.rindex(b"\n  }\n  ]") + len(b"\n  }")
    events = text[start:end].split(b",\n  {\n")
    events[0] = events[0].removeprefix(b"\n  {\n")
    return text[:start], events, text[end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--src", type=Path, default=SRC)
    ap.add_argument("--out", type=Path, default=OUT / "trace-10x.json.gz")
    args = ap.parse_args()
    t0 = time.perf_counter()
    header, events, footer = split(gzip.decompress(args.src.read_bytes()))
    meta = [e for e in events if b'"ph": "M"' in e]
    body = b",\n  {\n".join(e for e in events if b'"ph": "M"' not in e)
    ts = [int(a + b) for a, b in TS.findall(body)]
    assert len(ts) == body.count(b'"ts": '), "a ts not written as µs with three decimals"
    durs = [int(a + b) for a, b in re.findall(rb'"dur": (\d+)\.(\d{3})', body)]
    span_ns = max(ts) + max(durs) - min(ts) + 1_000_000  # ≥ the original's span, then 1 ms apart
    top = {}
    for key, value in IDS.findall(body):
        top[key] = max(top.get(key, 0), int(value))
    steps = {}
    for phase, step in PHASE.findall(body):
        lo, hi = steps.get(phase, (int(step), int(step)))
        steps[phase] = (min(lo, int(step)), max(hi, int(step)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wb", compresslevel=6) as f:
        f.write(header + b"\n  {\n")
        for k in range(args.copies):
            if k:
                f.write(b",\n  {\n")
            if k == 0:
                f.write(body)
                continue

            def ts_shift(m, k=k):
                v = int(m.group(1) + m.group(2)) + k * span_ns
                return b'"ts": %d.%03d' % (v // 1000, v % 1000)

            def id_shift(m, k=k):
                key = m.group(1)
                return b'"%s": %d' % (key, int(m.group(2)) + k * (top[key if key != b"id" else b"correlation"] + 1))

            def phase_shift(m, k=k):
                lo, hi = steps[m.group(1)]
                return b'"name": "kb::%s#%d"' % (m.group(1), int(m.group(2)) + k * (hi - lo + 1))

            f.write(PHASE.sub(phase_shift, IDS.sub(id_shift, TS.sub(ts_shift, body))))
            print(f"  copy {k + 1}/{args.copies} written ({time.perf_counter() - t0:.0f} s)", flush=True)
        f.write(b",\n  {\n" + b",\n  {\n".join(meta) + footer)
    print(f"{args.out}: {args.out.stat().st_size / 2**20:.0f} MiB gzipped, {args.copies} copies of "
          f"{args.src.name} ({len(events) - len(meta)} events each + {len(meta)} metadata), "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
