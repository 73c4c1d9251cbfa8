"""The trace ingest gives the committed tables of the bundled run, exactly: speed work on the ingest
(load.trace) cannot change a number."""
import pandas as pd

from conftest import RUN
from kernelbook.load.trace import ingest_torch_trace

# timeline.parquet's columns that come from the timed pass's trace; op_shapes, op_index and the modules are
# joined from the shapes pass (load.trace.join_shapes), whose trace the run does not keep, and the identity
# columns (short_name, category, ...) are added by analyze.kernels.annotate when the run is written
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
