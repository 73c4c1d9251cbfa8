#!/usr/bin/env bash
# Regenerate requirements/lock.txt: the exact versions the test suite passed with. Builds a fresh
# virtual environment, installs the book with its test and capture extras at the newest versions the
# ranges in pyproject.toml allow (torch: the CPU build 2.13.0), and freezes it. Run the tests on it
# (KB_VENV=<that venv> bash scripts/test.sh) before committing a new lock.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-$(mktemp -d)/venv}
python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.13.0"
"$venv/bin/pip" install -q -e ".[test,capture]"
{
  echo "# Exact versions the test suite passed with (scripts/lock.sh wrote this, python $("$venv/bin/python" -c "import platform; print(platform.python_version())"))."
  echo "# Used as pip constraints by scripts/test.sh and scripts/render.sh. torch is the CPU build (local tag dropped)."
  "$venv/bin/pip" freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/' | grep -v '^kernelbook'
} > requirements/lock.txt
echo "wrote requirements/lock.txt from $venv"
