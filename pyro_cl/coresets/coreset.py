"""The coreset: a small labelled memory of earlier tasks' data points (VCL section 2.1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Coreset"]


@dataclass(frozen=True)
class Coreset:
    """Inputs ``x``, targets ``y`` and the task each point came from (``task_ids``), row-aligned.

    A coreset is immutable: :class:`~pyro_cl.coresets.CoresetSelector` builds ``C_t`` from
    ``C_{t-1}`` and ``D_t`` as a new object, so a failed task never half-updates the memory.
    """

    x: torch.Tensor
    y: torch.Tensor
    task_ids: torch.Tensor

    def __post_init__(self) -> None:
        n = self.x.shape[0]
        if self.y.shape[0] != n or self.task_ids.shape != (n,):
            raise ValueError(
                f"coreset rows disagree: {n} inputs, {self.y.shape[0]} targets, "
                f"task ids of shape {tuple(self.task_ids.shape)}"
            )

    @classmethod
    def empty(cls, like_x: torch.Tensor, like_y: torch.Tensor) -> Coreset:
        """A coreset with no points whose tensors match ``like_x``/``like_y`` in dtype and device."""
        return cls(
            like_x.new_empty((0, *like_x.shape[1:])),
            like_y.new_empty((0, *like_y.shape[1:])),
            torch.empty(0, dtype=torch.long, device=like_x.device),
        )

    @classmethod
    def of_task(cls, x: torch.Tensor, y: torch.Tensor, task_id: int) -> Coreset:
        """All of ``(x, y)`` as coreset points of task ``task_id``."""
        return cls(x, y, torch.full((x.shape[0],), task_id, dtype=torch.long, device=x.device))

    def __len__(self) -> int:
        return self.x.shape[0]

    def tasks(self) -> list[int]:
        """The task ids present, in increasing order."""
        return [int(t) for t in torch.unique(self.task_ids).tolist()]

    def for_task(self, task_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The points of task ``task_id``."""
        mask = self.task_ids == task_id
        return self.x[mask], self.y[mask]

    def select(self, index: torch.Tensor) -> Coreset:
        """The rows ``index`` (a boolean mask or integer indices)."""
        return Coreset(self.x[index], self.y[index], self.task_ids[index])

    def concat(self, other: Coreset) -> Coreset:
        return Coreset(
            torch.cat([self.x, other.x]),
            torch.cat([self.y, other.y]),
            torch.cat([self.task_ids, other.task_ids]),
        )

    def to(self, device: torch.device | str) -> Coreset:
        return Coreset(self.x.to(device), self.y.to(device), self.task_ids.to(device))

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y, "task_ids": self.task_ids}

    @classmethod
    def from_state(cls, state: dict, device: torch.device | str | None = None) -> Coreset:
        coreset = cls(state["x"], state["y"], state["task_ids"])
        return coreset if device is None else coreset.to(device)
