"""CIFAR-10 and CIFAR-100 read from their binary distributions (no pickle), and split CIFAR.

Layouts read under ``root`` (first match wins):

* CIFAR-10: ``cifar-10-batches-bin/data_batch_{1..5}.bin`` + ``test_batch.bin`` (the official
  binary version: per image one label byte and 3072 pixel bytes, channel-major), or
  ``CIFAR10/cifar10.npz`` / ``cifar10.npz`` with ``x_train`` ``(N, 32, 32, 3)`` uint8, ``y_train``,
  ``x_test``, ``y_test``;
* CIFAR-100: ``cifar-100-binary/train.bin`` + ``test.bin`` (per image a coarse and a fine label
  byte, then 3072 pixel bytes), or ``CIFAR100/cifar100.npz`` / ``cifar100.npz`` with fine labels.

With ``download=True`` the official binary archives are fetched as torchvision fetches its data
sets. Images come back as float ``(N, 3, 32, 32)`` in [0, 1].
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from pyro_cl.data.tasks import TaskStream, split_tasks
from pyro_cl.extras import require

__all__ = ["load_cifar10", "load_cifar100", "split_cifar", "split_cifar10"]

_URLS = {
    "cifar-10-batches-bin": "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    "cifar-100-binary": "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
}
_IMAGE_BYTES = 3 * 32 * 32


def _read_binary(paths: list[Path], label_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    records = [
        np.fromfile(path, dtype=np.uint8).reshape(-1, label_bytes + _IMAGE_BYTES) for path in paths
    ]
    data = np.concatenate(records)
    images = data[:, label_bytes:].reshape(-1, 3, 32, 32)
    return images, data[:, label_bytes - 1].astype(np.int64)  # the last label byte: fine label


def _read_npz(path: Path) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    with np.load(path, allow_pickle=False) as arrays:
        return tuple(  # type: ignore[return-value]
            (arrays[f"x_{split}"].transpose(0, 3, 1, 2), arrays[f"y_{split}"].astype(np.int64))
            for split in ("train", "test")
        )


def _scaled(split: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    images, labels = split
    return np.ascontiguousarray(images, dtype=np.float32) / 255.0, labels


def _load(root, folder: str, npz: str, binary_files, label_bytes: int, download: bool):
    root = Path(root)
    binary = root / folder
    if not binary.is_dir() and download:
        utils = require("torchvision.datasets.utils", f"downloading {folder}")
        utils.download_and_extract_archive(_URLS[folder], str(root))
    if binary.is_dir():
        train_files, test_files = binary_files
        train = _read_binary([binary / f for f in train_files], label_bytes)
        test = _read_binary([binary / f for f in test_files], label_bytes)
        return _scaled(train), _scaled(test)
    for candidate in (root / npz.split("/")[0] / npz.split("/")[1], root / npz.split("/")[1]):
        if candidate.is_file():
            train, test = _read_npz(candidate)
            return _scaled(train), _scaled(test)
    raise FileNotFoundError(
        f"no {folder} or {npz} under {root}; pass download=True to fetch the binary version"
    )


def load_cifar10(root: str | Path, download: bool = False):
    """CIFAR-10 as ``((x_train, y_train), (x_test, y_test))``, images ``(N, 3, 32, 32)``."""
    files = ([f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"])
    return _load(root, "cifar-10-batches-bin", "CIFAR10/cifar10.npz", files, 1, download)


def load_cifar100(root: str | Path, download: bool = False):
    """CIFAR-100 (fine labels) as ``((x_train, y_train), (x_test, y_test))``."""
    files = (["train.bin"], ["test.bin"])
    return _load(root, "cifar-100-binary", "CIFAR100/cifar100.npz", files, 2, download)


def _image_stream(stream: TaskStream) -> TaskStream:
    return replace(stream, in_features=_IMAGE_BYTES, input_shape=(3, 32, 32))


def split_cifar(
    root: str | Path, download: bool = False, num_cifar100_tasks: int = 5
) -> TaskStream:
    """Split CIFAR-10/100 (Zenke et al., 2017; VOGN thesis section 4.5): task 1 is all of
    CIFAR-10, tasks 2-6 are CIFAR-100 classes 0-9, 10-19, ..., 40-49 (10-way each, one head per
    task)."""
    cifar10_train, cifar10_test = load_cifar10(root, download)
    cifar100_train, cifar100_test = load_cifar100(root, download)
    first = split_tasks("CIFAR-10", cifar10_train, cifar10_test, [tuple(range(10))])
    groups = [tuple(range(10 * k, 10 * (k + 1))) for k in range(num_cifar100_tasks)]
    rest = split_tasks("CIFAR-100", cifar100_train, cifar100_test, groups)
    tasks = [replace(first.tasks[0], name="CIFAR-10")]
    for k, task in enumerate(rest.tasks):
        tasks.append(replace(task, id=k + 1, name=f"CIFAR-100 {10 * k}-{10 * k + 9}"))
    return _image_stream(replace(first, name="split CIFAR-10/100", tasks=tasks))


def split_cifar10(
    root: str | Path, download: bool = False, class_incremental: bool = False
) -> TaskStream:
    """Split CIFAR-10: five 2-way tasks (airplane/automobile, bird/cat, ...), one head each — a
    stand-in for split CIFAR-10/100 where CIFAR-100 is not available (or class-incremental: one
    head over the ten classes, no task label at test time)."""
    train, test = load_cifar10(root, download)
    pairs = [(2 * k, 2 * k + 1) for k in range(5)]
    stream = split_tasks("split CIFAR-10", train, test, pairs, class_incremental=class_incremental)
    return _image_stream(stream)
