"""Labelled points stamped with their task and time: a step's data, a coreset ``C_t`` (VCL
section 2.1) or a running memory ``M_t`` (Kurle et al. 2020) are all :class:`Points`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Points", "data_size"]


@dataclass(frozen=True)
class Points:
    """Inputs ``x``, targets ``y``, the task each point came from (``task_ids``) and the time stamp
    of the step that observed it (``times``, float64; zeros where not given), row-aligned.

    ``weights``, where given, multiply each point's log-likelihood in a fit (a forgetting
    transition weighs memory points by age, Kurle et al. 2020 eq. 12); ``None`` means every
    weight is 1. They describe one step's fit, so they are not saved.

    Points are immutable: :class:`~pyro_cl.memory.Memory` builds ``C_t`` from
    ``C_{t-1}`` and ``D_t`` as a new object, so a failed task never half-updates the memory.
    """

    x: torch.Tensor
    y: torch.Tensor
    task_ids: torch.Tensor
    times: torch.Tensor | None = field(default=None)
    weights: torch.Tensor | None = field(default=None)

    def __post_init__(self) -> None:
        n = self.x.shape[0]
        if self.times is None:
            zeros = torch.zeros(n, dtype=torch.float64, device=self.x.device)
            object.__setattr__(self, "times", zeros)
        if (
            self.y.shape[0] != n
            or self.task_ids.shape != (n,)
            or self.times.shape != (n,)
            or (self.weights is not None and self.weights.shape != (n,))
        ):
            raise ValueError(
                f"the points disagree in length: {n} inputs, {self.y.shape[0]} targets, "
                f"task ids of shape {tuple(self.task_ids.shape)}, "
                f"times of shape {tuple(self.times.shape)}"
                + (
                    ""
                    if self.weights is None
                    else f", weights of shape {tuple(self.weights.shape)}"
                )
            )
        if self.weights is not None and not bool(
            (torch.isfinite(self.weights) & (self.weights >= 0)).all()
        ):
            raise ValueError("likelihood weights must be finite and non-negative")

    def likelihood_weights(self) -> torch.Tensor:
        """:attr:`weights`, with ones where none are given (in the inputs' dtype)."""
        if self.weights is None:
            return torch.ones(len(self), dtype=self.x.dtype, device=self.x.device)
        return self.weights.to(self.x.dtype)

    def weighted(self, weights: torch.Tensor | None) -> Points:
        """The same points with likelihood ``weights`` (``None``: unweighted)."""
        return Points(self.x, self.y, self.task_ids, self.times, weights)

    @classmethod
    def empty(cls, like_x: torch.Tensor, like_y: torch.Tensor) -> Points:
        """No points, with tensors like ``like_x`` and ``like_y`` in dtype and device."""
        return cls(
            like_x.new_empty((0, *like_x.shape[1:])),
            like_y.new_empty((0, *like_y.shape[1:])),
            torch.empty(0, dtype=torch.long, device=like_x.device),
        )

    @classmethod
    def of_task(cls, x: torch.Tensor, y: torch.Tensor, task_id: int, time: float = 0.0) -> Points:
        """All of ``(x, y)`` as points of task ``task_id`` observed at ``time``."""
        n = x.shape[0]
        return cls(
            x,
            y,
            torch.full((n,), task_id, dtype=torch.long, device=x.device),
            torch.full((n,), float(time), dtype=torch.float64, device=x.device),
        )

    def __len__(self) -> int:
        return self.x.shape[0]

    def tasks(self) -> list[int]:
        """The task ids present, in increasing order."""
        return [int(t) for t in torch.unique(self.task_ids).tolist()]

    def select(self, index: torch.Tensor) -> Points:
        """The rows ``index`` (a boolean mask or integer indices)."""
        weights = None if self.weights is None else self.weights[index]
        return Points(
            self.x[index], self.y[index], self.task_ids[index], self.times[index], weights
        )

    def concat(self, other: Points) -> Points:
        weights = None
        if self.weights is not None or other.weights is not None:
            weights = torch.cat([self.likelihood_weights(), other.likelihood_weights()])
        return Points(
            torch.cat([self.x, other.x]),
            torch.cat([self.y, other.y]),
            torch.cat([self.task_ids, other.task_ids]),
            torch.cat([self.times, other.times]),
            weights,
        )

    def to(self, device: torch.device | str) -> Points:
        return Points(
            self.x.to(device),
            self.y.to(device),
            self.task_ids.to(device),
            self.times.to(device),
            None if self.weights is None else self.weights.to(device),
        )

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y, "task_ids": self.task_ids, "times": self.times}

    @classmethod
    def from_state(cls, state: dict, device: torch.device | str | None = None) -> Points:
        points = cls(state["x"], state["y"], state["task_ids"], state.get("times"))
        return points if device is None else points.to(device)


def data_size(data: Points) -> float:
    """``N`` of the bound: the number of points, or ``Σ w_n`` of weighted likelihoods (a
    zero-weight point changes nothing).

    :raises ValueError: if every weight is 0.
    """
    if data.weights is None:
        return len(data)
    size = float(data.weights.sum())
    if not size > 0:
        raise ValueError("every likelihood weight of the data is 0: nothing to fit")
    return size
