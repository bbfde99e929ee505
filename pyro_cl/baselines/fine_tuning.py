"""Plain fine-tuning: maximum likelihood on each task in turn, no prior (the forgetting baseline)."""

from __future__ import annotations

from pyro_cl.fitters.point_estimate import PointEstimateFitter
from pyro_cl.learner.learner import ContinualLearner

__all__ = ["FineTuning"]


class FineTuning(ContinualLearner):
    """The learner with the :class:`~pyro_cl.fitters.point_estimate.PointEstimateFitter` (no
    penalty): train the deterministic net (the guide's means) by maximum likelihood on each
    task, starting from the previous task's weights and ignoring the prior entirely.

    Same net, optimiser, batches and epochs as :class:`~pyro_cl.VCL`, so the difference in
    accuracy is what the Bayesian prior buys. Predicts with the point estimate.
    """

    default_fitter = PointEstimateFitter
