#!/usr/bin/env bash
# Set up and render the book on the bundled run (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e .
python3 -m kernelbook book "$@"
