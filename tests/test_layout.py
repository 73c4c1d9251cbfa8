"""contract.layout names every artifact of a run directory, and nothing else in the package spells one.

The rule the grep holds the code to (issue 40): **a path comes from contract.layout; words may name a file.**
A string literal counts when it could be part of a path: any piece of it (an f-string's text between its
`{…}`) that holds no whitespace and names an artifact (`"manifest.json"`, `f"{d}/kernels.parquet"`,
`".ncu-rep"`, `".parquet"`), or a run folder joined onto a path (`run / "ncu"`, `raw / f"rank{r}"`). A
literal with whitespace is prose — an error message, a translated sentence, a docstring — and may name a file
for its reader (`"… has no manifest.json: not a kernelbook run"`); comments are not code. Only
contract/layout.py may spell a path; `EXCEPTIONS` lists the few places that still do, each with its reason.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kernelbook.contract import layout as L
from kernelbook.contract.layout import NcuDir, RunLayout

REPO = Path(__file__).resolve().parents[1]
LAYOUT = REPO / "lib" / "kernelbook" / "contract" / "layout.py"
# artifact names (or their distinctive suffixes): a path piece holding one spells an artifact
FILE_TOKENS = ("manifest.json", ".parquet", "capture-error.txt", ".timeline-staging", ".ncu-staging", ".ncu-rep",
               ".nsys-rep", ".sqlite", "targets.json", ".seen.json", ".worker.json", "params.json", "info.json",
               "launch.json", "nsys.log", "ncu.log")
# run folders: spelled when joined onto a path (`x / "ncu"`) or as a segment of a slash path ("ncu/…")
FOLDER_JOIN = re.compile(r"^(ncu|raw|rank(\{\}|\d+)|\.ncu-rank(\{\}|\d+)|\.?(timeline|ncu)-staging)$")
FOLDER_SEGMENT = re.compile(r"(^|/)(ncu|raw)/")
# (file relative to the repository, literal) → why it may still spell the name: none today
EXCEPTIONS: dict = {}


def _text(node) -> str | None:
    """A string literal's text, an f-string's `{…}` parts as `{}`; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _pieces(node) -> list[str]:
    """The literal text of a string node, cut at its `{…}` parts (each piece is judged alone)."""
    t = _text(node)
    return [] if t is None else t.split("{}")


def spelled(source: str) -> list[tuple[int, str]]:
    """(line, literal) for every place `source` spells an artifact's path (see the module's rule)."""
    hits = []
    tree = ast.parse(source)
    joined = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            joined.update(id(v) for v in n.values)
    for n in ast.walk(tree):
        if id(n) in joined:  # an f-string's pieces are judged with the f-string
            continue
        for piece in _pieces(n):
            if re.search(r"\s", piece):
                continue  # prose: a message or sentence naming a file for its reader
            if any(t in piece for t in FILE_TOKENS) or FOLDER_SEGMENT.search(piece):
                hits.append((n.lineno, piece))
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            t = _text(n.right)
            if t is not None and FOLDER_JOIN.match(t):
                hits.append((n.lineno, t))
    return hits


def _sources() -> list[Path]:
    return sorted([*(REPO / "lib" / "kernelbook").rglob("*.py"), *(REPO / "notebooks").glob("*.py")])


def test_no_artifact_name_is_spelled_outside_the_layout():
    found, used = [], set()
    for f in _sources():
        if f == LAYOUT:
            continue
        rel = f.relative_to(REPO).as_posix()
        for line, piece in spelled(f.read_text(encoding="utf-8")):
            if (rel, piece) in EXCEPTIONS:
                used.add((rel, piece))
                continue
            found.append(f"{rel}:{line}: {piece!r}")
    assert not found, ("artifact paths spelled outside contract/layout.py (take them from RunLayout / NcuDir):\n"
                       + "\n".join(found))
    assert used == set(EXCEPTIONS), f"exceptions no longer needed, remove them: {set(EXCEPTIONS) - used}"


