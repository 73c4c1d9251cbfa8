#!/usr/bin/env bash
# Set up and run the tests (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
# the capture tests load tiny checkpoints on the CPU: CPU build of torch first, so the capture extra
# does not pull a CUDA build
python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[test,capture]"
python3 -m pytest -q tests
