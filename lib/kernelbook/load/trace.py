"""Turn a torch.profiler (Kineto) Chrome trace into the normalized timeline tables.

`timeline.parquet`: one row per GPU kernel / memcpy / memset with its phase and step (from the
`kb::<phase>#<step>` record_function ranges the capture adds, matched on the CPU launch time of the
kernel), its aten op and input shapes (via Kineto's External id), and its launch configuration.
`phases.parquet`: the wall-clock interval of every phase step.

Two readers give the same tables. torch.profiler's JSON is written by Kineto in a fixed layout, one event to a
few lines: `  {`, a line with ph, cat and name, one with ts and dur, `"args": {`, the args on one line, `    }`,
`  },` (torch up to 2.11 at least), or one key a line (torch 2.13). `_KinetoReader` reads both column-wise, block
by block as the file is decompressed (ISA-L's inflate where installed): numpy over the bytes for where the
events and their lines are and for the numbers at fixed places, one regular expression per args key over a
category's lines (gathered by Arrow), names once per distinct line. It builds no Python object per event, and reads only the GPU activities, their launches, the
CPU ops that launched them and the user ranges (two thirds of a trace's events are other CPU ops, flows and
metadata). The JSON parse of every event took 3.3 of the 4.4 s the ingest took on the bundled trace (424 k
events); the column-wise read takes 0.75 s in a fresh process on the 2-core CPU machine, against 8.7 s for
HolisticTraceAnalysis 0.5.0 (bench/ingest.py, bench/measured/ingest_cpu.json). A file in another layout (another
writer, a Kineto that writes otherwise) is read as JSON (`read_trace_events` + `ingest_events`, one dict per
event); the tests hold the two readers equal.
"""
from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import zlib
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..contract.names import parse_module_range, parse_op_range, parse_record_name

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
# runtime / driver calls that launch a whole CUDA graph: their kernels are graph nodes (`graph` column)
GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz"}
US_TO_NS = 1000.0
try:  # ISA-L's inflate, 3-4x zlib's (0.055 s against 0.16-0.2 s for the bundled trace); same stream API
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency; zlib gives the same bytes
    _zlib = zlib
BLOCK_BYTES = 16 << 20  # decompressed bytes read at a time (the reader holds a few, not the file); 16 MiB: 0.59 s, 32: 0.76
_OPEN = b"\n  {\n"  # where an event begins in Kineto's layout
READ_PAST = 1024  # bytes readable past a block's end (the widest window read at a fixed place is 64)


def _loads(raw: bytes):
    try:
        import orjson

        return orjson.loads(raw)
    except ImportError:  # pragma: no cover - orjson is a dependency, json is the fallback
        import json

        return json.loads(raw)


