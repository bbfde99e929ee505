"""One-class task streams for continual generative modelling (VCL section 6.2): task ``t`` holds
the images of class ``t`` alone (digits 0…9, letters A…J)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pyro_cl.data.digits import load_digits
from pyro_cl.data.mnist import load_mnist
from pyro_cl.data.notmnist import LETTERS, load_notmnist
from pyro_cl.data.tasks import Task, TaskStream, _as_tensors

__all__ = ["class_tasks", "generative_digits", "generative_mnist", "generative_notmnist"]


def class_tasks(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    classes: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
    image_shape: tuple[int, int] | None = None,
) -> TaskStream:
    """One task per class, in the order of ``classes`` (default: every class, ascending).

    Labels keep their class number (so a classifier of all classes can judge each task's
    samples); a learner of the stream observes the images alone. ``num_classes`` is the number
    of classes of the data, ``input_shape`` the images' (for pictures).
    """
    labels = np.unique(train[1])
    classes = [int(c) for c in (labels if classes is None else classes)]
    missing = [c for c in classes if c not in labels]
    if missing:
        raise ValueError(f"{name}: classes {missing} have no training images")
    tasks = []
    for task_id, label in enumerate(classes):
        parts = [_as_tensors(x[y == label], y[y == label]) for x, y in (train, test)]
        task_name = str(label) if class_names is None else class_names[label]
        tasks.append(Task(task_id, task_name, *parts[0], *parts[1], num_classes=len(labels)))
    return TaskStream(
        name, tasks, train[0].shape[1], len(labels), multi_head=True, input_shape=image_shape
    )


def generative_mnist(root: str | Path, download: bool = False) -> TaskStream:
    """MNIST digits 0, 1, …, 9 as ten one-class tasks (VCL section 6.2)."""
    train, test = load_mnist(root, download)
    return class_tasks("generative MNIST", train, test, image_shape=(28, 28))


def generative_notmnist(root: str | Path, seed: int = 0) -> TaskStream:
    """notMNIST letters A, B, …, J as ten one-class tasks, on the 10,000-letter subset with a
    held-out fifth of each letter (:func:`~pyro_cl.data.load_notmnist`)."""
    train, test = load_notmnist(root, seed=seed)
    return class_tasks(
        "generative notMNIST", train, test, class_names=list(LETTERS), image_shape=(28, 28)
    )


def generative_digits(seed: int = 0) -> TaskStream:
    """Embedded default: scikit-learn's 8x8 digits 0…9 as ten one-class tasks (no download)."""
    train, test = load_digits(seed=seed)
    return class_tasks("generative digits", train, test, image_shape=(8, 8))
