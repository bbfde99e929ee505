"""Per-data-point IBP masks on a layer's hidden units (H-IBP supplement eq. 3-4, 6, 10-11, 21)."""

from __future__ import annotations

import pyro
import torch
from pyro.distributions import Bernoulli, Beta

from pyro_cl.checks import checked_real
from pyro_cl.nn.concrete import MASK_PARAMETERISATIONS, LogitBinaryConcrete, mask_logits
from pyro_cl.nn.effects import (
    CollectLocalKL,
    ParticlePlate,
    PosteriorConditionals,
    RecordMasks,
    current_data_plate,
    innermost,
)
from pyro_cl.nn.site_flags import STRUCTURED_FLAG
from pyro_cl.nn.structured import StructuredSites
from pyro_cl.nn.substitution import SubstitutableModule
from pyro_cl.posterior import site_name

__all__ = ["IBPMask"]

#: Stick-breaking probabilities are kept in ``[_PI_FLOOR, 1 - _PI_FLOOR]`` where they become Beta
#: concentrations (eq. 3), which must stay positive.
_PI_FLOOR = 1e-6


class IBPMask(StructuredSites, SubstitutableModule):
    """``h ∘ z`` with one binary mask row ``z_i ∈ {0, 1}^K`` per data point (eq. 4 and 6).

    Each unit ``k`` is on with probability ``π_k`` given by the stick-breaking weights passed in
    as ``log π``. In a *hierarchical* net (H-IBP, eq. 3) those are the global ``π^0`` and the layer
    first draws its own ``π_k ~ Beta(α_j π^0_k, α_j (1 - π^0_k))`` (site ``unit_probs``); its
    posterior given the sticks is the same conditional (eq. 10), so it contributes no KL.

    In training mode the masks are binary Concrete variables (see :mod:`pyro_cl.nn.concrete`):
    the site ``mask_logit`` holds ``y`` and the mask is ``z = σ(y)``. The prior draws ``y`` at
    temperature ``λ2`` (``prior_temperature``), the posterior at ``λ1``
    (``posterior_temperature``) with the same ``π`` given the sticks (eq. 11, 21); both sites live
    in the ``"data"`` plate, so there is one row per data point. In evaluation mode (``.eval()``)
    the masks are Bernoulli draws, site ``mask``, with ``P(z = 1) = σ(log α)``.

    :param num_units: the layer's width ``K`` (the truncation).
    :param posterior_temperature: ``λ1``.
    :param prior_temperature: ``λ2``.
    :param parameterisation: ``"log_odds"`` (standard binary Concrete) or ``"log_probability"``
        (the supplement's formula); see :func:`pyro_cl.nn.concrete.mask_logits`.
    :param child_concentration: ``α_j`` of the H-IBP layer, or ``None`` for an IBNN layer, which
        uses ``π`` directly.
    """

    def __init__(
        self,
        num_units: int,
        posterior_temperature: float = 1.0,
        prior_temperature: float = 1.0,
        parameterisation: str = "log_odds",
        child_concentration: float | None = None,
    ) -> None:
        super().__init__()
        for value, what in ((posterior_temperature, "λ1"), (prior_temperature, "λ2")):
            checked_real(value, f"the temperature {what}", 0, low_open=True)
        if parameterisation not in MASK_PARAMETERISATIONS:
            raise ValueError(
                f"unknown mask parameterisation {parameterisation!r}; "
                f"choose from {MASK_PARAMETERISATIONS}"
            )
        self.num_units = num_units
        self.posterior_temperature = float(posterior_temperature)
        self.prior_temperature = float(prior_temperature)
        self.parameterisation = parameterisation
        self.hierarchical = child_concentration is not None
        if self.hierarchical:
            checked_real(child_concentration, "the child concentration", 0, low_open=True)
            self.register_buffer("child_concentration", torch.tensor(float(child_concentration)))

    def unit_log_probabilities(self, parent_log_probabilities: torch.Tensor) -> torch.Tensor:
        """``log π`` of this layer's units: the parent's (IBNN), or a draw of eq. 3 (H-IBP)."""
        if not self.hierarchical:
            return parent_log_probabilities
        parent = parent_log_probabilities.exp().clamp(_PI_FLOOR, 1 - _PI_FLOOR)
        in_plate = not self.substituted and innermost(ParticlePlate) is not None
        if in_plate:  # the particles' (P, K) as batch (P, 1): the particle and data plates
            parent = parent.unsqueeze(-2)
        alpha = self.child_concentration
        conditional = Beta(alpha * parent, alpha * (1 - parent), validate_args=False).to_event(1)
        if self.substituted:
            probabilities = conditional.rsample()
        else:
            probabilities = pyro.sample(
                site_name(self, "unit_probs"), conditional, infer={STRUCTURED_FLAG: True}
            )
            if in_plate:
                probabilities = ParticlePlate.particles_of(probabilities, 1)
        return torch.log(probabilities.clamp(min=torch.finfo(probabilities.dtype).tiny))

    def forward(self, hidden: torch.Tensor, parent_log_probabilities: torch.Tensor) -> torch.Tensor:
        """``hidden ∘ z`` for hidden units of shape ``(..., N, K)`` and ``log π`` of shape
        ``(K,)`` or ``(particles, K)``."""
        if hidden.shape[-1] != self.num_units:
            raise ValueError(f"expected {self.num_units} hidden units, got {hidden.shape[-1]}")
        logits = mask_logits(
            self.unit_log_probabilities(parent_log_probabilities), self.parameterisation
        )
        shape = torch.broadcast_shapes(hidden.shape, logits.unsqueeze(-2).shape)
        logits = logits.unsqueeze(-2).expand(shape)
        mask = self._relaxed_mask(logits) if self.training else self._binary_mask(logits)
        recorder = innermost(RecordMasks)
        if recorder is not None:
            recorder.masks.append(mask.detach())
        return hidden * mask

    def _relaxed_mask(self, logits: torch.Tensor) -> torch.Tensor:
        if self.substituted:  # fast path: draw from q and report log q - log p per point
            posterior = LogitBinaryConcrete(self.posterior_temperature, logits, validate_args=False)
            mask_logit = posterior.rsample()
            # equal temperatures: q(z | v) = p(z | v), so the term is exactly zero
            collector = innermost(CollectLocalKL)
            if collector is not None and self.posterior_temperature != self.prior_temperature:
                prior = LogitBinaryConcrete(self.prior_temperature, logits, validate_args=False)
                log_ratio = posterior.log_prob(mask_logit) - prior.log_prob(mask_logit)
                collector.terms.append(log_ratio.sum(-1))
            return torch.sigmoid(mask_logit)
        in_posterior = innermost(PosteriorConditionals) is not None
        temperature = self.posterior_temperature if in_posterior else self.prior_temperature
        with current_data_plate(logits.shape[-2], logits.device):
            mask_logit = pyro.sample(
                site_name(self, "mask_logit"),
                LogitBinaryConcrete(temperature, logits).to_event(1),
                infer={STRUCTURED_FLAG: True},
            )
        return torch.sigmoid(mask_logit)

    def _binary_mask(self, logits: torch.Tensor) -> torch.Tensor:
        bernoulli = Bernoulli(logits=logits, validate_args=False)
        if self.substituted:
            return bernoulli.sample()
        with current_data_plate(logits.shape[-2], logits.device):
            return pyro.sample(
                site_name(self, "mask"), bernoulli.to_event(1), infer={STRUCTURED_FLAG: True}
            )

    def extra_repr(self) -> str:
        extra = (
            f", child_concentration={self.child_concentration.item()}" if self.hierarchical else ""
        )
        return (
            f"num_units={self.num_units}, λ1={self.posterior_temperature}, "
            f"λ2={self.prior_temperature}, parameterisation={self.parameterisation}{extra}"
        )
