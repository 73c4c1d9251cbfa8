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
python -m pytest -q tests "$@"
