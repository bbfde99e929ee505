"""The most recent points: a sliding window over the stream, ``M_t`` = the last ``M`` points of
``M_{t-1} ∪ D_t``.

The streaming learner's oldest answer to drift, made Bayesian: the window is held out of the
Gaussian and a refit on it predicts (Kurle et al. 2020, section 2.2's running memory, chosen by
age), while every point that leaves the window is fitted into the Gaussian part as it goes, so
nothing is thrown away — a transition (forgetting, Wiener) decides how fast the old points fade.
Against a random memory of the same size it gives the refit the points nearest in time to the
ones it predicts.
"""

from __future__ import annotations

import torch

from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory
from pyro_cl.points import Points

__all__ = ["RecentPoints"]


class RecentPoints(Memory):
    """The last ``size`` points seen, in stream order (a total budget: a window of ``M`` rows).

    :param size: the window's length ``M``.
    """

    name = "recent"

    def __init__(self, size: int) -> None:
        super().__init__(size, budget="total")

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        # the candidates are M_{t-1} followed by D_t, each in the order it arrived
        return torch.arange(len(candidates) - size, len(candidates), device=candidates.x.device)