@pytest.mark.parametrize("code, hit", [
    ('p = run / "manifest.json"', "manifest.json"),
    ('p = f"{run}/ncu/kernels.parquet"', "/ncu/kernels.parquet"),
    ('p = run / "ncu" / f"rank{r}"', "ncu"),
    ('p = base.with_suffix(".ncu-rep")', ".ncu-rep"),
    ('p = d / f"{name}.parquet"', ".parquet"),
    ('p = "ncu/" + name', "ncu/"),
])
def test_the_grep_finds_a_spelled_path(code, hit):
    assert hit in [h for _, h in spelled(code)]


@pytest.mark.parametrize("code", [
    'raise RunError(f"{p} has no manifest.json: not a kernelbook run")',  # prose
    'def f():\n    """Reads timeline.parquet."""',  # a docstring
    '# run / "manifest.json"\nx = 1',  # a comment
    'part = "ncu"',  # the ncu part's name, not a path
    'import pyarrow.parquet as pq',
])
def test_the_grep_leaves_prose_and_names_alone(code):
    assert spelled(code) == []


def _every_path(lay: RunLayout) -> list[Path]:
    nd = lay.ncu()
    return [lay.manifest, lay.manifest_tmp, lay.timeline, lay.phases, lay.steps, lay.capture_error, lay.raw,
            lay.timeline_staging, lay.ncu_staging, lay.tp_launch, lay.trace_base(), lay.trace_base(shapes=True),
            lay.nsys_params, lay.nsys_base, lay.nsys_report, lay.nsys_sqlite, lay.nsys_log, lay.tp_params, lay.info,
            lay.tp_ncu_stage(1).root, lay.tp_rank(1).root, nd.kernels, nd.metrics, nd.results, nd.launches,
            nd.params, nd.targets, nd.targets_tmp, nd.targets_seen, nd.worker_run, nd.report(),
            L.report_file(nd.report()), L.log_file(nd.report()), L.log_file(nd.report("decode")),
            L.trace_json(lay.trace_base()), L.window_json(lay.trace_base(), 3), nd.path / L.READER_METRICS,
            nd.path / L.READER_RESULTS]


def test_every_token_the_grep_looks_for_is_a_path_of_the_layout():
    """The grep's list names what the layout makes, so it cannot drift from it."""
    paths = [p.as_posix() for p in _every_path(RunLayout(Path("/r")))]
    for t in FILE_TOKENS:
        assert any(t in p for p in paths), t


def test_the_run_directory_contract():
    lay = RunLayout(Path("/runs/a"))
    rel = lambda p: lay.rel(p)  # noqa: E731
    assert [rel(p) for p in (lay.manifest, lay.timeline, lay.phases, lay.steps, lay.capture_error, lay.raw)] == [
        "manifest.json", "timeline.parquet", "phases.parquet", "steps.parquet", "capture-error.txt", "raw"]
    assert rel(lay.manifest_tmp) == ".manifest.json.tmp"
    assert [rel(p) for p in (lay.timeline_staging, lay.ncu_staging)] == [".timeline-staging", ".ncu-staging"]
    assert rel(L.landing(lay.timeline)) == ".timeline.parquet.tmp"
    assert L.capture_staging(Path("/runs/new"), 42) == Path("/runs/.new.tmp-42")
    assert [rel(lay.trace_base()), rel(lay.trace_base(shapes=True))] == ["raw/trace", "raw/trace-shapes"]
    assert rel(L.trace_json(lay.trace_base(shapes=True))) == "raw/trace-shapes.json"
    assert rel(L.window_json(lay.trace_base(), 2)) == "raw/trace-w2.json"
    assert RunLayout.holding(lay.trace_base()) == lay
    assert [rel(p) for p in (lay.nsys_params, lay.nsys_report, lay.nsys_sqlite, lay.nsys_log)] == [
        "raw/params.json", "raw/timeline.nsys-rep", "raw/timeline.sqlite", "raw/nsys.log"]
    assert rel(lay.tp_params) == "raw/tp-params.json"
    assert [rel(lay.tp_rank(1).timeline), rel(lay.tp_rank(0).info)] == ["raw/rank1/timeline.parquet",
                                                                         "raw/rank0/info.json"]
    assert L.rank_run(lay.raw, 1) == lay.tp_rank(1)
    assert rel(lay.tp_ncu_stage(1).ncu_kernels()) == ".ncu-rank1/ncu/kernels.parquet"
    assert rel(lay.tp_ncu_stage(0).tp_launch) == ".ncu-rank0/launch.json"


def test_ncu_folders_by_rank():
    """Rank 0 (and a one-GPU run) → ncu/, rank r ≥ 1 → ncu/rank<r>/: the rule Run.ncu_dir and checks.ncu_table
    both take from the layout."""
    lay = RunLayout(Path("/runs/a"))
    assert lay.rel(lay.ncu_dir()) == lay.rel(lay.ncu_dir(0)) == "ncu"
    assert lay.rel(lay.ncu_dir(1)) == "ncu/rank1"
    assert lay.rel(lay.ncu_dir(3)) == "ncu/rank3"
    assert [lay.rel(p) for p in (lay.ncu_kernels(), lay.ncu_metrics(), lay.ncu_results(), lay.ncu_launches())] == [
        "ncu/kernels.parquet", "ncu/metrics.parquet", "ncu/results.parquet", "ncu/launches.parquet"]
    assert lay.rel(lay.ncu_kernels(1)) == "ncu/rank1/kernels.parquet"
    nd = lay.ncu(1)
    assert nd == NcuDir(lay.ncu_dir(1))
    assert [lay.rel(p) for p in (nd.params, nd.targets, nd.targets_tmp, nd.targets_seen, nd.worker_run)] == [
        "ncu/rank1/params.json", "ncu/rank1/targets.json", "ncu/rank1/targets.json.tmp",
        "ncu/rank1/targets.seen.json", "ncu/rank1/targets.worker.json"]
    assert [lay.rel(L.report_file(nd.report())), lay.rel(L.log_file(nd.report()))] == [
        "ncu/rank1/ncu.ncu-rep", "ncu/rank1/ncu.log"]
    assert lay.rel(L.report_file(nd.report("decode"))) == "ncu/rank1/decode.ncu-rep"
    assert nd.table("metrics") == nd.metrics


def test_the_tp_run_reads_each_rank_through_the_layout():
    """The committed tensor-parallel run: each rank's ncu folder is where the layout says, and the chapters' reader
    (Run.ncu_dir) and the parameter check (checks.ncu_table) read the same table for each rank."""
    from kernelbook.checks import ncu_table
    from kernelbook.load.run import load_run

    run = REPO / "data" / "runs" / "h200-deepseek-decoder-tp2-b1"
    lay = RunLayout(run)
    assert lay.ncu_folders() == ["ncu", "ncu/rank1"]
    share = {}
    for r in (0, 1):
        loaded = load_run(run, rank=r)
        assert loaded.ncu_dir == lay.ncu_dir(r)
        k, t = loaded.ncu_kernels(), ncu_table(run, rank=r)
        assert t.kernel_id.tolist() == k.kernel_id.tolist() and t.share.tolist() == k.share.tolist()
        share[r] = t.share.tolist()
    assert share[0] != share[1]  # each rank's kernels take their own share of its time: two tables, told apart
    assert ncu_table(run, rank=2) is None


def test_table_files_of_a_run(tmp_path):
    """What `diff` opens: the tables beside the manifest, then every table under ncu/ (sorted each)."""
    lay = RunLayout(tmp_path)
    for p in (lay.timeline, lay.phases, lay.ncu_kernels(), lay.ncu_metrics(1), lay.ncu(0).params):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    assert [lay.rel(p) for p in lay.table_files()] == [
        "phases.parquet", "timeline.parquet", "ncu/kernels.parquet", "ncu/rank1/metrics.parquet"]
