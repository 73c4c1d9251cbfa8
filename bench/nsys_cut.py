"""A small real cut of a one-process nsys capture's sqlite export, for the CPU tests (tests/test_nsys.py): of each
pass (`kbpass#profiled`, `kbpass#shapes`), its vision encode, prefill and first `decode_steps` decode steps; every
row of the activity, runtime and NVTX tables outside those spans is deleted (and every runtime call no activity
correlates with), tables the reader never reads are dropped, and the database is gzipped.

    python bench/nsys_cut.py <run>/raw/timeline.sqlite <out.sqlite.gz> [decode_steps=2]
"""
from __future__ import annotations

import gzip
import shutil
import sqlite3
import sys
from pathlib import Path

KEEP = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds", "TARGET_INFO_SESSION_START_TIME")


def main(src: str, out: str, decode_steps: str = "2") -> None:
    dst = out.removesuffix(".gz")
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    text = "COALESCE(n.text, s.value)"
    rows = con.execute(f"SELECT {text}, n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                       f"WHERE {text} LIKE 'kbpass#%' OR {text} = 'decode' ORDER BY n.start").fetchall()
    spans, cur = [], None
    for name, start, end in rows:
        if name.startswith("kbpass#"):
            cur = [start, start, int(decode_steps)]
            spans.append(cur)
        elif cur is not None and cur[2] > 0 and start >= cur[0]:
            cur[1], cur[2] = end, cur[2] - 1
    inside = " OR ".join(f"(start BETWEEN {a} AND {b})" for a, b, _ in spans)
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if table not in KEEP:
            con.execute(f"DROP TABLE {table}")
        elif table not in ("StringIds", "TARGET_INFO_SESSION_START_TIME"):
            con.execute(f"DELETE FROM {table} WHERE NOT ({inside})")
    # the reader takes a runtime call only as the launch of an activity it correlates with
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId NOT IN (SELECT correlationId FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION SELECT "
                "correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET)")
    con.commit()
    con.execute("VACUUM")
    con.close()
    with open(dst, "rb") as f, gzip.open(out, "wb") as g:
        shutil.copyfileobj(f, g)
    Path(dst).unlink()
    print(f"{out}: spans {[(a, b) for a, b, _ in spans]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
