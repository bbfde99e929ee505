"""The binary Concrete distribution in log space: the relaxed Bernoulli masks of IBP nets.

A Bernoulli variable ``z ~ Bern(p)`` has no reparameterised gradient. Its Concrete relaxation
(Maddison et al., 2017; H-IBP supplement section 1.3, eq. 20) draws

.. math::

    y = (\\log\\alpha + \\log u - \\log(1 - u)) / \\lambda, \\qquad u \\sim U(0, 1), \\qquad
    z = \\sigma(y) \\in (0, 1),

with temperature ``λ`` and location ``α``; as ``λ → 0``, ``z`` becomes Bernoulli with
``P(z = 1) = α / (1 + α)``. The variable ``y`` ("the logit of the mask") has the density

.. math::

    \\log p(y) = \\log\\lambda - \\lambda y + \\log\\alpha - 2 \\log(1 + \\exp(-\\lambda y +
    \\log\\alpha)),

the formula of the supplement's text after eq. 21. Working with ``y`` instead of ``z`` avoids the
underflow of ``z`` at 0 or 1, and a KL divergence is the same for ``y`` and ``z = σ(y)`` because
the map is invertible, so eq. 21's bound holds in log space.

**Which location?** The *standard* binary Concrete for ``Bern(π)`` uses the odds,
``log α = log π - log(1 - π)`` (``"log_odds"``), so the zero-temperature limit is ``Bern(π)``.
The supplement's sampling formula and the authors' code use ``log α = log π``
(``"log_probability"``); its zero-temperature limit is ``Bern(π / (1 + π))``, which is at most
1/2, so it switches units off more often than ``π`` says. Both are offered by name through
:func:`mask_logits`; the standard one is the default.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.utils import broadcast_all

__all__ = [
    "MASK_PARAMETERISATIONS",
    "LogitBinaryConcrete",
    "binary_concrete_log_prob",
    "mask_logits",
]

#: How the Concrete location is formed from the unit's log probability ``log π``.
MASK_PARAMETERISATIONS = ("log_odds", "log_probability")


def uniform_noise(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    """``U(0, 1)`` noise of ``shape`` on ``like``'s device and dtype (the Concrete's only source
    of randomness, in one place so tests can control it)."""
    return torch.rand(shape, dtype=like.dtype, device=like.device)


def mask_logits(log_probability: torch.Tensor, parameterisation: str = "log_odds") -> torch.Tensor:
    """``log α`` of a unit whose Bernoulli probability is ``π = exp(log_probability)``.

    ``"log_odds"``: ``log π - log(1 - π)``, computed as ``log π - log(-expm1(log π))`` so that
    ``π`` close to 1 or to 0 stays finite; ``"log_probability"``: ``log π`` (the supplement).
    """
    if parameterisation == "log_odds":
        return log_probability - torch.log(-torch.expm1(log_probability))
    if parameterisation == "log_probability":
        return log_probability
    raise ValueError(
        f"unknown mask parameterisation {parameterisation!r}; choose from {MASK_PARAMETERISATIONS}"
    )


def binary_concrete_log_prob(
    value: torch.Tensor, logits: torch.Tensor, temperature: float | torch.Tensor
) -> torch.Tensor:
    """``log p(y) = log λ - λy + log α - 2 log(1 + exp(-λy + log α))`` (elementwise), with the
    last term written as a softplus so that it never overflows."""
    temperature = torch.as_tensor(temperature, dtype=value.dtype, device=value.device)
    difference = logits - temperature * value
    return torch.log(temperature) + difference - 2 * F.softplus(difference)


class LogitBinaryConcrete(TorchDistribution):
    """The logit ``y`` of a binary Concrete variable with temperature ``λ`` and ``log α = logits``.

    Like ``torch.distributions.LogitRelaxedBernoulli``, but sampled and scored in log space
    throughout (no round trip through probabilities, no overflow for large logits).
    """

    arg_constraints = {"temperature": constraints.positive, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(
        self,
        temperature: float | torch.Tensor,
        logits: torch.Tensor,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(temperature, torch.Tensor):  # a fill on the device: no host copy
            temperature = logits.new_full((), float(temperature))
        self.temperature, self.logits = broadcast_all(temperature, logits)
        super().__init__(self.logits.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogitBinaryConcrete, _instance)
        batch_shape = torch.Size(batch_shape)
        new.temperature = self.temperature.expand(batch_shape)
        new.logits = self.logits.expand(batch_shape)
        super(LogitBinaryConcrete, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.finfo(self.logits.dtype).eps
        uniform = uniform_noise(shape, self.logits)
        logistic = torch.logit(uniform, eps)  # log u - log(1 - u), u clamped to [eps, 1 - eps]
        return (self.logits + logistic) / self.temperature

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return binary_concrete_log_prob(value, self.logits, self.temperature)
