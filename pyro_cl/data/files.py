"""Reading the plain-text tables of public data sets: find a file among the layouts a loader
accepts, fetch it from its public source, read a numeric table and name the file at fault."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import numpy as np

__all__ = ["fetch", "find_file", "read_matrix"]


def find_file(root: Path, candidates: list[Path]) -> Path | None:
    """The first of ``candidates`` that is a file (``None`` if none is)."""
    return next((path for path in candidates if path.is_file()), None)


def fetch(url: str, path: Path) -> None:
    """Download ``url`` to ``path`` (folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (fixed https URLs)
        path.write_bytes(response.read())


def read_matrix(path: Path, delimiter: str | None = None, skiprows: int = 0) -> np.ndarray:
    """A numeric table as a 2-d float64 array.

    :raises ValueError: naming ``path`` if it is not numeric or holds NaN or infinite values.
    """
    try:  # utf-8-sig: a byte-order mark at the start is not part of the first number
        data = np.loadtxt(
            path, delimiter=delimiter, ndmin=2, skiprows=skiprows, encoding="utf-8-sig"
        )
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a text table (undecodable bytes: {error.reason})") from error
    except ValueError as error:
        raise ValueError(f"{path}: not a numeric table ({error})") from error
    if not np.isfinite(data).all():
        raise ValueError(f"{path}: contains NaN or infinite values")
    return data
