"""`python -m kernelbook lab`: JupyterLab on the repository, chapters opening as notebooks.

The settings it needs ship with the package (`kernelbook/jupyter/`, put on JUPYTER_CONFIG_PATH for this
server only): a double-click on a chapter's `.py` opens it with jupytext's notebook view, whose pairing
(`notebooks/jupytext.toml`) saves outputs to the paired `.ipynb`; the chapters name their kernel, so no
kernel dialog. The server's root is the repository and it opens on `notebooks/`. A user's own
JupyterLab settings still win over these defaults.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .params import REPO

CONFIG = Path(__file__).parent / "jupyter"


def command(extra: list[str]) -> tuple[list[str], dict]:
    """The `jupyter lab` command line and environment; arguments in `extra` win (a root of your own:
    `--ServerApp.root_dir=...`, which must then hold `notebooks/`)."""
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (str(CONFIG), env.get("JUPYTER_CONFIG_PATH")) if p)
    own_root = any(a.startswith(("--ServerApp.root_dir", "--notebook-dir")) for a in extra)
    cmd = [sys.executable, "-m", "jupyterlab", *([] if own_root else [f"--ServerApp.root_dir={REPO}"]),
           "--LabApp.default_url=/lab/tree/notebooks", *extra]
    return cmd, env


def launch(extra: list[str]) -> int:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        print("kernelbook: JupyterLab is not installed: pip install -e '.[lab]'", file=sys.stderr)
        return 2
    cmd, env = command(extra)
    if os.name == "posix":  # the server takes this process's place: Ctrl-C and signals reach it directly
        os.execve(sys.executable, cmd, env)
    return subprocess.call(cmd, env=env)
