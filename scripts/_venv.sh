# Sourced by test.sh and render.sh: a virtual environment (KB_VENV, default .venv) holding the locked
# versions (requirements/lock.txt), activated. Never installs into the machine's own Python.
venv=${KB_VENV:-.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
