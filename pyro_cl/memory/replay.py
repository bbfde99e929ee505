"""Replay of every point: each step fits the new task's data together with every point seen
before, ``D_1 ∪ … ∪ D_t``.

With a fitter that ignores the prior (fine-tuning's maximum likelihood) this is joint training
on all tasks so far, warm-started from the last fit: after the last task, the "Joint" upper
bound of the VOGN thesis's split CIFAR table (section 4.5, table 2) and the reference every
continual method is measured against. It is :class:`~pyro_cl.memory.every_point.EveryPoint`
chosen *after* the fit instead of before it, so the points are fitted with the new data rather
than held back for a refit.

A Bayesian fitter's prior already holds the old tasks' likelihoods: replaying them counts each
old point twice, so the learner refuses that pairing.
"""

from __future__ import annotations

from pyro_cl.memory.every_point import EveryPoint

__all__ = ["Replay"]


class Replay(EveryPoint):
    """Keeps every point and fits it again at every step, beside the step's new points."""

    name = "replay"
    order = "after"
    refit = False
    needs_point_fitter = True  # the fit on D_t ∪ M_{t-1} is the joint fit only without a prior
