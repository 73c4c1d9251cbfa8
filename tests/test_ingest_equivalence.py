"""The trace ingest gives the committed tables of the bundled run, exactly: speed work on the ingest
(load.trace) cannot change a number."""
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import RUN
from kernelbook.load import trace
from kernelbook.load.trace import _KinetoReader, ingest_events, ingest_torch_trace, read_trace_events

# timeline.parquet's columns that come from the timed pass's trace; op_shapes, op_index and the modules are
# joined from the shapes pass (load.trace.join_shapes), whose trace the run does not keep, and the identity
# columns (short_name, category, ...) are added by contract.kernels.annotate when the run is written
FROM_TRACE = ["name", "kind", "start_ns", "duration_ns", "launch_ns", "grid", "block", "registers", "shared_bytes",
              "stream", "op", "graph", "end_ns", "phase", "step"]


def test_bundled_trace_ingests_to_the_committed_tables():
    timeline, phases = ingest_torch_trace(RUN / "raw" / "trace.json.gz")
    pd.testing.assert_frame_equal(phases, pd.read_parquet(RUN / "phases.parquet"))
    assert list(timeline.columns) == FROM_TRACE[:11] + ["op_shapes"] + FROM_TRACE[11:] + ["op_index"]
    pd.testing.assert_frame_equal(timeline[FROM_TRACE], pd.read_parquet(RUN / "timeline.parquet")[FROM_TRACE])
    # the timed pass records neither shapes nor op calls (it runs without record_shapes and op numbering)
    assert timeline.op_shapes.dtype == object and timeline.op_shapes.isna().all()
    assert (timeline.op_index == -1).all()


# The column-wise reader of Kineto's layout (load.trace._KinetoReader) against the JSON reader (one dict per
# event, load.trace.ingest_events), on real events: decode steps 1-3 of the bundled trace, as Kineto wrote them,
# edited in place to hold what the timed pass's trace lacks (a shapes pass's Input Dims and op / module ranges,
# CUDA-graph launches) and what the reader must get right (escaped names, absent keys, an id twice).


def _split_events(text: bytes) -> tuple[bytes, list[bytes], bytes]:
    """Kineto's JSON as (header, events' text, footer): each event from its `  {` line to its closing `  }`."""
    start = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = text.rindex(b"\n  }\n  ]") + len(b"\n  }")
    return text[:start], text[start:end].split(b",\n  {\n"), text[end:]


def _join_events(header: bytes, events: list[bytes], footer: bytes) -> bytes:
    return header + b",\n  {\n".join(events) + footer


def _ts(event: bytes) -> float:
    return float(re.search(rb'"ts": (-?[\d.]+)', event).group(1))


def _annotation(name: str, ts: float, dur: float) -> bytes:
    """A user range as Kineto writes one (record_function)."""
    return (f'    "ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 3338, "tid": 3338,\n'
            f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      "External id": 0,"Record function id": 0, '
            f'"Ev Idx": 0\n    }}\n  }}').encode()


