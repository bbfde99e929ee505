"""A spike-and-slab first prior: most weights near zero, a few free to be large.

Blundell et al. 2015 ("Weight uncertainty in neural networks", eq. 7) put a scale mixture of two
Gaussians on every weight::

    p(w) = π N(w; m, σ_1²) + (1 - π) N(w; m, σ_2²),    σ_1 > σ_2,  σ_2 ≪ 1

a wide slab and a narrow spike at ``m``: the continuous relaxation of the spike-and-slab prior
(Mitchell & Beauchamp 1988), whose spike is a point mass. It prefers sparse nets as a Laplace
does, with a sharper peak and Gaussian tails. Blundell et al. searched ``-log σ_1 ∈ {0, 1, 2}``,
``-log σ_2 ∈ {6, 7, 8}`` and ``π ∈ {1/4, 1/2, 3/4}`` (section 5.1).

Its KL from a Gaussian posterior has no closed form, and none is registered: the ELBO takes the
Monte Carlo term ``log q(w) - log p(w)`` at a draw ``w ~ q`` (:func:`~pyro_cl.kl.site_kl`). The
mixture's mean is ``m`` and its variance ``π σ_1² + (1 - π) σ_2²``, which the Wiener and OU
transitions move towards. Its distribution is registered with
:func:`~pyro_cl.posterior.saveable_distribution`, so a learner saved with these priors loads.
This file is the whole family::

    make_bayesian(net, prior=ScaleMixturePrior(slab_weight=0.5, scale=1.0, spike_scale=1e-3))
    BayesianMLP(784, [100], 10, prior_family=ScaleMixturePrior())   # slab scales: prior_scale
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from pyro.distributions import Normal, TorchDistribution, constraints
from torch.distributions.utils import broadcast_all

from pyro_cl.checks import checked_real
from pyro_cl.nn.priors import LayerwisePrior
from pyro_cl.posterior import saveable_distribution

__all__ = ["ScaleMixtureNormal", "ScaleMixturePrior"]


@saveable_distribution
class ScaleMixtureNormal(TorchDistribution):
    """``π N(loc, scale²) + (1 - π) N(loc, spike_scale²)`` elementwise (``π`` the
    ``slab_weight``): Blundell et al.'s eq. 7 at location ``loc``."""

    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "spike_scale": constraints.positive,
        "slab_weight": constraints.unit_interval,
    }
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, scale, spike_scale, slab_weight, validate_args=None) -> None:
        self.loc, self.scale, self.spike_scale, self.slab_weight = broadcast_all(
            loc, scale, spike_scale, slab_weight
        )
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ScaleMixtureNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        for name in self.arg_constraints:
            setattr(new, name, getattr(self, name).expand(batch_shape))
        super(ScaleMixtureNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> torch.Tensor:
        return self.loc

    @property
    def variance(self) -> torch.Tensor:
        weight = self.slab_weight
        return weight * self.scale**2 + (1 - weight) * self.spike_scale**2

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        slab = Normal(self.loc, self.scale).log_prob(value) + self.slab_weight.log()
        spike = Normal(self.loc, self.spike_scale).log_prob(value) + (-self.slab_weight).log1p()
        return torch.logaddexp(slab, spike)

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        with torch.no_grad():
            in_slab = torch.rand(shape, dtype=self.loc.dtype, device=self.loc.device) < (
                self.slab_weight.expand(shape)
            )
            scale = torch.where(in_slab, self.scale.expand(shape), self.spike_scale.expand(shape))
            noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
            return self.loc.expand(shape) + scale * noise


class ScaleMixturePrior(LayerwisePrior):
    """:class:`ScaleMixtureNormal` on every weight: the slab's scale ``σ_1`` the layer's
    (:class:`~pyro_cl.nn.priors.LayerwisePrior`), the spike's ``σ_2`` and the slab's weight ``π``
    the same for all.

    :param slab_weight: ``π``, the prior probability of the slab, in ``[0, 1]``.
    :param scale: the slab's scale for layers not in ``layers``.
    :param spike_scale: the spike's scale ``σ_2`` (Blundell et al.: ``e^{-6}`` to ``e^{-8}``).
    :param loc: the location of every weight.
    :param layers: ``{path: scale}`` of the slab for chosen layers.
    :param fan_in: divide every slab scale by the square root of its layer's fan-in.
    """

    name = "scale_mixture"

    def __init__(
        self,
        slab_weight: float = 0.5,
        scale: float = 1.0,
        spike_scale: float = math.exp(-6),
        loc: float = 0.0,
        layers: Mapping[str, float] | None = None,
        fan_in: bool = False,
    ) -> None:
        super().__init__(scale, loc, layers, fan_in)
        self.slab_weight = checked_real(slab_weight, "slab_weight", low=0.0, high=1.0)
        self.spike_scale = checked_real(spike_scale, "spike_scale", low=0.0, low_open=True)

    def distribution(self, loc: torch.Tensor, scale: torch.Tensor) -> ScaleMixtureNormal:
        return ScaleMixtureNormal(
            loc,
            scale,
            torch.full_like(scale, self.spike_scale),
            torch.full_like(scale, self.slab_weight),
        )
