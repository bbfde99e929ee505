"""A read-only view of a learner's model and current posterior, for memories that score points."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pyro_cl.likelihoods import Likelihood
from pyro_cl.posterior import Posterior, detach_distribution

if TYPE_CHECKING:
    from pyro_cl.infer.learner import ContinualLearner

__all__ = ["ModelView"]


class ModelView:
    """What a memory may look at: the current posterior and the model's predictions under it.

    Nothing here changes the learner: :attr:`posterior` is a detached copy, and predictions run
    without gradients. For a memory that runs before the fit the posterior is the previous step's
    (the prior of this step); after the fit it is the newly fitted one.
    """

    def __init__(self, learner: ContinualLearner) -> None:
        self._learner = learner

    @property
    def posterior(self) -> Posterior:
        """``{site: distribution}`` of every site trained so far (detached copies)."""
        return {name: detach_distribution(q) for name, q in self._learner.current_prior().items()}

    @property
    def likelihood(self) -> Likelihood:
        return self._learner.model.likelihood

    @torch.no_grad()
    def predictive_samples(
        self, x: torch.Tensor, task_id: int, num_samples: int | None = None
    ) -> torch.Tensor:
        """Net outputs for ``num_samples`` draws from the current posterior: ``(S, N, ...)``."""
        return self._learner._predictive_samples(x, task_id, num_samples, sites={})

    @torch.no_grad()
    def log_predictive(
        self, x: torch.Tensor, y: torch.Tensor, task_id: int, num_samples: int | None = None
    ) -> torch.Tensor:
        """Per point, ``log (1/S) Σ_s p(y_n | x_n, θ_s)`` with ``θ_s`` from the current
        posterior: shape ``(N,)``."""
        samples = self.predictive_samples(x, task_id, num_samples)
        return self.likelihood.predictive_log_likelihood(samples, y)
