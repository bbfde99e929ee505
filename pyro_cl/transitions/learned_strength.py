"""A transition whose strength is learnt online, by empirical Bayes, instead of chosen from a grid.

A drift transition (Wiener diffusion ``c``, Ornstein-Uhlenbeck stiffness ``a``, Bayesian
forgetting rate ``ε``) has one strength ``s``; the right one depends on the stream and can change
along it. Before step ``k`` is learnt, its data ``D_k`` score every candidate prior
``p_s = T_s(q_{k-1})`` by their one-step-ahead predictive (the evidence a
:class:`~pyro_cl.learner.bank.LearnerBank` weighs its members by)::

    s_k = argmax_s  Σ_{n ∈ D_k} log (1/S) Σ_{j=1}^{S} p(y_n | x_n, θ_j),   θ_j ~ p_s      (1)

and the step starts from ``p_{s_k}``. ``D_k`` is scored before it is learnt, so ``s_k`` is a
forecast's strength, not a fit to the data it then learns (type-II maximum likelihood, one
scalar a step). The draws ``θ_j = μ_s + σ_s ε_j`` share one set of ``ε_j`` over the candidates
(the learner's evidence holds its random state fixed), so (1) is a smooth function of ``s`` and a
golden-section search over ``log s`` in ``[low, high]`` finds its maximum in a few dozen
evaluations; ``s = low`` stands for "no drift" (no grid for the user to guess, only a range).
Where a step has no data in view (predicting at a later time, :meth:`prior_at`), the last
learnt strength carries the posterior.

With a Gaussian random walk of known rate, ``s_k`` recovers it (tests/test_learned_strength.py).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.guides import GAUSSIAN_FAMILIES
from pyro_cl.posterior import Posterior
from pyro_cl.transitions.base import Transition, TransitionContext, check_time_constant
from pyro_cl.transitions.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.forgetting import BayesianForgetting

__all__ = ["FAMILIES", "LearnedStrength"]

#: The transitions whose strength can be learnt, and the range searched by default.
FAMILIES: dict[str, tuple[type[Transition], float, float]] = {
    "wiener": (Wiener, 1e-4, 1e2),
    "ornstein_uhlenbeck": (OrnsteinUhlenbeck, 1e-4, 1e2),
    "bayesian_forgetting": (BayesianForgetting, 1e-4, 0.999),
}
_GOLDEN = (math.sqrt(5) - 1) / 2


class LearnedStrength(Transition):
    """``family``'s transition at the strength that maximises the step's one-step-ahead
    predictive, eq. (1) of the module docstring.

    :param family: ``"wiener"``, ``"ornstein_uhlenbeck"`` or ``"bayesian_forgetting"``.
    :param low: the smallest strength searched (standing for no drift); default the family's.
    :param high: the largest; default the family's.
    :param evaluations: evaluations of (1) per step (golden-section search over ``log s``).
    :param time_constant: ``τ`` of the family's transition (``None``: the mean lag).
    """

    name = "learned_strength"
    guide_families = GAUSSIAN_FAMILIES  # a linear Gaussian step at the learnt strength
    #: Strengths within this factor are one (the search stops).
    tolerance: ClassVar[float] = 1.02

    def __init__(
        self,
        family: str = "wiener",
        low: float | None = None,
        high: float | None = None,
        evaluations: int = 24,
        time_constant: float | None = None,
    ) -> None:
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
        kind, default_low, default_high = FAMILIES[family]
        self.family = family
        self.low = checked_real(default_low if low is None else low, "low", 0, low_open=True)
        self.high = checked_real(default_high if high is None else high, "high", self.low)
        if family == "bayesian_forgetting" and not self.high < 1:
            raise ValueError(f"a forgetting rate is below 1: high must be < 1, got {self.high}")
        self.evaluations = checked_count(evaluations, "evaluations")
        self.time_constant = check_time_constant(time_constant)
        self._kind = kind
        #: The strength learnt at the last step (``low`` before the first).
        self.strength = self.low
        #: Every step's learnt strength, in order.
        self.history: list[float] = []

    def check(self, net: torch.nn.Module) -> None:
        self._at(self.low).check(net)

    def _at(self, strength: float) -> Transition:
        return self._kind(strength, self.time_constant)

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        if context.evidence is not None:
            self.strength = self._search(posterior, context)
            self.history.append(self.strength)
        return self._at(self.strength)(posterior, context)

    def _search(self, posterior: Posterior, context: TransitionContext) -> float:
        """Golden-section search of (1) over ``log s`` in ``[log low, log high]``; the best
        strength evaluated."""
        scores: dict[float, float] = {}

        def score(log_strength: float) -> float:
            if log_strength not in scores:
                prior = self._at(math.exp(log_strength))(posterior, context)
                scores[log_strength] = context.evidence(prior)
            return scores[log_strength]

        a, b = math.log(self.low), math.log(self.high)
        c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
        score(a)  # no drift is always a candidate
        for _ in range(max(0, self.evaluations - 3)):
            if b - a < math.log(self.tolerance):
                break
            if score(c) >= score(d):
                b, d = d, c
                c = b - _GOLDEN * (b - a)
            else:
                a, c = c, d
                d = a + _GOLDEN * (b - a)
        best = max(scores, key=lambda log_strength: (scores[log_strength], -log_strength))
        return math.exp(best)

    def gaussian_step(self, initial_loc, initial_scale, context):
        return self._at(self.strength).gaussian_step(initial_loc, initial_scale, context)

    def likelihood_weights(self, ages: torch.Tensor, context: TransitionContext):
        return self._at(self.strength).likelihood_weights(ages, context)

    def state_dict(self) -> dict:
        return {"strength": self.strength, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.strength = float(state.get("strength", self.low))
        self.history = [float(s) for s in state.get("history", [])]
