"""Coresets and running memories: an episodic memory of a few data points per task (VCL section
2.1, Algorithm 1), or of a fixed total size chosen at every step (Kurle et al. 2020, section 3)."""

from pyro_cl.coresets.gaussian_residual import GaussianResidualMemory
from pyro_cl.coresets.selection import (
    BUDGETS,
    CoresetSelector,
    CoresetUpdate,
    KCenterCoreset,
    RandomCoreset,
    farthest_first,
)

__all__ = [
    "BUDGETS",
    "GaussianResidualMemory",
    "CoresetSelector",
    "CoresetUpdate",
    "KCenterCoreset",
    "RandomCoreset",
    "farthest_first",
]
