"""Loaded at interpreter start when bench/ballast is on PYTHONPATH (bench/ncu_ballast.py): with KB_BALLAST_GB
set, the process first takes that many GiB of device memory and writes it, so that ncu sees a bigger footprint."""
import os

_gb = float(os.environ.get("KB_BALLAST_GB", "0") or 0)
if _gb > 0 and os.environ.get("KB_NCU_PLAIN_RANK") is None:
    import torch

    _BALLAST = torch.ones(int(_gb * 2**30), dtype=torch.uint8, device="cuda")
