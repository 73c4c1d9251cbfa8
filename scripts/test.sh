#!/usr/bin/env bash
# Set up and run the tests (the README's test command), in a virtual environment with the locked versions.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
# the capture tests load tiny checkpoints on the CPU: CPU build of torch first, so the capture extra
# does not pull a CUDA build
pip install -q -c requirements/lock.txt "torch==2.13.0"
pip install -q -c requirements/lock.txt -e ".[test,capture]"
python -c "import torch, transformers; print(f'testing with torch {torch.__version__}, transformers {transformers.__version__}')"
# two workers (pytest-xdist), a test file each at a time: most of the suite waits on chapter kernels, a browser
# or JupyterLab, so two files at once on the CI's 2 cores take 536 s where one after another took 783 s
python -m pytest -q -n "${KB_TEST_WORKERS:-2}" --dist loadfile tests "$@"
