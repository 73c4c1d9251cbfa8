"""Turn a torch.profiler (Kineto) Chrome trace into the normalized timeline tables.

`timeline.parquet`: one row per GPU kernel / memcpy / memset with its phase and step (from the
`kb::<phase>#<step>` record_function ranges the capture adds, matched on the CPU launch time of the
kernel), its aten op and input shapes (via Kineto's External id), and its launch configuration.
`phases.parquet`: the wall-clock interval of every phase step.

Two readers give the same tables. torch.profiler's JSON is written by Kineto in a fixed layout, one event to a
few lines (`  {`, a line with ph, cat and name, one with ts and dur, `"args": {`, the args on one line, `    }`,
`  },`); `_KinetoReader` reads that layout column-wise (numpy over the bytes, regular expressions over the
lines it needs) while the next block is decompressed in a thread, and builds no Python object per event: only
the GPU activities, their launches, the CPU ops that launched them and the user ranges are read, and two thirds
of a trace's events are other CPU ops, flows and metadata. A file in another layout (another writer, a Kineto
that writes otherwise) is read as JSON (`read_trace_events` + `ingest_events`, one dict per event); the tests
hold the two readers equal.
"""
from __future__ import annotations

import gzip
import queue
import re
import threading
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..capture.phases import parse_module_range, parse_op_range, parse_record_name

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
# runtime / driver calls that launch a whole CUDA graph: their kernels are graph nodes (`graph` column)
GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz"}
US_TO_NS = 1000.0
BLOCK_BYTES = 32 << 20  # decompressed bytes read at a time: the reader holds about three blocks, not the file
READ_PAST = 1024  # bytes readable past a block's end (the widest window read is a name's, NAME_WIDTH)
NAME_WIDTH = 128  # names up to this long are read in numpy; longer ones, or escaped ones, one by one


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
    timeline["op_index"] = _assign_op_index(timeline, op_ranges)
    if mod_ranges:
        mod = pd.Series(_assign_module(timeline, mod_ranges), index=timeline.index, dtype=object)
        parts = mod.str.rsplit("|", n=1)
        timeline["module"], timeline["module_class"] = parts.str[0], parts.str[1]
    return timeline, phases


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
_ANY_WANTED_CAT = re.compile(rb'"cat": "(?:' + b"|".join(c.encode() for c in _WANTED) + rb')"')
_ARGS_OPEN, _ARGS_CLOSE = b'    "args": {', b"    }"
_TS_KEY, _DUR_KEY = b'    "ts": ', b', "dur": '
_EXT_FIRST = b'      "External id": '  # a CPU op's args line begins with its External id
_LIST_VALUE = rb'(\[[^"\n]*\])(?=,[ \t]*"|\n|$)'  # a JSON list of numbers or lists (no string in it)


# a category read, by the 16 bytes after `"cat": "`: its name and closing quote (as 8-byte words, and which of
# their bytes count)
_CAT_WORDS = [(np.frombuffer((c.encode() + b'"').ljust(16, b"\0"), np.uint64),
               np.frombuffer((b"\xff" * (len(c) + 1)).ljust(16, b"\0"), np.uint64)) for c in _WANTED]
HEAD_WIDTH = 56  # bytes read of each event's second line: `    "ph": "X", "cat": "<category>", "name": "` fits