def read_trace_events(path: str | Path) -> list[dict]:
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = _loads(raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def ingest_torch_trace(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, phases) from a Kineto trace file (`.json` or `.json.gz`). Times in ns (the trace's µs × 1000)."""
    try:
        parsed = _KinetoReader().read(Path(path))
    except _OtherLayout:
        parsed = _parse_events(read_trace_events(path))
    return _tables(*parsed)


def ingest_events(events: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timeline, phases) from a trace's events, parsed (one dict per event, as in the JSON)."""
    return _tables(*_parse_events(events))


def _tables(gpu: dict, annotations: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two tables from the GPU activities' columns (see `_parse_events`) and the user ranges, as
    (name, ts µs, end µs) in the trace's order."""
    ranges, op_ranges, mod_ranges = [], [], []
    for name, start, end in annotations:
        parsed = parse_record_name(name)
        if parsed:
            ranges.append((parsed[0], parsed[1], start, end))
        elif (i := parse_op_range(name)) is not None:
            op_ranges.append((start, end, i))
        elif (path := parse_module_range(name)) is not None:
            mod_ranges.append((start, end, path))
    phases = _phase_table(ranges)
    timeline = _gpu_frame(gpu, phases)
    return with_calls(timeline, op_ranges, mod_ranges), phases


def with_calls(timeline: pd.DataFrame, op_ranges: list[tuple], mod_ranges: list[tuple],
               to_ns: float = US_TO_NS) -> pd.DataFrame:
    """`timeline` with each launch's op call (`op_index`, -1 where none) and, where the pass marked modules, its
    module and the module's class: from the `kbop#<i>` ranges (start, end, i) and the `kbmod#<path>|<class>` ranges
    (start, end, "<path>|<class>") of one thread (capture.phases), in µs (the torch profiler's trace) or in any unit
    `to_ns` turns into ns (nsys: 1)."""
    timeline["op_index"] = _assign_op_index(timeline, op_ranges, to_ns)
    if mod_ranges:
        mod = pd.Series(_assign_module(timeline, mod_ranges, to_ns), index=timeline.index, dtype=object)
        parts = mod.str.rsplit("|", n=1)
        timeline["module"], timeline["module_class"] = parts.str[0], parts.str[1]
    return timeline


def _parse_events(events: list[dict]) -> tuple[dict, list[tuple]]:
    """The JSON reader: GPU activities' columns and user ranges from the parsed events, one event at a time.
    An aten op or a launch that appears twice under one id counts as its last appearance."""
    gpu, ops, launches, annotations, graph_corr = [], {}, {}, [], set()
    for ev in events:
        cat = ev.get("cat")
        if cat in GPU_CATS:
            gpu.append(ev)
        elif cat == "cpu_op":
            a = ev.get("args") or {}
            ext = a.get("External id")
            if ext is not None:
                ops[ext] = (ev.get("name"), a.get("Input Dims"))
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            a = ev.get("args") or {}
            corr = a.get("correlation")
            if corr is not None:
                launches[corr] = ev.get("ts", 0.0)
                if ev.get("name") in GRAPH_LAUNCH:
                    graph_corr.add(corr)
        elif cat == "user_annotation":
            annotations.append((ev.get("name", ""), ev["ts"], ev["ts"] + ev.get("dur", 0.0)))
    n = len(gpu)
    cols = {"name": [None] * n, "kind": [None] * n, "ts": np.empty(n), "dur": np.empty(n),
            "launch": np.full(n, np.nan), "graph": np.zeros(n, dtype=bool),
            "stream": np.full(n, -1, dtype="int64"), "registers": np.full(n, -1, dtype="int64"),
            "shared_bytes": np.full(n, -1, dtype="int64"), "grid": [None] * n, "block": [None] * n,
            "op": [None] * n, "op_shapes": [None] * n}
    name, kind, start, dur, launch, graph = (cols[k] for k in ("name", "kind", "ts", "dur", "launch", "graph"))
    stream, regs, shmem, grid, block, op, shapes = (cols[k] for k in ("stream", "registers", "shared_bytes", "grid",
                                                                      "block", "op", "op_shapes"))
    for i, ev in enumerate(gpu):
        a = ev.get("args") or {}
        name[i] = ev.get("name")
        kind[i] = GPU_CATS[ev["cat"]]
        start[i] = ev.get("ts", 0.0)
        dur[i] = ev.get("dur", 0.0)
        corr = a.get("correlation")
        if corr in launches:
            launch[i] = launches[corr]
            graph[i] = corr in graph_corr
        stream[i] = a.get("stream", -1)
        if "registers per thread" in a:
            regs[i] = a["registers per thread"]
        if "shared memory" in a:
            shmem[i] = a["shared memory"]
        g, b = a.get("grid"), a.get("block")
        if g is not None:
            grid[i] = "x".join(map(str, g))
        if b is not None:
            block[i] = "x".join(map(str, b))
        o = ops.get(a.get("External id"))
        if o is not None:
            op[i] = o[0]
            shapes[i] = _shapes_str(o[1])
    return cols, annotations


class _OtherLayout(Exception):
    """The file is not in the layout `_KinetoReader` knows; it is read as JSON instead."""


_WANTED = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation")
KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, CPU_OP, USER = range(len(_WANTED))
_X_HEAD = b'    "ph": "X", "cat": "'  # the line after `  {` of a complete event (ph X) of any category
_NAME_KEY = b'", "name": "'
_PID_KEY = b'", "pid": '  # what follows a name
_FLOW_HEADS = (b'    "ph": "s", ', b'    "ph": "f", ')
_FLOW_CAT = b'    "cat": "ac2g", '  # a flow's second line (Kineto's flows are all ac2g)
_FLOW_LINES = (b'    "ph": "s",\n', b'    "ph": "f",\n')  # the second layout: the category on line 6
_FLOW_CAT_LINE = b'    "cat": "ac2g",\n'
_ANY_WANTED_CAT = re.compile(rb'"cat": "(?:' + b"|".join(c.encode() for c in _WANTED) + rb')"')
_ARGS_OPEN, _ARGS_CLOSE = b'    "args": {', b"    }"
_TS_KEY, _DUR_KEY, _DUR_LINE = b'    "ts": ', b', "dur": ', b'    "dur": '
_CAT_KEY, _NAME_LINE = b'    "cat": "', b'    "name": "'  # lines of the second layout
# Kineto's two layouts of a complete event (ph X): line numbers (its `  {` is line 0) in the first (torch up to
# 2.11 at least: `"ph": "X", "cat": ..., "name": ..., "pid": ..., "tid": ...` on line 1, ts and dur on line 2)
# and in the second (torch 2.13: one key a line, then `    ,` and the args)
_LINES = {"name": (1, 3), "ts": (2, 6), "dur": (2, 7), "comma": (0, 8), "args_open": (3, 9), "args": (4, 10),
          "args_close": (5, 11), "close": (6, 12)}
_EVENTS_BEGIN = re.compile(rb"\s*?\n  \{\n")  # after `"traceEvents": [`: the first event's `  {` line
_EXT_FIRST = b'      "External id": '  # a CPU op's args line begins with its External id
_INT = rb"(-?\d{1,18})(?=[,\n])"  # an integer value (ids, sizes)
_LIST_VALUE = rb'(\[[^"\n]*\])(?=,[ \t]*"|\n|$)'  # a JSON list of numbers or lists (no string in it)


# a category read, by the 16 bytes after `"cat": "`: its name and closing quote (as 8-byte words, and which of
# their bytes count)
_CAT_WORDS = [(np.frombuffer((c.encode() + b'"').ljust(16, b"\0"), np.uint64),
               np.frombuffer((b"\xff" * (len(c) + 1)).ljust(16, b"\0"), np.uint64)) for c in _WANTED]
HEAD_WIDTH = 56  # bytes read of each event's second line: `    "ph": "X", "cat": "<category>", "name": "` fits


class _KinetoReader:
    """The column-wise reader of Kineto's layout (module docstring). Per block of whole events, `_layout` finds
    each event's lines (numpy over the newlines), reads its category at a fixed place of its second line, checks
    the layout and parses the numbers at fixed places (ts, dur, External id); `block` gathers a category's lines
    (Arrow's take over the block's lines) and reads each args key, or two written side by side, with one regular
    expression over them. A CPU
    op's name and shapes are read at the end, only for the ops that launched GPU work, from its lines kept per
    block. Anything that does not fit the layout raises `_OtherLayout`. Semantics as `_parse_events`: the last
    CPU op or launch of an id counts."""

    def __init__(self):
        self.gpu: list[dict] = []
        self.launch: list[dict] = []
        self.cpu: list[dict] = []
        self.annotations: list[tuple] = []
        self.names: dict[bytes, str] = {}  # raw JSON text of a name -> the name (kernel and op names repeat)
        self.gpu_codes: dict[str, int] = {}  # a GPU activity's name -> its code in the name column
        self.lists: dict[str, dict] = {}  # key (grid, block, Input Dims) -> its raw JSON values -> strings

    def read(self, path: Path) -> tuple[dict, list[tuple]]:
        started = []
        try:
            for text, begin, end in _text_blocks(path):
                if (layout := _layout(text, begin, end, started)) is not None:
                    self.block(text, layout)
        except (zlib.error, _zlib.error, EOFError) as e:  # the JSON reader says what is wrong with the file
            raise _OtherLayout(str(e)) from e
        if not started:
            raise _OtherLayout("no traceEvents list")
        return self.result(), self.annotations

    def block(self, text: bytes, lay: dict) -> None:
        """What `_layout` leaves: the args keys, names, CPU ops' lines and user ranges of one block."""
        # every line of the block as one Arrow array over the text (no copy): element i is the line after the
        # i-th newline, its own newline included; Arrow's take gathers a category's lines into one text
        lines = pa.Array.from_buffers(pa.binary(), len(lay["offsets"]) - 1,
                                      [None, pa.py_buffer(lay["offsets"]), pa.py_buffer(text)])
        if (g := lay.get("gpu")) is not None:
            self._gpu(lines, **g)
        if (r := lay.get("launch")) is not None:
            at, corr = _ints(_take(lines, r["args_line"]), len(r["ts"]), b"correlation")
            self.launch.append({"corr": corr, "ts": r["ts"][at], "graph": r["graph"][at]})
        if (c := lay.get("cpu")) is not None:
            at, ext = (np.arange(len(c["ext"])), c["ext"]) if c["ext"] is not None else \
                _ints(_take(lines, c["args_line"]), len(c["args_line"]), b"External id")
            # second lines kept as their distinct lines and a code per op (ops repeat: 197 k ops, ~500 lines)
            heads = pc.dictionary_encode(lines.take(c["name_line"][at]))
            self.cpu.append({"ext": ext, "codes": heads.indices.to_numpy(zero_copy_only=False),
                             "heads": heads.dictionary, "args": lines.take(c["args_line"][at]) if c["shapes"] else None})
        for s, e in lay.get("user", []):  # user ranges: few, parsed whole
            ev = _loads(text[s:e].rstrip(b","))
            self.annotations.append((ev.get("name", ""), ev["ts"], ev["ts"] + ev.get("dur", 0.0)))

    def _gpu(self, lines, cat, ts, dur, name_line, args_line, ext) -> None:
        n = len(cat)
        col = {"corr": np.zeros(n, np.int64), "has_corr": np.zeros(n, bool), "ext": np.zeros(n, np.int64),
               "has_ext": np.zeros(n, bool), "stream": np.full(n, -1, np.int64), "registers": np.full(n, -1, np.int64),
               "shared_bytes": np.full(n, -1, np.int64), "grid": np.full(n, None, object),
               "block": np.full(n, None, object)}
        if ext is not None:  # read in place
            col["ext"], col["has_ext"] = ext, np.ones(n, bool)
        for c in (KERNEL, MEMCPY, MEMSET):  # each category's args lines have the same keys
            if not len(sel := np.flatnonzero(cat == c)):
                continue
            args = _take(lines, args_line[sel])
            if ext is None:
                at, raw = _values(args, len(sel), b"External id", _INT)
                col["ext"][sel[at]], col["has_ext"][sel[at]] = _int_array(raw), True
            # keys Kineto writes side by side are read in one pass
            for (k1, c1), (k2, c2), value in ((("stream", "stream"), ("correlation", "corr"), _INT),
                                              (("registers per thread", "registers"), ("shared memory", "shared_bytes"),
                                               _INT),
                                              (("grid", "grid"), ("block", "block"), _LIST_VALUE)):
                read = _int_pair(args, len(sel), k1.encode(), k2.encode()) if value is _INT else [
                    (at, self._list_strs(c, raw, _dims_str))
                    for c, (at, raw) in zip((c1, c2), _pair(args, len(sel), k1.encode(), k2.encode(), value))]
                for name, (at, v) in zip((c1, c2), read):
                    col[name][sel[at]] = v
                    if name == "corr":
                        col["has_corr"][sel[at]] = True
        col.update(name=self._name_codes(lines.take(name_line)), kind=np.array(list(GPU_CATS.values()))[cat], ts=ts,
                   dur=dur)
        self.gpu.append(col)

    def _name_codes(self, heads: pa.Array) -> np.ndarray:
        """The names on events' name lines (`    "ph": "X", "cat": ..., "name": "<name>", "pid": ...` in the first
        layout, `    "name": "<name>",` in the second) as codes into `gpu_names`, each distinct line (Arrow's
        dictionary encoding) read once."""
        encoded = pc.dictionary_encode(heads)
        code = np.array([self.gpu_codes.setdefault(n, len(self.gpu_codes)) for n in self._line_names(encoded.dictionary)],
                        dtype=np.int64)
        return code[encoded.indices.to_numpy(zero_copy_only=False)]

    def _line_names(self, lines: pa.Array) -> np.ndarray:
        """The name on each name line, JSON-decoded: in the first layout up to the line's last `", "pid": `, in the
        second the rest of the line."""
        names = np.empty(len(lines), dtype=object)
        for i, line in enumerate(lines.to_pylist()):
            if line.startswith(_NAME_LINE):  # the second layout: `    "name": "<name>",`
                start, stop = len(_NAME_LINE), len(line) - 3 if line.endswith(b'",\n') else -1
            else:
                start, stop = line.find(_NAME_KEY) + len(_NAME_KEY), line.rfind(_PID_KEY)
            if stop < start:
                raise _OtherLayout("a name not followed by pid")
            raw = line[start:stop]
            if (name := self.names.get(raw)) is None:
                name = self.names[raw] = _loads(b'"' + raw + b'"')
            names[i] = name
        return names

    def _list_strs(self, key: str, raw: list[bytes], convert) -> list:
        """List values (grid, block, Input Dims: raw JSON) through `convert`, once per distinct value."""
        known = self.lists.setdefault(key, {})
        for r in set(raw).difference(known):
            try:
                known[r] = convert(_loads(r))
            except ValueError as e:
                raise _OtherLayout(f"{key}: {r[:80]!r}") from e
        return [known[r] for r in raw]

    def result(self) -> dict:
        """The GPU activities' columns as `_parse_events` gives them: launch time and graph flag by correlation id,
        aten op and shapes by External id."""
        if not self.gpu:  # no GPU activity (a CPU-only trace): the JSON reader's empty columns, dtypes included
            return _parse_events([])[0]
        g = {k: np.concatenate([p[k] for p in self.gpu])
             for k in ("corr", "has_corr", "ext", "has_ext", "stream", "registers", "shared_bytes", "grid", "block",
                       "kind", "ts", "dur")}
        names = _Coded(np.concatenate([p["name"] for p in self.gpu]), list(self.gpu_codes))
        n = len(names.codes)
        corr = np.concatenate([p["corr"] for p in self.launch] or [np.zeros(0, np.int64)])
        j, found = _last_of(corr, g["corr"], g["has_corr"])
        launch_ts = np.concatenate([p["ts"] for p in self.launch] or [np.zeros(0)])
        # an id launched a graph where any launch under it did (a set in _parse_events)
        graph_ids = np.concatenate([p["corr"][p["graph"]] for p in self.launch] or [np.zeros(0, np.int64)])
        ext = np.concatenate([p["ext"] for p in self.cpu] or [np.zeros(0, np.int64)])
        k, has_op = _last_of(ext, g["ext"], g["has_ext"])
        op, shapes = [None] * n, [None] * n
        if has_op.any():
            ops, inverse = np.unique(k[has_op], return_inverse=True)  # the CPU ops that launched GPU work
            block_of = np.concatenate([np.full(len(p["ext"]), b) for b, p in enumerate(self.cpu)])[ops]
            codes = np.concatenate([p["codes"] for p in self.cpu])[ops]
            names_of = np.empty(len(ops), dtype=object)
            for b in np.unique(block_of).tolist():
                sel = block_of == b
                names_of[sel] = self._line_names(self.cpu[b]["heads"])[codes[sel]]
            shapes_of = [None] * len(ops)
            if any(p["args"] is not None for p in self.cpu):
                args = pa.chunked_array([p["args"] if p["args"] is not None else pa.array([b"\n"] * len(p["ext"]),
                                                                                         pa.binary())
                                         for p in self.cpu]).combine_chunks()
                at, raw = _values(_take(args, ops), len(ops), b"Input Dims", _LIST_VALUE)
                v = self._list_strs("Input Dims", raw, _shapes_str)
                for i, s in zip(at.tolist(), v):
                    shapes_of[i] = s
            for i, u in zip(np.flatnonzero(has_op).tolist(), inverse.tolist()):
                op[i], shapes[i] = names_of[u], shapes_of[u]
        return {"name": names, "kind": g["kind"], "ts": g["ts"], "dur": g["dur"],
                "launch": np.where(found, launch_ts[j] if len(launch_ts) else np.nan, np.nan),
                "graph": found & np.isin(g["corr"], graph_ids), "stream": g["stream"], "registers": g["registers"],
                "shared_bytes": g["shared_bytes"], "grid": list(g["grid"]), "block": list(g["block"]), "op": op,
                "op_shapes": shapes}


def _layout(text: bytes, begin: int, end: int, started: list) -> dict | None:
    """The numeric part of reading a block of whole events (text[begin:end]): where each event's lines are, which
    events are read, their layout checked, and the numbers at fixed places (ts, dur, External id, whether a launch
    is a graph's). None: no event to read. `started`: empty until the traceEvents list has begun (in an earlier
    block or this one). Both of Kineto's layouts (`_LINES`) are read, event by event."""
    a = np.frombuffer(text, np.uint8)
    nl = np.flatnonzero(a[begin:end] == 10) + begin
    opens = np.flatnonzero(np.diff(nl) == 4)  # 3-byte lines: "  {" opens an event
    opens = opens[(a[nl[opens] + 3] == ord("{")) & (a[nl[opens] + 1] == 32) & (a[nl[opens] + 2] == 32)]
    if not started:
        at = text.find(b'"traceEvents": [', begin, end)
        if at < 0:
            if len(opens):
                raise _OtherLayout("events before a traceEvents list")
            return None
        if not _EVENTS_BEGIN.match(text, at + len(b'"traceEvents": [')):
            raise _OtherLayout("the events are not one to a block of lines")
        opens = opens[nl[opens] > at]
        started.append(True)
    if not len(opens):
        return None
    offsets = (nl + 1).astype(np.int32)
    nl = np.concatenate([nl, np.full(16, end - 1)])  # lines past the block's end read as empty
    head = _window(a, nl[opens + 1] + 1, HEAD_WIDTH)  # each event's line 1, its first bytes
    x1 = _starts(head, _X_HEAD)  # `    "ph": "X", "cat": "<category>", "name": ...`
    x2 = _starts(head, b'    "ph": "X",\n')  # one key a line: the category on line 2
    sig = np.ascontiguousarray(head[:, len(_X_HEAD):len(_X_HEAD) + 16]).view(np.uint64)  # after `"cat": "`
    v2 = np.flatnonzero(x2)
    cat_line = _window(a, nl[opens[v2] + 2] + 1, 32)
    has_cat = _starts(cat_line, _CAT_KEY)
    if len(v2):
        sig[v2] = 0
        sig[v2[has_cat]] = np.ascontiguousarray(cat_line[has_cat, len(_CAT_KEY):len(_CAT_KEY) + 16]).view(np.uint64)
    cat = np.full(len(opens), -1)
    for i, (want, mask) in enumerate(_CAT_WORDS):
        sel = ((sig[:, 0] & mask[0]) == want[0]) & ((sig[:, 1] & mask[1]) == want[1])
        c = _WANTED[i].encode()
        if (sel1 := np.flatnonzero(sel & x1)).size and not _starts(head[sel1], _X_HEAD + c + _NAME_KEY).all():
            raise _OtherLayout("an event of a category read is laid out otherwise")
        in2 = sel[v2] & has_cat
        if in2.any() and not _starts(cat_line[in2], _CAT_KEY + c + b'",\n').all():
            raise _OtherLayout("an event of a category read is laid out otherwise")
        cat[sel & (x1 | x2)] = i
    other = ~x1 & ~x2
    other[v2[~has_cat]] = True  # one key a line, without its category on line 2
    _check_others(a, text, end, nl, opens, head, other)
    if not len(wanted := np.flatnonzero(cat >= 0)):
        return None
    cat, layout, zero = cat[wanted], x2[wanted].astype(np.int64), opens[wanted]
    # each event's line numbers (by its layout), where each line begins and its length
    k = {key: np.array(ks)[layout] if len(v2) else ks[0] for key, ks in _LINES.items()}
    begins = {key: nl[zero + k[key]] + 1 for key in _LINES}
    at = begins.__getitem__
    length = lambda key: nl[zero + k[key] + 1] - begins[key]  # noqa: E731
    # the lines of a complete event, checked where not read below: `"args": {` (read for GPU activities and
    # launches: the next line is their args), `    }`, `  }` or `  },`, and in the second layout the `    ,`
    # before the args and the name line
    ok = ((length("args_open") == len(_ARGS_OPEN)) & (length("args_close") == len(_ARGS_CLOSE))
          & (length("close") >= 3) & (length("close") <= 4) & ((layout == 0) | (length("comma") == len(b"    ,"))))
    by_line = np.flatnonzero(cat <= DRIVER)
    ok[by_line] &= _startswith(a, at("args_open")[by_line], _ARGS_OPEN)
    if (two := np.flatnonzero(layout == 1)).size:
        ok[two] &= _startswith(a, at("name")[two], _NAME_LINE)
    if not ok.all():
        raise _OtherLayout("an event of a category read is laid out otherwise")
    # where each name begins: after `"name": "` on line 1 (first layout) or line 3 (second)
    name_at = np.where(layout == 0, at("name") + len(_X_HEAD) + np.array([len(c) for c in _WANTED])[cat]
                       + len(_NAME_KEY), at("name") + len(_NAME_LINE))
    name_line, args_line = zero + k["name"], zero + k["args"]
    out = {"offsets": offsets}
    if len(gpu := np.flatnonzero(cat <= MEMSET)):
        ts, dur = _ts_dur(a, at("ts")[gpu], at("dur")[gpu], layout[gpu])
        out["gpu"] = {"cat": cat[gpu], "ts": ts, "dur": dur, "name_line": name_line[gpu],
                      "args_line": args_line[gpu], "ext": _ext_in_place(a, at("args")[gpu])}
    if len(launch := np.flatnonzero((cat == RUNTIME) | (cat == DRIVER))):
        names = _window(a, name_at[launch], 32)  # the longest graph launch and its quote fit
        graph = np.zeros(len(launch), dtype=bool)
        for g in GRAPH_LAUNCH:
            graph |= _starts(names, g.encode() + b'"')
        out["launch"] = {"ts": _ts_dur(a, at("ts")[launch], None, layout[launch])[0], "graph": graph,
                         "args_line": args_line[launch]}
    if len(cpu := np.flatnonzero(cat == CPU_OP)):
        args_at, args_end = at("args")[cpu], at("args")[cpu] + length("args")[cpu]
        out["cpu"] = {"name_line": name_line[cpu], "args_line": args_line[cpu], "ext": _ext_in_place(a, args_at),
                      "shapes": text.find(b'"Input Dims": ', int(args_at.min()), int(args_end.max())) >= 0}
    user = np.flatnonzero(cat == USER)
    out["user"] = list(zip((nl[zero[user]] + 1).tolist(), (at("close")[user] + length("close")[user]).tolist()))
    return out


def _ext_in_place(a: np.ndarray, args_at: np.ndarray) -> np.ndarray | None:
    """The External id of events whose args line begins with it (Kineto writes it first); None if one does not."""
    w = _window(a, args_at, len(_EXT_FIRST) + 19)
    if not _starts(w, _EXT_FIRST).all():
        return None
    return _decimals(a, args_at + len(_EXT_FIRST), b",\n", integer=True, w=w[:, len(_EXT_FIRST):])[0]


def _check_others(a, text, end, nl, opens, head, other) -> None:
    """Events not laid out as a complete event (flows, metadata, instants) must carry no category read. `head`:
    the first bytes of each event's second line."""
    other = np.flatnonzero(other)
    head = head[other]
    flow, flow2 = np.zeros(len(other), dtype=bool), np.zeros(len(other), dtype=bool)
    for h, h2 in zip(_FLOW_HEADS, _FLOW_LINES):
        flow |= _starts(head, h)
        flow2 |= _starts(head, h2)
    # a flow is two lines, its category on the second, then `  }` or `  },`; in the second layout one key a line,
    # its category on line 6
    fourth = nl[opens[other] + 4] - nl[opens[other] + 3] - 1
    flow &= _startswith(a, nl[opens[other] + 2] + 1, _FLOW_CAT) & (fourth >= 3) & (fourth <= 4)
    if flow2.any():
        flow[flow2] = _startswith(a, nl[opens[other[flow2]] + 6] + 1, _FLOW_CAT_LINE)
    ends = np.append(nl[opens[1:]], end)  # an event's text: from its "  {" line to the next one's
    for i in other[~flow].tolist():
        if _ANY_WANTED_CAT.search(text, nl[opens[i]], ends[i]):
            raise _OtherLayout("an event of a category read is laid out otherwise")


def _text_blocks(path: Path, size: int | None = None):
    """The file's text in blocks, as (buffer, begin, end): buffer[begin:end] holds whole events, from the newline
    before an event's `  {` line to the newline before the next block's first one, and at least READ_PAST bytes
    follow `end` in the buffer, so fixed-width windows need no bounds. Each decompressed piece (about `size`
    bytes) is read where it lies; only the event cut by a piece's end is copied, with the next piece's start.
    (Decompressing in a thread while the piece before is read gained nothing: the reading holds the GIL in
    regular expressions, and on the 2-core machine the two ran one after the other.)"""
    pending, start = b"", True  # the text from the last event opened in the piece before; the file's start
    for chunk in _decompressed(path, size or BLOCK_BYTES):
        first = 0 if start else chunk.find(_OPEN)  # the file's first piece holds the header too
        last = chunk.rfind(_OPEN, 0, len(chunk) - READ_PAST)
        if first < 0 or last <= first:  # no event opens early enough in this piece to cut it
            pending, start = pending + chunk, False
            continue
        if pending:
            yield pending + chunk[:first + 1 + READ_PAST], 0, len(pending) + first + 1
        if last > first:
            yield chunk, first, last + 1
        pending, start = chunk[last:], False
    if pending:
        yield pending + b" " * READ_PAST, 0, len(pending)


def _decompressed(path: Path, size: int):
    """The file's bytes, gunzipped if gzipped (every member), in pieces of about `size` bytes. The compressed
    bytes are fed a slice at a time: a decompressor given the whole file and an output limit hands back the rest
    of its input on every call, a copy of the file each time (1.4 GB copied for the 84 MB 10x trace)."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        if not gzipped:
            while chunk := f.read(size):
                yield chunk
            return
        d, fed, pieces, held = _zlib.decompressobj(31), False, [], 0
        while data := f.read(1 << 16):  # small slices: each output stays in cache (3x faster than 2 MiB ones)
            while data:
                out, fed, data = d.decompress(data), True, b""
                if out:
                    pieces.append(out)
                    held += len(out)
                if d.eof:  # the next gzip member, if any
                    data, d, fed = d.unused_data, _zlib.decompressobj(31), False
            if held >= size:
                yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
                pieces, held = [], 0
        if fed and not d.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        if pieces:
            yield b"".join(pieces)


def _window(a: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes from each position, as rows."""
    return np.lib.stride_tricks.sliding_window_view(a, width)[at]


def _startswith(a: np.ndarray, at: np.ndarray, prefix: bytes) -> np.ndarray:
    """Whether the bytes at each position begin with `prefix`."""
    return _starts(_window(a, at, -(-len(prefix) // 8) * 8), prefix)


def _starts(rows: np.ndarray, prefix: bytes) -> np.ndarray:
    """Whether each row of bytes begins with `prefix` (compared 8 bytes at a time)."""
    width = -(-len(prefix) // 8) * 8
    words = np.ascontiguousarray(rows[:, :width]).view(np.uint64)
    want = np.frombuffer(prefix.ljust(width, b"\0"), np.uint64)
    mask = np.frombuffer((b"\xff" * len(prefix)).ljust(width, b"\0"), np.uint64)
    return ((words & mask) == want).all(1)


_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _decimals(a: np.ndarray, at: np.ndarray, ends: bytes, integer: bool = False, width: int = 24, w=None):
    """The JSON numbers written at `at`, each followed by one of the bytes in `ends`: (values, where each number
    ends). A plain decimal whose digits make an integer below 2^53 is parsed in numpy, digit column by digit
    column: that integer over a power of ten, both exact, so the quotient is the correctly rounded double a JSON
    parser gives (Clinger's fast path); others (exponents, longer numbers) are parsed one by one. `integer`: int64
    ids, which must be plain integers. `w`: the bytes at `at`, if already read."""
    w = _window(a, at, width) if w is None else w
    n, width = w.shape
    neg = w[:, 0] == 45
    mant, ndig, frac = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    live, dotted, last_digit = neg.copy(), np.zeros(n, bool), np.zeros(n, bool)
    stop = np.full(n, width - 1)
    for j in range(width):
        c = w[:, j]
        digit = (c >= 48) & (c <= 57) & (live | (j == 0))
        dot = (c == 46) & live & ~dotted & last_digit & (not integer)
        ended = (live | (j == 0)) & ~digit & ~dot & ~((j == 0) & neg)
        stop[ended] = j
        mant = np.where(digit, mant * 10 + (c.astype(np.int64) - 48), mant)
        ndig += digit
        frac += digit & dotted
        dotted |= dot
        last_digit = digit
        live = digit | dot | ((j == 0) & neg)
        if not live.any():
            break
    rows = np.arange(n)
    good = ((ndig >= 1) & (ndig <= 17) & (mant < 2**53) & np.isin(w[rows, stop], np.frombuffer(ends, np.uint8))
            & ~live & ((w[rows, np.maximum(stop - 1, 0)] >= 48) & (w[rows, np.maximum(stop - 1, 0)] <= 57)))
    if integer:
        if not good.all():
            raise _OtherLayout("an id that is not a plain integer")
        return np.where(neg, -mant, mant), at + stop
    val = mant / 10.0 ** frac
    val = np.where(neg, -val, val)
    ends_at = at + stop
    for i in np.flatnonzero(~good).tolist():  # rare: as text, one by one
        m = _NUMBER.match(a[at[i]:at[i] + 64].tobytes())
        if m is None or int(a[at[i] + m.end()]) not in ends:
            raise _OtherLayout("a time that is not a number")
        val[i], ends_at[i] = float(m.group()), at[i] + m.end()
    return val, ends_at


def _ts_dur(a: np.ndarray, ts_line: np.ndarray, dur_line: np.ndarray | None, layout: np.ndarray):
    """ts and dur (µs) of events: ts from its line (`    "ts": <ts>,`), dur after it on the same line in the first
    layout (`, "dur": <dur>,`), on a line of its own in the second (`    "dur": <dur>`); dur_line None: ts alone."""
    w = _window(a, ts_line, len(_TS_KEY) + 24)
    if not _starts(w, _TS_KEY).all():
        raise _OtherLayout("an event without ts")
    ts, after = _decimals(a, ts_line + len(_TS_KEY), b",", w=w[:, len(_TS_KEY):])
    if dur_line is None:
        return ts, None
    dur_at = np.where(layout == 0, after, dur_line)
    w = _window(a, dur_at, 16)
    if not np.where(layout == 0, _starts(w, _DUR_KEY), _starts(w, _DUR_LINE)).all():
        raise _OtherLayout("an event without dur")
    return ts, _decimals(a, dur_at + np.where(layout == 0, len(_DUR_KEY), len(_DUR_LINE)), b",\n")[0]


def _take(lines: pa.Array, idx: np.ndarray) -> bytes:
    """The lines at `idx` (each with its newline), as one text."""
    got = lines.take(pa.array(idx, pa.int64()))
    offsets = np.frombuffer(got.buffers()[1], np.int32)
    return got.buffers()[2][offsets[got.offset]:offsets[got.offset + len(got)]].to_pybytes() if len(got) else b""


def _values(lines: bytes, n: int, key: bytes, value: bytes) -> tuple[np.ndarray, list[bytes]]:
    """An args key's raw values on `n` lines (each ending in a newline): (the lines that have it, values). Where
    every line has it, one findall; where some lack it, each match is placed by its offset. `_OtherLayout` where
    a value is not of the form `value` or a line has the key twice."""
    pattern = re.compile(b'"' + re.escape(key) + b'": ' + value)
    raw = pattern.findall(lines)
    if len(raw) == n:
        return np.arange(n), raw
    if lines.count(b'"' + key + b'": ') != len(raw):
        raise _OtherLayout(f"a value of {key!r} of another form")
    if not raw:
        return np.zeros(0, np.int64), raw
    line_start = np.concatenate([[0], np.flatnonzero(np.frombuffer(lines, np.uint8) == 10) + 1])
    idx = np.searchsorted(line_start, [m.start() for m in pattern.finditer(lines)], side="right") - 1
    if len(np.unique(idx)) != len(idx):
        raise _OtherLayout(f"{key!r} twice in one event")
    return idx, raw


def _ints(lines: bytes, n: int, key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """An integer args key on `n` lines: (the lines that have it, values)."""
    at, raw = _values(lines, n, key, _INT)
    return at, _int_array(raw)


def _int_array(raw: list[bytes]) -> np.ndarray:
    return np.fromstring(b" ".join(raw), dtype=np.int64, sep=" ") if raw else np.zeros(0, np.int64)


def _pair(lines: bytes, n: int, key1: bytes, key2: bytes, value: bytes) -> list[tuple[np.ndarray, list[bytes]]]:
    """Two args keys written side by side (`"k1": v1, "k2": v2`) on `n` lines, as `_values` gives each: one
    findall where every line has the pair; otherwise each key alone."""
    rows = re.findall(b'"' + re.escape(key1) + b'": ' + value + b',[ \t]*"' + re.escape(key2) + b'": ' + value, lines)
    if len(rows) == n and n:
        return [(np.arange(n), list(v)) for v in zip(*rows)]
    return [_values(lines, n, key1, value), _values(lines, n, key2, value)]


def _int_pair(lines: bytes, n: int, key1: bytes, key2: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two integer args keys written side by side on `n` lines, as `_ints` gives each: where every line has the
    pair, one findall of the pair's text, whose numbers (the keys hold no digit) are read in one go."""
    raw = re.findall(b'"' + re.escape(key1) + b'": (-?\\d{1,18},[ \t]*"' + re.escape(key2) + b'": -?\\d{1,18})(?=[,\n])',
                     lines)
    if len(raw) == n and n:
        values = np.fromstring(re.sub(rb"[^\d-]+", b" ", b" ".join(raw)), dtype=np.int64, sep=" ").reshape(n, 2)
        return [(np.arange(n), values[:, 0]), (np.arange(n), values[:, 1])]
    return [_ints(lines, n, key1), _ints(lines, n, key2)]


def _dims_str(v) -> str:
    """grid / block as the JSON reader writes them: [128, 1, 1] -> "128x1x1"."""
    return "x".join(map(str, v))


def _last_of(ids: np.ndarray, wanted: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted id (where `has`): the index of its last appearance in `ids`, and whether it appears
    (index 0 where not)."""
    if not len(ids):
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    uniq, first_in_reversed = np.unique(ids[::-1], return_index=True)
    pos = np.clip(np.searchsorted(uniq, wanted), 0, len(uniq) - 1)
    found = has & (uniq[pos] == wanted)
    return np.where(found, len(ids) - 1 - first_in_reversed[pos], 0), found


def _gpu_frame(g: dict, phases: pd.DataFrame) -> pd.DataFrame:
    """The timeline, rows in start order (stable: the trace's order among equal starts). The columns are put in
    that order before the frame is made: sorting the frame copied every column again, the 200 MB of kernel
    names of the 10x trace among them."""
    start = np.round(g["ts"] * US_TO_NS).astype("int64")
    order = np.argsort(start, kind="stable")

    def rows(v):
        if isinstance(v, _Coded):
            return _Coded(v.codes[order], v.values)
        return (v if isinstance(v, np.ndarray) else np.asarray(v, dtype=object))[order]

    df = pd.DataFrame({
        "name": _strings(rows(g["name"])), "kind": _strings(rows(g["kind"])), "start_ns": start[order],
        "duration_ns": rows(np.round(g["dur"] * US_TO_NS).astype("int64")),
        "launch_ns": rows(g["launch"] * US_TO_NS),
        "grid": _strings(rows(g["grid"])), "block": _strings(rows(g["block"])), "registers": rows(g["registers"]),
        "shared_bytes": rows(g["shared_bytes"]), "stream": rows(g["stream"]), "op": _strings(rows(g["op"])),
        "op_shapes": _strings(rows(g["op_shapes"])), "graph": rows(g["graph"]),
    })
    df["end_ns"] = df["start_ns"] + df["duration_ns"]
    df["phase"], df["step"] = _assign_phase(df["launch_ns"].to_numpy(), df["start_ns"].to_numpy(), phases)
    return df


class _Coded(NamedTuple):
    """A column as codes (-1: None) into its distinct values."""
    codes: np.ndarray
    values: list


def _strings(values):
    """A column of str (None where missing) as pandas makes it from the list (its str dtype), built from the
    distinct values (Arrow's take of them): names and launch shapes repeat, and pandas' own conversion, string by
    string, took 0.27 s a column on the 10x trace (its kernel names: 534 k of 363 bytes on average). All None, or
    not all str: the values as they are."""
    if isinstance(values, _Coded):
        codes, uniques = values
    else:
        codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    if not len(uniques) or not all(isinstance(u, str) for u in uniques):  # as pandas makes it from a list
        return (np.asarray(uniques, dtype=object)[codes] if isinstance(values, _Coded) else values).tolist()
    column = pa.array(uniques, pa.large_string()).take(pa.array(codes, mask=codes < 0))
    return pd.array(column, dtype=pd.StringDtype("pyarrow", na_value=np.nan))


def _assign_module(timeline: pd.DataFrame, mod_ranges: list[tuple], to_ns: float = US_TO_NS) -> np.ndarray:
    """The innermost module (`kbmod#<path>` range, see capture.phases) whose forward holds each kernel's CPU
    launch; None where none."""
    out = np.full(len(timeline), None, dtype=object)
    if not mod_ranges:
        return out
    at = innermost(np.array([r[0] for r in mod_ranges]) * to_ns, np.array([r[1] for r in mod_ranges]) * to_ns,
                   timeline["launch_ns"].to_numpy())
    paths = np.array([r[2] for r in mod_ranges], dtype=object)
    out[at >= 0] = paths[at[at >= 0]]
    return out


def innermost(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in `t` (NaN: none), the index of the innermost of the ranges [start, end] that holds it, -1
    where none does. The ranges nest or are disjoint (one thread's push/pop ranges): those of one depth never
    overlap, so each depth is searched by bisection, outermost first, and a deeper range that holds the time wins."""
    out = np.full(len(t), -1, dtype="int64")
    if not len(start):
        return out
    order = np.lexsort((-np.asarray(end), np.asarray(start)))  # by start, the longer first
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    if (e > s).all():
        # a range's depth is how many ranges before it are still open at its start: nested ranges of positive length
        # that closed at or before it started all came before it, so the rest of those before it are open
        depth = np.arange(len(s)) - np.searchsorted(np.sort(e), s, side="right")
    else:  # a range of no length ties with the one that starts with it: a stack of the open ranges' ends
        depth = np.empty(len(s), dtype="int64")
        open_ends: list = []
        for k, (a, b) in enumerate(zip(s.tolist(), e.tolist())):
            while open_ends and open_ends[-1] <= a:
                open_ends.pop()
            depth[k] = len(open_ends)
            open_ends.append(b)
    t = np.asarray(t, dtype="float64")
    for d in range(int(depth.max()) + 1):
        level = np.flatnonzero(depth == d)
        j, ok = _containing(s[level], e[level], t)
        ok &= ~np.isnan(t)
        out[ok] = order[level[j[ok]]]
    return out


def _assign_op_index(timeline: pd.DataFrame, op_ranges: list[tuple], to_ns: float = US_TO_NS) -> np.ndarray:
    """The numbered op call (`kbop#i` range, see capture.phases) around each kernel's CPU launch; -1
    where none (a pass without op numbering, or a launch outside any phase range)."""
    out = np.full(len(timeline), -1, dtype="int64")
    if not op_ranges:
        return out
    r = np.array(sorted(op_ranges))
    t = timeline["launch_ns"].to_numpy()
    j, ok = _containing(r[:, 0] * to_ns, r[:, 1] * to_ns, t)
    ok &= ~np.isnan(t)
    out[ok] = r[j[ok], 2].astype("int64")
    return out


def _containing(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each time in `t`: the index of the last range (sorted by start, not overlapping) that starts
    at or before it, and whether that range still holds it."""
    idx = np.searchsorted(start, t, side="right") - 1
    return idx, (idx >= 0) & (t <= end[np.clip(idx, 0, None)])


def _phase_table(ranges: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(ranges, columns=["phase", "step", "start_us", "end_us"])
    df["start_ns"] = (df.pop("start_us") * US_TO_NS).round().astype("int64")
    df["end_ns"] = (df.pop("end_us") * US_TO_NS).round().astype("int64")
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return df


def _shapes_str(dims) -> str | None:
    if not dims:
        return None
    return ";".join("x".join(map(str, d)) if isinstance(d, list) else str(d) for d in dims)


def _assign_phase(launch_ns: np.ndarray, start_ns: np.ndarray, phases: pd.DataFrame):
    """Innermost phase range containing each kernel's CPU launch time (GPU start if no launch
    record). Top-level steps (prefill/decode) do not overlap; vision ranges nest inside prefill and
    win where they contain the launch."""
    t = np.where(np.isnan(launch_ns), start_ns, launch_ns)
    phase = np.full(len(t), "other", dtype=object)
    step = np.full(len(t), -1, dtype="int64")
    for outer in (phases[phases.phase != "vision_encode"], phases[phases.phase == "vision_encode"]):
        if outer.empty:
            continue
        idx, ok = _containing(outer["start_ns"].to_numpy(), outer["end_ns"].to_numpy(), t)
        phase[ok] = outer["phase"].to_numpy()[idx[ok]]
        step[ok] = outer["step"].to_numpy()[idx[ok]]
    return phase, step


_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")
_STEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*[<(]")


def kernel_stem(name) -> str:
    """A kernel's function name without namespaces, template arguments or parameters (`indexSelectSmallIndex`):
    what two demanglers agree on. Nsight Systems writes `<(int)16, long>`, `<unnamed>` and `T2 *` where the torch
    profiler (CUPTI through c10's demangler) writes `<16, long>`, `(anonymous namespace)` and `long*`; the torch
    profiler also leaves some names mangled (`_ZN7cutlass13device_kernelI…`, a grouped GEMM on the H200 and H100)
    where nsys demangles them (`cutlass::device_kernel<…>`): their stem is read from the mangled name."""
    text = str(name)
    if text.startswith("_Z"):
        return _mangled_stem(text) or text
    text = _ANON.sub("anon", text)
    m = _STEM.search(text[5:] if text.startswith("void ") else text)
    return m.group(1) if m else text


def _mangled_stem(name: str) -> str | None:
    """The function name of an Itanium-mangled symbol: the last of its length-prefixed names (`_ZN7cutlass13device_
    kernelI…` → `device_kernel`; `_Z10gemv_kernelPf` → `gemv_kernel`); None where it holds none."""
    i = 3 if name.startswith("_ZN") else 2
    while i < len(name) and name[i] in "KVr":  # const / volatile / restrict qualifiers of a nested name
        i += 1
    last = None
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        last, i = name[j:j + n], j + n
    return last or None


def join_shapes(timing: pd.DataFrame, shaped: pd.DataFrame, by_stem: bool = False) -> tuple[pd.DataFrame, dict]:
    """Two-pass capture: the timeline of a pass without `record_shapes` (less host overhead, so less
    perturbed times) takes aten op shapes from a second pass with them. Launches are matched by
    (phase, step, kernel name, n-th launch of that name in the instance), and only where both passes
    name the same aten op; greedy decode repeats the same launch sequence, so every launch matches
    unless the passes diverged. `by_stem`: the two passes come from different profilers (the nsys timeline, the
    torch profiler's shapes pass), whose demanglers write one kernel's name differently, so launches are matched
    by `kernel_stem` instead of the full name. Returns the joined timeline and the match statistics for the
    manifest."""
    def keyed(t):
        t = t.sort_values("start_ns", kind="stable").copy()
        t["_name"] = t["name"].map(kernel_stem) if by_stem else t["name"]
        t["_occ"] = t.groupby(["phase", "step", "_name"], sort=False).cumcount()
        return t

    a, b = keyed(timing), keyed(shaped)
    keys = ["phase", "step", "_name", "_occ"]
    mods = [c for c in ("module", "module_class") if c in b]
    take = ["op", "op_shapes"] + [c for c in ("op_index",) if c in b] + mods
    m = a.drop(columns=[c for c in ("op_shapes", "op_index", *mods) if c in a]).merge(
        b[keys + take].rename(columns={"op": "_op_b"}), on=keys, how="left")
    # A kernel node of a CUDA-graph replay (its op is the compiled graph's call) takes the aten op and shapes
    # of the same-named n-th launch of the step in the shapes pass, which runs the step eagerly (the
    # dispatch mode that numbers op calls keeps torch.compile out): library kernels (cuBLAS GEMMs, cuDNN
    # attention, top-k) are the ones the compiled graph calls; Inductor's fused Triton kernels have no
    # eager twin and stay without shapes.
    graph_node = m["op"].fillna("").str.contains("CompiledFxGraph", regex=False)
    if "graph" in m:
        graph_node |= m["graph"].fillna(False).astype(bool)
    same_op = m["_op_b"].notna() & ((m["op"] == m["_op_b"]) | m["op"].isna() | graph_node)
    m.loc[~same_op, "op_shapes"] = None
    if "op_index" in m:  # the op call that launched it, in the shapes pass: ncu's identity by position
        m["op_index"] = m["op_index"].where(same_op & ~graph_node, -1).fillna(-1).astype("int64")
    for c in mods:  # the module whose forward launched it, in the shapes pass (a graph node: its eager twin's)
        m[c] = m[c].where(same_op)
    m["op"] = m["op"].where(m["op"].notna() & ~(graph_node & same_op), m["_op_b"].where(same_op))
    kern = m.kind == "kernel"

    def seq(t):
        k = t[t.kind == "kernel"]
        return k.groupby(["phase", "step"], sort=False)["_name"].agg(tuple)

    sa, sb = seq(a), seq(b)
    common = sa.index.intersection(sb.index)
    stats = {"kernels": int(kern.sum()), "kernels_matched": int((kern & same_op).sum()),
             "matched_pct": 100 * float((kern & same_op).sum()) / max(1, int(kern.sum())),
             "instances": int(len(sa)), "instances_identical": int((sa.loc[common] == sb.loc[common]).sum()),
             "kernels_in_shapes_pass": int((b.kind == "kernel").sum()),
             "graph_nodes": int((kern & graph_node).sum()),
             "graph_nodes_with_eager_shapes": int((kern & graph_node & same_op).sum()),
             "kernels_with_module": int((kern & m["module"].notna()).sum()) if "module" in m else 0}
    cols = list(timing.columns) + [c for c in ("op_index", *mods) if c in m and c not in timing]
    out = m.drop(columns=["_occ", "_op_b", "_name"])[cols]
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True), stats


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name of an Itanium-mangled symbol (`_Z...`) via c++filt when it is installed;
    any other name unchanged (ncu and CUPTI mostly give demangled names already)."""
    if not name.startswith("_Z") or not shutil.which("c++filt"):
        return name
    try:  # a name from the run may hold anything, a NUL byte included, which no argument can: it goes in on stdin
        out = subprocess.run(["c++filt"], input=name.replace("\0", " ").replace("\n", " "), capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError, ValueError):
        return name
    return out or name
