"""The random coreset: points drawn uniformly without replacement (VCL section 2.1)."""

from __future__ import annotations

import torch

from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory
from pyro_cl.points import Points

__all__ = ["RandomCoreset"]


class RandomCoreset(Memory):
    """``K`` points of each task (or ``M`` in all, ``budget="total"``) drawn uniformly without
    replacement: an unbiased coreset.

    Draws from torch's random number generator, so a learner's seed fixes the choice.
    """

    name = "random"
    #: Chooses by the inputs alone; the refit fits a copy of any family's guide.
    guide_families = None

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        return torch.randperm(len(candidates), device=candidates.x.device)[:size]
