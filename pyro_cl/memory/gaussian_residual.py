"""A running memory chosen by Gaussian Residual Scoring (Kurle et al. 2020, sections 3.2-3.3,
appendix G's Algorithm 1 without forgetting).

The posterior is a diagonal Gaussian times the likelihood of ``M`` raw data points (eq. 3).
After the fit ``q̃_t`` on ``D_t ∪ M_{t-1}`` against the step's prior ``p_t`` (eq. 7), every
candidate point gets a Gaussian factor ``r⁽ⁿ⁾`` (eq. 5a/5b, bias-corrected) and a score (eq. 8)::

    S(d) = E_q̃[log p(d | w)] - E_q̃[log r(w; d)]

The new memory ``M_t`` is the top ``M`` points by score: those whose likelihood the Gaussian
approximates worst. The Gaussian part handed to the next step is ``q̃_t`` with the memory's
factors taken out (eq. 9a/9b, :func:`~pyro_cl.memory.gaussian_factors.remove_memory_factors`);
prediction uses ``q̃_t``, the fit that includes the memory.

The section 6.1 / figure 8 ablations are options of the same part: ``selection="kcenter"`` or
``"random"`` chooses ``M_t`` from the same candidates without the scores (with the factor update
kept), and ``gaussian_update="elbo"`` hands on a fresh ELBO fit of ``(D_t ∪ M_{t-1}) \\ M_t``
against ``p_t`` instead of the factor update (the learner runs that fit).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.memory.gaussian_factors import (
    GaussianFactors,
    natural_parameters,
    remove_memory_factors,
)
from pyro_cl.memory.kcenter import farthest_first
from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory, MemoryUpdate
from pyro_cl.points import Points
from pyro_cl.posterior import Posterior

__all__ = ["GaussianResidualMemory"]

#: How ``M_t`` is chosen from ``D_t ∪ M_{t-1}``.
SELECTIONS = ("residual", "kcenter", "random")
#: How the Gaussian part is updated: factors removed (eq. 9) or an ELBO fit of the other points.
GAUSSIAN_UPDATES = ("factors", "elbo")


class GaussianResidualMemory(Memory):
    """GRS: a running memory of at most ``size`` points with the highest Gaussian residual.

    Runs after the fit (``order = "after"``) and needs a learner whose guide is a mean-field
    Gaussian over single-head or multi-head nets of pyro_cl layers (or any net, slower, on the
    Pyro route).

    :param size: ``M``, the memory's total size (not per task).
    :param num_term_samples: ``K_term``, Monte Carlo samples for the factors and the expected
        log-likelihoods (the paper uses 50k, table 2).
    :param selection: one of ``"residual"`` (GRS), ``"kcenter"``, ``"random"``.
    :param gaussian_update: ``"factors"`` (eq. 9a/9b) or ``"elbo"``.
    :param precision_floor: clip the updated precision to this fraction of the step's prior
        precision (see :func:`~pyro_cl.memory.gaussian_factors.remove_memory_factors`).
    :param samples_per_chunk: Monte Carlo samples per vectorised pass (default: automatic).

    After each step :attr:`scores` holds the memory points' scores and :attr:`statistics` what
    the update did (equation used, coordinates clipped, seconds spent on factors, scores and the
    update); both save with the learner.
    """

    name = "gaussian_residual"
    order = "after"
    refit = False

    def __init__(
        self,
        size: int,
        num_term_samples: int = 1000,
        selection: str = "residual",
        gaussian_update: str = "factors",
        precision_floor: float = 0.01,
        samples_per_chunk: int | None = None,
    ) -> None:
        super().__init__(size, budget="total")
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if gaussian_update not in GAUSSIAN_UPDATES:
            raise ValueError(
                f"gaussian_update must be one of {GAUSSIAN_UPDATES}, got {gaussian_update!r}"
            )
        self.num_term_samples = checked_count(num_term_samples, "num_term_samples")
        self.selection = selection
        self.gaussian_update = gaussian_update
        self.precision_floor = checked_real(precision_floor, "precision_floor", 0, low_open=True)
        self.samples_per_chunk = (
            None
            if samples_per_chunk is None
            else checked_count(samples_per_chunk, "samples_per_chunk")
        )
        #: Gaussian residual scores of the memory's points, row-aligned with it.
        self.scores = torch.zeros(0)
        #: Scores of every candidate of the last update (``M_{t-1}`` then ``D_t``; not saved).
        self.candidate_scores = torch.zeros(0)
        #: What the last update did: ``{"equation", "clipped", "coordinates", "seconds"}``.
        self.statistics: dict[str, Any] = {}
        self._factors: GaussianFactors | None = None  # the candidates' factors, within a step
        self._start = 0.0

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        """The ``size`` candidates with the highest score (eq. 8), or the heuristic's choice
        (``kcenter``, ``random``) from the same candidates; every candidate's factor is kept for
        :meth:`handed_on`.

        :param view: required: the fitted ``q̃_t``, the step's prior and the model.
        """
        if view is None:
            raise ValueError("GaussianResidualMemory scores points by the model: it needs a view")
        self._start = time.perf_counter()
        self._factors = view.gaussian_factors(
            candidates, self.num_term_samples, self.samples_per_chunk
        )
        scores = self._factors.residual_scores(view.posterior)
        if self.selection == "residual":
            chosen = torch.topk(scores, size).indices
        elif self.selection == "kcenter":
            chosen = farthest_first(candidates.x, size).to(scores.device)
        else:
            chosen = torch.randperm(len(candidates), device=candidates.x.device)[:size]
            chosen = chosen.to(scores.device)
        self.scores = scores[chosen].detach()
        self.candidate_scores = scores.detach()
        return chosen

    def handed_on(
        self, candidates: Points, kept: torch.Tensor, update: MemoryUpdate, view: ModelView | None
    ) -> Posterior | None:
        """``q̃_t`` with the kept points' factors divided out (eq. 9a/9b), or with
        ``gaussian_update="elbo"`` the step's prior where every point is kept (else ``None``:
        the learner fits the points let go from the prior)."""
        factors: GaussianFactors = self._factors
        self._factors = None
        posterior = None
        self.statistics = {"equation": "elbo", "clipped": 0, "coordinates": 0}
        if self.gaussian_update == "factors":
            removed = remove_memory_factors(
                natural_parameters(view.prior),
                natural_parameters(view.posterior),
                factors,
                kept.to(factors.expected_log_likelihood.device),
                self.precision_floor,
            )
            posterior = removed.posterior.distributions()
            self.statistics = {
                "equation": removed.equation,
                "clipped": removed.clipped,
                "coordinates": removed.coordinates,
            }
        elif not len(update.remaining) and not len(update.dropped):
            posterior = view.prior  # every point is in the memory: the Gaussian part is the prior
        self.statistics["seconds"] = time.perf_counter() - self._start
        return posterior

    def state_dict(self) -> dict[str, Any]:
        return {"scores": self.scores, "statistics": dict(self.statistics)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scores = state.get("scores", torch.zeros(0))
        self.statistics = dict(state.get("statistics", {}))
