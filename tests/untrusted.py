"""Copies of real runs whose strings are hostile, for the fuzz tests (issue 31).

A run directory is data someone else may hand over: kernel names come from whatever code ran on the GPU
(Triton names kernels after user functions), and a trace or manifest can be edited. `hostile_run` copies a
bundled run and appends `PAYLOAD` to every string a reader sees: kernel and op names, aten shapes, the
model id, prompt, variant label, notes, GPU name and commands in the manifest, and the run folder's own
name. The same suffix goes on a name wherever it appears (timeline and ncu tables), so joins by name hold
and the book renders as it does on the original run.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

# HTML and script (an element with a handler, a script tag, an attribute break-out), Markdown (a link to a
# script URL, an image, emphasis, a code span, table pipes, a heading after a line break, an entity) and
# control characters (NUL, ESC, CR, a bell)
PAYLOAD = (' <img src=x onerror="window.__kbpwned=1;alert(1)"><script>window.__kbpwned=2;alert(2)</script>'
           '"\'><b id=kbinjected>B</b> [link](javascript:alert(3)) ![img](x.png) **bold** _em_ `code` '
           '| pipe | table | ```fence``` $x$\n# Heading &amp; &lt;x&gt; {0} {name} %s \x00\x1b[31m\r\x07 end')
# the text a reader must see of it (control characters shown or dropped, never acting)
VISIBLE = ("<img src=x onerror=", "<script>", "[link](javascript:alert(3))", "![img](x.png)", "**bold**",
           "| pipe | table |", "# Heading &amp;")

TIMELINE_COLS = ("name", "short_name", "op", "friendly_name", "description")
NCU_COLS = ("name", "ncu_name", "function", "identity")
# manifest entries a reader sees, as key paths
MANIFEST_KEYS = (("params", "model"), ("params", "prompt"), ("params", "variant"), ("params_source",),
                 ("environment", "gpu", "name"), ("environment", "host"), ("environment", "torch"),
                 ("clock_state", "note"), ("timeline_info", "routing_note"), ("timeline_info", "model_class"),
                 ("timeline_info", "inputs", "prompt"), ("timeline_info", "inputs", "tokenizer"),
                 ("timeline_info", "inputs", "images"), ("timeline_info", "inputs", "inputs_built_with"),
                 ("ncu", "mode"), ("ncu", "command"), ("timeline_backend", "why"))


def _hostile(v):
    return v if v is None or (isinstance(v, float) and v != v) else f"{v}{PAYLOAD}"


def _shapes(v):
    # aten shapes stay parseable in front ("127x64;"), the payload rides in an extra slot
    return v if v is None or (isinstance(v, float) and v != v) else f"{v};{PAYLOAD}"


def _set(d: dict, path: tuple, fn) -> None:
    for k in path[:-1]:
        d = d.get(k)
        if not isinstance(d, dict):
            return
    if path[-1] in d:
        d[path[-1]] = fn(d[path[-1]]) if d[path[-1]] is not None else f"x{PAYLOAD}"


def _tables(folder: Path, cols: tuple[str, ...], renamed: dict[str, str]) -> None:
    for f in folder.glob("*.parquet"):
        df = pd.read_parquet(f)
        for c in cols:
            if c in df.columns:
                df[c] = df[c].map(lambda v: renamed.get(v) or _hostile(v))
        if "op_shapes" in df.columns:
            df["op_shapes"] = df["op_shapes"].map(_shapes)
        df.to_parquet(f, index=False)


def hostile_run(src: Path, dest_parent: Path, name: str = "fuzz<img src=x onerror=alert(9)>&") -> Path:
    """A copy of the run `src` under `dest_parent` (folder `name`, itself hostile) with `PAYLOAD` in every
    string a reader sees; returns its path."""
    dest = dest_parent / name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("raw", "*.ncu-rep"))
    # the longest decode kernel is named by the payload alone (no library recognises it: its friendly name is
    # its name), as the reproduction had it
    tl = pd.read_parquet(dest / "timeline.parquet", columns=["name", "phase", "duration_ns"])
    top = tl[tl.phase == "decode"].groupby("name").duration_ns.sum().idxmax()
    renamed = {top: "kb" + PAYLOAD}
    _tables(dest, TIMELINE_COLS, renamed)
    if (dest / "ncu").is_dir():
        _tables(dest / "ncu", NCU_COLS + ("op",), renamed)
    m = json.loads((dest / "manifest.json").read_text())
    for path in MANIFEST_KEYS:
        _set(m, path, _hostile)
    for part in m.get("produced_by", {}).values():
        if isinstance(part, dict) and "command" in part:
            part["command"] = _hostile(part["command"])
    m["run_id"] = dest.name
    (dest / "manifest.json").write_text(json.dumps(m, indent=1))
    return dest
