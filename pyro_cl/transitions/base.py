"""Transitions: what happens to the posterior between two time steps before it is the prior.

Online Bayes hands the posterior after step ``t_{k-1}`` to step ``t_k`` unchanged (VCL eq. 1).
Methods for drifting data change it first, as a function of the elapsed time
``Δt = t_k - t_{k-1}``: Bayesian forgetting mixes it with the initial prior, an
Ornstein-Uhlenbeck or Wiener process widens it. A :class:`Transition` is that step::

    prior_{t_k} = transition(posterior_{t_{k-1}}, Δt)

The learner applies it at the start of every step after the first (when ``Δt`` is known), to the
priors of the sites trained so far; sites never trained (an untrained head) keep their initial
prior and are not passed in. A transition returns the next prior of every site it was given.
A transition may also weigh the likelihood of each memory point by its age
(:meth:`Transition.likelihood_weights`; Bayesian forgetting does). Built-ins:

* :class:`Identity` — VCL's handoff;
* :class:`NoPropagation` — the prior stays the initial one (the coreset-only baseline); a
  learner skips the propagation fit, whose result would be discarded;
* :class:`ChildConcentrationGrowth` — H-IBP's "multiple of α after each new dataset"
  (supplement section 6.1), which changes the net's hyperparameters, not the posterior;
* :class:`Chain` — several transitions in order;
* for drifting data (Kurle et al. 2020, section 4):
  :class:`~pyro_cl.transitions.forgetting.BayesianForgetting`,
  :class:`~pyro_cl.transitions.diffusion.OrnsteinUhlenbeck` and :class:`~pyro_cl.transitions.diffusion.Wiener`.

Time is measured in units of a time constant ``τ`` (``time_constant``); ``None`` takes the mean lag
between the steps observed so far, ``(t_k - t_0) / k`` (the paper's "average of the time-lags",
without looking ahead in the stream).

Write your own by subclassing :class:`Transition`, giving it a ``name`` and implementing
:meth:`Transition.__call__`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from pyro.distributions import Distribution, Normal, constraints

from pyro_cl.checks import LARGEST_REAL, checked_real
from pyro_cl.infer.parts import Parts
from pyro_cl.nn.ibp_mask import IBPMask
from pyro_cl.nn.module_walks import modules_of_type
from pyro_cl.posterior import Posterior, base_distribution, read_priors
from pyro_cl.spec import Registrable

__all__ = [
    "Chain",
    "ChildConcentrationGrowth",
    "Identity",
    "NoPropagation",
    "Transition",
    "TransitionContext",
    "check_adaptation",
    "check_prior_families",
    "check_real_priors",
    "initial_moments",
    "check_time_constant",
    "map_gaussian_sites",
    "map_gaussian_step",
]


@dataclass(frozen=True)
class TransitionContext:
    """What a transition may use besides the posterior.

    :ivar elapsed: ``Δt = t_k - t_{k-1}``, the time since the last step (positive).
    :ivar time: ``t_k``, the time stamp of the step about to be learnt.
    :ivar initial_prior: the sites' priors before the first step (e.g. for forgetting).
    :ivar net: the model's net, for transitions of its hyperparameters (rolled back with the
        rest of the step if the step fails).
    :ivar mean_lag: ``(t_k - t_0) / k``, the mean time between the steps so far (``Δt`` at the
        second step).
    :ivar evidence: where the step's data are in view (a learner's ``observe``), the one-step-
        ahead predictive of those data under a candidate prior, ``Σ_n log p(y_n | x_n, prior)``
        (Monte Carlo, from the same draws for every candidate), for a transition that learns its
        strength (:class:`~pyro_cl.transitions.learned_strength.LearnedStrength`); ``None``
        otherwise (predicting at a later time, a graph's edge).
    """

    elapsed: float
    time: float
    initial_prior: Posterior
    net: torch.nn.Module
    mean_lag: float | None = None
    evidence: Callable[[Posterior], float] | None = None

    @classmethod
    def after(
        cls,
        times: Sequence[float],
        time: float,
        initial_prior: Posterior,
        net: torch.nn.Module,
        evidence: Callable[[Posterior], float] | None = None,
    ) -> TransitionContext:
        """The context of a step at ``time`` after steps at ``times`` (at least one)."""
        return cls(
            elapsed=time - times[-1],
            time=time,
            initial_prior=initial_prior,
            net=net,
            mean_lag=(time - times[0]) / len(times),
            evidence=evidence,
        )

    def time_constant(self, time_constant: float | None) -> float:
        """``τ``: ``time_constant`` if given, else :attr:`mean_lag` (else ``Δt``)."""
        if time_constant is not None:
            return time_constant
        return self.mean_lag if self.mean_lag is not None else self.elapsed

    def scaled_elapsed(self, time_constant: float | None) -> float:
        """``Δt / τ``."""
        return self.elapsed / self.time_constant(time_constant)


class Transition(Registrable, ABC, kind="transition"):
    """Base class: ``__call__(posterior, context)`` returns the prior of the next step."""

    #: False when the next prior never depends on the fitted posterior (then the learner does
    #: not run the propagation fit at all).
    propagates: ClassVar[bool] = True

    @abstractmethod
    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        """The next prior of every site in ``posterior`` (the current priors of the trained
        sites, which hold the last posterior)."""

    def check(self, net: torch.nn.Module) -> None:
        """Refuse a net this transition cannot act on, when the learner is built rather than at
        the second step (default: any net).

        :raises TypeError: naming what the net lacks.
        """

    def check_parts(self, parts: Parts) -> None:
        """Refuse, when the learner is built, parts this transition cannot work with (default:
        :meth:`check` of the model's net)."""
        self.check(parts.model.net)

    def gaussian_step(
        self, initial_loc: torch.Tensor, initial_scale: torch.Tensor, context: TransitionContext
    ) -> tuple[float, torch.Tensor, torch.Tensor] | None:
        """The transition as a linear Gaussian step per coordinate, ``w' = a w + b + ε``,
        ``ε ~ N(0, v)``: ``(a, b, v)`` given the coordinates' initial prior, or ``None`` for a
        transition that is not one (the default). A Gaussian ``N(μ, Σ)`` goes to
        ``N(a μ + b, a² Σ + diag v)`` (Kurle et al. 2020, eq. 13): what carries the joint prior
        of a guide that couples sites (:class:`~pyro_cl.guides.FullCovariance`,
        :class:`~pyro_cl.guides.LowRank`)."""
        return None

    def likelihood_weights(
        self, ages: torch.Tensor, context: TransitionContext
    ) -> torch.Tensor | None:
        """The weight of each memory point's likelihood at the step about to be learnt, from
        its age ``t_k - t(m)`` (``None``: every weight 1, the default).

        The learner multiplies each memory point's log-likelihood by its weight in every fit, and
        memories multiply its Gaussian factor and residual score by it (Kurle et al. 2020,
        eq. 12 and algorithm 1).
        """
        return None


class Identity(Transition):
    """``prior_{t_k} = posterior_{t_{k-1}}`` whatever the elapsed time (VCL eq. 1)."""

    name = "identity"
    #: The posterior is the prior whatever its family.
    guide_families = None

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        return posterior


class NoPropagation(Transition):
    """The prior stays the initial prior at every step: nothing is learnt from one step to the
    next except by a memory (the coreset-only baseline, VCL section 6.1)."""

    name = "no_propagation"
    propagates = False

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        return {name: context.initial_prior[name] for name in posterior}

    def check_parts(self, parts: Parts) -> None:
        """Refuse a learner without a memory: it would learn nothing (the coreset-only baseline
        is a learner of its memory alone)."""
        super().check_parts(parts)
        if parts.memory is None:
            raise ValueError(
                "the no-propagation transition (CoresetOnly's) learns from its memory alone and "
                "needs a memory, e.g. RandomCoreset(200)"
            )


class ChildConcentrationGrowth(Transition):
    """H-IBP: ``α_j ← α_j · factor`` for every masked layer's child concentration before each
    later step (supplement section 6.1); the posterior is handed on unchanged.

    :param factor: the growth factor per step (1 keeps ``α_j``).
    """

    name = "child_concentration_growth"

    def __init__(self, factor: float) -> None:
        self.factor = checked_real(factor, "the growth factor", 0, low_open=True)

    def check(self, net: torch.nn.Module) -> None:
        if not _hierarchical_masks(net):
            raise TypeError(
                "ChildConcentrationGrowth needs an H-IBP net (IndianBuffetMLP(hierarchical=True))"
            )

    @torch.no_grad()
    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        for mask in _hierarchical_masks(context.net):
            mask.child_concentration.mul_(self.factor)
        return posterior


def _hierarchical_masks(net: torch.nn.Module) -> list[IBPMask]:
    return [m for m in modules_of_type(net, IBPMask) if m.hierarchical]


class Chain(Transition):
    """Several transitions applied in order.

    :param transitions: the transitions, first applied first.
    """

    name = "chain"

    def __init__(self, transitions: Sequence[Transition]) -> None:
        self.transitions = list(transitions)
        if not all(isinstance(t, Transition) for t in self.transitions):
            raise TypeError(f"Chain takes transitions, got {self.transitions!r}")
        self.propagates = all(t.propagates for t in self.transitions)

    def check(self, net: torch.nn.Module) -> None:
        for transition in self.transitions:
            transition.check(net)

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        for transition in self.transitions:
            posterior = transition(posterior, context)
        return posterior

    def likelihood_weights(
        self, ages: torch.Tensor, context: TransitionContext
    ) -> torch.Tensor | None:
        """The product of the transitions' weights."""
        weights = None
        for transition in self.transitions:
            own = transition.likelihood_weights(ages, context)
            if own is not None:
                weights = own if weights is None else weights * own
        return weights


def check_time_constant(time_constant: float | None) -> float | None:
    """``τ`` checked: positive and finite, or ``None`` (the stream's mean lag).

    :raises ValueError: otherwise.
    """
    if time_constant is None:
        return None
    return checked_real(time_constant, "the time constant", 0, low_open=True)


def check_adaptation(value: float, name: str, upper: float = LARGEST_REAL) -> float:
    """An adaptation parameter in ``[0, upper)``, or a ``ValueError`` naming it."""
    return checked_real(value, name, 0, upper, high_open=True)


def check_real_priors(net: torch.nn.Module) -> None:
    """Refuse a net with a latent site whose prior is not on the real line with a finite mean
    and variance, the moments a Gaussian transition moves towards (:func:`initial_moments`)."""
    for name, prior in read_priors(net).items():
        initial_moments(name, base_distribution(prior))


def initial_moments(name: str, prior: Distribution) -> tuple[torch.Tensor, torch.Tensor]:
    """``(μ_0, σ_0)`` of site ``name``'s initial prior: a Normal's location and scale, another
    real-valued family's mean and standard deviation (a Laplace's ``√2 b``, a Student-t's
    ``s √(ν/(ν-2))``), which a Gaussian transition moves towards.

    :raises TypeError: for a prior off the real line or without a finite variance.
    """
    if isinstance(prior, Normal):
        return prior.loc, prior.scale
    kind = type(prior).__name__
    if prior.support is not constraints.real:
        raise TypeError(
            f"this transition needs priors on the real line; site {name!r} has a {kind} prior"
        )
    mean, stddev = prior.mean, prior.stddev
    if not (bool(torch.isfinite(mean).all()) and bool(torch.isfinite(stddev).all())):
        raise TypeError(
            f"this transition moves towards the initial prior's mean and variance; site "
            f"{name!r} has a {kind} prior without them (a Student-t needs df > 2)"
        )
    return mean, stddev


def check_prior_families(net: torch.nn.Module, allowed: tuple[type, ...] = (Normal,)) -> None:
    """Refuse a net with a latent site whose prior is not one of ``allowed`` (by name)."""
    for name, prior in read_priors(net).items():
        if not isinstance(base_distribution(prior), allowed):
            kinds = " or ".join(kind.__name__ for kind in allowed)
            raise TypeError(
                f"this transition needs {kinds} priors; site {name!r} has a "
                f"{type(base_distribution(prior)).__name__} prior"
            )


def map_gaussian_step(
    transition: Transition, posterior: Posterior, context: TransitionContext
) -> Posterior:
    """Every Normal site of ``posterior`` through ``transition.gaussian_step``:
    ``μ ← a μ + b``, ``σ² ← a² σ² + v``."""

    def update(loc, scale, initial_loc, initial_scale):
        a, b, v = transition.gaussian_step(initial_loc, initial_scale, context)
        return a * loc + b, (a**2 * scale.square() + v).sqrt()

    return map_gaussian_sites(posterior, context.initial_prior, update)


def map_gaussian_sites(
    posterior: Posterior, initial_prior: Posterior, update, others: str = "refuse"
) -> Posterior:
    """Apply ``update(loc, scale, initial_loc, initial_scale) -> (loc, scale)`` to every Normal
    site of ``posterior`` (its event dimensions kept).

    :param others: what happens to a site that is not Gaussian (an IBP net's Beta sticks):
        ``"refuse"`` raises, ``"keep"`` hands it on unchanged.
    :raises TypeError: naming a site that is not Gaussian (with ``others="refuse"``).
    """
    if others not in ("refuse", "keep"):
        raise ValueError(f"others must be 'refuse' or 'keep', got {others!r}")
    result = {}
    for name, distribution in posterior.items():
        q, p0 = base_distribution(distribution), base_distribution(initial_prior[name])
        if not isinstance(q, Normal) or p0.support is not constraints.real:
            if others == "keep":
                result[name] = distribution
                continue
            raise TypeError(f"site {name!r} is not Gaussian ({type(q).__name__}); see the docs")
        initial_loc, initial_scale = initial_moments(name, p0)
        loc, scale = update(q.loc, q.scale, initial_loc.to(q.loc), initial_scale.to(q.scale))
        event_dim = len(distribution.event_shape)
        normal = Normal(loc, scale)
        result[name] = normal.to_event(event_dim) if event_dim else normal
    return result
