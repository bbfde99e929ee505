"""Adaptation by diffusing the weights between steps (Kurle et al. 2020, section 4.2, app. B).

The weights follow a Gaussian process in time; the next prior is the posterior pushed through
the transition density, ``p_{t_{k+1}}(w') = ∫ p(w' | w) q_{t_k}(w) dw`` (eq. 13), which for a
diagonal Gaussian ``q`` and these processes is Gaussian again, coordinate by coordinate:

* **Ornstein-Uhlenbeck**, ``dw = θ (μ_0 - w) dt + σ_0 √(2θ) dW`` with stiffness ``θ = a/τ``::

      μ  ← (1 - e^{-aΔt/τ}) μ_0  + e^{-aΔt/τ} μ
      σ² ← (1 - e^{-2aΔt/τ}) σ_0² + e^{-2aΔt/τ} σ²

  It returns to the initial prior ``N(μ_0, σ_0²)`` as ``Δt → ∞`` (the only Gaussian process that
  does), and ``a = 0`` changes nothing.
* **Wiener** (a random walk; appendix B), ``dw = c σ_0 dW``: the diffusion is proportional to the
  initial prior's standard deviation of each coordinate (for the nets' per-layer priors, of each
  layer)::

      μ  ← μ
      σ² ← σ² + c² σ_0² Δt/τ

Both act on the Gaussian part only: the paper uses them without a memory (the transition of a
memory's raw likelihoods has no closed form).
"""

from __future__ import annotations

import math

import torch

from pyro_cl.guides import GAUSSIAN_FAMILIES
from pyro_cl.posterior import Posterior
from pyro_cl.transitions.base import (
    Transition,
    TransitionContext,
    check_adaptation,
    check_real_priors,
    check_time_constant,
    map_gaussian_step,
)

__all__ = ["OrnsteinUhlenbeck", "Wiener"]


class OrnsteinUhlenbeck(Transition):
    """The Ornstein-Uhlenbeck transition of section 4.2 (see the module docstring).

    :param stiffness: ``a ≥ 0``: the mean decays towards ``μ_0`` by ``e^{-a}`` per time constant
        (half-life ``τ ln 2 / a``).
    :param time_constant: ``τ``; ``None`` is the mean lag between the steps so far.
    """

    name = "ornstein_uhlenbeck"

    def __init__(self, stiffness: float, time_constant: float | None = None) -> None:
        self.stiffness = check_adaptation(stiffness, "the stiffness")
        self.time_constant = check_time_constant(time_constant)

    def check(self, net: torch.nn.Module) -> None:
        check_real_priors(net)

    #: A linear Gaussian step, so it carries a joint Gaussian prior too.
    guide_families = GAUSSIAN_FAMILIES

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        if self._decay(context) == 1.0:
            return posterior
        return map_gaussian_step(self, posterior, context)

    def gaussian_step(self, initial_loc, initial_scale, context):
        """``a = e^{-aΔt/τ}``, ``b = (1 - a) μ_0``, ``v = (1 - a²) σ_0²``."""
        decay = self._decay(context)
        return decay, (1 - decay) * initial_loc, (1 - decay**2) * initial_scale.square()

    def _decay(self, context: TransitionContext) -> float:
        return math.exp(-self.stiffness * context.scaled_elapsed(self.time_constant))


class Wiener(Transition):
    """The Wiener (random-walk) transition of appendix B (see the module docstring).

    :param diffusion: ``c ≥ 0``: the standard deviation added per time constant, as a multiple
        of each coordinate's initial prior standard deviation.
    :param time_constant: ``τ``; ``None`` is the mean lag between the steps so far.
    """

    name = "wiener"

    def __init__(self, diffusion: float, time_constant: float | None = None) -> None:
        self.diffusion = check_adaptation(diffusion, "the diffusion")
        self.time_constant = check_time_constant(time_constant)

    def check(self, net: torch.nn.Module) -> None:
        check_real_priors(net)

    #: A linear Gaussian step, so it carries a joint Gaussian prior too.
    guide_families = GAUSSIAN_FAMILIES

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        if self._growth(context) == 0.0:
            return posterior
        return map_gaussian_step(self, posterior, context)

    def gaussian_step(self, initial_loc, initial_scale, context):
        """``a = 1``, ``b = 0``, ``v = c² σ_0² Δt/τ``."""
        return 1.0, torch.zeros_like(initial_loc), self._growth(context) * initial_scale.square()

    def _growth(self, context: TransitionContext) -> float:
        return self.diffusion**2 * context.scaled_elapsed(self.time_constant)
