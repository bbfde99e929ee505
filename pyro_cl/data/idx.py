"""Reader for the IDX format of MNIST-style data sets (optionally gzip-compressed)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

__all__ = ["read_idx", "find_idx"]

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (``.gz`` or raw) into a numpy array of the declared shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            data = file.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ValueError(f"{path} is truncated or not a valid gzip file ({error})") from error
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise ValueError(f"{path} is not an IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    array = np.frombuffer(data, dtype=_DTYPES[data[2]], offset=4 + 4 * ndim)
    if array.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header declares {shape} but holds {array.size} values")
    return array.reshape(shape)


def find_idx(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    return None
