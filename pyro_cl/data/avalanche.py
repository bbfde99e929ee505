"""Avalanche's benchmark streams as pyro_cl task streams.

Avalanche (Lomonaco et al. 2021) describes a benchmark as a ``train_stream`` and a
``test_stream`` of *experiences*; each experience has a ``dataset`` whose items are
``(x, y, task_label)`` and a ``current_experience`` index. :func:`avalanche_task_stream` reads that
protocol (duck-typed: Avalanche itself is needed only to build its benchmarks, ``pip install
"pyro_cl[avalanche]"``) into a :class:`~pyro_cl.data.tasks.TaskStream`: one task per experience,
its test data the test experience of the same index. With more than one task label in the
benchmark (task-incremental: SplitMNIST with ``return_task_id=True``) each task gets its label as
id and the stream is multi-head; otherwise (class- or domain-incremental: PermutedMNIST) one
head serves every experience.

:func:`pyro_cl.app.avalanche_run.run_avalanche` runs a learner on it and reports Avalanche's
metric names.
"""

from __future__ import annotations

from typing import Any

import torch

from pyro_cl.data.tasks import Task, TaskStream

__all__ = ["avalanche_task_stream", "experience_tensors"]


def experience_tensors(experience: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(x, y, task label)`` of one experience: its dataset's items stacked.

    :raises ValueError: for an empty experience, items that are not ``(x, y, task_label)``, or
        several task labels in one experience.
    """
    dataset = experience.dataset
    items = [dataset[i] for i in range(len(dataset))]
    if not items:
        raise ValueError(f"experience {_index(experience)} has no data")
    if any(len(item) < 3 for item in items):
        raise ValueError("experience items must be (x, y, task_label), as Avalanche's are")
    labels = {int(item[2]) for item in items}
    if len(labels) != 1:
        raise ValueError(f"experience {_index(experience)} mixes task labels {sorted(labels)}")
    x = torch.stack([torch.as_tensor(item[0], dtype=torch.float32) for item in items])
    y = torch.as_tensor([int(item[1]) for item in items], dtype=torch.long)
    return x.reshape(len(items), -1), y, labels.pop()


def avalanche_task_stream(benchmark: Any, name: str | None = None) -> TaskStream:
    """A task stream of ``benchmark``'s train and test streams (module docstring); images are
    flattened to vectors (``input_shape`` keeps their shape).

    :raises ValueError: if the two streams differ in length (or :func:`experience_tensors`
        refuses an experience).
    """
    train, test = list(benchmark.train_stream), list(benchmark.test_stream)
    if len(train) != len(test):
        raise ValueError(
            f"the benchmark has {len(train)} training and {len(test)} test experiences: "
            "pyro_cl needs one test experience per training experience "
            "(complete_test_set_only=False)"
        )
    pairs = [
        (experience_tensors(a), experience_tensors(b)) for a, b in zip(train, test, strict=True)
    ]
    labels = sorted({task for (_, _, task), _ in pairs})
    multi_head = len(labels) > 1
    num_classes = int(
        max(int(y.max()) for (_, y, _), (_, y_test, _) in pairs for y in (y, y_test)) + 1
    )
    shape = tuple(train[0].dataset[0][0].shape)
    tasks = []
    for i, ((x, y, task), (x_test, y_test, _)) in enumerate(pairs):
        tasks.append(
            Task(task if multi_head else i, f"experience {i}", x, y, x_test, y_test, num_classes)
        )
    return TaskStream(
        name or type(benchmark).__name__,
        tasks,
        tasks[0].x_train.shape[1],
        num_classes,
        multi_head,
        input_shape=shape if len(shape) > 1 else None,
    )


def _index(experience: Any) -> Any:
    return getattr(experience, "current_experience", "?")
