"""What a result was measured with: the versions of pyro_cl, torch and pyro, the Python and the
git commit of the checkout (when there is one), recorded in every ``results.json``."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pyro
import torch

import pyro_cl

__all__ = ["environment"]


def environment() -> dict[str, str | None]:
    """``{"pyro_cl", "torch", "pyro", "python", "machine", "git_commit"}``; ``git_commit`` is None
    outside a git checkout (an installed wheel), with ``+dirty`` for uncommitted changes."""
    return {
        "pyro_cl": pyro_cl.__version__,
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "git_commit": _git_commit(),
    }


def _git_commit() -> str | None:
    source = Path(pyro_cl.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit
