"""The ncu reader on a real report (3 decode kernels, H200, ncu 2025.3.1) and the derived columns."""
import json

import pandas as pd
import pytest

from conftest import FIXTURE_REP
from kernelbook.contract.kernels import name_key
from kernelbook.capture.ncu_tables import derive
from kernelbook.load.ncu import NcuReportError, read_ncu_report


@pytest.fixture(scope="module")
def report():
    return read_ncu_report(FIXTURE_REP)


def test_reads_every_profiled_launch(report):
    metrics, results = report
    assert len(results) == 4
    assert set(metrics.columns) == {"result_id", "metric", "unit", "value"}
    assert results.loc[0, "name"] == "nvjet_sm90_tst_16x64_64x16_4x1_v_bz_TNN"
    assert results.loc[2, "grid"] == "6x1120x1" and results.loc[2, "block"] == "256x1x1"


def test_tensor_flops_of_the_decode_gemv_are_the_padded_tile(report):
    metrics, _ = report
    d = derive(metrics, "hopper").set_index("result_id")
    # aten::mm 1x1280 @ 1280x1280 on a 64-row MMA tile: 2 * 64 * 1280 * 1280 FLOPs
    assert d.loc[0, "flops_tensor_bf16"] == 2 * 64 * 1280 * 1280
    assert d.loc[0, "flops_tensor"] == pytest.approx(2 * 64 * 1280 * 1280)
    # the cuDNN SDPA kernel uses HMMA (bf16 in, fp32 accumulate)
    assert d.loc[1, "flops_tensor_bf16"] == 104857600
    assert d.loc[2, "flops_tensor"] == 0
    assert d.loc[0, "duration_ns"] == 5504
    assert d.loc[0, "intensity_dram"] == pytest.approx(d.loc[0, "flops"] / d.loc[0, "dram_bytes"])
    # ncu reports the DRAM rate in byte/s; the column is GB/s and agrees with bytes ÷ duration
    for i in d.index:
        assert d.loc[i, "dram_gbps"] == pytest.approx(d.loc[i, "dram_bytes"] / d.loc[i, "duration_ns"], rel=0.02)


def test_corrupt_and_truncated_reports_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(FIXTURE_REP.read_bytes()[:1000])
    with pytest.raises(NcuReportError, match="not a readable|could not be read|no profiled"):
        read_ncu_report(bad)
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    with pytest.raises(NcuReportError, match="is empty"):
        read_ncu_report(empty)


def _prefill_lm_head(k: pd.DataFrame) -> str:
    """The prefill lm_head GEMV's kernel id: the one prefill launch of the nvjet 384x8 tile (the vocab projection)."""
    ids = k.kernel_id[(k.phase == "prefill") & (k.name == "nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT")]
    assert len(ids) == 1
    return ids.iloc[0]


def test_bundled_run_coverage_is_complete(run):
    """Vision encode, prefill and decode top-20, one ncu process, selection by position: every kernel profiled,
    and 75 results for 60 kernels (the helpers the same op calls launch: cub's radix sort beside the MoE
    routing, the grouped GEMM's setup kernel, the kernels a vision op call launches beside the selected one)."""
    k = run.ncu_kernels()
    assert len(k) == 60 and (k.status == "profiled").all()
    assert k.groupby("phase").size().to_dict() == {"decode": 20, "prefill": 20, "vision_encode": 20}
    assert set(k.kernel_id[k.phase == "vision_encode"]) == {f"v{i:03d}" for i in range(20)}
    info = run.manifest["ncu"]
    assert info["processes"] == 1 and info["cache_control"] == "all"
    results = pd.read_parquet(run.path / "ncu" / "results.parquet")
    assert info["results"] == len(results) == 75 and info["results_per_selected"] == pytest.approx(75 / 60)
    assert sum(p["results"] for p in info["phases"].values()) == 75
    # DRAM rate in GB/s: bytes ÷ ns (ncu's byte/s scaled by 1e-9)
    assert k.dram_gbps.to_numpy() == pytest.approx((k.dram_bytes / k.duration_ns).to_numpy(), rel=0.05, abs=0.01)
    # the main pass's reads and writes add up to its DRAM bytes
    assert (k.dram_read_bytes + k.dram_write_bytes).to_numpy() == pytest.approx(k.dram_bytes.to_numpy(), rel=1e-6)
    # the position each result was tied by is confirmed by the name in all but two rows, both explained: the
    # grouped GEMM ncu names otherwise, and the prefill lm_head GEMV (p015 on the re-captured run, p016 before)
    assert (k.identity == "position; names agree").sum() == 58
    assert set(k.kernel_id[k.identity != "position; names agree"]) == {"p000", _prefill_lm_head(k)}
    assert k.set_index("kernel_id").loc[_prefill_lm_head(k), "identity"].startswith("same kernel profiled in decode")