class _KinetoReader:
    """The column-wise reader of Kineto's layout (module docstring). Per block of whole events: the newlines
    (numpy) give each event's lines; its category is read at a fixed place of its second line; numbers at fixed
    places (ts, dur, a CPU op's External id) are parsed in numpy; the lines of one category are gathered (Arrow's
    take over the block's lines) and each args key read with one regular expression over them. A CPU op's name
    and shapes are read only for the ops that launched GPU work, at the end, from their lines kept per block.
    Anything that does not fit the layout raises `_OtherLayout`. Semantics as `_parse_events`: the last CPU op
    or launch of an id counts."""

    def __init__(self):
        self.started = False
        self.gpu: list[dict] = []
        self.launch: list[dict] = []
        self.cpu: list[dict] = []
        self.annotations: list[tuple] = []
        self.names: dict[bytes, str] = {}  # raw JSON text of a name -> the name (kernel and op names repeat)
        self.lists: dict[tuple, str | None] = {}  # (key, raw JSON text) of grid / block / Input Dims -> string

    def read(self, path: Path) -> tuple[dict, list[tuple]]:
        for text, end in _text_blocks(path):
            self.block(text, end)
        if not self.started:
            raise _OtherLayout("no traceEvents list")
        return self.result(), self.annotations

    def block(self, text: bytes, end: int) -> None:
        a = np.frombuffer(text, np.uint8)
        nl = np.flatnonzero(a[:end] == 10)
        opens = np.flatnonzero(np.diff(nl) == 4)  # 3-byte lines: "  {" opens an event
        opens = opens[(a[nl[opens] + 3] == ord("{")) & (a[nl[opens] + 1] == 32) & (a[nl[opens] + 2] == 32)]
        if not self.started:
            at = text.find(b'"traceEvents": [', 0, end)
            if at < 0:
                if len(opens):
                    raise _OtherLayout("events before a traceEvents list")
                return
            if text[at + len(b'"traceEvents": ['):at + len(b'"traceEvents": [\n  {\n')] != b"\n  {\n":
                raise _OtherLayout("the events are not one to a block of lines")
            opens, self.started = opens[nl[opens] > at], True
        if not len(opens):
            return
        # every line of the block as one Arrow array over the text (no copy): element i is line i, its newline
        # included; Arrow's take gathers a category's lines into one text
        lines = pa.Array.from_buffers(pa.binary(), len(nl) - 1,
                                      [None, pa.py_buffer((nl + 1).astype(np.int32)), pa.py_buffer(text)])
        nl = np.concatenate([nl, np.full(8, end - 1)])  # lines past the block's end read as empty
        head = _window(a, nl[opens + 1] + 1, HEAD_WIDTH)  # each event's second line, its first bytes
        is_x = _starts(head, _X_HEAD)
        sig = np.ascontiguousarray(head[:, len(_X_HEAD):len(_X_HEAD) + 16]).view(np.uint64)
        cat = np.full(len(opens), -1)
        for i, (want, mask) in enumerate(_CAT_WORDS):
            sel = np.flatnonzero(((sig[:, 0] & mask[0]) == want[0]) & ((sig[:, 1] & mask[1]) == want[1]) & is_x)
            if len(sel) and not _starts(head[sel], _X_HEAD + _WANTED[i].encode() + _NAME_KEY).all():
                raise _OtherLayout("an event of a category read is laid out otherwise")
            cat[sel] = i
        self._check_others(a, text, end, nl, opens, ~is_x)
        wanted = np.flatnonzero(cat >= 0)
        if not len(wanted):
            return
        cat, first = cat[wanted], opens[wanted] + 1  # an event's second line (ph, cat, name) is line `first`
        start, stop = nl[first[:, None] + np.arange(6)] + 1, nl[first[:, None] + np.arange(1, 7)]  # lines 1..6
        name_at = start[:, 0] + (len(_X_HEAD) + len(_NAME_KEY)) + np.array([len(c) for c in _WANTED])[cat]
        # the lines of a complete event: ph cat name (checked above), ts and dur (checked where read), `"args": {`,
        # the args, `    }`, `  }` or `  },`
        length = stop - start
        ok = ((length[:, 2] == len(_ARGS_OPEN)) & (length[:, 4] == len(_ARGS_CLOSE)) & (length[:, 5] >= 3)
              & (length[:, 5] <= 4) & _startswith(a, start[:, 2], _ARGS_OPEN)
              & _startswith(a, start[:, 4], _ARGS_CLOSE + b"\n  }"))
        if not ok.all():
            raise _OtherLayout("an event of a category read is laid out otherwise")
        if len(gpu := np.flatnonzero(cat <= MEMSET)):
            ts, dur = _ts_dur(a, start[gpu, 1])
            self._gpu(a, text, lines, cat[gpu], name_at[gpu], stop[gpu, 0], ts, dur, first[gpu] + 3)
        if len(launch := np.flatnonzero((cat == RUNTIME) | (cat == DRIVER))):
            ts, _ = _ts_dur(a, start[launch, 1], dur=False)
            self._launches(a, lines, name_at[launch], ts, first[launch] + 3)
        if len(cpu := np.flatnonzero(cat == CPU_OP)):
            self._cpu_ops(a, text, lines, first[cpu], start[cpu, 3], stop[cpu, 3])
        for i in np.flatnonzero(cat == USER).tolist():  # user ranges: few, parsed whole
            ev = _loads(text[start[i, 0] - 4:stop[i, 5]].rstrip(b","))
            self.annotations.append((ev.get("name", ""), ev["ts"], ev["ts"] + ev.get("dur", 0.0)))

    def _check_others(self, a, text, end, nl, opens, other) -> None:
        """Events not laid out as a complete event (flows, metadata, instants) must carry no category read."""
        other = np.flatnonzero(other)
        second, third, fourth = (nl[opens[other] + k] + 1 for k in (1, 2, 3))
        flow = np.zeros(len(other), dtype=bool)
        for h in _FLOW_HEADS:
            flow |= _startswith(a, second, h)
        # a flow is two lines, its category on the second
        flow &= _startswith(a, third, _FLOW_CAT) & _startswith(a, fourth, b"  }")
        ends = np.append(nl[opens[1:]], end)
        for i in other[~flow].tolist():
            if _ANY_WANTED_CAT.search(text, nl[opens[i]], ends[i]):
                raise _OtherLayout("an event of a category read is laid out otherwise")

    def _gpu(self, a, text, lines, cat, name_at, head_end, ts, dur, args_line) -> None:
        n = len(cat)
        col = {"corr": np.zeros(n, np.int64), "has_corr": np.zeros(n, bool), "ext": np.zeros(n, np.int64),
               "has_ext": np.zeros(n, bool), "stream": np.full(n, -1, np.int64), "registers": np.full(n, -1, np.int64),
               "shared_bytes": np.full(n, -1, np.int64), "grid": np.full(n, None, object),
               "block": np.full(n, None, object)}
        for c in (KERNEL, MEMCPY, MEMSET):  # each category's args lines have the same keys
            if not len(sel := np.flatnonzero(cat == c)):
                continue
            args = _take(lines, args_line[sel])
            for key, value, present in (("correlation", "corr", "has_corr"), ("External id", "ext", "has_ext"),
                                        ("stream", "stream", None), ("registers per thread", "registers", None),
                                        ("shared memory", "shared_bytes", None)):
                at, v = _ints(args, len(sel), key.encode())
                col[value][sel[at]] = v
                if present:
                    col[present][sel[at]] = True
            for key in ("grid", "block"):
                at, v = self._lists(args, len(sel), key.encode(), _dims_str)
                col[key][sel[at]] = v
        col.update(name=self._names(text, name_at, head_end), kind=np.array(list(GPU_CATS.values()))[cat], ts=ts,
                   dur=dur)
        self.gpu.append(col)

    def _launches(self, a, lines, name_at, ts, args_line) -> None:
        at, corr = _ints(_take(lines, args_line), len(ts), b"correlation")
        graph = np.zeros(len(ts), dtype=bool)
        for g in GRAPH_LAUNCH:
            graph |= _startswith(a, name_at, g.encode() + b'"')
        self.launch.append({"corr": corr, "ts": ts[at], "graph": graph[at]})

    def _cpu_ops(self, a, text, lines, first, args_at, args_end) -> None:
        """A CPU op's External id now; its second line (name) and args line kept for the end."""
        w = _window(a, args_at, len(_EXT_FIRST) + 19)
        if _starts(w, _EXT_FIRST).all():  # Kineto writes the External id first: read in place
            ext, _ = _decimals(a, args_at + len(_EXT_FIRST), b",\n", integer=True, w=w[:, len(_EXT_FIRST):])
            at = np.arange(len(first))
        else:
            at, ext = _ints(_take(lines, first + 3), len(first), b"External id")
        shapes = text.find(b'"Input Dims": ', int(args_at[0]), int(args_end[-1])) >= 0  # a shapes pass
        self.cpu.append({"ext": ext, "head": lines.take(first[at]),
                         "args": lines.take(first[at] + 3) if shapes else None})

    def _names(self, text: bytes, start: np.ndarray, line_end: np.ndarray) -> list[str]:
        """The names that begin at `start` on events' second lines (up to the line's last `", "pid": `)."""
        names, out = self.names, []
        for s, e in zip(start.tolist(), line_end.tolist()):
            stop = text.rfind(_PID_KEY, s, e)
            raw = text[s:stop]
            name = names.get(raw)
            if name is None:
                if stop < 0:
                    raise _OtherLayout("a name not followed by pid")
                name = names[raw] = _loads(b'"' + raw + b'"')
            out.append(name)
        return out

    def _lists(self, lines, n: int, key: bytes, convert) -> tuple[np.ndarray, list]:
        """A list-valued args key (grid, block, Input Dims) on `n` newline-joined lines, through `convert` (once
        per distinct value): (lines that have it, values)."""
        at, raw = _values(lines, n, key, _LIST_VALUE)
        out, known = [], self.lists
        for r in raw:
            s = known.get((key, r), known)
            if s is known:
                try:
                    s = known[(key, r)] = convert(_loads(r))
                except ValueError as e:
                    raise _OtherLayout(f"{key!r}: {r[:80]!r}") from e
            out.append(s)
        return at, out

    def result(self) -> dict:
        """The GPU activities' columns as `_parse_events` gives them: launch time and graph flag by correlation id,
        aten op and shapes by External id."""
        g = {k: np.concatenate([p[k] for p in self.gpu]) if self.gpu else np.zeros(0, dtype=object)
             for k in ("corr", "has_corr", "ext", "has_ext", "stream", "registers", "shared_bytes", "grid", "block",
                       "kind", "ts", "dur")}
        names = [x for p in self.gpu for x in p["name"]]
        n = len(names)
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
            heads = _take(pa.chunked_array([p["head"] for p in self.cpu]).combine_chunks(), ops)
            names_of = self._op_names(heads, len(ops))
            shapes_of = [None] * len(ops)
            if any(p["args"] is not None for p in self.cpu):
                args = pa.chunked_array([p["args"] if p["args"] is not None else pa.array([b"\n"] * len(p["head"]),
                                                                                         pa.binary())
                                         for p in self.cpu]).combine_chunks()
                at, v = self._lists(_take(args, ops), len(ops), b"Input Dims", _shapes_str)
                for i, s in zip(at.tolist(), v):
                    shapes_of[i] = s
            for i, u in zip(np.flatnonzero(has_op).tolist(), inverse.tolist()):
                op[i], shapes[i] = names_of[u], shapes_of[u]
        return {"name": names, "kind": g["kind"], "ts": g["ts"], "dur": g["dur"],
                "launch": np.where(found, launch_ts[j] if len(launch_ts) else np.nan, np.nan),
                "graph": found & np.isin(g["corr"], graph_ids), "stream": g["stream"], "registers": g["registers"],
                "shared_bytes": g["shared_bytes"], "grid": list(g["grid"]), "block": list(g["block"]), "op": op,
                "op_shapes": shapes}

    def _op_names(self, text: bytes, n: int) -> list[str]:
        """CPU op names from their second lines, newline-joined."""
        line_start = np.concatenate([[0], np.flatnonzero(np.frombuffer(text, np.uint8) == 10)[:-1] + 1])
        line_end = np.append(line_start[1:] - 1, len(text) - 1)
        return self._names(text, line_start + len(_X_HEAD) + len("cpu_op") + len(_NAME_KEY), line_end)


