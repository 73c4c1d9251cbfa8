"""What machine this is: GPU, driver, CUDA, library and profiler versions, NVML clocks.

Everything degrades to "absent" on a machine without the thing, so chapter 00 renders anywhere.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ABSENT = "absent"


# Where Nsight Systems lives when it is not on PATH: inside an Nsight Compute install (the lent GPU machines' image has
# it at /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys), or in its own install.
NSYS_GLOBS = ("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
              "/usr/local/cuda*/bin/nsys")


def find_nsys() -> Path | None:
    """The nsys executable: on PATH, else beside the `ncu` on PATH (inside its Nsight Compute install), else in a
    standard install folder (`NSYS_GLOBS`); None when there is none."""
    import glob

    exe = shutil.which("nsys")
    if exe:
        return Path(exe)
    ncu = shutil.which("ncu")
    near = [Path(ncu).resolve().parent / "host" / "target-linux-x64" / "nsys"] if ncu else []
    found = [p for p in near if p.is_file()] + sorted(Path(p) for g in NSYS_GLOBS for p in glob.glob(g))
    return found[0] if found else None


def _version(pkg: str) -> str:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return ABSENT


def tool_version(tool: str) -> str:
    """`ncu --version` / `nsys --version` → "2025.3.1.0" or "absent"."""
    exe = find_nsys() if tool == "nsys" else shutil.which(tool)  # nsys also where capture finds it
    if not exe:
        return ABSENT
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ABSENT
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else ABSENT


def gpu_info() -> dict | None:
    """GPU 0 through torch (name, CC, SMs, memory, L2) or None when no CUDA device is usable."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(0)
    return {
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "memory_gib": round(p.total_memory / 2**30, 1),
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "cuda": torch.version.cuda,
    }


def nvml_clocks() -> dict | None:
    """Current and max SM / memory clocks (MHz), driver version and clock-throttle reasons via NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        c = pynvml
        out = {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "sm_clock_mhz": c.nvmlDeviceGetClockInfo(h, c.NVML_CLOCK_SM),
            "sm_clock_max_mhz": c.nvmlDeviceGetMaxClockInfo(h, c.NVML_CLOCK_SM),
            "mem_clock_mhz": c.nvmlDeviceGetClockInfo(h, c.NVML_CLOCK_MEM),
            "mem_clock_max_mhz": c.nvmlDeviceGetMaxClockInfo(h, c.NVML_CLOCK_MEM),
        }
        try:
            out["applications_sm_clock_mhz"] = c.nvmlDeviceGetApplicationsClock(h, c.NVML_CLOCK_SM)
        except Exception:
            pass
        return out
    finally:
        pynvml.nvmlShutdown()


def environment() -> dict:
    """The manifest's environment block."""
    gpu = gpu_info()
    clocks = nvml_clocks()
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "gpu": gpu or ABSENT,
        "driver": (clocks or {}).get("driver", ABSENT),
        "cuda": (gpu or {}).get("cuda", ABSENT) if gpu else ABSENT,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "ncu": tool_version("ncu"),
        "nsys": tool_version("nsys"),
        "clocks": clocks or ABSENT,
    }


def git_revision(cwd=None) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=cwd, timeout=10).stdout.strip() or ABSENT
    except (OSError, subprocess.TimeoutExpired):
        return ABSENT


def no_gpu_device() -> bool:
    """True when this Linux machine has no GPU device node or driver at all (no NVIDIA driver, no ROCm /dev/kfd):
    torch would see no GPU, and importing it only to ask costs 1.6 s in each chapter that asks."""
    if not sys.platform.startswith("linux"):
        return False  # no cheap answer elsewhere: ask torch
    return not (os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/kfd")
                or any(n.startswith("nvidia") for n in os.listdir("/dev")))


def cuda_visible() -> bool:
    """torch sees a GPU (False without torch)."""
    if no_gpu_device():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def can_capture(part: str) -> tuple[bool, str]:
    """(possible, why not) on this machine: torch with a visible GPU; for ncu also ncu on PATH."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed (pip install -e '.[capture]')"
    if not cuda_visible():
        return False, "no GPU is visible to torch (torch.cuda.is_available() is False)"
    if part == "ncu" and not shutil.which("ncu"):
        return False, "Nsight Compute (ncu) is not on PATH"
    return True, ""
