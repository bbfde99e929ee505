"""A memory of every point: with no propagation between steps, a learner refits its posterior
on all the data so far at every step, from the initial prior — batch VI on ``D_1 ∪ … ∪ D_t``,
the upper bound the VCL paper draws in its figure 4 (section 6.1)."""

from __future__ import annotations

import torch

from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory
from pyro_cl.points import Points

__all__ = ["EveryPoint"]

#: More points than any stream holds (the memory's total budget).
UNLIMITED = 2**31 - 1


class EveryPoint(Memory):
    """Keeps every point it is given (a total budget larger than any stream); chosen before the
    fit, so nothing is left to propagate and prediction uses the refit on all the points."""

    name = "every_point"

    def __init__(self) -> None:
        super().__init__(UNLIMITED, budget="total")

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        return torch.arange(size, device=candidates.x.device)
