"""A low-rank-plus-diagonal Gaussian over a block: ``Σ = diag(d) + W Wᵀ``, ``D(r+2)`` numbers.

``W = diag(√d) V`` with ``V`` the parameter: an optimiser's step moves an entry relative to its
row's scale, so Adam's fixed-size steps on the many coupling entries do not inflate the
covariance. Every weight of a net fits at small ``r``; ``r ≥ D`` contains every covariance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from pyro.distributions import LowRankMultivariateNormal

from pyro_cl.guides.joint_gaussian import (
    BlockCovariance,
    BlockLayout,
    JointGaussianFamily,
    joint_form,
)

__all__ = ["LowRank", "LowRankBlocks", "LowRankGaussian"]

#: The size of the low-rank factor's relative entries at the start (``V`` of ``W = diag(√d) V``
#: has rows of norm about this): a covariance close to its diagonal.
INITIAL_CORRELATION = 0.1


@joint_form
class LowRankGaussian(NamedTuple):
    """``N(loc, diag(cov_diag) + W Wᵀ)`` over a flat block, ``W`` = ``cov_factor`` (``D × r``)."""

    loc: torch.Tensor
    cov_factor: torch.Tensor
    cov_diag: torch.Tensor

    @property
    def variance(self) -> torch.Tensor:
        return self.cov_factor.square().sum(-1) + self.cov_diag

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        like = {"dtype": self.loc.dtype, "device": self.loc.device}
        low = torch.randn(*sample_shape, self.cov_factor.shape[-1], **like)
        diagonal = torch.randn(*sample_shape, self.loc.shape[-1], **like)
        return self.loc + low @ self.cov_factor.T + diagonal * self.cov_diag.sqrt()

    def detached(self) -> LowRankGaussian:
        return LowRankGaussian(*(t.detach().clone() for t in self))

    def distribution(self) -> LowRankMultivariateNormal:
        """The same Gaussian as a torch distribution (its KL torch's registered closed form,
        ``O(D r²)``)."""
        return LowRankMultivariateNormal(
            self.loc, self.cov_factor, self.cov_diag, validate_args=False
        )


class LowRankBlocks(BlockCovariance):
    """``Σ = diag(d) + W Wᵀ``: fitted ``V`` (``block_factor``) and ``log d``
    (``block_log_diag``); the prior's ``W`` (``prior_factor``) and ``d`` (``prior_diag``).

    :param rank: ``r``, the columns of ``W``.
    """

    parameters = ("block_factor", "block_log_diag")
    prior_buffers = ("prior_factor", "prior_diag")

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def start(
        self, layout: BlockLayout, prior_variance: torch.Tensor, init_log_variance: float
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        size = layout.size
        # V of W = diag(√d) V starts small: the covariance starts near its diagonal
        relative = torch.randn(size, self.rank).to(prior_variance) * (
            INITIAL_CORRELATION / math.sqrt(self.rank)
        )
        parameters = {
            "block_factor": relative,
            "block_log_diag": torch.full_like(prior_variance, init_log_variance),
        }
        prior = {
            "prior_factor": prior_variance.new_zeros(size, self.rank),
            "prior_diag": prior_variance,
        }
        return parameters, prior

    def joint(self, loc: torch.Tensor, parameters: Mapping[str, torch.Tensor]) -> LowRankGaussian:
        diagonal = parameters["block_log_diag"].exp()  # W = diag(√d) V: V's entries are relative
        return LowRankGaussian(loc, diagonal.sqrt().unsqueeze(-1) * parameters["block_factor"],
                               diagonal)  # fmt: skip

    def prior(self, loc: torch.Tensor, buffers: Mapping[str, torch.Tensor]) -> LowRankGaussian:
        return LowRankGaussian(loc, buffers["prior_factor"], buffers["prior_diag"])

    def hand_off(self, joint: LowRankGaussian) -> dict[str, torch.Tensor]:
        return {"prior_factor": joint.cov_factor, "prior_diag": joint.cov_diag}

    def parameters_at(self, prior: LowRankGaussian) -> dict[str, torch.Tensor]:
        return {
            "block_factor": prior.cov_factor / prior.cov_diag.sqrt().unsqueeze(-1),
            "block_log_diag": prior.cov_diag.log(),
        }

    def carried(
        self, buffers: Mapping[str, torch.Tensor], a: torch.Tensor | float, v: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The low-rank form kept: ``W ← a W``, ``d ← a² d + v``."""
        return {"prior_factor": a * buffers["prior_factor"],
                "prior_diag": a**2 * buffers["prior_diag"] + v}  # fmt: skip


class LowRank(JointGaussianFamily):
    """A low-rank-plus-diagonal Gaussian ``Σ = diag(d) + W Wᵀ`` over the chosen sites (``D(r+2)``
    parameters a block: every weight of a net at small ``r``), the rest mean-field.

    :param rank: ``r``, the columns of ``W``.
    :param sites: site names or module prefixes to join (``None``: every Gaussian site).
    :param per_module: one block per module.
    """

    name = "low-rank"

    def __init__(
        self, rank: int = 10, sites: Sequence[str] | None = None, per_module: bool = False
    ) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive integer, got {rank!r}")
        super().__init__(sites, per_module)
        self.rank = rank

    def block_covariance(self) -> LowRankBlocks:
        return LowRankBlocks(self.rank)
