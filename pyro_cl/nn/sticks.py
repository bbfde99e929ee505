"""Stick-breaking construction of the Indian Buffet Process (H-IBP supplement eq. 1-2, 8-9)."""

from __future__ import annotations

import torch
from pyro.distributions import Beta, Distribution

from pyro_cl.checks import checked_real
from pyro_cl.nn.substitution import SubstitutableModule, prior_site
from pyro_cl.posterior import base_distribution

__all__ = ["BetaSticks", "stick_breaking_log_probabilities"]


def stick_breaking_log_probabilities(sticks: torch.Tensor) -> torch.Tensor:
    """``log π_k = Σ_{i≤k} log v_i``, i.e. ``π_k = ∏_{i≤k} v_i`` (eq. 2) along the last dimension.

    Summing logs keeps ``π_k`` representable far beyond where the product underflows; sticks
    are clamped into ``[tiny, 1 - eps]`` first, so ``log π_k < 0`` is finite and non-increasing.
    """
    info = torch.finfo(sticks.dtype)
    return torch.cumsum(torch.log(sticks.clamp(info.tiny, 1 - info.eps)), dim=-1)


class BetaSticks(SubstitutableModule):
    """``K`` stick proportions ``v_k ~ Beta(a_k, b_k)`` as the ``PyroSample`` site ``v``.

    The first task's prior is ``Beta(α, β)`` for every ``k`` (eq. 1 uses ``β = 1``); the
    concentrations live in buffers and :meth:`set_prior` replaces them, so the Beta posterior of a
    task becomes the next task's Beta prior through the same handoff as the Gaussian weights.
    Calling the module draws the sticks and returns ``log π`` (:func:`stick_breaking_log_probabilities`).

    :param num_sticks: the truncation ``K`` of the variational posterior.
    :param alpha: prior concentration ``α`` (larger: more active units).
    :param beta: prior concentration ``β``.
    """

    def __init__(self, num_sticks: int, alpha: float = 5.0, beta: float = 1.0) -> None:
        super().__init__()
        if num_sticks < 1:
            raise ValueError(f"the truncation must be at least 1, got {num_sticks}")
        for value, what in ((alpha, "α"), (beta, "β")):
            checked_real(value, f"the sticks' Beta concentration {what}", 0, low_open=True)
        self.num_sticks = num_sticks
        self.register_buffer("v_prior_concentration1", torch.full((num_sticks,), float(alpha)))
        self.register_buffer("v_prior_concentration0", torch.full((num_sticks,), float(beta)))
        self.v = prior_site("v")

    @property
    def site_names(self) -> tuple[str, ...]:
        return ("v",)

    def prior_parameters(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(concentration1, concentration0)`` buffers of the prior of site ``name``."""
        if name != "v":
            raise KeyError(f"BetaSticks has no site {name!r}")
        return self.v_prior_concentration1, self.v_prior_concentration0

    def prior(self, name: str) -> Distribution:
        concentration1, concentration0 = self.prior_parameters(name)
        return Beta(concentration1, concentration0, validate_args=False).to_event(1)

    def set_prior(self, name: str, prior: Distribution) -> None:
        """Make ``prior`` (a Beta over the ``K`` sticks) the prior of site ``name``."""
        base = base_distribution(prior)
        if not isinstance(base, Beta):
            raise TypeError(
                f"BetaSticks site {name!r} takes a Beta prior, got {type(base).__name__}"
            )
        concentration1, concentration0 = self.prior_parameters(name)
        new1 = base.concentration1.detach().to(concentration1).expand_as(concentration1)
        new0 = base.concentration0.detach().to(concentration0).expand_as(concentration0)
        if not (torch.isfinite(new1) & torch.isfinite(new0) & (new1 > 0) & (new0 > 0)).all():
            raise ValueError(f"prior for {name!r} has non-finite or non-positive concentrations")
        concentration1.copy_(new1)
        concentration0.copy_(new0)

    def forward(self) -> torch.Tensor:
        """Draw ``v`` and return ``log π``: shape ``(K,)``, or ``(particles, K)`` with particles."""
        value = self._particles_of("v", self._site_value("v"))
        return stick_breaking_log_probabilities(self._draw(value))

    def extra_repr(self) -> str:
        return f"num_sticks={self.num_sticks}"
