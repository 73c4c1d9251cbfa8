#!/usr/bin/env bash
# Wheels the capture needs on a GPU machine that has no registry access (the lent machines have torch,
# transformers, pandas, pyarrow, pyyaml, nvidia-ml-py): NVIDIA's ncu-report reader (the copy inside the
# Nsight Compute install crashed reading its own report there) and orjson. Run here, in the repo root;
# on the GPU machine: bash bench/gpu_env.sh (installs them into /tmp/site and exports PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"; grep -qx "/.whl/" "$ex" 2>/dev/null || echo /.whl/ >> "$ex"
lock=requirements/lock.txt
pin() { grep -i "^${1//-/[-_]}==" "$lock" | head -1; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$(pin ncu-report)" "$(pin orjson)"
ls .whl
