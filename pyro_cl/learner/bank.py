"""A bank of learners weighted by their one-step-ahead evidence: adaptation that chooses its own
strength.

A transition's strength (forgetting rate ``ε``, OU stiffness ``a``, Wiener diffusion ``c``) is a
hyperparameter of the model of how the world drifts. Bayes' rule chooses it like any other: give
each candidate ``m`` a prior weight, run one learner per candidate, and before a step ``D_{t_k}`` is
learnt score each learner's predictive of it,

.. math::

    \\log w_m \\leftarrow \\gamma \\log w_m + \\sum_{n \\in D_{t_k}} \\log p_m(y_n \\mid x_n,
    D_{t_{<k}}), \\qquad w \\leftarrow w / \\textstyle\\sum_m w_m,

the prequential (one-step-ahead) marginal likelihood of candidate ``m`` so far (Dawid 1984). With
``γ = 1`` the weights are the exact posterior over the candidates and the bank predicts with the
Bayesian model average ``Σ_m w_m p_m(y | x)``, whose cumulative log-loss is at most
``log M`` nats worse than the best candidate's in hindsight, on any stream. ``γ < 1`` discounts old
evidence, for streams whose best strength itself changes.

Each ``p_m`` is member ``m``'s posterior carried to the step's time by its transition (the
default), or, with ``at_time=False``, the member's own prediction posterior whatever the time:
for members with a memory, whose prediction is a refit on the memory that no transition carries
(:meth:`~pyro_cl.learner.ContinualLearner.predict` refuses a time there), this is how a single
such learner is scored one step ahead.

Every member keeps its own transaction: a step the bank cannot finish (one member's fit diverges)
leaves every member and the weights as they were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import ExitStack

import torch

from pyro_cl.checks import checked_real
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.learner.state import transaction
from pyro_cl.learner.step_time import next_time
from pyro_cl.metrics import expected_calibration_error

__all__ = ["LearnerBank"]


class LearnerBank:
    """Learners of one model under different settings (e.g. transition strengths), weighted by
    their one-step-ahead evidence and predicting as their Bayesian model average.

    :param members: ``{label: learner}``, two or more learners of the same likelihood, each with
        its own net (e.g. ``{"ε=0.01": VCL(net_a, transition=BayesianForgetting(0.01)), ...}``).
    :param discount: ``γ ∈ (0, 1]``, the weight kept of the evidence so far at each step.
    :param num_samples: posterior draws for the members' predictives (default: each member's own).
    :param at_time: weigh and predict with each member's posterior carried to the step's time
        (``True``), or with its own prediction posterior (``False``: members with a memory's
        refit; the bank then predicts without a time).
    """

    def __init__(
        self,
        members: Mapping[str, ContinualLearner],
        discount: float = 1.0,
        num_samples: int | None = None,
        at_time: bool = True,
    ) -> None:
        members = dict(members)
        if len(members) < 2:
            raise ValueError(f"a bank needs two or more learners, got {len(members)}")
        for label, member in members.items():
            if not isinstance(member, ContinualLearner):
                raise TypeError(f"member {label!r} is a {type(member).__name__}, not a learner")
        nets = {id(member.net) for member in members.values()}
        if len(nets) < len(members):
            raise ValueError("the bank's learners share a net: give each its own")
        likelihoods = {member.model.likelihood.name for member in members.values()}
        if len(likelihoods) > 1:
            raise ValueError(
                f"the bank's learners have different likelihoods: {sorted(likelihoods)}"
            )
        self.members = members
        self.discount = checked_real(discount, "the discount", low=0.0, high=1.0, low_open=True)
        self.num_samples = num_samples
        self.at_time = bool(at_time)
        self.log_weights = torch.full((len(members),), -math.log(len(members)), dtype=torch.float64)

    @property
    def weights(self) -> dict[str, float]:
        """``{label: w_m}``, the members' current weights (summing to one)."""
        return dict(zip(self.members, self.log_weights.exp().tolist(), strict=True))

    @property
    def chosen(self) -> str:
        """The label of the member with the largest weight."""
        return list(self.members)[int(self.log_weights.argmax())]

    def member_samples(self, x, task_id: int | None = None, time: float | None = None) -> list:
        """Each member's predictive samples ``(S, N, outputs)`` of inputs ``x`` (at ``time``)."""
        if time is not None and not self.at_time:
            raise ValueError(
                "this bank predicts with its members' own posteriors (at_time=False): predict "
                "without a time"
            )
        return [
            member.predictive_samples(x, task_id, self.num_samples, time=time)
            for member in self.members.values()
        ]

    def _member_samples(self, data, task_id, time) -> tuple[list[torch.Tensor], torch.Tensor]:
        x, y, task = next(iter(self.members.values())).prepare_data(data, task_id)
        samples = self.member_samples(x, task, time)
        return samples, y.to(samples[0].device)

    def member_log_likelihoods(
        self, data, task_id: int | None = None, time: float | None = None
    ) -> torch.Tensor:
        """Per-point predictive log-likelihoods ``log p_m(y_n | x_n)`` (at ``time``: each
        member's posterior carried there by its transition), shape ``(M, N)``."""
        samples, y = self._member_samples(data, task_id, time)
        return self._log_likelihoods(samples, y)

    def _log_likelihoods(self, samples: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        likelihood = self.likelihood
        return torch.stack([likelihood.predictive_log_likelihood(s, y).double() for s in samples])

    @property
    def likelihood(self):
        return next(iter(self.members.values())).model.likelihood

    def observe(self, data, task_id: int | None = None, time: float | None = None) -> None:
        """Weigh the members by their predictive of ``data`` at the step's ``time`` (before any of
        them learns it: ``p_m(D_{t_k} | D_{t_{<k}})``, each member's posterior carried to ``t_k``
        by its transition, or its own prediction posterior with ``at_time=False``), then let
        every member learn it; all or nothing."""
        time = next_time(next(iter(self.members.values())).times, time)
        scored_at = time if self.at_time else None
        evidence = self.member_log_likelihoods(data, task_id, scored_at).sum(1)
        with ExitStack() as members_as_they_were:
            for member in self.members.values():
                members_as_they_were.enter_context(transaction(member))
            for member in self.members.values():
                member.observe(data, task_id=task_id, time=time)
        log_weights = self.discount * self.log_weights + evidence
        self.log_weights = log_weights - torch.logsumexp(log_weights, 0)

    def mixed_probabilities(self, samples: list[torch.Tensor]) -> torch.Tensor:
        """``Σ_m w_m p_m(y | x)`` from each member's predictive samples."""
        probabilities = torch.stack(
            [self.likelihood.predictive_probabilities(s).double() for s in samples]
        )
        weights = self.log_weights.exp().to(probabilities.device)
        return torch.einsum("m,mnk->nk", weights, probabilities)

    def predict(self, x, task_id: int | None = None, time: float | None = None) -> torch.Tensor:
        """Class probabilities of the Bayesian model average ``Σ_m w_m p_m(y | x)`` (at
        ``time``, see :meth:`member_log_likelihoods`)."""
        return self.mixed_probabilities(self.member_samples(x, task_id, time))

    def evaluate(
        self, data, task_id: int | None = None, time: float | None = None
    ) -> dict[str, float]:
        """The model average's mean log-likelihood of ``data`` (and accuracy and calibration
        error for a classifier), at ``time`` if given."""
        samples, y = self._member_samples(data, task_id, time)
        per_point = self._log_likelihoods(samples, y)
        weights = self.log_weights.to(per_point.device).unsqueeze(1)
        out = {"log_likelihood": torch.logsumexp(weights + per_point, 0).mean().item()}
        try:
            probabilities = self.mixed_probabilities(samples)
        except TypeError:  # a regression likelihood: no classes
            return out
        out["accuracy"] = (probabilities.argmax(-1) == y).double().mean().item()
        out["calibration_error"] = expected_calibration_error(probabilities, y.long())
        return out
