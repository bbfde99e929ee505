"""The continual learner: the loop over time steps composed of parts, its state as one value,
its checkpoints, the learners built on it (VCL, graph VCL), a bank of learners weighted by their
evidence (and one that moves along a ladder of strengths), and river's classifier interface over a learner."""

from pyro_cl.learner.bank import LearnerBank
from pyro_cl.learner.graph_vcl import GraphVCL
from pyro_cl.learner.learner import ALL_TASKS, ContinualLearner
from pyro_cl.learner.moving_bank import MovingBank
from pyro_cl.learner.online_classifier import OnlineClassifier
from pyro_cl.learner.state import LearnerState
from pyro_cl.learner.vcl import VCL

__all__ = [
    "ALL_TASKS",
    "VCL",
    "ContinualLearner",
    "GraphVCL",
    "LearnerBank",
    "LearnerState",
    "MovingBank",
    "OnlineClassifier",
]
