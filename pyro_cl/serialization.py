"""Atomic saving and safe loading of learner state (plain tensors and containers only)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

__all__ = ["atomic_save", "safe_load"]


def atomic_save(state: dict, path: str | os.PathLike) -> None:
    """Write ``state`` with ``torch.save`` so that ``path`` is never left half-written.

    The bytes go to a temporary file in the same folder, are flushed to disk, and the file is
    then renamed over ``path`` in one step (``os.replace`` is atomic on POSIX and Windows).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def safe_load(path: str | os.PathLike, map_location=None) -> dict:
    """Load a file written by :func:`atomic_save` without unpickling arbitrary objects.

    ``torch.load(weights_only=True)`` only rebuilds tensors and primitive containers, so a
    tampered file cannot run code.
    """
    return torch.load(path, map_location=map_location, weights_only=True)
