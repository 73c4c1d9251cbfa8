"""Damaged runs (issue 31): each damage to a copy of the bundled run stops the book before any chapter with
one message naming the file and what is wrong, exit code 2, no traceback, and an earlier report kept as it
was. Paths given on the command line resolve against the caller's folder, outside the repository too."""
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO, RUN

STATIC = REPO / "data" / "runs" / "h200-deepseek-decoder-tp1-b1"  # timeline-only: no ncu counters


def _truncate(f):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _manifest(run, change):
    m = json.loads((run / "manifest.json").read_text())
    change(m)
    (run / "manifest.json").write_text(json.dumps(m))


def _table(f, change):
    df = pd.read_parquet(f)
    change(df).to_parquet(f, index=False)


# case → (damage done to the copy, what the message must say besides the file's name)
CASES = {
    "timeline truncated": (lambda r: _truncate(r / "timeline.parquet"), ("timeline.parquet", "not a readable Parquet")),
    "timeline is CSV": (lambda r: (r / "timeline.parquet").write_text("name,phase\nk,decode\n"),
                        ("timeline.parquet", "not a readable Parquet")),
    "timeline empty file": (lambda r: (r / "timeline.parquet").write_bytes(b""), ("timeline.parquet", "empty file")),
    "timeline is a folder": (lambda r: ((r / "timeline.parquet").unlink(), (r / "timeline.parquet").mkdir()),
                             ("timeline.parquet", "not a file")),
    "ncu kernels truncated": (lambda r: _truncate(r / "ncu" / "kernels.parquet"),
                              ("ncu/kernels.parquet", "not a readable Parquet")),
    "ncu metrics not parquet": (lambda r: (r / "ncu" / "metrics.parquet").write_text('{"a": 1}'),
                                ("ncu/metrics.parquet", "not a readable Parquet")),
    "manifest bad JSON": (lambda r: _truncate(r / "manifest.json"), ("manifest.json", "not valid JSON", "line")),
    "manifest not UTF-8": (lambda r: (r / "manifest.json").write_bytes(b'{"status": "\xff\xfe"}'),
                           ("manifest.json", "not UTF-8")),
    "manifest is a list": (lambda r: (r / "manifest.json").write_text("[1, 2]"),
                           ("manifest.json", "expected a JSON object")),
    "manifest without status": (lambda r: _manifest(r, lambda m: m.pop("status")),
                                ("manifest.json", "missing key(s) status")),
    "manifest without params": (lambda r: _manifest(r, lambda m: m.pop("params")),
                                ("manifest.json", "missing key(s) params")),
    "manifest unknown status": (lambda r: _manifest(r, lambda m: m.update(status="done")),
                                ("manifest.json", "status is 'done'")),
    "complete without ncu kernels": (lambda r: (r / "ncu" / "kernels.parquet").unlink(),
                                     ("manifest.json", "says the run is complete", "ncu/kernels.parquet is missing")),
    "complete without phases": (lambda r: (r / "phases.parquet").unlink(),
                                ("manifest.json", "says the run is complete", "phases.parquet is missing")),
    "ncu kernel not in timeline": (lambda r: _table(r / "ncu" / "kernels.parquet", lambda d: d.assign(
        name=d.name.where(d.kernel_id != "d003", "kernel_from_another_run"))),
        ("ncu/kernels.parquet", "kernel d003", "is not in timeline.parquet")),
    "ncu launch of an unknown kernel": (lambda r: _table(r / "ncu" / "launches.parquet", lambda d: d.assign(
        kernel_id=d.kernel_id.where(d.index != 0, "x999"))), ("ncu/launches.parquet", "x999", "not in kernels.parquet")),
    "timeline without a column": (lambda r: _table(r / "timeline.parquet", lambda d: d.drop(columns="duration_ns")),
                                  ("timeline.parquet", "lacks column(s) duration_ns")),
    "timeline durations as text": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.astype(str))), ("timeline.parquet", "column duration_ns", "expected numbers")),
    "timeline unknown phase": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        phase=d.phase.where(d.index != 5, "<b>warp</b>"))), ("timeline.parquet", "unknown phase(s)")),
    "timeline without rows": (lambda r: _table(r / "timeline.parquet", lambda d: d.iloc[:0]),
                              ("timeline.parquet", "has no rows")),
    # issue 39: runs that passed the door and rendered nonsense or failed late inside a chapter
    "timeline NaN duration": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.astype(float).where(d.index != 7))),
        ("timeline.parquet", "column duration_ns, row 7", "empty or NaN")),
    "timeline inf duration": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.astype(float).where(d.index != 7, float("inf")))),
        ("timeline.parquet", "column duration_ns, row 7", "infinite")),
    "timeline negative duration": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.where(d.index != 7, -d.duration_ns))),
        ("timeline.parquet", "column duration_ns, row 7", "negative")),
    "timeline duration not end - start": (lambda r: _table(r / "timeline.parquet", lambda d: d.assign(
        duration_ns=d.duration_ns.where(d.index != 7, 10 ** 12))),
        ("timeline.parquet", "column duration_ns, row 7", "not end_ns − start_ns")),
    "phases overlap": (lambda r: _table(r / "phases.parquet", _overlap_decode_steps),
                       ("phases.parquet", "start_ns/end_ns", "decode step 2 (row 6) overlaps decode step 1 (row 5)")),
    "phases: vision across prefill": (lambda r: _table(r / "phases.parquet", lambda d: d.assign(
        end_ns=d.end_ns.where(d.phase != "prefill", d.start_ns + 10 ** 6),
        duration_ns=d.duration_ns.where(d.phase != "prefill", 10 ** 6))),
        ("phases.parquet", "vision_encode step 0 (row 1) overlaps prefill step 0 (row 0)")),
    "steps truncated": (lambda r: _truncate(r / "steps.parquet"), ("steps.parquet", "not a readable Parquet")),
    "steps NaN wall time": (lambda r: _table(r / "steps.parquet", lambda d: d.assign(
        wall_ms=d.wall_ms.where(d.index != 4))), ("steps.parquet", "column wall_ms, row 4", "empty or NaN")),
    "ncu counter NaN": (lambda r: _table(r / "ncu" / "metrics.parquet", lambda d: d.assign(
        value=d.value.where(d.metric != "dram__bytes.sum"))),
        ("ncu/metrics.parquet", "column value, row", "'dram__bytes.sum' (result 0)", "empty or NaN")),
    "ncu counter +inf": (lambda r: _table(r / "ncu" / "metrics.parquet", lambda d: d.assign(
        value=d.value.where(d.metric != "gpu__time_duration.sum", float("inf")))),
        ("ncu/metrics.parquet", "'gpu__time_duration.sum' (result 0)", "infinite (inf)")),
    "ncu counter -inf": (lambda r: _table(r / "ncu" / "metrics.parquet", lambda d: d.assign(
        value=d.value.where(d.metric != "lts__t_bytes.sum", float("-inf")))),
        ("ncu/metrics.parquet", "'lts__t_bytes.sum' (result 0)", "infinite (-inf)")),
    "ncu counter negative": (lambda r: _table(r / "ncu" / "metrics.parquet", lambda d: d.assign(
        value=d.value.where(d.metric != "gpu__time_duration.sum", -d.value))),
        ("ncu/metrics.parquet", "'gpu__time_duration.sum' (result 0)", "negative (-")),
    "ncu percentage far below zero": (lambda r: _table(r / "ncu" / "metrics.parquet", lambda d: d.assign(
        value=d.value.where(d.metric != "sm__throughput.avg.pct_of_peak_sustained_elapsed", -40.0))),
        ("ncu/metrics.parquet", "'sm__throughput.avg.pct_of_peak_sustained_elapsed'", "negative (-40)")),
    "ncu kernel id twice": (lambda r: _table(r / "ncu" / "kernels.parquet", lambda d: d.assign(
        kernel_id=d.kernel_id.where(d.index != 3, d.kernel_id[2]))),
        ("ncu/kernels.parquet", "column kernel_id, row 3", "'v002' again (first at row 2)")),
    "ncu kernel amount infinite": (lambda r: _table(r / "ncu" / "kernels.parquet", lambda d: d.assign(
        flops_per_s=d.flops_per_s.where(d.index != 2, float("inf")))),
        ("ncu/kernels.parquet", "column flops_per_s, row 2 of kernel 'v002'", "infinite")),
    "ncu result id twice": (lambda r: _table(r / "ncu" / "results.parquet", lambda d: d.assign(
        result_id=d.result_id.where(d.index != 3, 2))), ("ncu/results.parquet", "column result_id, row 3", "again")),
    "ncu results truncated": (lambda r: _truncate(r / "ncu" / "results.parquet"),
                              ("ncu/results.parquet", "not a readable Parquet")),
    "device contradicts the GPU": (lambda r: _manifest(r, lambda m: m.update(device="b200")),
                                   ("manifest.json", "device is 'b200'", "'NVIDIA H100 80GB HBM3'", "'h100-sxm'")),
    "unknown GPU name": (lambda r: _manifest(r, lambda m: (m.update(device=None),
                                                           m["environment"]["gpu"].update(name="NVIDIA B300 SXM6"))),
                         ("manifest.json", "'NVIDIA B300 SXM6'", "params/devices.yaml", "add a row")),
    "unknown device key": (lambda r: _manifest(r, lambda m: m.update(device="no-such-gpu")),
                           ("manifest.json", "device 'no-such-gpu'", "params/devices.yaml")),
    "no device at all": (lambda r: _manifest(r, lambda m: (m.pop("device"), m["environment"].pop("gpu"))),
                         ("manifest.json", "names no device")),
    "measured peaks without bf16 GEMM": (lambda r: _manifest(r, lambda m: m["measured_peaks"].pop("bf16_gemm_tflops")),
                                         ("manifest.json", "measured_peaks lacks bf16_gemm_tflops")),
    "manifest environment not an object": (lambda r: _manifest(r, lambda m: m.update(environment="an H100")),
                                           ("manifest.json", "environment is str, expected an object")),
}


