"""The shortcuts the speed work took give what the long way gave: the run cache, per-distinct-value
classification, and the book runner's chapters at once."""
import json
import shutil

import pandas as pd

from conftest import RUN


def test_run_cache_gives_each_caller_its_own_run_and_rereads_a_changed_file(tmp_path):
    from kernelbook.load.run import load_run

    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    a, b = load_run(run), load_run(run)
    assert a is not b and a.manifest is not b.manifest
    pd.testing.assert_frame_equal(a.timeline, b.timeline)
    a.timeline.loc[0, "duration_ns"] = -1  # a caller changing its tables or manifest changes no one else's
    a.manifest["status"] = "changed"
    c = load_run(run)
    assert c.timeline.loc[0, "duration_ns"] == b.timeline.loc[0, "duration_ns"] != -1
    assert c.manifest["status"] == "complete"
    m = json.loads((run / "manifest.json").read_text())
    m["params"]["note"] = "edited after the first load"
    (run / "manifest.json").write_text(json.dumps(m))
    assert load_run(run).manifest["params"]["note"] == "edited after the first load"


def test_matvec_rows_match_the_row_by_row_answer(run):
    from kernelbook.contract.shapes import is_matvec, matvec_rows

    shapes = run.timeline["op_shapes"]
    assert matvec_rows(shapes).tolist() == [is_matvec(s) for s in shapes]
    assert matvec_rows(shapes).any() and not matvec_rows(shapes).all()


def test_module_types_match_the_row_by_row_answer(run):
    from kernelbook.analyze.modules import layer_of, module_type, with_module_types

    t = run.timeline.copy()
    t.loc[t.index[:20], "module_class"] = None  # a module without its class
    got = with_module_types(t)
    want = [module_type(m if isinstance(m, str) else None, c if isinstance(c, str) else None)
            for m, c in zip(t["module"], t["module_class"])]
    assert got["module_type"].tolist() == want
    layers = [None if pd.isna(v) else int(v) for v in got["layer"]]
    assert layers == [layer_of(m) if isinstance(m, str) else None for m in t["module"]]
    assert any(v is not None for v in layers)
