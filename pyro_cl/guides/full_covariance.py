"""A full-covariance Gaussian over a block: ``Σ = L Lᵀ``, ``D(D+1)/2`` numbers a block.

``L = diag(s) (I + N)`` with ``log s`` and the strictly lower ``N`` the parameters
(:func:`~pyro_cl.guides.joint_gaussian.relative_tril`). The family contains the exact posterior
of every linear-Gaussian model, so VCL with it is exact online Bayes there; it is for a layer or
a small model (``sites=["head"]``: the last layer alone, as last-layer Laplace does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from pyro.distributions import MultivariateNormal
from torch.distributions import register_kl

from pyro_cl.guides.joint_gaussian import (
    BlockCovariance,
    BlockLayout,
    JointGaussianFamily,
    joint_form,
    relative_tril,
    tril_parameters,
)
from pyro_cl.kl import full_gaussian_kl

__all__ = ["CholeskyGaussian", "FullCovariance", "FullCovarianceBlocks", "FullGaussian"]


class CholeskyGaussian(MultivariateNormal):
    """A block's ``N(loc, L Lᵀ)`` as the torch distribution, kept by its Cholesky factor: its KL
    to another is the registered closed form with one triangular solve
    (:func:`~pyro_cl.kl.full_gaussian_kl`)."""


@register_kl(CholeskyGaussian, CholeskyGaussian)
def _kl_cholesky_gaussians(q: CholeskyGaussian, p: CholeskyGaussian) -> torch.Tensor:
    return full_gaussian_kl(q.loc, q.scale_tril, p.loc, p.scale_tril)


@joint_form
class FullGaussian(NamedTuple):
    """``N(loc, L Lᵀ)`` over a flat block, ``L`` = ``scale_tril`` (lower-triangular)."""

    loc: torch.Tensor
    scale_tril: torch.Tensor

    @property
    def variance(self) -> torch.Tensor:
        return self.scale_tril.square().sum(-1)

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        noise = torch.randn(
            *sample_shape, self.loc.shape[-1], dtype=self.loc.dtype, device=self.loc.device
        )
        return self.loc + noise @ self.scale_tril.T

    def detached(self) -> FullGaussian:
        return FullGaussian(self.loc.detach().clone(), self.scale_tril.detach().clone())

    def distribution(self) -> CholeskyGaussian:
        """The same Gaussian as a torch distribution."""
        return CholeskyGaussian(self.loc, scale_tril=self.scale_tril, validate_args=False)


class FullCovarianceBlocks(BlockCovariance):
    """``Σ = L Lᵀ``: the fitted raw ``L`` (``block_tril``) and the prior's ``L`` (``prior_tril``)."""

    parameters = ("block_tril",)
    prior_buffers = ("prior_tril",)

    def start(
        self, layout: BlockLayout, prior_variance: torch.Tensor, init_log_variance: float
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        raw = torch.diag(torch.full_like(prior_variance, 0.5 * init_log_variance))
        return {"block_tril": raw}, {"prior_tril": torch.diag(prior_variance.sqrt())}

    def joint(self, loc: torch.Tensor, parameters: Mapping[str, torch.Tensor]) -> FullGaussian:
        return FullGaussian(loc, relative_tril(parameters["block_tril"]))

    def prior(self, loc: torch.Tensor, buffers: Mapping[str, torch.Tensor]) -> FullGaussian:
        return FullGaussian(loc, buffers["prior_tril"])

    def hand_off(self, joint: FullGaussian) -> dict[str, torch.Tensor]:
        return {"prior_tril": joint.scale_tril}

    def parameters_at(self, prior: FullGaussian) -> dict[str, torch.Tensor]:
        return {"block_tril": tril_parameters(prior.scale_tril)}

    def carried(
        self, buffers: Mapping[str, torch.Tensor], a: torch.Tensor | float, v: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        tril = buffers["prior_tril"]
        covariance = a**2 * (tril @ tril.T) + torch.diag(v)
        return {"prior_tril": torch.linalg.cholesky(covariance)}


class FullCovariance(JointGaussianFamily):
    """A full-covariance Gaussian over the chosen sites (``Σ = L Lᵀ``; ``D(D+1)/2``
    parameters a block, so for a layer or a small model), the rest mean-field.

    :param sites: site names or module prefixes to join (``None``: every Gaussian site).
    :param per_module: one block per module (each layer its own covariance).
    """

    name = "full-covariance"

    def block_covariance(self) -> FullCovarianceBlocks:
        return FullCovarianceBlocks()