@pytest.fixture(scope="module")
def decode_window(tmp_path_factory) -> Path:
    """Decode steps 1-3 of the bundled trace with a shapes pass's marks, in Kineto's layout (plain JSON)."""
    text = gzip.decompress((RUN / "raw" / "trace.json.gz").read_bytes())
    header, events, footer = _split_events(text)
    phases = pd.read_parquet(RUN / "phases.parquet")
    steps = phases[(phases.phase == "decode") & phases.step.between(1, 3)]
    lo, hi = steps.start_ns.min() / 1e3, steps.end_ns.max() / 1e3
    first = events[0]  # the header's opening `  {` stays with the first event
    kept = [e for e in events[1:] if b'"ph": "M"' in e or lo <= _ts(e) <= hi]
    out, n_op, launches = [], 0, 0
    for e in kept:
        if b'"cat": "cpu_op"' in e:
            ext = int(re.search(rb'"External id": (\d+)', e).group(1))
            if ext % 4:  # a shapes pass: Input Dims on most ops (absent on the rest)
                e = e.replace(b'"Record function id"', f'"Input Dims": [[{ext % 7 + 1}, 1280], [], [[2, 3], [4]]], '
                              '"Input type": ["c10::BFloat16", "", "TensorList"], "Record function id"'.encode(), 1)
            if ext % 5 == 0:  # op calls numbered, each its own kbop range
                ts, dur = (float(x) for x in re.search(rb'"ts": ([\d.]+), "dur": ([\d.]+)', e).groups())
                out.append(_annotation(f"kbop#{n_op}", ts, dur))
                n_op += 1
        elif b'"cat": "cuda_runtime", "name": "cudaLaunchKernel"' in e:
            launches += 1
            if launches % 9 == 0:  # a launch of a whole CUDA graph: its kernels are graph nodes
                e = e.replace(b'"cudaLaunchKernel"', b'"cudaGraphLaunch"')
            elif launches % 97 == 0:  # a launch without a correlation id
                e = re.sub(rb',? *"correlation": \d+', b"", e)
        elif b'"cat": "kernel"' in e and launches % 50 == 1:
            e = re.sub(rb'"name": "[^"]*"', rb'"name": "k<\\"\\u00e9\\\\>(float)"', e, count=1)  # escapes in a name
            e = re.sub(rb'"registers per thread": \d+,\s*', b"", e)  # a key absent
        out.append(e)
    # the same op id twice: the later one counts (Kineto never does this; both readers must agree)
    kernel = next(e for e in out if b'"cat": "kernel"' in e)
    ext = re.search(rb'"External id": \d+,', kernel).group()
    dup = next(e for e in out if b'"cat": "cpu_op"' in e and ext in e)
    out.append(dup.replace(b'"name": "', b'"name": "again::', 1))
    # module ranges, nested: each step's first and second half, and a quarter inside the first half
    for _, s in steps.iterrows():
        a, b = s.start_ns / 1e3, s.end_ns / 1e3
        out.append(_annotation("kbmod#model.layers.0|DecoderLayer", a, (b - a) / 2))
        out.append(_annotation("kbmod#model.layers.1|DecoderLayer", (a + b) / 2, (b - a) / 2))
        out.append(_annotation("kbmod#model.layers.0.mlp|MLP", a + (b - a) / 8, (b - a) / 4))
    path = tmp_path_factory.mktemp("trace") / "decode.json"
    path.write_bytes(_join_events(header, [first] + out, footer))
    return path


