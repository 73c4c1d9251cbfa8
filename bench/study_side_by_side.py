"""Issue 44: a study run side by side on several GPUs against the same points captured alone. Prints each point's
decode step (plain and GPU-busy) in both and the difference, and each study's wall time (first start to last end,
from its manifest). Usage: python bench/study_side_by_side.py <side-by-side study> <alone study> [<one-GPU study>]"""
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from kernelbook.analyze import serving as SV  # noqa: E402
from kernelbook.load.study import open_study  # noqa: E402


def wall_s(st) -> float:
    """First start to last end of the study's points, from its manifest."""
    spans = [(datetime.fromisoformat(p.started).timestamp(), p.seconds) for p in st.points if p.started]
    return max(a + s for a, s in spans) - min(a for a, _ in spans) if spans else float("nan")


def main(side: str, alone: str, one_gpu: str | None = None) -> None:
    a, b = open_study(alone), open_study(side)
    da, db = SV.decode_table(a).set_index("batch"), SV.decode_table(b).set_index("batch")
    gpu = {SV.batch_of(p): p.gpu for p in b.held}
    d = pd.DataFrame({"gpu": pd.Series(gpu), "alone_plain_ms": da.plain_step_ms, "side_plain_ms": db.plain_step_ms,
                      "plain_diff_pct": 100 * (db.plain_step_ms / da.plain_step_ms - 1),
                      "alone_busy_ms": da.busy_step_ms, "side_busy_ms": db.busy_step_ms,
                      "busy_diff_pct": 100 * (db.busy_step_ms / da.busy_step_ms - 1)}).dropna(subset=["alone_plain_ms"])
    pd.set_option("display.width", 200)
    print(d.round(3).to_string())
    print(f"\n{b.study_id}: wall {wall_s(b):.0f} s for {len(b.held)} points")
    if one_gpu:
        o = open_study(one_gpu)
        print(f"{o.study_id}: wall {wall_s(o):.0f} s (first start to last end; spans leases if resumed), "
              f"points {sum(p.seconds or 0 for p in o.points):.0f} s in all")


if __name__ == "__main__":
    main(*sys.argv[1:])
