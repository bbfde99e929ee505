"""Transitions: what happens to the posterior between two time steps before it is the prior.

Online Bayes hands the posterior after step ``t_{k-1}`` to step ``t_k`` unchanged (VCL eq. 1).
Methods for drifting data change it first, as a function of the elapsed time
``Δt = t_k - t_{k-1}``: Bayesian forgetting mixes it with the initial prior, an
Ornstein-Uhlenbeck or Wiener process widens it. A :class:`Transition` is that step::

    prior_{t_k} = transition(posterior_{t_{k-1}}, Δt)

The learner applies it at the start of every step after the first (when ``Δt`` is known), to the
priors of the sites trained so far; sites never trained (an untrained head) keep their initial
prior and are not passed in. A transition returns the next prior of every site it was given.
Built-ins:

* :class:`Identity` — VCL's handoff;
* :class:`NoPropagation` — the prior stays the initial one (the coreset-only baseline); a
  learner skips the propagation fit, whose result would be discarded;
* :class:`ChildConcentrationGrowth` — H-IBP's "multiple of α after each new dataset"
  (supplement section 6.1), which changes the net's hyperparameters, not the posterior;
* :class:`Chain` — several transitions in order.

Write your own by subclassing :class:`Transition`, giving it a ``name`` and implementing
:meth:`Transition.__call__`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from pyro_cl.nn.ibp_mask import IBPMask
from pyro_cl.nn.module_walks import modules_of_type
from pyro_cl.posterior import Posterior
from pyro_cl.spec import Registrable

__all__ = [
    "Chain",
    "ChildConcentrationGrowth",
    "Identity",
    "NoPropagation",
    "Transition",
    "TransitionContext",
]


@dataclass(frozen=True)
class TransitionContext:
    """What a transition may use besides the posterior.

    :ivar elapsed: ``Δt = t_k - t_{k-1}``, the time since the last step (positive).
    :ivar time: ``t_k``, the time stamp of the step about to be learnt.
    :ivar initial_prior: the sites' priors before the first step (e.g. for forgetting).
    :ivar net: the model's net, for transitions of its hyperparameters (rolled back with the
        rest of the step if the step fails).
    """

    elapsed: float
    time: float
    initial_prior: Posterior
    net: torch.nn.Module


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


class Identity(Transition):
    """``prior_{t_k} = posterior_{t_{k-1}}`` whatever the elapsed time (VCL eq. 1)."""

    name = "identity"

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        return posterior


class NoPropagation(Transition):
    """The prior stays the initial prior at every step: nothing is learnt from one step to the
    next except by a memory (the coreset-only baseline, VCL section 6.1)."""

    name = "no_propagation"
    propagates = False

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        return {name: context.initial_prior[name] for name in posterior}


class ChildConcentrationGrowth(Transition):
    """H-IBP: ``α_j ← α_j · factor`` for every masked layer's child concentration before each
    later step (supplement section 6.1); the posterior is handed on unchanged.

    :param factor: the growth factor per step (1 keeps ``α_j``).
    """

    name = "child_concentration_growth"

    def __init__(self, factor: float) -> None:
        if not factor > 0:
            raise ValueError(f"the growth factor must be positive, got {factor}")
        self.factor = float(factor)

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
