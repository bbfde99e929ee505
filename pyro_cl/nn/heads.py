"""Task-indexed output heads: the part of a multi-head net (VCL fig. 1a) shared by all nets."""

from __future__ import annotations

import numbers

import torch

__all__ = ["MultiHead", "normalised_task_id"]


def normalised_task_id(task_id) -> int:
    """``task_id`` as a non-negative Python int.

    :raises ValueError: for booleans (``True`` is not head 1), non-integers (``1.0``, ``"a"``),
        tensors of more than one element, and negative ids.
    """
    value = task_id
    if torch.is_tensor(value):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise ValueError(f"task_id must be an integer, got the tensor {task_id!r}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"task_id must be an integer, got {task_id!r} ({type(task_id).__name__})")
    if int(value) < 0:
        raise ValueError(f"task_id must be non-negative, got {int(value)}")
    return int(value)


class MultiHead:
    """Mixin for nets with ``num_heads`` output heads, one per task, and optionally task-specific
    FiLM layers for ``num_film_tasks`` tasks (:mod:`pyro_cl.nn.film`); ``task_id`` picks both.

    A single-head net without FiLM layers (``num_heads == 1``, ``num_film_tasks == 0``) ignores
    ``task_id``.
    """

    num_heads: int
    num_film_tasks: int = 0

    @property
    def multi_head(self) -> bool:
        """Whether the task id picks part of the net (a head, or a task's FiLM layers)."""
        return self.num_heads > 1 or self.num_film_tasks > 0

    def head_sites(self, names: list[str]) -> list[str]:
        """The sites among ``names`` that belong to an output head (the ``heads`` module list of
        pyro_cl's multi-head nets: ``heads.<task>.…``)."""
        return [name for name in names if name.split(".", 1)[0] == "heads"]

    def check_task_id(self, task_id: int) -> int:
        """Return the head index for ``task_id`` (0 on a single-head net), or raise if the net
        has no such head or no FiLM layers for that task."""
        if not self.multi_head:
            return 0
        task_id = normalised_task_id(task_id)
        if self.num_heads > 1 and task_id >= self.num_heads:
            raise ValueError(
                f"unknown task id {task_id}: this multi-head net has heads 0..{self.num_heads - 1}"
            )
        if self.num_film_tasks and task_id >= self.num_film_tasks:
            raise ValueError(
                f"unknown task id {task_id}: this net has FiLM layers for tasks "
                f"0..{self.num_film_tasks - 1}"
            )
        return task_id if self.num_heads > 1 else 0

    def task_film(self, task_id: int):
        """The FiLM layers of ``task_id`` (a list, one per hidden layer; ``None`` without FiLM);
        call :meth:`check_task_id` first."""
        if not self.num_film_tasks:
            return None
        return self.film[normalised_task_id(task_id)]
