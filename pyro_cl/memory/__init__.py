"""Memories: an episodic memory of a few data points per task (VCL section 2.1, Algorithm 1), or
of a fixed total size chosen at every step (Kurle et al. 2020, section 3)."""

from pyro_cl.memory.every_point import EveryPoint
from pyro_cl.memory.experience_replay import ExperienceReplay
from pyro_cl.memory.gaussian_residual import GaussianResidualMemory
from pyro_cl.memory.kcenter import KCenterCoreset, farthest_first
from pyro_cl.memory.protocol import BUDGETS, ORDERS, Memory, MemoryUpdate
from pyro_cl.memory.random_coreset import RandomCoreset
from pyro_cl.memory.recent import RecentPoints
from pyro_cl.memory.replay import Replay

__all__ = [
    "BUDGETS",
    "ORDERS",
    "EveryPoint",
    "ExperienceReplay",
    "GaussianResidualMemory",
    "KCenterCoreset",
    "Memory",
    "MemoryUpdate",
    "RandomCoreset",
    "RecentPoints",
    "Replay",
    "farthest_first",
]
