"""Device spec peaks: one table (params/devices.yaml), looked up by the name CUDA/NVML report.

Ridge points are computed here from that table; analysis code never holds a peak literal.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DEVICES_YAML = Path(__file__).resolve().parents[2] / "params" / "devices.yaml"
PRECISIONS = ("bf16", "fp16", "fp8", "tf32", "fp32", "fp64")


class UnknownDeviceError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; this one is read by people
        return self.args[0]


@dataclass(frozen=True)
class Device:
    key: str
    names: tuple[str, ...]
    arch: str
    cc: str
    tflops: dict  # precision -> TFLOP/s (None where the part has no such unit)
    dram_gbps: float
    l2_mb: float
    sm_count: int
    sm_clock_max_mhz: float
    source: str
    link_gbps: float | None = None  # GPU-to-GPU link (NVLink), GB/s per direction; None: none listed

    @property
    def display_name(self) -> str:
        return self.names[0]

    def peak_flops(self, precision: str = "bf16") -> float:
        """Peak FLOP/s (not TFLOP/s) for `precision`."""
        v = self.tflops.get(precision)
        if v is None:
            raise ValueError(f"{self.display_name} has no {precision} peak in devices.yaml")
        return v * 1e12

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gbps * 1e9

    def ridge(self, precision: str = "bf16") -> float:
        """Ridge point in FLOP/byte: peak FLOP/s ÷ DRAM bytes/s."""
        return self.peak_flops(precision) / self.dram_bytes_per_s


@lru_cache(maxsize=4)
def load_table(path: str | Path = DEVICES_YAML) -> dict[str, Device]:
    raw = yaml.safe_load(Path(path).read_text())
    out = {}
    for key, row in raw.items():
        out[key] = Device(key=key, names=tuple(row["names"]), arch=row["arch"], cc=str(row["cc"]),
                          tflops=dict(row["tflops"]), dram_gbps=float(row["dram_gbps"]),
                          l2_mb=float(row["l2_mb"]), sm_count=int(row["sm_count"]),
                          sm_clock_max_mhz=float(row["sm_clock_max_mhz"]), source=row["source"],
                          link_gbps=float(row["link_gbps"]) if row.get("link_gbps") else None)
    return out


def lookup(name: str, path: str | Path = DEVICES_YAML) -> Device:
    """The row for a device name as CUDA/NVML report it (case-insensitive), or a row key."""
    table = load_table(str(path))
    want = name.strip().lower()
    for dev in table.values():
        if want == dev.key or want in (n.lower() for n in dev.names):
            return dev
    known = "; ".join(f"{d.key} ({d.names[0]})" for d in table.values())
    raise UnknownDeviceError(
        f"unknown device {name!r}. Known devices: {known}.\n"
        f"To add one, copy a row in {path} with the name your driver reports under `names`, and fill "
        "its peaks from the vendor datasheet with a `source` note.")


def peaks_table(path: str | Path = DEVICES_YAML):
    """All devices as a long table: device, quantity, unit, value."""
    import pandas as pd

    rows = []
    for d in load_table(str(path)).values():
        for p in PRECISIONS:
            rows.append((d.key, f"{p} peak", "TFLOP/s", d.tflops.get(p)))
        rows += [(d.key, "DRAM bandwidth", "GB/s", d.dram_gbps), (d.key, "L2", "MiB", d.l2_mb),
                 (d.key, "SMs", "count", d.sm_count), (d.key, "max SM clock", "MHz", d.sm_clock_max_mhz),
                 (d.key, "bf16 ridge", "FLOP/byte", d.ridge("bf16"))]
    return pd.DataFrame(rows, columns=["device", "quantity", "unit", "value"])
