"""Turn a torch.profiler (Kineto) Chrome trace into the normalized timeline tables.

`timeline.parquet`: one row per GPU kernel / memcpy / memset with its phase and step (from the
`kb::<phase>#<step>` record_function ranges the capture adds, matched on the CPU launch time of the
kernel), its aten op and input shapes (via Kineto's External id), and its launch configuration.
`phases.parquet`: the wall-clock interval of every phase step.

The parse is column-oriented and touches each event once; orjson is used when installed.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd

from ..capture.phases import parse_module_range, parse_op_range, parse_record_name

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
# runtime / driver calls that launch a whole CUDA graph: their kernels are graph nodes (`graph` column)
GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz"}
US_TO_NS = 1000.0


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
    """(timeline, phases) from a Kineto trace file (`.json` or `.json.gz`)."""
    return ingest_events(read_trace_events(path))


def ingest_events(events: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    gpu, ops, launches, ranges, op_ranges, mod_ranges, graph_corr = [], {}, {}, [], [], [], set()
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
            name = ev.get("name", "")
            parsed = parse_record_name(name)
            if parsed:
                ranges.append((parsed[0], parsed[1], ev["ts"], ev["ts"] + ev.get("dur", 0.0)))
            elif (i := parse_op_range(name)) is not None:
                op_ranges.append((ev["ts"], ev["ts"] + ev.get("dur", 0.0), i))
            elif (path := parse_module_range(name)) is not None:
                mod_ranges.append((ev["ts"], ev["ts"] + ev.get("dur", 0.0), path))
    phases = _phase_table(ranges)
    timeline = _gpu_table(gpu, ops, launches, phases, graph_corr)
    timeline["op_index"] = _assign_op_index(timeline, op_ranges)
    if mod_ranges:
        mod = pd.Series(_assign_module(timeline, mod_ranges), index=timeline.index, dtype=object)
        parts = mod.str.rsplit("|", n=1)
        timeline["module"], timeline["module_class"] = parts.str[0], parts.str[1]
    return timeline, phases


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


def _gpu_table(gpu: list[dict], ops: dict, launches: dict, phases: pd.DataFrame,
               graph_corr: set = frozenset()) -> pd.DataFrame:
    n = len(gpu)
    graph = np.zeros(n, dtype=bool)
    name = [None] * n
    kind = [None] * n
    start = np.empty(n)
    dur = np.empty(n)
    launch = np.full(n, np.nan)
    stream = np.full(n, -1, dtype="int64")
    regs = np.full(n, -1, dtype="int64")
    shmem = np.full(n, -1, dtype="int64")
    grid = [None] * n
    block = [None] * n
    op = [None] * n
    shapes = [None] * n
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
    df = pd.DataFrame({
        "name": name, "kind": kind,
        "start_ns": np.round(start * US_TO_NS).astype("int64"),
        "duration_ns": np.round(dur * US_TO_NS).astype("int64"),
        "launch_ns": launch * US_TO_NS,
        "grid": grid, "block": block, "registers": regs, "shared_bytes": shmem, "stream": stream,
        "op": op, "op_shapes": shapes, "graph": graph,
    })
    df["end_ns"] = df["start_ns"] + df["duration_ns"]
    df["phase"], df["step"] = _assign_phase(df["launch_ns"].to_numpy(), df["start_ns"].to_numpy(), phases)
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
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
