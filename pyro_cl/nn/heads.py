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
    """Mixin for nets with ``num_heads`` output heads, one per task; ``task_id`` picks the head.

    A single-head net (``num_heads == 1``) ignores ``task_id``.
    """

    num_heads: int

    @property
    def multi_head(self) -> bool:
        return self.num_heads > 1

    def head_sites(self, names: list[str]) -> list[str]:
        """The sites among ``names`` that belong to an output head (the ``heads`` module list of
        pyro_cl's multi-head nets: ``heads.<task>.…``)."""
        return [name for name in names if name.split(".", 1)[0] == "heads"]

    def check_task_id(self, task_id: int) -> int:
        """Return the head index for ``task_id``, or raise if the net has no such head."""
        if not self.multi_head:
            return 0
        task_id = normalised_task_id(task_id)
        if task_id >= self.num_heads:
            raise ValueError(
                f"unknown task id {task_id}: this multi-head net has heads 0..{self.num_heads - 1}"
            )
        return task_id
