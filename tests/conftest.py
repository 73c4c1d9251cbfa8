from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
FIXTURE_REP = REPO / "tests" / "fixtures" / "h200-decode-3kernels.ncu-rep"


@pytest.fixture(scope="session")
def run():
    from kernelbook.load.run import load_run

    return load_run(RUN)
