"""A mean-field Gaussian built from what a guide holds: means, variances and log-variances.

A mean-field guide keeps ``(μ, log σ²)`` per weight; the fast route of the ELBO needs ``σ²`` for
local reparameterisation and ``log σ²`` for the KL. :class:`DiagonalGaussian` is
``Normal(μ, σ)`` built from them without argument checks or broadcasting (it runs on every
training step) and without the square root until a draw needs it. Being a ``Normal``, it is what
every part reads (``rsample``, ``log_prob``, the KL registry): the KL of one to a prior is a
closed form registered in :mod:`pyro_cl.kl`, which uses the log-variance it carries.
"""

from __future__ import annotations

import torch
from torch.distributions import Distribution, Normal

__all__ = ["DiagonalGaussian"]


class DiagonalGaussian(Normal):
    """``N(loc, variance)`` element by element (a ``torch.distributions.Normal``).

    :param loc: the means ``μ``.
    :param variance: the variances ``σ²``, of ``loc``'s shape.
    :param log_variance: ``log σ²`` where the caller holds it (a guide's parameter), else
        computed when asked.
    """

    def __init__(
        self,
        loc: torch.Tensor,
        variance: torch.Tensor,
        log_variance: torch.Tensor | None = None,
    ) -> None:
        self.loc = loc
        self._variance = variance
        self._log_variance = log_variance
        self._scale: torch.Tensor | None = None
        Distribution.__init__(self, loc.shape, validate_args=False)

    @property
    def variance(self) -> torch.Tensor:
        return self._variance

    @property
    def log_variance(self) -> torch.Tensor:
        if self._log_variance is None:
            self._log_variance = self._variance.log()
        return self._log_variance

    @property
    def scale(self) -> torch.Tensor:
        # draws as Normal(μ, √σ²).rsample does: the same random numbers on every route
        if self._scale is None:
            self._scale = self._variance.sqrt()
        return self._scale

    @scale.setter
    def scale(self, value: torch.Tensor) -> None:  # Normal.expand assigns it
        self._scale = value

    @property
    def stddev(self) -> torch.Tensor:
        return self.scale

    def expand(self, batch_shape, _instance=None) -> DiagonalGaussian:
        shape = torch.Size(batch_shape)
        log_variance = None if self._log_variance is None else self._log_variance.expand(shape)
        return DiagonalGaussian(self.loc.expand(shape), self._variance.expand(shape), log_variance)

    def __repr__(self) -> str:
        return f"DiagonalGaussian(loc: {tuple(self.loc.shape)})"
