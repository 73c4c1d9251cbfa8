"""The numbers the book shows for a run: every table's numeric columns, chapter by chapter, as JSON.

Each chapter's code cells run in this process (as the book runs them, with the chapter's default
parameters and `run_dir` set), with `kb.table` recording the frame it is given. The numeric columns of
every recorded table are written in long form (chapter, table ordinal, caption, column, values), so two
versions of the code can be compared number for number: speed work must leave them unchanged
(tests/test_same_numbers.py compares the bundled run against tests/fixtures/bundled_numbers.json).

Usage: python bench/book_numbers.py [run_dir] [--out FILE]
    (default: the bundled run, written to tests/fixtures/bundled_numbers.json; run it on the code the
    numbers should come from, e.g. a worktree of an earlier commit with PYTHONPATH=<worktree>/lib)
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ["00_setup", "01_timeline", "02_ncu", "03_histograms", "04_roofline", "05_classification", "06_npu",
            "07_summary"]


def _values(col) -> list | None:
    import pandas as pd

    from kernelbook.contract.quantity import Q

    if col.dtype == object and col.map(lambda v: isinstance(v, Q)).any() and col.map(
            lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
        col = col.astype(float)  # a column of named quantities (`quantity.column`, object dtype): their numbers
    if not (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)):
        return None
    out = []
    for v in col.tolist():
        v = None if v is None or v is pd.NA else float(v)
        out.append(None if v is None or math.isnan(v) else (repr(v) if math.isinf(v) else v))
    return out


def book_numbers(run_dir: str, notebooks: Path = ROOT / "notebooks") -> list[dict]:
    """Long rows: chapter, table (ordinal in the chapter), caption, column, values (floats; None for NaN)."""
    import jupytext
    import pandas as pd
    from IPython import display as ipd

    from kernelbook import display as kd
    from kernelbook import notebook as kb

    rows: list[dict] = []
    where = {"chapter": "", "n": 0}

    original = kd.table

    def record(df, caption="", *a, **k):
        shown = original(df, caption, *a, **k)
        df = getattr(df, "data", df)  # a Styler holds its frame in .data
        if isinstance(df, pd.DataFrame):
            for c in df.columns:
                vals = _values(df[c])
                if vals is not None:
                    rows.append({"chapter": where["chapter"], "table": where["n"], "caption": str(caption),
                                 "column": str(c), "values": vals})
        where["n"] += 1
        return shown

    kept = kb.table, ipd.display
    kb.table = kd.table = record
    ipd.display = lambda *a, **k: None
    try:
        for stem in CHAPTERS:
            where.update(chapter=stem, n=0)
            nb = jupytext.read(notebooks / f"{stem}.py")
            g: dict = {}
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                src = cell.source
                if "parameters" in cell.metadata.get("tags", []):
                    src += f"\nrun_dir = {run_dir!r}"
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(src, f"{stem}", "exec"), g)
    finally:  # the process goes on as it was (a test run after this one sees no recorder and no chapter's cards)
        kb.table, ipd.display = kept
        kd.table = original
        kd.link_kernels(())
    return rows


def main(argv: list[str]) -> None:
    out = ROOT / "tests/fixtures/bundled_numbers.json"
    if "--out" in argv:
        i = argv.index("--out")
        out, argv = Path(argv[i + 1]).resolve(), argv[:i] + argv[i + 2:]
    run_dir = argv[0] if argv else "data/runs/h100-deepseek-ocr-2"
    import os

    os.chdir(ROOT)
    rows = book_numbers(run_dir)
    out.write_text(json.dumps(rows, indent=0, ensure_ascii=False))
    print(f"{len(rows)} numeric columns from {len({(r['chapter'], r['table']) for r in rows})} tables → {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