def test_a_kernel_kineto_could_not_demangle_is_profiled_by_position(run):
    """The prefill's biggest kernel, CUTLASS's grouped GEMM for the MoE experts, reaches the timeline
    under its mangled name (Kineto did not demangle it) while ncu's report demangles it: a name filter
    built from the timeline never matches (the earlier capture missed it as 'name filter did not
    match'). By position it is the launch inside its op call (aten::_grouped_mm), and its counters
    say so: DRAM bytes = the 64 experts' weights + the routed rows."""
    import re

    from kernelbook.capture.ncu import name_pattern

    p0 = run.ncu_kernels().set_index("kernel_id").loc["p000"]
    assert p0["name"].startswith("_ZN7cutlass13device_kernel") and "GroupProblemShape" in p0["name"]
    assert p0.ncu_name.startswith("void cutlass::device_kernel<") and p0.status == "profiled"
    assert p0.identity == "position; ncu names it otherwise"
    assert re.search(name_pattern(p0["name"]), p0.ncu_name) is None
    launch = run.timeline[(run.timeline.phase == "prefill") & (run.timeline.op_index == p0.op_index)
                          & (run.timeline.step == p0.profiled_step)]
    assert set(launch.op) == {"aten::_grouped_mm"}
    weights, rows = 64 * 1280 * 1792 * 2, 6774 * 1280 * 2
    assert p0.dram_bytes == pytest.approx(weights + rows, rel=0.15)


def test_decode_bytes_are_what_the_weights_and_kv_cache_imply(run):
    """Cache control `all`: the decode GEMV's DRAM bytes are its 1280×1280 bf16 weights and the decode
    attention's are its KV cache (10 heads × 1130 × 128, K and V), each within ±15 %."""
    from kernelbook.analyze.ncu_report import byte_fidelity

    k = run.ncu_kernels().set_index("kernel_id")
    assert k.loc["d000", "dram_bytes"] == pytest.approx(1280 * 1280 * 2, rel=0.15)
    assert k.loc["d008", "dram_bytes"] == pytest.approx(2 * 10 * 1130 * 128 * 2, rel=0.15)
    bf = byte_fidelity(run.ncu_kernels(), run.timeline, run.manifest).set_index("kernel_id")
    mat = bf[bf.category.isin(["GEMM", "GEMV", "attention"])]
    assert mat.loc[mat.phase == "decode", "verdict"].eq("agrees").all() and (mat.phase == "decode").sum() == 4
    assert mat.verdict.str.startswith("agrees").all()


def test_byte_check_uses_the_launch_ncu_profiled(run):
    """Chapter 02's byte table showed decode attention (d008) with the KV cache of another step (1130
    tokens, 5.79 MB), the configuration's most common shapes, while its FLOP check and ncu's counters
    are of the launch profiled: step 32, op 55, 1161 tokens."""
    from kernelbook.analyze.ncu_report import byte_fidelity, fidelity

    k = run.ncu_kernels().set_index("kernel_id").loc["d008"]
    assert (k.profiled_step, k.op_index) == (32, 55)
    d = run.timeline
    at = d[(d.phase == "decode") & (d.step == 32) & (d.op_index == 55) & (d.name == k["name"])]
    assert at.op_shapes.iloc[0].startswith("1x10x1x128;1x10x1161x128;1x10x1161x128")
    bf = byte_fidelity(run.ncu_kernels(), run.timeline, run.manifest).set_index("kernel_id").loc["d008"]
    fid = fidelity(run.ncu_kernels(), run.timeline).set_index("kernel_id").loc["d008"]
    assert bf.op_shapes == fid.op_shapes == at.op_shapes.iloc[0]
    # q and the K, V of 1161 tokens, bf16: 2 · (10·128 + 2·10·1161·128) B = 5.95 MB, ncu read 5.98 MB
    assert bf.implied_read_bytes == 2 * (10 * 128 + 2 * 10 * 1161 * 128)
    assert bf.dram_bytes / (bf.implied_read_bytes + bf.implied_write_bytes) == pytest.approx(1.0049, abs=1e-4)