def _overlap_decode_steps(d):
    """Decode step 2 starting 10 ms earlier, inside step 1 (its duration kept consistent with its ends)."""
    i = d.index[(d.phase == "decode") & (d.step == 2)][0]
    return d.assign(start_ns=d.start_ns.where(d.index != i, d.start_ns - 10 ** 7),
                    duration_ns=d.duration_ns.where(d.index != i, d.duration_ns + 10 ** 7))


def _book(cwd, *args):
    return subprocess.run([sys.executable, "-m", "kernelbook", "book", *args], capture_output=True, text=True,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=600)


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_run_one_message_exit_2_nothing_overwritten(tmp_path, case):
    damage, says = CASES[case]
    run = tmp_path / "runs" / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    damage(run)
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("an earlier report")
    proc = _book(tmp_path, "--run", "runs/copy", "--out", "report")  # relative, from outside the repository
    msg = proc.stderr.strip()
    print(f"| {case} | {msg.splitlines()[0]} | {proc.returncode} |")  # the table of cases (pytest -s)
    assert proc.returncode == 2, msg
    assert "Traceback" not in msg and proc.stdout == ""
    assert msg.startswith("kernelbook: damaged run: ") and all(s in msg for s in says), msg
    assert str(run) in msg  # the file is named by its path
    assert (out / "index.html").read_text() == "an earlier report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "runs"]  # no staging or .failed folder


