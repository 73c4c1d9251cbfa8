import pytest

from kernelbook.devices import UnknownDeviceError, load_table, lookup, peaks_table


def test_lookup_by_cuda_name_and_ridge_from_table():
    h200 = lookup("NVIDIA H200")
    assert h200.ridge("bf16") == pytest.approx(989.4e12 / 4800e9)
    assert lookup("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert lookup("nvidia geforce rtx 5090").key == "rtx-5090"


def test_required_devices_present_with_sources():
    keys = set(load_table())
    assert {"h100-sxm", "h100-pcie", "h200", "a100-80gb", "l40s", "rtx-4090", "rtx-5090", "b200"} <= keys
    for d in load_table().values():
        assert d.source and d.sm_count > 0 and d.dram_gbps > 0
        assert all(d.tflops[p] for p in ("bf16", "fp16", "tf32", "fp32", "fp64"))


def test_unknown_device_names_known_ones_and_how_to_add():
    with pytest.raises(UnknownDeviceError) as e:
        lookup("NVIDIA T4")
    msg = str(e.value)
    assert "h200 (NVIDIA H200)" in msg and "To add one" in msg


def test_peaks_table_is_long_with_units():
    t = peaks_table()
    assert list(t.columns) == ["device", "quantity", "unit", "value"]
    assert set(t.unit) >= {"TFLOP/s", "GB/s", "FLOP/byte"}


def test_the_runs_own_ncu_facts_win_over_the_table_row():
    """SM count, clock, L2 and the DRAM peak come from ncu's device attributes of the run where it has them (a name
    lookup can pick a sibling part's row); the row fills in what the run did not measure."""
    from conftest import REPO

    from kernelbook.devices import facts_table, for_run
    from kernelbook.load.run import load_run

    for name, dram in (("h100-deepseek-ocr-2", 3350.0), ("h200-deepseek-ocr-2", 4800.0)):
        r = load_run(REPO / "data" / "runs" / name)
        dev, src = for_run(r)
        med = r.ncu_metrics().groupby("metric").value.median()
        assert dev.sm_count == med["device__attribute_multiprocessor_count"] == 132
        assert dev.dram_gbps == pytest.approx(med["dram__bytes.sum.peak_sustained"]
                                              * med["dram__cycles_elapsed.avg.per_second"] / 1e9)
        assert abs(dev.dram_gbps / dram - 1) < 0.01  # within 1 % of the datasheet's figure
        assert src["sm_count"].startswith("ncu") and src["dram_gbps"].startswith("ncu")
        assert list(facts_table(dev, src).quantity) == ["SMs", "max SM clock", "L2 cache", "DRAM peak"]
    tp = load_run(REPO / "data" / "runs" / "h200-deepseek-decoder-tp2-b1")
    if tp.ncu_metrics() is None:
        dev, src = for_run(tp)
        assert src["dram_gbps"] == "devices.yaml (spec)" and dev.dram_gbps == 4800.0
