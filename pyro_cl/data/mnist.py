"""MNIST read from torchvision's folder layout, and the permuted/split MNIST task streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pyro_cl.data.idx import find_idx, read_idx
from pyro_cl.data.tasks import TaskStream, permuted_tasks, split_tasks
from pyro_cl.extras import require

__all__ = ["load_mnist", "permuted_mnist", "split_mnist", "SPLIT_MNIST_CLASSES"]

SPLIT_MNIST_CLASSES = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _raw_folder(root: str | Path, dataset: str) -> Path:
    root = Path(root)
    for folder in (root / dataset / "raw", root / "raw", root):
        if find_idx(folder, _FILES["train"][0]) is not None:
            return folder
    return root / dataset / "raw"


def load_idx_dataset(root: str | Path, dataset: str = "MNIST", download: bool = False):
    """``((x_train, y_train), (x_test, y_test))`` with pixels scaled to [0, 1], flattened.

    :param root: the folder given to torchvision (holding ``<dataset>/raw``); ``<dataset>/raw``
        itself or a folder with the four IDX files also work.
    :param download: fetch the files with torchvision if they are missing (needs internet).
    """
    folder = _raw_folder(root, dataset)
    if find_idx(folder, _FILES["train"][0]) is None:
        if not download:
            raise FileNotFoundError(
                f"no {dataset} IDX files under {Path(root)}; pass download=True to fetch them"
            )
        datasets = require("torchvision.datasets", f"downloading {dataset}")
        getattr(datasets, dataset)(str(root), train=True, download=True)
        folder = _raw_folder(root, dataset)
    splits = []
    for images_stem, labels_stem in _FILES.values():
        images = read_idx(_required(folder, images_stem))
        labels = read_idx(_required(folder, labels_stem))
        _check_split(images, labels, folder / images_stem, dataset)
        x = images.reshape(images.shape[0], -1).astype(np.float32) / 255.0
        splits.append((x, labels.astype(np.int64)))
    return splits[0], splits[1]


#: Classes of the IDX data sets (MNIST digits, Fashion-MNIST's ten kinds of clothing).
NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)


def _required(folder: Path, stem: str) -> Path:
    path = find_idx(folder, stem)
    if path is None:
        raise FileNotFoundError(f"{folder / stem} (or .gz) is missing")
    return path


def _check_split(images: np.ndarray, labels: np.ndarray, where: Path, dataset: str) -> None:
    """Refuse files that are not the data set's: image shape, one label per image, and labels
    among its classes (a file of labels 0..180 would otherwise train a 181-class net).

    :raises ValueError: naming the file and what is wrong.
    """
    if images.ndim != 3 or tuple(images.shape[1:]) != IMAGE_SHAPE or images.dtype != np.uint8:
        raise ValueError(
            f"{where}: expected {dataset} images of shape (N, 28, 28) uint8, got "
            f"{images.shape} {images.dtype}"
        )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"{where}: {images.shape[0]} images but labels of shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise ValueError(
            f"{where}: labels must lie in 0..{NUM_CLASSES - 1} for {dataset}, got "
            f"{labels.min()}..{labels.max()}"
        )


def load_mnist(root: str | Path, download: bool = False):
    """MNIST as ``((x_train, y_train), (x_test, y_test))``; see :func:`load_idx_dataset`."""
    return load_idx_dataset(root, "MNIST", download)


def permuted_mnist(
    root: str | Path,
    num_tasks: int = 10,
    seed: int = 0,
    permute_first_task: bool = True,
    download: bool = False,
) -> TaskStream:
    """Permuted MNIST (VCL section 6.1): 10 single-head tasks; task 1 permuted by default."""
    train, test = load_mnist(root, download)
    return permuted_tasks("permuted MNIST", train, test, num_tasks, seed, permute_first_task)


def split_mnist(
    root: str | Path, download: bool = False, class_incremental: bool = False
) -> TaskStream:
    """Split MNIST (VCL section 6.1): binary tasks 0/1, 2/3, 4/5, 6/7, 8/9, one head each (or
    class-incremental: one head over the ten digits, no task label at test time)."""
    train, test = load_mnist(root, download)
    return split_tasks(
        "split MNIST", train, test, SPLIT_MNIST_CLASSES, class_incremental=class_incremental
    )