def test_name_key_bridges_kineto_and_nvidia_demanglers():
    kineto = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
              "neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#9}::"
              "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::neg_kernel_"
              "cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#9}::operator()() "
              "const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_"
              "nocast<at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
              "{lambda()#9}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native"
              "::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#9}::"
              "operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})")
    nvidia = ("void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::"
              "native::neg_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 2)]::operator ()() const::"
              "[lambda() (instance 9)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]>(at::"
              "TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
    assert name_key(kineto) == name_key(nvidia)
    assert name_key("void at::native::sbtopk::gatherTopK<float, unsigned int, 1, false>(float*)") == \
        name_key("void at::native::sbtopk::gatherTopK<float, unsigned int, (int)1, (bool)0>(T1 *)")
    # different instantiations stay apart
    assert name_key(kineto) != name_key(kineto.replace("<128, 4,", "<128, 2,"))


def test_ncu_past_its_time_limit_is_stopped_with_a_clear_error(tmp_path):
    import sys
    import time

    from kernelbook.capture.ncu import NcuError, run_ncu

    # a real child process standing in for a hung profiler: it prints, then never finishes on its own
    cmd = [sys.executable, "-c", "import time; print('==PROF== profiling', flush=True); time.sleep(60)"]
    t = time.perf_counter()
    with pytest.raises(NcuError, match="did not finish within ncu_timeout_s = 1 s.*kept"):
        run_ncu(cmd, tmp_path / "ncu.log", timeout_s=1)
    assert time.perf_counter() - t < 30  # SIGINT ended it, not the 60 s sleep
    assert "==PROF== profiling" in (tmp_path / "ncu.log").read_text()


def test_every_selected_kernel_gets_profiled_or_a_named_reason(run, report):
    """The fixture holds 3 of the bundled run's top-20 decode kernels; the other 17 get reasons."""
    from kernelbook.capture.ncu import select_kernels
    from kernelbook.capture.ncu_tables import kernel_table

    metrics, results = report
    sel = select_kernels(run.timeline, "decode", 20)
    cut = kernel_table(sel, metrics, results, run.timeline, "ncu did not finish within ncu_timeout_s = 60 s")
    assert len(cut) == 20
    profiled = cut[cut.status == "profiled"]
    fixture_keys = set(results.name.map(name_key))
    assert set(profiled.name.map(name_key)) == fixture_keys & set(sel.kernels.name.map(name_key))
    assert 1 <= len(profiled) <= 3
    assert cut.loc[cut.status != "profiled", "status"].str.startswith("ncu: ncu did not finish").all()
    # no error: the unmatched ones say the name filter matched nothing, never a crash
    clean = kernel_table(sel, metrics, results, run.timeline, None)
    assert (clean.loc[clean.status != "profiled", "status"] ==
            "ncu profiled no launch of it (name filter did not match)").all()
    # nothing read at all (ncu wrote no report): every row has the reason
    none = kernel_table(sel, None, None, run.timeline, "ncu failed (exit 1): boom")
    assert (none.status == "ncu: ncu failed (exit 1): boom").all()


def test_a_kernel_absent_from_the_profiled_step_is_named_as_such(run, report):
    from kernelbook.capture.ncu import select_kernels
    from kernelbook.capture.ncu_tables import kernel_table

    sel = select_kernels(run.timeline, "decode", 20)
    tl = run.timeline[run.timeline.kind == "kernel"]
    # every decode kernel of this run runs in every step; a prefill-only kernel stands in for one that
    # the chosen step does not launch
    absent = sorted(set(tl.loc[tl.phase == "prefill", "name"]) - set(tl.loc[tl.phase == "decode", "name"]))
    sel.kernels = pd.concat([sel.kernels.head(2), pd.DataFrame([{"kernel_id": "kx", "name": absent[0]}])],
                            ignore_index=True)
    t = kernel_table(sel, *report, run.timeline, None)
    assert t.loc[2, "status"] == f"not launched inside the profiled range (decode step {sel.step})"



def test_name_filter_takes_the_selected_instantiations_and_no_siblings():
    """The by-name fallback's ncu filter, checked with Python's `re` on the bundled run's real names: the
    selected kernels as Kineto named them against every launch ncu profiled and named with its own
    demangler, which includes the helpers launched beside them (cub's radix-sort passes, casts)."""
    import re

    from conftest import RUN
    from kernelbook.capture.ncu import BARE_NAME, name_pattern, name_regex

    kernels = pd.read_parquet(RUN / "ncu" / "kernels.parquet")
    selected = [n for n in kernels.name.tolist() if not n.startswith("_Z")]  # mangled: never matches
    profiled = pd.read_parquet(RUN / "ncu" / "results.parquet").name.unique()
    rx = name_regex(selected)
    assert rx.startswith("regex:")
    rx = re.compile(rx[len("regex:"):])
    keys = {name_key(n) for n in selected}
    others = [n for n in profiled if name_key(n) not in keys and "<" in n and "cutlass" not in n]
    assert len(others) >= 3
    assert not [n for n in others if rx.search(n)]
    assert all(rx.search(n) for n in profiled if name_key(n) in keys)
    # each selected kernel's own pattern finds its ncu name, and only that
    for n in selected:
        own = re.compile(name_pattern(n))
        assert [m for m in profiled if own.search(m)] == [m for m in profiled if name_key(m) == name_key(n)]
    bare = re.compile(BARE_NAME)
    assert bare.search("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT")
    assert bare.search("CatArrayBatchedCopy_vectorized") and rx.search("vectorized_elementwise_kernel")
    assert not [n for n in profiled if "<" in n and bare.search(n)]


def test_results_are_tied_to_kernels_by_launch_position(run):
    """The reader on the run's own tables: results in launch order against the planned launches. A cut-
    off report (the first 30 results) keeps exactly the kernels whose launch came before the cut."""
    from kernelbook.capture.ncu_tables import kernel_table_by_position
    from kernelbook.capture.ncu import expected_launches, representative_launches, select_kernels

    tl = run.timeline
    sels = [select_kernels(tl, ph, 20) for ph in ("vision_encode", "prefill", "decode")]
    reps = pd.concat([representative_launches(tl, s) for s in sels], ignore_index=True)
    exp = expected_launches(tl, reps)
    planned = pd.read_parquet(run.path / "ncu" / "launches.parquet")
    assert len(exp) == len(planned) == run.manifest["ncu"]["expected_launches"] == 75 and (exp[["phase", "op_index", "name"]].values == planned[["phase", "op_index", "name"]].values).all()
    metrics = run.ncu_metrics().drop(columns=["phase"])
    results = pd.read_parquet(run.path / "ncu" / "results.parquet").drop(columns=["phase"])
    selected = pd.concat([s.kernels.assign(phase=s.phase) for s in sels], ignore_index=True)
    full, _ = kernel_table_by_position(selected, exp, metrics, results, None, timeline=tl)
    assert (full.status == "profiled").all()
    assert full.dram_bytes.to_numpy() == pytest.approx(run.ncu_kernels().dram_bytes.to_numpy())
    cut_results = results[results.result_id < 30]
    cut, _ = kernel_table_by_position(selected, exp, metrics[metrics.result_id < 30], cut_results,
                                      "ncu did not finish within ncu_timeout_s = 60 s", timeline=tl)
    before = set(exp.loc[:29].dropna(subset=["kernel_id"]).apply(lambda r: (r.phase, r.kernel_id), axis=1))
    got = set(cut.loc[cut.status == "profiled"].apply(lambda r: (r.phase, r.kernel_id), axis=1))
    twins = set(cut.loc[cut.identity.fillna("").str.startswith("same kernel")].apply(
        lambda r: (r.phase, r.kernel_id), axis=1))
    assert got - twins == before
    missing = cut[cut.status != "profiled"].set_index(["phase", "kernel_id"]).status
    assert missing.str.startswith("ncu: ncu did not finish").sum() == len(missing) - 1
    # the prefill lm_head GEMV (its launch had no op call in the shapes pass) has no twin before the cut
    assert missing.loc[("prefill", _prefill_lm_head(run.ncu_kernels()))].startswith(
        "no launch of it inside a numbered op call")


def test_the_reader_comes_from_the_wheel_and_its_absence_says_how_to_install_it(tmp_path):
    """The wheel is what reads reports reliably; without it (and with no Nsight Compute install on PATH)
    the error names the pip command, not a bare ImportError."""
    import subprocess
    import sys

    from kernelbook.load.ncu import reader_origin

    assert reader_origin() == "wheel"
    code = ("import sys; sys.modules['ncu_report'] = None\n"
            "from kernelbook.load.ncu import read_ncu_report, NcuReportError\n"
            "try:\n    read_ncu_report(sys.argv[1])\nexcept NcuReportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(FIXTURE_REP)], capture_output=True, text=True,
                         env={"PATH": str(tmp_path), "PYTHONPATH": ":".join(sys.path)})
    assert "pip install ncu-report" in out.stdout, out.stderr


def test_chapters_say_what_cache_control_none_distorts(run):
    from kernelbook.narrate.ncu_report import cache_control_note

    assert "flushed before each replay" in cache_control_note(run.manifest, "04")  # the bundled run: all
    none = {**run.manifest, "ncu": {**run.manifest["ncu"], "cache_control": "none"}}
    for ch, what in (("03", "L2 hit histograms"), ("04", "DRAM-level roofline point"), ("05", "memory-bound")):
        note = cache_control_note(none, ch)
        assert "--cache-control none" in note and what in note and "cache_control: all" in note


def test_chapter_02_says_how_the_ncu_worker_ran(run):
    """The bundled run's ncu account names the worker's one-token warmup, the decode steps that led up to a
    profiled one without cuDNN attention and its profiler gate, as the worker recorded them (manifest ncu.worker)."""
    from kernelbook.analyze.provenance import ncu_account

    w = run.manifest["ncu"]["worker"]
    assert w["warmup_tokens"] == 1 and w["cudnn_free_decode_steps"] > 0
    # the lead-up steps are the decode steps before the last profiled one, less the profiled ones
    steps = {int(k.split(":")[1]) for k in json.loads((run.path / "ncu" / "targets.json").read_text())
             if k.startswith("decode:")}
    assert w["cudnn_free_decode_steps"] == max(steps) - 1 - len(steps - {max(steps)})
    assert w["max_new_tokens"] == max(steps) + 1
    acc = ncu_account(run.manifest).set_index("item")["value"]
    # the worker started the profiler only around each target op call (ncu ran with --profile-from-start off)
    assert w["profile_gate"] is True and "--profile-from-start off" in run.manifest["ncu"]["command"]
    assert acc["ncu worker"] == (f"1 warmup generate of 1 token; {w['max_new_tokens']} new tokens; "
                                 f"{w['cudnn_free_decode_steps']} decode steps that lead up to a profiled one "
                                 "ran attention without cuDNN; ncu profiled only while the worker had the profiler "
                                 "started, around each target op call")


def test_nvidia_rule_results_travel_with_each_result():
    """The report's own rule results (Nsight Compute's per-section advice) are read into `results.rules`: the
    fixture's first kernel has the "Small Grid" bottleneck and a launch-configuration speedup estimate."""
    import json

    _, results = read_ncu_report(FIXTURE_REP)
    rules = [json.loads(r) for r in results.rules]
    assert all(rules)
    first = {r["rule"]: r for r in rules[0]}
    assert first["SOLBottleneck"]["title"] == "Small Grid" and "@" not in first["SOLBottleneck"]["message"]
    assert 0 < first["LaunchConfiguration"]["speedup_pct"] <= 100
    assert {r["type"] for rs in rules for r in rs} <= {"ok", "warning", "optimization", "note", "error"}
