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