def test_relative_paths_from_outside_the_repository_and_exit_0_for_a_stop_by_design(tmp_path):
    """A relative --run, --out and --params from a folder outside the repository: the chapters read the
    caller's run (they ran in the repository before and stopped on every chapter, exit 0); a chapter the
    timeline-only run cannot serve by design shows its note and the book still exits 0; the index shows the
    run as the caller wrote it."""
    assert not str(tmp_path).startswith(str(REPO))
    shutil.copytree(STATIC, tmp_path / "runs" / "static")
    (tmp_path / "p.yaml").write_text("phase: decode\n")
    proc = _book(tmp_path, "--params", "p.yaml", "--run", "runs/static", "--out", "out",
                 "--chapters", "00_setup,03_histograms")
    assert proc.returncode == 0, proc.stderr
    timings = {e["stem"]: e for e in json.loads((tmp_path / "out" / "timings.json").read_text())}
    assert timings["00_setup"]["ok"] and "stopped" not in timings["00_setup"]
    assert "No Nsight Compute counters in static" in timings["03_histograms"]["stopped"]
    index = (tmp_path / "out" / "index.html").read_text()
    assert "<code>runs/static</code>" in index
    assert "h200-deepseek-decoder-tp1-b1" in (tmp_path / "out" / "00_setup.html").read_text() or \
        "static" in (tmp_path / "out" / "00_setup.html").read_text()