def _same_tables(path: Path, events: list[dict] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both readers give equal tables (exactly: values, dtypes, order)."""
    fast = ingest_torch_trace(path)
    slow = ingest_events(events if events is not None else read_trace_events(path))
    pd.testing.assert_frame_equal(fast[0], slow[0])
    pd.testing.assert_frame_equal(fast[1], slow[1])
    return fast


def test_kineto_reader_equals_the_json_reader_on_the_bundled_trace():
    path = RUN / "raw" / "trace.json.gz"
    _KinetoReader().read(path)  # the layout is read column-wise (no fallback)
    _same_tables(path)


def test_kineto_reader_equals_the_json_reader_on_a_shapes_pass(decode_window, monkeypatch):
    _KinetoReader().read(decode_window)  # no fallback
    timeline, phases = _same_tables(decode_window)
    # what the edits put there reached the tables
    assert list(phases.step) == [1, 2, 3]
    assert timeline.op_shapes.notna().any() and timeline.graph.any() and (timeline.op_index >= 0).any()
    assert {"model.layers.0.mlp", "model.layers.1"} <= set(timeline.module.dropna())
    assert (timeline.name == 'k<"\u00e9\\>(float)').any() and (timeline.registers == -1).any()
    assert timeline.op.str.startswith("again::").any()
    # blocks much smaller than the file: events meet block ends anywhere
    monkeypatch.setattr(trace, "BLOCK_BYTES", 4096)  # pieces shorter than some events, too
    assert len(list(trace._text_blocks(decode_window))) > 10
    _same_tables(decode_window)


def test_other_layouts_are_read_as_json(decode_window, tmp_path):
    events = read_trace_events(decode_window)
    # one line (json.dumps), gzipped
    compact = tmp_path / "compact.json.gz"
    compact.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    with pytest.raises(trace._OtherLayout):
        _KinetoReader().read(compact)
    _same_tables(compact, events)
    # Kineto's layout but one kernel written otherwise (its name on a line of its own)
    text = decode_window.read_bytes()
    at = text.index(b'"cat": "kernel", "name": ')
    odd = tmp_path / "odd.json"
    odd.write_bytes(text[:at] + b'"cat": "kernel",\n    "name": ' + text[at + len(b'"cat": "kernel", "name": '):])
    with pytest.raises(trace._OtherLayout):
        _KinetoReader().read(odd)
    _same_tables(odd)


def test_this_torch_writes_the_layout_the_reader_knows(tmp_path):
    """The reader depends on Kineto's layout: a trace torch.profiler writes now (CPU, with the capture's range
    names and record_shapes) is read column-wise, not as JSON, and its CPU ops' ids, names and shapes and its
    ranges are read as the JSON reader reads them."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(32, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("kb::decode#1"):
            for i in range(3):
                with record_function(f"kbop#{i}"), record_function("kbmod#model.layers.0.mlp|MLP"):
                    torch.cat([x @ x.T, x[:, :1].expand(32, 32)]).relu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    reader = _KinetoReader()
    _, annotations = reader.read(path)  # no fallback
    events = read_trace_events(path)
    assert annotations == [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"]
    ops = {e["args"]["External id"]: (e["name"], trace._shapes_str(e["args"].get("Input Dims")))
           for e in events if e.get("cat") == "cpu_op"}
    ext = np.concatenate([p["ext"] for p in reader.cpu])
    names = np.concatenate([reader._line_names(p["heads"])[p["codes"]] for p in reader.cpu])
    args = trace._take(pa.chunked_array([p["args"] for p in reader.cpu]).combine_chunks(), np.arange(len(ext)))
    at, raw = trace._values(args, len(ext), b"Input Dims", trace._LIST_VALUE)
    shapes = [None] * len(ext)
    for i, s in zip(at, reader._list_strs("Input Dims", raw, trace._shapes_str)):
        shapes[i] = s
    assert dict(zip(ext.tolist(), zip(names, shapes))) == ops
    assert any(s and ";" in s for s in shapes) and any(n == "aten::cat" for n, _ in ops.values())
    _same_tables(path)


def _second_layout(events: list[dict]) -> bytes:
    """Events as Kineto writes them since torch 2.13 (libkineto output_json.cpp: writeCompleteEvent, the flow
    and metadata writers): one key a line, a complete event's args after a line `    ,`."""
    def event(keys: list[str], tail: str = "") -> str:
        return "  {\n    " + ",\n    ".join(keys) + tail + "\n  }"

    out = []
    for e in events:
        if e.get("ph") == "X":
            keys = ['"ph": "X"', f'"cat": "{e["cat"]}"', f'"name": {json.dumps(e["name"])}', f'"pid": {json.dumps(e["pid"])}',
                    f'"tid": {json.dumps(e["tid"])}', f'"ts": {e["ts"]!r}', f'"dur": {e["dur"]!r}']
            args = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in (e.get("args") or {}).items())
            out.append(event(keys, f'\n    ,\n    "args": {{\n      {args}\n    }}' if args else "\n    "))
        elif e.get("ph") in ("s", "f"):
            keys = [f'"ph": "{e["ph"]}"', f'"id": {e["id"]}', f'"pid": {json.dumps(e["pid"])}',
                    f'"tid": {json.dumps(e["tid"])}', f'"ts": {e["ts"]!r}', f'"cat": "{e["cat"]}"',
                    f'"name": "{e["name"]}"']
            out.append(event(keys, '\n    , "bp": "e"' if e.get("bp") else "\n    "))
        else:
            out.append(event([f'"{k}": {json.dumps(v)}' for k, v in e.items()]))
    return (' {\n    "schemaVersion": 1,\n    "deviceProperties": [],\n    "displayTimeUnit": "ms",\n'
            '    "traceEvents": [\n    \n' + ",\n".join(out) + '\n  ],\n  "traceName": "trace.json"\n}').encode()


def test_kineto_reader_reads_the_layout_of_torch_2_13(decode_window, tmp_path):
    """torch 2.13's Kineto writes one key a line: the same events in that layout are read column-wise too, and
    give the JSON reader's tables."""
    path = tmp_path / "second.json"
    path.write_bytes(_second_layout(read_trace_events(decode_window)))
    _KinetoReader().read(path)  # no fallback
    timeline, _ = _same_tables(path)
    pd.testing.assert_frame_equal(timeline, ingest_torch_trace(decode_window)[0])


def test_gzip_members_and_a_cut_file(decode_window, tmp_path):
    """Gzip as the capture may leave it: several members (read as one text, like gzip), or cut short (the same
    error as the JSON reader's)."""
    text = decode_window.read_bytes()
    members = tmp_path / "members.json.gz"
    members.write_bytes(gzip.compress(text[:len(text) // 3]) + gzip.compress(text[len(text) // 3:]))
    _KinetoReader().read(members)  # no fallback
    _same_tables(members, read_trace_events(decode_window))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:-1000])
    with pytest.raises(EOFError):
        ingest_torch_trace(cut)
