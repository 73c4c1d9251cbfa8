"""The dispatch mode behind kernel identity by position (see `phases.PhaseTracker.op_call`)."""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class OpNumbering(TorchDispatchMode):
    """Hands every op call to the tracker, which numbers it and marks it (profiler range or NVTX)."""

    def __init__(self, tracker):
        super().__init__()
        self.tracker = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.tracker.op_call(func, args, kwargs or {})