def test_a_missing_run_is_a_non_zero_exit_with_one_line(tmp_path):
    proc = _book(tmp_path, "--run", "runs/none", "--out", "out")
    assert proc.returncode == 2 and "runs/none does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_a_captured_runs_manifest_names_the_params_file_as_given(tmp_path, monkeypatch):
    """The book passes paths to the chapters absolute; the manifest a capture chapter begins records the
    params file as the caller wrote it (the runner hands it over in its session, contract.session)."""
    from kernelbook.capture.chapters import _begin
    from kernelbook.contract.session import BookSession
    from kernelbook.params import validate

    from kernelbook.contract.config import CaptureConfig

    params = CaptureConfig.of(validate({"capture": "never"}, consumer="capture"))
    for k, v in BookSession(params_as_given="params/mine.yaml").env().items():
        monkeypatch.setenv(k, v)
    m = _begin(tmp_path / "new-run", params, str(tmp_path / "abs" / "params" / "mine.yaml"))
    assert m["params_source"] == "params/mine.yaml"
    monkeypatch.delenv("KERNELBOOK_SESSION")
    m = _begin(tmp_path / "other-run", params, "/abs/p.yaml")  # a chapter run alone: the path it was given
    assert m["params_source"] == "/abs/p.yaml"


def _check(run):
    from kernelbook.load.run import check_run

    return check_run(run)


def _refused(run) -> str:
    from kernelbook.load.run import RunDamaged

    with pytest.raises(RunDamaged) as e:
        _check(run)
    return str(e.value)


def test_every_bundled_run_passes_the_door():
    """The door check refuses no real capture: ncu's percentages a little below 0, NaN derived columns of kernels
    that moved no L1 bytes, vision ranges nested in prefill, tensor-parallel ranks running side by side, graph runs,
    and the range pass's in-loop column, NaN where it did not reach a kernel (the bundled run's prefill and vision
    kernels)."""
    runs = sorted(p.parent for p in (REPO / "data" / "runs").glob("*/manifest.json"))
    assert len(runs) >= 15  # the same-host twin h100-deepseek-ocr-2-host-s14 was removed
    for run in runs:
        _check(run)
    k = pd.read_parquet(RUN / "ncu" / "kernels.parquet")
    assert k.dram_read_bytes_inloop.isna().sum() >= 1 and k.dram_read_bytes_inloop.notna().sum() >= 1


