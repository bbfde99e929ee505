"""notMNIST letters A-J (Bulatov, 2011) and the split notMNIST stream of the VCL paper."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pyro_cl.data.idx import find_idx, read_idx
from pyro_cl.data.tasks import TaskStream, split_tasks

__all__ = ["LETTERS", "SPLIT_NOTMNIST_CLASSES", "load_notmnist", "split_notmnist"]

LETTERS = "ABCDEFGHIJ"

#: The VCL paper's split notMNIST tasks: A/F, B/G, C/H, D/I, E/J.
SPLIT_NOTMNIST_CLASSES = ((0, 5), (1, 6), (2, 7), (3, 8), (4, 9))

#: Folder names searched under the data root, then the root itself.
_FOLDERS = ("notMNIST_small_subset10k", "notMNIST", "notMNIST/raw")
_STEMS = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _folder(root: Path) -> Path | None:
    for folder in (*(root / name for name in _FOLDERS), root):
        if find_idx(folder, _STEMS[0]) is not None and find_idx(folder, _STEMS[1]) is not None:
            return folder
    return None


def load_notmnist(root: str | Path, test_fraction: float = 0.2, seed: int = 0):
    """notMNIST in MNIST's IDX layout as ``((x_train, y_train), (x_test, y_test))``.

    Reads the 10,000-letter subset of notMNIST_small that David Flanagan's notMNIST-to-MNIST
    converter writes (1,000 images per letter as ``t10k-images-idx3-ubyte[.gz]`` and
    ``t10k-labels-idx1-ubyte[.gz]``, labels 0..9 = A..J), found in ``root`` or in
    ``root/notMNIST_small_subset10k``. That set has no test split, so a fraction
    ``test_fraction`` of each letter is held out at random (``numpy.random.default_rng(seed)``),
    a stratified split. Pixels are scaled to [0, 1] and flattened.

    There is no official download URL that torchvision knows, so a missing set is an error.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    folder = _folder(Path(root))
    if folder is None:
        raise FileNotFoundError(
            f"no notMNIST IDX files ({_STEMS[0]}[.gz], {_STEMS[1]}[.gz]) under {root} or "
            f"{', '.join(_FOLDERS)} below it; convert notMNIST_small with "
            "github.com/davidflanagan/notMNIST-to-MNIST"
        )
    images = read_idx(find_idx(folder, _STEMS[0]))
    labels = read_idx(find_idx(folder, _STEMS[1])).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{folder}: {images.shape[0]} images but {labels.shape[0]} labels")
    x = images.reshape(images.shape[0], -1).astype(np.float32) / 255.0
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for letter in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == letter))
        test[members[: int(round(test_fraction * len(members)))]] = True
    return (x[~test], labels[~test]), (x[test], labels[test])


def split_notmnist(root: str | Path, seed: int = 0) -> TaskStream:
    """Split notMNIST (VCL section 6.1): binary tasks A/F, B/G, C/H, D/I, E/J, one head each,
    with a held-out fifth of each letter as the test set (see :func:`load_notmnist`)."""
    train, test = load_notmnist(root, seed=seed)
    return split_tasks(
        "split notMNIST", train, test, SPLIT_NOTMNIST_CLASSES, class_names=list(LETTERS)
    )
