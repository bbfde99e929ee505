"""Bayesian exponential forgetting in continuous time (Kurle et al. 2020, section 4.1, app. F).

The likelihood of data observed at ``t_k`` counts with weight ``(1-ε)^{(t_K - t_k)/τ}`` at time
``t_K`` (eq. 10)::

    p(w | D_{t_1:t_K}) ∝ p_0(w) ∏_k p(D_{t_k} | w)^{(1-ε)^{(t_K - t_k)/τ}}

which is the recursion (eq. 11, appendix F), with ``ρ = (1-ε)^{Δt_{k+1}/τ}``::

    p(w | D_{t_1:t_{k+1}}) ∝ p_0(w)^{1-ρ} p(w | D_{t_1:t_k})^ρ p(D_{t_{k+1}} | w)

The *forgetting step* ``p_0^{1-ρ} q^ρ`` of a posterior ``q`` in the exponential family of the
prior mixes natural parameters (appendix F)::

    Λ_{t_{k+1}} = (1-ρ) Λ_0 + ρ Λ_{t_k},     η_{t_{k+1}} = (1-ρ) η_0 + ρ η_{t_k}

for Gaussian sites (``Λ = 1/σ²``, ``η = μ/σ²``), and ``α ← (1-ρ) α_0 + ρ α`` (``β`` alike) for Beta
sites (IBP sticks), whose natural parameters are ``α - 1`` and ``β - 1``. A memory's points keep
their raw likelihoods, each weighted by ``(1-ε)^{Δt(m)/τ}`` with ``Δt(m)`` its age (eq. 12):
:meth:`BayesianForgetting.likelihood_weights`. As ``Δt → ∞`` the prior returns to ``p_0`` and the
memory's weights to 0; with ``ε = 0`` nothing changes (online VB).
"""

from __future__ import annotations

import torch
from pyro.distributions import Beta, Normal

from pyro_cl.posterior import Posterior, base_distribution
from pyro_cl.transitions.base import (
    Transition,
    TransitionContext,
    check_adaptation,
    check_prior_families,
    check_time_constant,
)

__all__ = ["BayesianForgetting", "forgetting_mix", "retention"]


def retention(forgetting_rate: float, scaled_elapsed: float | torch.Tensor) -> float | torch.Tensor:
    """``ρ = (1-ε)^{Δt/τ}``: how much of the posterior survives ``Δt/τ`` time constants."""
    return (1.0 - forgetting_rate) ** scaled_elapsed  # a tensor keeps its dtype and device


def forgetting_mix(initial: torch.Tensor, current: torch.Tensor, rho: float) -> torch.Tensor:
    """``(1-ρ) · initial + ρ · current``: the forgetting step on one natural parameter (any shape,
    full precision matrices included)."""
    return (1.0 - rho) * initial + rho * current


class BayesianForgetting(Transition):
    """``p_{t_{k+1}} ∝ p_0^{1-ρ} q_{t_k}^ρ`` with ``ρ = (1-ε)^{Δt/τ}`` (eq. 11, 12), and memory
    points weighted by ``(1-ε)^{age/τ}``.

    :param forgetting_rate: ``ε`` in ``[0, 1)``: the fraction forgotten per time constant
        (``1/ε`` steps of data is the effective memory of equally sized steps).
    :param time_constant: ``τ``; ``None`` is the mean lag between the steps so far.
    """

    name = "bayesian_forgetting"

    def __init__(self, forgetting_rate: float, time_constant: float | None = None) -> None:
        self.forgetting_rate = check_adaptation(forgetting_rate, "the forgetting rate", upper=1)
        self.time_constant = check_time_constant(time_constant)

    def check(self, net: torch.nn.Module) -> None:
        check_prior_families(net, (Normal, Beta))

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        rho = retention(self.forgetting_rate, context.scaled_elapsed(self.time_constant))
        if rho == 1.0:
            return posterior
        return {
            name: _forget(name, q, context.initial_prior[name], rho)
            for name, q in posterior.items()
        }

    def likelihood_weights(self, ages: torch.Tensor, context: TransitionContext) -> torch.Tensor:
        """``(1-ε)^{age/τ}`` per memory point (eq. 12)."""
        return retention(self.forgetting_rate, ages / context.time_constant(self.time_constant))


def _forget(name: str, distribution, initial, rho: float):
    q, p0 = base_distribution(distribution), base_distribution(initial)
    event_dim = len(distribution.event_shape)
    if isinstance(q, Normal) and isinstance(p0, Normal):
        precision = forgetting_mix(p0.scale.to(q.scale).pow(-2), q.scale.pow(-2), rho)
        shift = forgetting_mix(
            p0.loc.to(q.loc) * p0.scale.to(q.scale).pow(-2), q.loc * q.scale.pow(-2), rho
        )
        mixed = Normal(shift / precision, precision.rsqrt())
    elif isinstance(q, Beta) and isinstance(p0, Beta):
        mixed = Beta(
            forgetting_mix(p0.concentration1.to(q.concentration1), q.concentration1, rho),
            forgetting_mix(p0.concentration0.to(q.concentration0), q.concentration0, rho),
        )
    else:
        raise TypeError(
            f"Bayesian forgetting mixes Gaussian or Beta sites; {name!r} is "
            f"{type(q).__name__} with a {type(p0).__name__} initial prior"
        )
    return mixed.to_event(event_dim) if event_dim else mixed