def test_tables_of_many_row_groups_are_read_as_one(tmp_path):
    """A long capture's tables come in several row groups, each with its own dictionary of names: the check reads
    them as it reads one (grouping names across groups needs one dictionary) and finds a bad row past the first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = tmp_path / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    for rel in ("timeline.parquet", "ncu/metrics.parquet"):
        pq.write_table(pq.read_table(run / rel), run / rel, row_group_size=5000)
    assert pq.ParquetFile(run / "timeline.parquet").num_row_groups > 1
    _check(run)
    f = run / "timeline.parquet"
    t = pd.read_parquet(f)
    t.loc[30000, "duration_ns"] = -1
    pq.write_table(pa.Table.from_pandas(t, preserve_index=False), f, row_group_size=5000)
    assert "column duration_ns, row 30000" in _refused(run)


def test_ncu_noise_and_numa_ids_pass_but_counters_do_not(tmp_path):
    """What ncu itself writes below zero passes: a percentage of peak a little under 0 (−0.73 % in the bundled run,
    the tensor pipes' `sm__pipe_tensor_type_…_cycles_active.min`; −0.97 % of `sm__mio2rf_writeback_active.min` in
    the capture before) and a NUMA id of −1 (a host without NUMA); the same value on a byte counter is refused, in
    the metric table and in the kernel table's in-loop columns (NaN there passes: a kernel the in-loop pass did not
    reach)."""
    from kernelbook.load.run import PCT_NOISE

    run = tmp_path / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    f = run / "ncu" / "metrics.parquet"
    m = pd.read_parquet(f)
    pct = m[m.unit == "%"]
    low = pct.loc[pct.value.idxmin()]
    assert low.value == pytest.approx(-0.7315890354017043) and -PCT_NOISE < low.value < 0
    assert low.metric == ("sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.min"
                          ".pct_of_peak_sustained_elapsed")
    _table(f, lambda d: d.assign(value=d.value.where(d.metric != "device__attribute_host_numa_id", -1.0)))
    _check(run)
    _table(f, lambda d: d.assign(value=d.value.where(d.metric != "dram__bytes.sum", -1.0)))
    assert "'dram__bytes.sum' (result 0): negative (-1)" in _refused(run)
    run = tmp_path / "inloop"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    kp = run / "ncu" / "kernels.parquet"
    _table(kp, lambda d: d.assign(dram_read_bytes_inloop=d.dram_read_bytes_inloop.where(d.kernel_id != "d005")))
    _check(run)  # NaN: the in-loop pass did not reach it
    _table(kp, lambda d: d.assign(dram_read_bytes_inloop=d.dram_read_bytes_inloop.where(d.kernel_id != "d005", -1.0)))
    msg = _refused(run)
    assert "column dram_read_bytes_inloop" in msg and "kernel 'd005'" in msg and "negative (-1)" in msg


def test_a_gpu_name_devices_yaml_lacks_passes_when_the_manifest_names_its_row(tmp_path):
    """The chapters price a run by its `device` row, else by its GPU's name: a GPU devices.yaml does not name, with
    a `device` that names a row (a capture on a new part priced as its sibling), is no contradiction; without the
    `device`, the same name stops at the door, named with the file to extend."""
    run = tmp_path / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    _manifest(run, lambda m: m["environment"]["gpu"].update(name="NVIDIA H100 NVL"))
    assert _check(run)["device"] == "h100-sxm"
    _manifest(run, lambda m: m.pop("device"))
    msg = _refused(run)
    assert "environment.gpu.name 'NVIDIA H100 NVL'" in msg and str(REPO / "params" / "devices.yaml") in msg


def test_tensor_parallel_run_is_checked_rank_by_rank(tmp_path):
    """A two-GPU run: the ranks' phase ranges overlap each other (the GPUs run side by side) and pass; a rank's own
    ranges may not; the tables of ncu/rank1/ are read as ncu/'s are."""
    src = REPO / "data" / "runs" / "h200-deepseek-decoder-tp2-b1"
    ph = pd.read_parquet(src / "phases.parquet")
    r0, r1 = (ph[(ph["rank"] == r) & (ph.phase == "decode")].iloc[0] for r in (0, 1))
    assert r0.start_ns < r1.end_ns and r1.start_ns < r0.end_ns  # across ranks: side by side
    run = tmp_path / "tp2"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("raw"))
    _check(run)

    def overlap_rank1(d):
        i = d.index[(d["rank"] == 1) & (d.phase == "decode") & (d.step == 2)][0]
        return d.assign(start_ns=d.start_ns.where(d.index != i, d.start_ns - 10 ** 7),
                        duration_ns=d.duration_ns.where(d.index != i, d.duration_ns + 10 ** 7))

    _table(run / "phases.parquet", overlap_rank1)
    msg = _refused(run)
    assert "phases.parquet" in msg and "decode step 2" in msg and "on rank 1" in msg
    shutil.copy(src / "phases.parquet", run / "phases.parquet")
    _table(run / "ncu" / "rank1" / "kernels.parquet", lambda d: d.assign(
        kernel_id=d.kernel_id.where(d.index != 1, d.kernel_id[0])))
    msg = _refused(run)
    assert str(run / "ncu" / "rank1" / "kernels.parquet") in msg and "column kernel_id, row 1" in msg


def test_a_failure_inside_a_chapter_is_a_note_and_one_line(tmp_path):
    """A damage the door does not know (the manifest's plain-generate time as text: chapter 00 formats it as a
    number): the chapter fails, the book exits 1 with one line naming the error, and the chapter's HTML and notebook
    show a note saying what failed and what to do, not a traceback."""
    run = tmp_path / "runs" / "copy"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    _manifest(run, lambda m: m["timeline_info"].update(plain_generate={"median_s": "fast"}))
    _check(run)  # past the door
    proc = _book(tmp_path, "--run", "runs/copy", "--out", "report", "--chapters", "00_setup")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    first = proc.stderr.strip().splitlines()[0]
    # the typed manifest keeps the text, chapter 00 formats it as a number: the error is Python's own words
    assert first.startswith("kernelbook: chapter 00_setup failed: ") and "format" in first, first
    assert "narrate/setup.py" in first and "the run may be damaged, or this is a kernelbook bug" in first
    failed = tmp_path / "report.failed"
    html = (failed / "00_setup.html").read_text()
    ipynb = (failed / "00_setup.ipynb").read_text()
    for text in (html, ipynb):
        assert "This chapter stopped on an error:" in text and "%tb" in text and "Traceback" not in text
    assert "<code>kb.summary(SN.headline(r, dev))</code>" in html  # the cell line that failed, though inputs are hidden
    nb = json.loads(ipynb)
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] in ("ValueError", "TypeError") and len(errors[0]["traceback"]) == 1
