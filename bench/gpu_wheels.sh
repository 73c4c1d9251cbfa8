#!/usr/bin/env bash
# Wheels a GPU machine without registry access needs (the lent machines have torch, transformers,
# pandas, pyarrow, pyyaml, nvidia-ml-py, jinja2, ...): for a capture, NVIDIA's ncu-report reader (the
# copy inside the Nsight Compute install crashed reading its own report there) and orjson; with
# `book`, also what renders the book there (papermill, nbconvert, jupytext, ipykernel, plotly, ...),
# at the versions of requirements/lock.txt. Run here, in the repo root:
#   bash bench/gpu_wheels.sh [book]      → .whl/
# then on the GPU machine: source bench/gpu_env.sh (installs them into /tmp/site, exports PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"; grep -qx "/.whl/" "$ex" 2>/dev/null || echo /.whl/ >> "$ex"
lock=requirements/lock.txt
# on the GPU image already, or only needed by transformers, the tests or JupyterLab
have='torch|transformers|nvidia-.*|triton|sympy|networkx|mpmath|tokenizers|safetensors|huggingface.hub|hf-xet|pillow|numpy|pandas|pyarrow|pyyaml|jinja2|markupsafe|filelock|fsspec|packaging|typing.extensions|regex|requests|urllib3|idna|certifi|charset.normalizer|tqdm|psutil|setuptools|six|python-dateutil|attrs|pygments|click|pytest|iniconfig|pluggy|httpx2?|httpcore2?|h11|anyio|typer|rich|shellingham|annotated-.*|pydantic(_core)?|typing-inspection|truststore|markdown-it-py|mdurl|narwhals|tzdata|kernelbook|jupyterlab|jupyterlab_server|jupyter_server|jupyter_server_terminals|jupyter-lsp|jupyter-events|jupyter_builder|notebook_shim|selenium|trio|trio-websocket|outcome|sortedcontainers|pysocks|wsproto|babel|json5|argon2-cffi|argon2-cffi-bindings|cffi|pycparser|arrow|isoduration|fqdn|rfc3339-validator|rfc3986-validator|rfc3987-syntax|jsonpointer|lark|uri-template|webcolors|overrides|prometheus_client|python-json-logger|send2trash|terminado|async-lru|sniffio|websocket-client'
if [ "${1:-}" = book ]; then
  grep -v '^#' "$lock" | grep -v -i -E "^($have)==" > /tmp/kb-gpu-reqs.txt
else
  grep -i -E '^(ncu[-_]report|orjson)==' "$lock" > /tmp/kb-gpu-reqs.txt
fi
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl -r /tmp/kb-gpu-reqs.txt
du -sh .whl; ls .whl | wc -l
