"""Priors and initial posteriors whose pre-activations have moments zero and one (Kurle et al.
2020, appendices H and I).

For standardised inputs and independent zero-mean weights, a pre-activation of layer ``l`` has
second moment ``N_{l-1} c_{f_{l-1}} Var[W_l]`` (appendix H), where ``c_f = Var[f(x)]`` for
``x ~ N(0, 1)`` corrects for the non-linearity of the previous layer (``c = 1`` for the inputs).
Setting it to one gives the prior variance of eq. 17::

    σ_l² = 1 / (N_{l-1} c_{f_{l-1}})

The initial posterior (appendix I) splits the same variance between the spread of the means and
the posterior variances: ``μ ~ N(0, β σ_l²)`` and ``log σ ~ N(m, α²)`` with
``m = ½ log((1-β) e^{-2α²} σ_l²)``, ``α = 0.001``, ``β = 0.999`` in the paper
(:meth:`pyro_cl.guides.MeanFieldGuide.match_prior_moments`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import torch

__all__ = ["ACTIVATIONS", "activation_variance", "moment_matched_prior_scales"]

#: The activations of pyro_cl's nets.
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


@cache
def activation_variance(activation: str) -> float:
    """``c_f = Var[f(x)]``, ``x ~ N(0, 1)``, by the trapezoidal rule on ``[-12, 12]`` (accurate
    to about 1e-9, also at relu's kink): about 0.3408 for relu (exactly ``1/2 - 1/(2π)``),
    0.3943 for tanh, 0.0434 for sigmoid; 1 for ``"linear"``."""
    if activation == "linear":
        return 1.0
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {list(ACTIVATIONS)}")
    x = np.linspace(-12.0, 12.0, 240_001)
    density = np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi)
    values = ACTIVATIONS[activation](torch.from_numpy(x)).numpy()
    mean = np.trapezoid(density * values, x)
    return float(np.trapezoid(density * values**2, x) - mean**2)


def moment_matched_prior_scales(
    in_features: int, hidden_sizes: Sequence[int], activation: str
) -> list[float]:
    """Eq. 17's prior standard deviation ``(N_{l-1} c_{f_{l-1}})^{-½}`` of every layer (inputs
    assumed standardised, so the first layer has ``c = 1``)."""
    fan_ins = [in_features, *hidden_sizes]
    factors = [1.0] + [activation_variance(activation)] * len(hidden_sizes)
    return [float((n * c) ** -0.5) for n, c in zip(fan_ins, factors, strict=True)]
