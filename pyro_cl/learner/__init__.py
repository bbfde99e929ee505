"""The continual learner: the loop over time steps composed of parts, its state as one value,
its checkpoints, and the learners built on it (VCL, graph VCL)."""

from pyro_cl.learner.graph_vcl import GraphVCL
from pyro_cl.learner.learner import ALL_TASKS, ContinualLearner
from pyro_cl.learner.state import LearnerState
from pyro_cl.learner.vcl import VCL

__all__ = ["ALL_TASKS", "VCL", "ContinualLearner", "GraphVCL", "LearnerState"]
