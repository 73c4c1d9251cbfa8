#!/usr/bin/env bash
# Wheels a GPU machine without registry access needs (the lent machines have torch, transformers,
# pandas, pyarrow, pyyaml, nvidia-ml-py, jinja2, ...): for a capture, NVIDIA's ncu-report reader (the
# copy inside the Nsight Compute install crashed reading its own report there) and orjson; with
# `book`, also what renders the book there (papermill, nbconvert, jupytext, ipykernel, plotly, ...),
# at the versions of requirements/lock.txt; with `tests` (the GPU suite, bench/gpu_tests.sh), the book's wheels
# packed into one file, .whl/wheels.tar.xz: stored uncompressed and xz'd together they come to ~18 MiB against
# ~44 MiB as downloaded, which with the repository (~37 MiB) is more than the device's 64 MiB. Run here, in the
# repo root:
#   bash bench/gpu_wheels.sh [book|tests]      → .whl/
# then on the GPU machine: source bench/gpu_env.sh (installs them into /tmp/site, exports PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"; grep -qx "/.whl/" "$ex" 2>/dev/null || echo /.whl/ >> "$ex"
lock=requirements/lock.txt
# on the GPU image already, or only needed by transformers, the tests or JupyterLab
have='torch|transformers|nvidia-.*|triton|sympy|networkx|mpmath|tokenizers|safetensors|huggingface.hub|hf-xet|pillow|numpy|pandas|pyarrow|pyyaml|jinja2|markupsafe|filelock|fsspec|packaging|typing.extensions|regex|requests|urllib3|idna|certifi|charset.normalizer|tqdm|psutil|setuptools|six|python-dateutil|attrs|pygments|click|pytest|iniconfig|pluggy|httpx2?|httpcore2?|h11|anyio|typer|rich|shellingham|annotated-.*|pydantic(_core)?|typing-inspection|truststore|markdown-it-py|mdurl|narwhals|tzdata|kernelbook|jupyterlab|jupyterlab_server|jupyter_server|jupyter_server_terminals|jupyter-lsp|jupyter-events|jupyter_builder|notebook_shim|selenium|trio|trio-websocket|outcome|sortedcontainers|pysocks|wsproto|babel|json5|argon2-cffi|argon2-cffi-bindings|cffi|pycparser|arrow|isoduration|fqdn|rfc3339-validator|rfc3986-validator|rfc3987-syntax|jsonpointer|lark|uri-template|webcolors|overrides|prometheus_client|python-json-logger|send2trash|terminado|async-lru|sniffio|websocket-client'
if [ "${1:-}" = book ] || [ "${1:-}" = tests ]; then
  grep -v '^#' "$lock" | grep -v -i -E "^($have)==" > /tmp/kb-gpu-reqs.txt
  if [ "$1" = tests ]; then  # ipykernel and IPython run without debugger and completion (debugpy, jedi + parso)
    grep -v -i -E '^(debugpy|jedi|parso|widgetsnbextension|pytest-xdist|execnet)==' /tmp/kb-gpu-reqs.txt > /tmp/kb-gpu-reqs-t.txt
    mv /tmp/kb-gpu-reqs-t.txt /tmp/kb-gpu-reqs.txt
  fi
else
  grep -i -E '^(ncu[-_]report|orjson)==' "$lock" > /tmp/kb-gpu-reqs.txt
fi
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl -r /tmp/kb-gpu-reqs.txt
if [ "${1:-}" = tests ]; then
  python3 - <<'EOF2'
import pathlib, zipfile
for w in pathlib.Path(".whl").glob("*.whl"):  # stored, not deflated: xz then compresses the whole set at once
    with zipfile.ZipFile(w) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist()]
    tmp = w.with_suffix(".stored")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for i, data in items:
            i.compress_type = zipfile.ZIP_STORED
            z.writestr(i, data)
    tmp.replace(w)
EOF2
  (cd .whl && tar -cf - *.whl) | xz -9 -T0 > .whl/wheels.tar.xz.tmp && mv .whl/wheels.tar.xz.tmp .whl/wheels.tar.xz
  rm -f .whl/*.whl
fi
du -sh .whl; ls .whl | wc -l
