"""Task-indexed output heads: the part of a multi-head net (VCL fig. 1a) shared by all nets."""

from __future__ import annotations

__all__ = ["MultiHead"]


class MultiHead:
    """Mixin for nets with ``num_heads`` output heads, one per task; ``task_id`` picks the head.

    A single-head net (``num_heads == 1``) ignores ``task_id``.
    """

    num_heads: int

    @property
    def multi_head(self) -> bool:
        return self.num_heads > 1

    def check_task_id(self, task_id: int) -> int:
        """Return the head index for ``task_id``, or raise if the net has no such head."""
        if not self.multi_head:
            return 0
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise ValueError(f"task_id must be an integer, got {task_id!r}")
        if not 0 <= task_id < self.num_heads:
            raise ValueError(
                f"unknown task id {task_id}: this multi-head net has heads 0..{self.num_heads - 1}"
            )
        return task_id
