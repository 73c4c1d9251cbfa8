"""The ncu reader on a real report (3 decode kernels, H200, ncu 2025.3.1) and the derived columns."""
import pandas as pd
import pytest

from conftest import FIXTURE_REP
from kernelbook.analyze.kernels import name_key
from kernelbook.analyze.ncu_metrics import derive
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


def test_bundled_run_coverage_is_complete(run):
    k = run.ncu_kernels()
    assert len(k) == 20 and (k.status == "profiled").all()
    # DRAM rate in GB/s: bytes ÷ ns (ncu's byte/s scaled by 1e-9)
    assert k.dram_gbps.to_numpy() == pytest.approx((k.dram_bytes / k.duration_ns).to_numpy(), rel=0.05, abs=0.01)
    # every profiled row was matched across demanglers by name_key
    assert (k.ncu_name.map(name_key) == k.name.map(name_key)).all()


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
    from kernelbook.analyze.ncu_metrics import kernel_table

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
    from kernelbook.analyze.ncu_metrics import kernel_table

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
    """kernelbook's ncu filter, checked with Python's `re` on the bundled run's real names: the selected
    kernels as Kineto named them (kernels.parquet) against every launch ncu profiled and named with
    its own demangler (results.parquet, taken with the earlier short-name filter, so it holds sibling
    instantiations: `cos` vs `sin` functors, `<(int)4>` vs `<(int)8>`, `long` vs `float` reductions)."""
    import re

    from conftest import RUN
    from kernelbook.capture.ncu import BARE_NAME, name_pattern, name_regex

    selected = pd.read_parquet(RUN / "ncu" / "kernels.parquet").name.tolist()
    profiled = pd.read_parquet(RUN / "ncu" / "results.parquet").name.unique()
    rx = name_regex(selected)
    assert rx.startswith("regex:")
    rx = re.compile(rx[len("regex:"):])
    keys = {name_key(n) for n in selected}
    siblings = [n for n in profiled if name_key(n) not in keys]
    assert len(siblings) >= 10 and all("<" in n for n in siblings)
    assert not [n for n in siblings if rx.search(n)]
    assert all(rx.search(n) for n in profiled if name_key(n) in keys)
    # each selected kernel's own pattern finds its ncu name, and only that
    for n in selected:
        own = re.compile(name_pattern(n))
        assert [m for m in profiled if own.search(m)] == [m for m in profiled if name_key(m) == name_key(n)]
    # the bare-name alternative: C-linkage names and the stale bare names ncu's filter shows
    # for library launches, never a templated ATen name
    bare = re.compile(BARE_NAME)
    assert bare.search("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT")
    assert bare.search("CatArrayBatchedCopy_vectorized") and rx.search("vectorized_elementwise_kernel")
    assert not [n for n in profiled if "<" in n and bare.search(n)]


def test_h100_capture_profiled_every_selected_kernel_and_no_sibling():
    """The H100 run was captured with the current filter. Every selected kernel is profiled, including
    the cuBLASLt and cuDNN kernels that ncu's filter sees under a stale name; every templated result
    is one of the selected instantiations (no siblings), the rest are bare-named library launches."""
    from conftest import REPO

    run = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
    kernels = pd.read_parquet(run / "ncu" / "kernels.parquet")
    results = pd.read_parquet(run / "ncu" / "results.parquet")
    assert (kernels.status == "profiled").all() and len(kernels) == 20
    library = kernels.name[kernels.name.str.startswith(("nvjet", "cudnn_generated"))]
    assert len(library) >= 4
    keys = set(kernels.name.map(name_key))
    templated = results.name[results.name.str.contains("<")]
    assert templated.map(name_key).isin(keys).all()
    assert results.name[~results.name.str.contains("<")].str.match("nvjet_|cudnn_generated").all()


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
