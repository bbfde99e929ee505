"""Bayesian linear regression with an unknown noise precision, as a Pyro model: the conjugate-
exponential model of the VCL slides' coordinate ascent (:mod:`pyro_cl.fitters.coordinate_ascent`).

::

    w_d ~ N(0, s²),   τ ~ Gamma(α, β),   y_n ~ N(x_nᵀ w, 1/τ)

The net's outputs are ``(x_nᵀ w, τ)`` per point; :class:`~pyro_cl.likelihoods.PrecisionGaussianLikelihood`
scores ``y`` with them. Any fitter fits it (SVI with a Gamma ``q(τ)``, see
:class:`~pyro_cl.guides.MeanFieldGuide`); :class:`~pyro_cl.fitters.coordinate_ascent.CoordinateAscent`
fits it factor by factor in closed form.
"""

from __future__ import annotations

import torch
from pyro.distributions import Gamma, Normal
from pyro.nn import PyroModule, PyroSample

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.nn.rebuildable import RebuildableNet

__all__ = ["BayesianLinearRegression"]


class BayesianLinearRegression(PyroModule, RebuildableNet):
    """``y = xᵀw + ε``, ``ε ~ N(0, 1/τ)`` with sites ``weight`` (``D`` Gaussians) and
    ``noise_precision`` (a Gamma); add a column of ones to ``x`` for an intercept.

    :param features: ``D``.
    :param prior_scale: ``s``, the weights' prior standard deviation (mean 0).
    :param concentration: ``α`` of the precision's Gamma prior.
    :param rate: ``β`` of that prior.
    """

    name = "bayesian_linear_regression"

    def __init__(
        self, features: int, prior_scale: float = 1.0, concentration: float = 1.0, rate: float = 1.0
    ) -> None:
        super().__init__()
        features = checked_count(features, "features")
        self.in_features = features
        self.out_features = 2
        scale = checked_real(prior_scale, "prior_scale", 0.0, low_open=True)
        alpha = checked_real(concentration, "concentration", 0.0, low_open=True)
        beta = checked_real(rate, "rate", 0.0, low_open=True)
        self.config = {
            "features": features,
            "prior_scale": scale,
            "concentration": alpha,
            "rate": beta,
        }
        # the first priors read buffers, so they follow the net to its device
        self.register_buffer("prior_scale", torch.full((features,), scale))
        self.register_buffer("prior_gamma", torch.tensor([alpha, beta]))
        self.weight = PyroSample(
            lambda self: Normal(torch.zeros_like(self.prior_scale), self.prior_scale).to_event(1)
        )
        self.noise_precision = PyroSample(
            lambda self: Gamma(self.prior_gamma[0], self.prior_gamma[1])
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x @ self.weight
        return torch.stack([mean, self.noise_precision.expand_as(mean)], dim=-1)
