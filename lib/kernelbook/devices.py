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
    # profiled ÷ plain generate per timeline backend as measured on this part ({"nsys": x, "torch": y, "pairs": n,
    # "measured": where}); None: not measured (timeline_backend: auto then keeps the torch profiler)
    timeline_overhead: dict | None = None

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
                          link_gbps=float(row["link_gbps"]) if row.get("link_gbps") else None,
                          timeline_overhead=dict(row["timeline_overhead"]) if row.get("timeline_overhead") else None)
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


@dataclass(frozen=True)
class MeasuredOverhead:
    """A timeline backend's overhead on one GPU, as bench/timeline_overhead.py measures it: the median over `pairs`
    alternating plain and profiled generates of the profiled ÷ plain ratio, per backend."""

    device: str
    nsys: float
    torch: float
    pairs: int | None
    where: str


def measured_overhead(gpu: str | None, path: str | Path = DEVICES_YAML) -> MeasuredOverhead | None:
    """The timeline overhead devices.yaml records for the GPU named `gpu`; None where the GPU is unknown or its row
    records none."""
    if not gpu:
        return None
    try:
        dev = lookup(gpu, path)
    except UnknownDeviceError:
        return None
    o = dev.timeline_overhead
    if not o or "nsys" not in o or "torch" not in o:
        return None
    return MeasuredOverhead(dev.display_name, float(o["nsys"]), float(o["torch"]),
                            int(o["pairs"]) if o.get("pairs") else None, str(o.get("measured", "devices.yaml")))


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


# ncu's device attributes (the same on every result of a run) → the Device field they measure
_NCU_FACTS = {"sm_count": ("device__attribute_multiprocessor_count", 1.0),
              "sm_clock_max_mhz": ("device__attribute_clock_rate", 1e-3),  # kHz
              "l2_mb": ("device__attribute_l2_cache_size", 1 / 2**20)}


def for_run(run) -> tuple[Device, dict]:
    """The run's device: its devices.yaml row (by the name the capture recorded), with the facts the run's ncu
    counters measured on the GPU itself winning over the row (SM count, max SM clock, L2 size, and the DRAM peak,
    `dram__bytes.sum.peak_sustained` × `dram__cycles_elapsed.avg.per_second`): a name lookup can pick a sibling
    part's row (an A100 PCIe and SXM share a name prefix). Returns (device, {field: source})."""
    from dataclasses import replace

    from .i18n import N_

    dev = lookup(run.info.device or run.gpu_name)
    src = {f: N_("devices.yaml (spec)") for f in ("sm_count", "sm_clock_max_mhz", "l2_mb", "dram_gbps")}
    m = run.ncu_metrics()
    if m is None or not len(m):
        return dev, src
    med = m.groupby("metric").value.median()
    got = {}
    for field, (metric, scale) in _NCU_FACTS.items():
        if metric in med.index and med[metric] > 0:
            got[field] = med[metric] * scale
            src[field] = N_("ncu device attribute (measured on this GPU)")
    peak, clock = "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"
    if peak in med.index and clock in med.index and med[peak] > 0:
        got["dram_gbps"] = med[peak] * med[clock] / 1e9
        src["dram_gbps"] = N_("ncu DRAM peak × DRAM clock (measured on this GPU)")
    if "sm_count" in got:
        got["sm_count"] = int(round(got["sm_count"]))
    return replace(dev, **got), src


def facts_table(dev: Device, sources: dict) -> "pd.DataFrame":
    """The device facts a chapter used, each with its source (long format)."""
    import pandas as pd

    from .i18n import tr

    rows = [(tr("SMs"), dev.sm_count, "count", sources["sm_count"]),
            (tr("max SM clock"), dev.sm_clock_max_mhz, "MHz", sources["sm_clock_max_mhz"]),
            (tr("L2 cache"), dev.l2_mb, "MiB", sources["l2_mb"]),
            (tr("DRAM peak"), dev.dram_gbps, "GB/s", sources["dram_gbps"])]
    return pd.DataFrame([(q, v, u, tr(s)) for q, v, u, s in rows], columns=["quantity", "value", "unit", "source"])
