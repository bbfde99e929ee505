"""Embedded streams that need no download: scikit-learn's bundled 8x8 digits (1,797 images)."""

from __future__ import annotations

import numpy as np

from pyro_cl.data.mnist import SPLIT_MNIST_CLASSES
from pyro_cl.data.tasks import TaskStream, permuted_tasks, split_tasks
from pyro_cl.extras import require

__all__ = ["load_digits", "split_digits", "permuted_digits"]


def load_digits(test_fraction: float = 0.25, seed: int = 0):
    """The 8x8 digits, pixels scaled to [0, 1], split into train/test by a seeded shuffle."""
    datasets = require("sklearn.datasets", "the embedded 8x8 digits")

    bunch = datasets.load_digits()
    x = (bunch.data / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    num_test = int(round(test_fraction * len(y)))
    test, train = order[:num_test], order[num_test:]
    return (x[train], y[train]), (x[test], y[test])


def split_digits(seed: int = 0, class_incremental: bool = False) -> TaskStream:
    """Split digits: the split MNIST protocol (0/1, 2/3, ...) on 8x8 digits, multi-head (or
    class-incremental: one head over the ten digits, no task label at test time)."""
    train, test = load_digits(seed=seed)
    return split_tasks(
        "split digits", train, test, SPLIT_MNIST_CLASSES, class_incremental=class_incremental
    )


def permuted_digits(num_tasks: int = 5, seed: int = 0) -> TaskStream:
    """Permuted digits: the permuted MNIST protocol on 8x8 digits, single head."""
    train, test = load_digits(seed=seed)
    return permuted_tasks("permuted digits", train, test, num_tasks, seed)
