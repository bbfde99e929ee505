"""Coresets: an episodic memory of a few data points per task (VCL section 2.1, Algorithm 1)."""

from pyro_cl.coresets.coreset import Coreset
from pyro_cl.coresets.selection import (
    CoresetSelector,
    CoresetUpdate,
    KCenterCoreset,
    RandomCoreset,
    farthest_first,
)

__all__ = [
    "Coreset",
    "CoresetSelector",
    "CoresetUpdate",
    "KCenterCoreset",
    "RandomCoreset",
    "farthest_first",
]