def _text_blocks(path: Path, size: int | None = None):
    """The file's text in blocks of about `size` bytes, as (text, end): text[:end] holds whole events (it ends
    with the newline before an event's `  {`, which the next block begins with), and at least READ_PAST bytes
    follow `end` in text, so fixed-width windows need no bounds. A gzipped file is decompressed in a thread while
    the block before is read (zlib lets go of the GIL)."""
    size = size or BLOCK_BYTES
    chunks: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                chunks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for chunk in _decompressed(path, size):
                if not put(chunk):
                    return
            put(None)
        except BaseException as e:  # handed to the reader, which raises it
            put(e)

    threading.Thread(target=produce, daemon=True, name="trace-gunzip").start()
    tail = b""
    try:
        while (chunk := chunks.get()) is not None:
            if isinstance(chunk, BaseException):
                raise chunk
            text = tail + chunk if tail else chunk
            cut = text.rfind(b"\n  {\n", 0, len(text) - READ_PAST)
            if cut <= 0:
                tail = text
                continue
            yield text, cut + 1
            tail = text[cut:]
        if tail:
            yield tail + b" " * READ_PAST, len(tail)
    finally:
        stop.set()


def _decompressed(path: Path, size: int):
    """The file's bytes, gunzipped if gzipped (every member), in pieces of at most `size` bytes."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        if not gzipped:
            while chunk := f.read(size):
                yield chunk
            return
        data = f.read()
    d = zlib.decompressobj(31)
    while True:
        out = d.decompress(data, size)
        if out:
            yield out
        data = d.unconsumed_tail
        if d.eof:
            data = d.unused_data
            if not data:
                return
            d = zlib.decompressobj(31)
        elif not data and not out:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")


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


def _ts_dur(a: np.ndarray, ts_line: np.ndarray, dur: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """ts and dur (µs) from each event's `    "ts": <ts>, "dur": <dur>,` line."""
    w = _window(a, ts_line, len(_TS_KEY) + 24)
    if not _starts(w, _TS_KEY).all():
        raise _OtherLayout("an event without ts")
    ts, after = _decimals(a, ts_line + len(_TS_KEY), b",", w=w[:, len(_TS_KEY):])
    if not dur:
        return ts, None
    w = _window(a, after, len(_DUR_KEY) + 24)
    if not _starts(w, _DUR_KEY).all():
        raise _OtherLayout("ts without dur")
    return ts, _decimals(a, after + len(_DUR_KEY), b",\n", w=w[:, len(_DUR_KEY):])[0]


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
    at, raw = _values(lines, n, key, rb"(-?\d{1,18})(?=[,\n])")
    return at, np.fromstring(b" ".join(raw), dtype=np.int64, sep=" ") if raw else np.zeros(0, np.int64)


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
    df = pd.DataFrame({
        "name": g["name"], "kind": g["kind"],
        "start_ns": np.round(g["ts"] * US_TO_NS).astype("int64"),
        "duration_ns": np.round(g["dur"] * US_TO_NS).astype("int64"),
        "launch_ns": g["launch"] * US_TO_NS,
        "grid": g["grid"], "block": g["block"], "registers": g["registers"], "shared_bytes": g["shared_bytes"],
        "stream": g["stream"], "op": g["op"], "op_shapes": g["op_shapes"], "graph": g["graph"],
    })
    df["end_ns"] = df["start_ns"] + df["duration_ns"]
    df["phase"], df["step"] = _assign_phase(df["launch_ns"].to_numpy(), df["start_ns"].to_numpy(), phases)
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return df


