"""Re-derive a committed run's CUDA-graph phases of the ncu kernel table from the counters it stored, with the
current selection rule (capture.ncu_stage.rederive_graph_phases): python bench/rederive_ncu.py <run-dir> ...
Used when the selection changed after capture and the stored results already hold every kernel it now takes
(a graph step is profiled once per launch configuration, so they do)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from kernelbook.capture.ncu_stage import rederive_graph_phases  # noqa: E402

for run in sys.argv[1:]:
    info = rederive_graph_phases(Path(run))
    print(run, json.dumps({ph: {k: v.get(k) for k in ("selected", "profiled", "left_out")}
                           for ph, v in info["phases"].items()}, indent=1))
