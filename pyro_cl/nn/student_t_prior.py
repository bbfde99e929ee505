"""A Student-t first prior: heavy tails, so a few large weights cost little.

``w ~ StudentT(ν, m, s)``, density ``∝ (1 + ((w - m)/s)² / ν)^{-(ν+1)/2}``: the scale mixture
``w | λ ~ N(m, s²/λ)``, ``λ ~ Gamma(ν/2, ν/2)`` (Neal 1996's heavy-tailed prior for Bayesian
nets; Fortuin et al. 2022, "Bayesian neural network priors revisited", find such tails in the
weights SGD learns). Small ``ν`` is heavy-tailed (``ν = 1`` the Cauchy); ``ν → ∞`` is
``N(m, s²)``.

Its KL from a Gaussian posterior has no closed form, and none is registered: the ELBO takes the
Monte Carlo term ``log q(w) - log p(w)`` at a draw ``w ~ q`` (:func:`~pyro_cl.kl.site_kl`), as
Pyro's ``TraceMeanField_ELBO`` does. The first posterior is Gaussian and is the next prior as
usual. This file is the whole family::

    make_bayesian(net, prior=StudentTPrior(df=3.0, scale=0.1))
    BayesianMLP(784, [100], 10, prior_family=StudentTPrior(df=3.0))   # scales: prior_scale
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from pyro.distributions import Distribution, StudentT

from pyro_cl.checks import checked_real
from pyro_cl.nn.priors import LayerwisePrior

__all__ = ["StudentTPrior"]


class StudentTPrior(LayerwisePrior):
    """``StudentT(df, loc, s)`` on every weight, ``s`` the layer's scale
    (:class:`~pyro_cl.nn.priors.LayerwisePrior`; the standard deviation is ``s √(ν/(ν-2))`` for
    ``ν > 2``).

    :param df: the degrees of freedom ``ν > 0``.
    :param scale: the scale of layers not in ``layers``.
    :param loc: the location of every weight.
    :param layers: ``{path: scale}`` for chosen layers.
    :param fan_in: divide every scale by the square root of its layer's fan-in.
    """

    name = "student_t"

    def __init__(
        self,
        df: float = 3.0,
        scale: float = 1.0,
        loc: float = 0.0,
        layers: Mapping[str, float] | None = None,
        fan_in: bool = False,
    ) -> None:
        super().__init__(scale, loc, layers, fan_in)
        self.df = checked_real(df, "df", low=0.0, low_open=True)

    def distribution(self, loc: torch.Tensor, scale: torch.Tensor) -> Distribution:
        return StudentT(torch.full_like(loc, self.df), loc, scale)
