"""GPU tests (issue 45): the capture paths only a GPU with Nsight Compute can run, `pytest -m gpu tests/gpu`.

A package, so that its conftest is imported as `gpu.conftest` and never shadows `tests/conftest.py`, which the
CPU tests import by the name `conftest`.
"""