def _assign_module(timeline: pd.DataFrame, mod_ranges: list[tuple]) -> np.ndarray:
    """The innermost module (`kbmod#<path>` range, see capture.phases) whose forward holds each kernel's CPU
    launch; None where none. Module ranges nest: ranges of one depth never overlap, so each depth is searched
    like the op ranges, outermost first, and a deeper range that holds the launch wins."""
    out = np.full(len(timeline), None, dtype=object)
    t = timeline["launch_ns"].to_numpy()
    ranges = sorted(mod_ranges, key=lambda r: (r[0], -r[1]))
    depth, open_ends = [], []
    for start, end, _ in ranges:
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        depth.append(len(open_ends))
        open_ends.append(end)
    depth = np.array(depth)
    for d in range(int(depth.max()) + 1):
        level = [r for r, dd in zip(ranges, depth) if dd == d]
        j, ok = _containing(np.array([r[0] for r in level]) * US_TO_NS, np.array([r[1] for r in level]) * US_TO_NS, t)
        ok &= ~np.isnan(t)
        paths = np.array([r[2] for r in level], dtype=object)
        out[ok] = paths[j[ok]]
    return out


def _assign_op_index(timeline: pd.DataFrame, op_ranges: list[tuple]) -> np.ndarray:
    """The numbered op call (`kbop#i` range, see capture.phases) around each kernel's CPU launch; -1
    where none (a pass without op numbering, or a launch outside any phase range)."""
    out = np.full(len(timeline), -1, dtype="int64")
    if not op_ranges:
        return out
    r = np.array(sorted(op_ranges))
    t = timeline["launch_ns"].to_numpy()
    j, ok = _containing(r[:, 0] * US_TO_NS, r[:, 1] * US_TO_NS, t)
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


def join_shapes(timing: pd.DataFrame, shaped: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Two-pass capture: the timeline of a pass without `record_shapes` (less host overhead, so less
    perturbed times) takes aten op shapes from a second pass with them. Launches are matched by
    (phase, step, kernel name, n-th launch of that name in the instance), and only where both passes
    name the same aten op; greedy decode repeats the same launch sequence, so every launch matches
    unless the passes diverged. Returns the joined timeline and the match statistics for the manifest."""
    def keyed(t):
        t = t.sort_values("start_ns", kind="stable").copy()
        t["_occ"] = t.groupby(["phase", "step", "name"], sort=False).cumcount()
        return t

    a, b = keyed(timing), keyed(shaped)
    keys = ["phase", "step", "name", "_occ"]
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
        return k.groupby(["phase", "step"], sort=False)["name"].agg(tuple)

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
    out = m.drop(columns=["_occ", "_op_b"])[cols]
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True), stats
