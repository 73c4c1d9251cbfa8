#!/usr/bin/env bash
# Set up and render the book on the bundled run (the README's first command), in a virtual environment
# with the locked versions.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
pip install -q -c requirements/lock.txt -e .
python -m kernelbook book "$@"
