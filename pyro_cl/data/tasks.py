"""Tasks and task streams: the unit of data a continual learner observes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Task", "TaskStream", "split_tasks", "permuted_tasks"]


@dataclass
class Task:
    """One task: training and test data with labels ``0..num_classes-1``."""

    id: int
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x_train, self.y_train

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x_test, self.y_test


@dataclass
class TaskStream:
    """An ordered sequence of tasks plus what a net needs to know to learn them.

    :param multi_head: whether each task should get its own head (task identity known at test).
    :param input_shape: the shape of one input when it is not a flat vector (images).
    """

    name: str
    tasks: list[Task]
    in_features: int
    num_classes: int
    multi_head: bool
    input_shape: tuple[int, ...] | None = None

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> Task:
        return self.tasks[index]

    def first(self, count: int) -> TaskStream:
        """The stream of its first ``count`` tasks (a quick run of a long benchmark).

        :raises ValueError: unless ``1 <= count <= len(self)``.
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(self):
            raise ValueError(
                f"{self.name} has {len(self)} tasks: choose 1 to {len(self)}, not {count!r}"
            )
        return dataclasses.replace(self, tasks=self.tasks[:count])

    def validation(self, fraction: float = 0.1, seed: int = 0) -> TaskStream:
        """The same stream with each task's test set replaced by a random ``fraction`` of its
        training set, held out from training: for choosing settings (a tempering β, a penalty's
        strength) without looking at the test sets.

        :raises ValueError: unless ``0 < fraction < 1``.
        """
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"the validation fraction must be in (0, 1), got {fraction!r}")
        generator = torch.Generator().manual_seed(seed)
        tasks = []
        for task in self.tasks:
            order = torch.randperm(len(task.y_train), generator=generator)
            held = max(1, int(round(fraction * len(order))))
            keep, hold = order[held:], order[:held]
            tasks.append(
                Task(
                    task.id,
                    task.name,
                    task.x_train[keep],
                    task.y_train[keep],
                    task.x_train[hold],
                    task.y_train[hold],
                    task.num_classes,
                )
            )
        return TaskStream(
            f"{self.name} (validation: {fraction:g} of the training data)",
            tasks,
            self.in_features,
            self.num_classes,
            self.multi_head,
            self.input_shape,
        )


def _as_tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)


def split_tasks(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    class_groups: Sequence[Sequence[int]],
    class_names: Sequence[str] | None = None,
    class_incremental: bool = False,
) -> TaskStream:
    """One task per group of classes, labels renumbered ``0..len(group)-1`` (multi-head).

    ``class_groups=[(0, 1), (2, 3), ...]`` gives the split MNIST protocol of Zenke et al. (2017).
    ``class_names`` (indexed by class) names the tasks, e.g. "A/F"; by default the class numbers.

    :param class_incremental: the class-incremental setting (van de Ven & Tolias 2019) instead:
        labels keep their class number, one head over every class of the stream, and no task
        label at test time (a task's test set is scored over all classes, those not seen yet
        included).
    """
    every = sorted({c for group in class_groups for c in group})
    tasks = []
    for task_id, group in enumerate(class_groups):
        relabel = np.full(max(max(every) + 1, int(train[1].max()) + 1), -1, dtype=np.int64)
        relabel[every] = np.arange(len(every))  # class-incremental: one head, classes in order
        if not class_incremental:
            relabel[list(group)] = np.arange(len(group))
        parts = []
        for x, y in (train, test):
            keep = np.isin(y, group)
            parts.append(_as_tensors(x[keep], relabel[y[keep]]))
        label = "/".join(str(c) if class_names is None else class_names[c] for c in group)
        classes = len(every) if class_incremental else len(group)
        tasks.append(Task(task_id, label, *parts[0], *parts[1], num_classes=classes))
    if class_incremental:
        return TaskStream(
            f"{name} (class-incremental)", tasks, train[0].shape[1], len(every), multi_head=False
        )
    num_classes = max(len(g) for g in class_groups)
    return TaskStream(name, tasks, train[0].shape[1], num_classes, multi_head=True)


def permuted_tasks(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    num_tasks: int,
    seed: int = 0,
    permute_first_task: bool = True,
) -> TaskStream:
    """Each task applies a fixed random permutation to the input features (single head).

    The permutations come from ``numpy.random.default_rng(seed)``, so a seed fixes the stream.
    ``permute_first_task=True`` permutes task 1 too, as the VCL reference code does; later work
    (e.g. the VOGN thesis) keeps task 1 unpermuted.
    """
    if num_tasks < 1:
        raise ValueError(f"num_tasks must be at least 1, got {num_tasks}")
    rng = np.random.default_rng(seed)
    num_features = train[0].shape[1]
    num_classes = int(max(train[1].max(), test[1].max())) + 1
    tasks = []
    for task_id in range(num_tasks):
        permutation = rng.permutation(num_features)
        if task_id == 0 and not permute_first_task:
            permutation = np.arange(num_features)
        tasks.append(
            Task(
                task_id,
                f"permutation {task_id + 1}",
                *_as_tensors(train[0][:, permutation], train[1]),
                *_as_tensors(test[0][:, permutation], test[1]),
                num_classes=num_classes,
            )
        )
    return TaskStream(name, tasks, num_features, num_classes, multi_head=False)
