"""A read-only view of a learner's model and current posterior, for memories that score points."""

from __future__ import annotations

import torch

from pyro_cl.infer.prediction import predictive_samples
from pyro_cl.likelihoods import Likelihood
from pyro_cl.memory.gaussian_factors import (
    GaussianFactors,
    estimate_gaussian_factors,
    natural_parameters,
)
from pyro_cl.model import SupervisedModel
from pyro_cl.points import Points
from pyro_cl.posterior import Posterior, detach_distribution

__all__ = ["ModelView"]


class ModelView:
    """What a memory may look at: the current posterior and the model's predictions under it.

    Nothing here changes the learner: :attr:`posterior` is a detached copy, and predictions run
    without gradients. For a memory that runs before the fit the posterior is the previous step's
    (the prior of this step); after the fit it is the newly fitted one, and :attr:`prior` is the
    prior that fit started from.

    :param model: the learner's model; its priors hold :attr:`posterior`.
    :param posterior: ``{site: distribution}`` of every site trained so far, as detached copies
        (the learner's :meth:`~pyro_cl.learner.learner.ContinualLearner.current_prior`).
    :param prior: the step's prior (after the transition), for memories that run after the fit.
    :param time: the step's time stamp (stamped on the step's new points).
    :param task_id: the task of the step's new points.
    :param num_predictive_samples: draws per prediction where none are asked for.
    """

    def __init__(
        self,
        model: SupervisedModel,
        posterior: Posterior,
        prior: Posterior | None = None,
        time: float = 0.0,
        task_id: int = 0,
        num_predictive_samples: int = 100,
    ) -> None:
        self._model = model
        self._posterior = dict(posterior)
        self._prior = prior
        self.time = float(time)
        self.task_id = task_id
        self.num_predictive_samples = num_predictive_samples

    @property
    def posterior(self) -> Posterior:
        """``{site: distribution}`` of every site trained so far (detached copies)."""
        return dict(self._posterior)

    @property
    def prior(self) -> Posterior:
        """``{site: distribution}``: the prior of this step's fit for the same sites as
        :attr:`posterior` (detached copies).

        :raises RuntimeError: for a memory that runs before the fit (there is no fit yet)."""
        if self._prior is None:
            raise RuntimeError("the step's prior is only in view after the fit (order='after')")
        return {name: detach_distribution(self._prior[name]) for name in self._posterior}

    @property
    def likelihood(self) -> Likelihood:
        return self._model.likelihood

    @torch.no_grad()
    def predictive_samples(
        self, x: torch.Tensor, task_id: int, num_samples: int | None = None
    ) -> torch.Tensor:
        """Net outputs for ``num_samples`` draws from the current posterior: ``(S, N, ...)``."""
        num_samples = num_samples or self.num_predictive_samples
        return predictive_samples(self._model, {}, x, task_id, num_samples)

    @torch.no_grad()
    def log_predictive(
        self, x: torch.Tensor, y: torch.Tensor, task_id: int, num_samples: int | None = None
    ) -> torch.Tensor:
        """Per point, ``log (1/S) Σ_s p(y_n | x_n, θ_s)`` with ``θ_s`` from the current
        posterior: shape ``(N,)``."""
        samples = self.predictive_samples(x, task_id, num_samples)
        return self.likelihood.predictive_log_likelihood(samples, y)

    def gaussian_factors(
        self, points: Points, num_samples: int, samples_per_chunk: int | None = None
    ) -> GaussianFactors:
        """Every point's Gaussian factor under :attr:`posterior`, bias-corrected so that
        :attr:`prior` times all factors is :attr:`posterior` (Kurle et al. eq. 5, appendix C;
        see :mod:`pyro_cl.memory.gaussian_factors`). Meaningful after a fit on exactly ``points``.
        Points with likelihood weights get the weighted factors (algorithm 1 with forgetting).
        """
        posterior = self.posterior
        model = self._model
        parts = []
        order = []
        for task in points.tasks():
            rows = (points.task_ids == task).nonzero().squeeze(1)
            parts.append(
                estimate_gaussian_factors(
                    model,
                    posterior,
                    points.x[rows],
                    points.y[rows],
                    task,
                    num_samples,
                    samples_per_chunk,
                )
            )
            order.append(rows)
        rows = torch.cat(order)
        inverse = torch.empty_like(rows)
        inverse[rows] = torch.arange(len(rows), device=rows.device)
        factors = GaussianFactors(
            {n: torch.cat([f.precision[n] for f in parts])[inverse] for n in posterior},
            {n: torch.cat([f.shift[n] for f in parts])[inverse] for n in posterior},
            torch.cat([f.expected_log_likelihood for f in parts])[inverse],
            num_samples,
        )
        if points.weights is not None:
            factors = factors.weighted(points.weights)
        return factors.bias_corrected(natural_parameters(self.prior), natural_parameters(posterior))
