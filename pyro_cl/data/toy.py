"""A two-dimensional toy stream: binary tasks whose decision boundaries can be drawn."""

from __future__ import annotations

import math

import torch

from pyro_cl.data.tasks import Task, TaskStream

__all__ = ["toy_2d_stream"]


def toy_2d_stream(
    num_tasks: int = 3, points_per_class: int = 100, spread: float = 0.4, seed: int = 0
) -> TaskStream:
    """Binary classification in the plane: class 1 lies outside a circle of radius 2, class 0
    inside, and task ``t`` shows only the sector around angle ``2πt / num_tasks``.

    Each task is separable by a straight line, but only a boundary that bends keeps the earlier
    sectors right, so a single-head net must remember old tasks while it learns new ones, and the
    posterior's uncertainty shows where no task has put data yet (as in the toy figures of the VCL
    and VOGN papers). Test sets are drawn the same way, independently.
    """
    if num_tasks < 1 or points_per_class < 1:
        raise ValueError("num_tasks and points_per_class must be positive")
    generator = torch.Generator().manual_seed(seed)
    tasks = []
    for t in range(num_tasks):
        angle = 2 * math.pi * t / num_tasks
        direction = torch.tensor([math.cos(angle), math.sin(angle)])

        def draw(n: int, direction: torch.Tensor = direction):
            x0 = 1.0 * direction + spread * torch.randn(n, 2, generator=generator)
            x1 = 3.0 * direction + spread * torch.randn(n, 2, generator=generator)
            x = torch.cat([x0, x1])
            y = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
            return x, y

        x_train, y_train = draw(points_per_class)
        x_test, y_test = draw(points_per_class)
        tasks.append(Task(t, f"sector {t}", x_train, y_train, x_test, y_test, 2))
    return TaskStream("toy 2D", tasks, in_features=2, num_classes=2, multi_head=False)
