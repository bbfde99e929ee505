"""Bayesian linear layer: a ``PyroModule`` whose weight and bias are ``PyroSample`` sites."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from pyro.distributions import Distribution, Normal
from pyro.nn import PyroModule, PyroSample

from pyro_cl.nn.local_reparam import (
    DiagonalGaussian,
    base_normal,
    gaussian_linear,
    normal_source,
)

__all__ = ["BayesianLinear"]


def _prior_from_buffers(module: BayesianLinear, name: str) -> Distribution:
    return module.prior(name)


def _as_diagonal_gaussian(value) -> DiagonalGaussian | None:
    """Means and variances of ``value`` if it is a (possibly ``Independent``) Normal."""
    if isinstance(value, DiagonalGaussian):
        return value
    normal = base_normal(value)
    return None if normal is None else DiagonalGaussian(normal.loc, normal.scale**2)


class BayesianLinear(PyroModule):
    """``y = x W^T + b`` with mean-field Gaussian priors on ``W`` and ``b``.

    The priors ``W_ij ~ N(prior_loc, prior_scale^2)`` live in buffers (so ``.to(device)`` moves
    them and ``state_dict`` saves them) and are read by the ``PyroSample`` sites ``weight`` and
    ``bias``. :meth:`set_prior` replaces them, which is how a posterior becomes the next prior.

    :param in_features: size of each input.
    :param out_features: size of each output.
    :param bias: whether the layer has a bias site.
    :param prior_loc: prior mean of every weight and bias.
    :param prior_scale: prior standard deviation of every weight and bias.
    :param local_reparameterization: sample pre-activations rather than weights whenever the
        weights' Normal distribution is known (see :mod:`pyro_cl.nn.local_reparam`).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        prior_loc: float = 0.0,
        prior_scale: float = 1.0,
        local_reparameterization: bool = True,
    ) -> None:
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"layer sizes must be positive, got {in_features}x{out_features}")
        if prior_scale <= 0:
            raise ValueError(f"prior_scale must be positive, got {prior_scale}")
        self.in_features = in_features
        self.out_features = out_features
        self.has_bias = bias
        self.local_reparameterization = local_reparameterization
        shapes = {"weight": (out_features, in_features)}
        if bias:
            shapes["bias"] = (out_features,)
        for name, shape in shapes.items():
            self.register_buffer(f"{name}_prior_loc", torch.full(shape, float(prior_loc)))
            self.register_buffer(f"{name}_prior_scale", torch.full(shape, float(prior_scale)))
            setattr(self, name, PyroSample(partial(_prior_from_buffers, name=name)))
        # Set by pyro_cl.infer.fast_path.substitute_sites: site values given directly, skipping
        # pyro.sample (the fast path), and the number of particles along a leading dimension.
        self._substitute: dict | None = None
        self._num_particles: int | None = None

    @property
    def site_names(self) -> tuple[str, ...]:
        return ("weight", "bias") if self.has_bias else ("weight",)

    def prior_parameters(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)`` buffers of the prior of site ``name``."""
        return getattr(self, f"{name}_prior_loc"), getattr(self, f"{name}_prior_scale")

    def prior(self, name: str) -> Distribution:
        """The current prior of site ``name`` ("weight" or "bias")."""
        loc, scale = self.prior_parameters(name)
        # set_prior checked the buffers, so argument validation would only cost time.
        return Normal(loc, scale, validate_args=False).to_event(loc.dim())

    def set_prior(self, name: str, prior: Distribution) -> None:
        """Make ``prior`` (a Normal, possibly wrapped in ``Independent``) the prior of ``name``."""
        normal = base_normal(prior)
        loc_buffer = getattr(self, f"{name}_prior_loc")
        if normal is None:
            raise TypeError(
                f"BayesianLinear site {name!r} takes a Normal prior, got {type(prior).__name__}"
            )
        loc = normal.loc.detach().to(loc_buffer).expand_as(loc_buffer)
        scale = normal.scale.detach().to(loc_buffer).expand_as(loc_buffer)
        if not torch.isfinite(loc).all() or not (scale > 0).all():
            raise ValueError(f"prior for {name!r} has non-finite means or non-positive scales")
        loc_buffer.copy_(loc)
        getattr(self, f"{name}_prior_scale").copy_(scale)

    def _site(self, name: str):
        """The weight/bias to use: a Normal (for local reparameterisation) or a tensor."""
        if self._substitute is not None:
            value = self._substitute.get(name)
            return self.prior(name) if value is None else value
        value = getattr(self, name)  # a pyro.sample statement
        if self.local_reparameterization:
            normal = normal_source(value)
            if normal is not None:
                return normal
        return value

    def _draw(self, value) -> torch.Tensor:
        if isinstance(value, (Distribution, DiagonalGaussian)):
            shape = () if self._num_particles is None else (self._num_particles,)
            return value.rsample(shape)
        return value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features but the layer expects {self.in_features}"
            )
        weight = self._site("weight")
        bias = self._site("bias") if self.has_bias else None
        if self.local_reparameterization:
            weight_gaussian = _as_diagonal_gaussian(weight)
            bias_gaussian = None if bias is None else _as_diagonal_gaussian(bias)
            if weight_gaussian is not None and (bias is None or bias_gaussian is not None):
                return gaussian_linear(x, weight_gaussian, bias_gaussian, self._num_particles)
        weight = self._draw(weight)
        bias = None if bias is None else self._draw(bias)
        if weight.dim() == 2:
            return F.linear(x, weight, bias)
        out = torch.matmul(x, weight.transpose(-1, -2))
        return out if bias is None else out + bias.unsqueeze(-2)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.has_bias}, local_reparameterization={self.local_reparameterization}"
        )
