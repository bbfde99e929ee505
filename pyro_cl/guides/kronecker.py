"""A Kronecker-factored (matrix-normal) Gaussian over each weight matrix.

A layer's weight ``W`` (``n`` outputs × ``p`` inputs) gets the matrix normal
``MN(M, U, V)``: ``W = M + A Z Bᵀ`` with ``Z`` standard normal, ``U = A Aᵀ`` the rows'
covariance and ``V = B Bᵀ`` the columns', so that ``Cov(vec W) = U ⊗ V`` (``vec`` by rows) —
``n(n+1)/2 + p(p+1)/2`` numbers where a full covariance needs ``np(np+1)/2`` (Louizos & Welling
2016, "Structured and efficient variational deep learning with matrix Gaussian posteriors"; the
factorisation of K-FAC and of Ritter et al. 2018's Kronecker-factored Laplace). Biases and every
other site stay mean-field.

The KL between two matrix normals is closed-form (eq. 1 below, with ``D = M - M_0``)::

    KL = ½ [ tr(U_0⁻¹ U) tr(V_0⁻¹ V) + tr(V_0⁻¹ Dᵀ U_0⁻¹ D) - n p
             + p log(|U_0| / |U|) + n log(|V_0| / |V|) ]                                 (1)

and the posterior is handed on whole: the next prior is ``MN(M, U, V)``. The first prior must be
one scale per matrix, ``N(m, σ²)`` on every weight, which is ``MN(m, σ I, σ I)``. A transition's
step ``Σ ← a² Σ + diag v`` leaves the family, so the diffusions refuse it (by the families they
name); VCL's identity and the ELBO fitter take it. On multi-output linear regression with shared
inputs the posterior is ``MN(M, I, (I/σ_0² + XᵀX/σ²)⁻¹)``: in the family, so VCL with it is exact
online Bayes there (tested against the closed form)::

    ContinualLearner(net, guide=KroneckerFactored())                 # every weight matrix
    ContinualLearner(net, guide=KroneckerFactored(sites=["head"]))   # the last layer's
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from pyro.distributions import TorchDistribution, constraints
from torch.distributions import register_kl

from pyro_cl.guides.joint_gaussian import (
    BlockCovariance,
    BlockLayout,
    JointGaussianFamily,
    joint_form,
    relative_tril,
    tril_parameters,
)

__all__ = [
    "KroneckerBlocks",
    "KroneckerFactored",
    "MatrixNormal",
    "MatrixNormalDistribution",
    "matrix_normal_kl",
]


def _inverse_times(tril: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``L⁻¹ X`` for a lower-triangular ``L``."""
    return torch.linalg.solve_triangular(tril, other, upper=False)


def matrix_normal_kl(
    loc: torch.Tensor,
    row_tril: torch.Tensor,
    column_tril: torch.Tensor,
    prior_loc: torch.Tensor,
    prior_row_tril: torch.Tensor,
    prior_column_tril: torch.Tensor,
) -> torch.Tensor:
    """``KL(MN(M, A Aᵀ, B Bᵀ) ‖ MN(M_0, A_0 A_0ᵀ, B_0 B_0ᵀ))`` (eq. 1), means ``n × p``."""
    n, p = loc.shape
    trace_rows = _inverse_times(prior_row_tril, row_tril).square().sum()
    trace_columns = _inverse_times(prior_column_tril, column_tril).square().sum()
    difference = loc - prior_loc  # A_0⁻¹ D B_0⁻ᵀ, squared and summed: the mean's term
    whitened = _inverse_times(prior_column_tril, _inverse_times(prior_row_tril, difference).T)
    log_det = lambda tril: 2 * tril.diagonal().log().sum()  # noqa: E731 (log |L Lᵀ|)
    return 0.5 * (
        trace_rows * trace_columns
        + whitened.square().sum()
        - n * p
        + p * (log_det(prior_row_tril) - log_det(row_tril))
        + n * (log_det(prior_column_tril) - log_det(column_tril))
    )


class MatrixNormalDistribution(TorchDistribution):
    """``MN(M, A Aᵀ, B Bᵀ)`` as a torch distribution over ``vec W`` by rows (event ``n p``):
    ``N(vec M, U ⊗ V)`` without the ``np × np`` matrix. Its KL to another is eq. 1, registered
    with torch's ``kl_divergence``; its density::

        log p(W) = -½ [n p log 2π + p log|U| + n log|V| + ‖A⁻¹ (W - M) B⁻ᵀ‖²_F]
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "row_tril": constraints.lower_cholesky,
        "column_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, row_tril, column_tril, validate_args=None) -> None:
        self.loc, self.row_tril, self.column_tril = loc, row_tril, column_tril
        self.shape2 = (len(row_tril), len(column_tril))
        super().__init__(torch.Size(), loc.shape[-1:], validate_args=validate_args)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc

    @property
    def variance(self) -> torch.Tensor:
        rows, columns = self.row_tril.square().sum(-1), self.column_tril.square().sum(-1)
        return torch.outer(rows, columns).reshape(-1)

    def rsample(self, sample_shape=torch.Size()) -> torch.Tensor:  # noqa: B008 (torch's own)
        sample_shape = torch.Size(sample_shape)
        noise = torch.randn(
            *sample_shape, *self.shape2, dtype=self.loc.dtype, device=self.loc.device
        )
        spread = self.row_tril @ noise @ self.column_tril.T
        return self.loc + spread.reshape(*sample_shape, -1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        n, p = self.shape2
        difference = (value - self.loc).reshape(*value.shape[:-1], n, p)
        rows = torch.linalg.solve_triangular(self.row_tril, difference, upper=False)
        whitened = torch.linalg.solve_triangular(
            self.column_tril, rows.transpose(-1, -2), upper=False
        )
        log_det = p * 2 * self.row_tril.diagonal().log().sum() + n * 2 * (
            self.column_tril.diagonal().log().sum()
        )
        squares = whitened.square().sum((-1, -2))
        return -0.5 * (n * p * math.log(2 * math.pi) + log_det + squares)


@register_kl(MatrixNormalDistribution, MatrixNormalDistribution)
def _kl_matrix_normals(q: MatrixNormalDistribution, p: MatrixNormalDistribution) -> torch.Tensor:
    shape = q.shape2
    return matrix_normal_kl(
        q.loc.reshape(shape), q.row_tril, q.column_tril,
        p.loc.reshape(shape), p.row_tril, p.column_tril,
    )  # fmt: skip


@joint_form
class MatrixNormal(NamedTuple):
    """``MN(M, A Aᵀ, B Bᵀ)`` over a flat block (``loc`` is ``vec M`` by rows, ``n p``)."""

    loc: torch.Tensor
    row_tril: torch.Tensor
    column_tril: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.row_tril), len(self.column_tril)

    @property
    def variance(self) -> torch.Tensor:
        return self.distribution().variance

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        return self.distribution().rsample(sample_shape)

    def detached(self) -> MatrixNormal:
        return MatrixNormal(*(t.detach().clone() for t in self))

    def distribution(self) -> MatrixNormalDistribution:
        """The same Gaussian as a torch distribution over ``vec W``."""
        return MatrixNormalDistribution(*self, validate_args=False)


class KroneckerBlocks(BlockCovariance):
    """``U ⊗ V`` per weight matrix: the raw ``A`` and ``B`` fitted (``block_row_tril``,
    ``block_column_tril``, each ``diag(s)(I + N)``), the prior's ``A_0`` and ``B_0``."""

    parameters = ("block_row_tril", "block_column_tril")
    prior_buffers = ("prior_row_tril", "prior_column_tril")

    def blocks(
        self, names: Sequence[str], shapes: Sequence[torch.Size], per_module: bool
    ) -> list[list[str]]:
        """Each weight matrix alone; the other sites (biases, convolutions' kernels) stay
        mean-field."""
        return [[name] for name, shape in zip(names, shapes, strict=True) if len(shape) == 2]

    def check_block(self, layout: BlockLayout, prior_variance: torch.Tensor) -> None:
        if not bool((prior_variance == prior_variance[0]).all()):
            raise TypeError(
                f"a Kronecker-factored block starts from one prior scale a matrix, N(m, σ²) on "
                f"every weight; {layout.names[0]!r} has several (leave it out with sites=...)"
            )

    def start(
        self, layout: BlockLayout, prior_variance: torch.Tensor, init_log_variance: float
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        n, p = layout.shapes[0]
        like = {"dtype": prior_variance.dtype, "device": prior_variance.device}
        # U ⊗ V = σ² I with U = V = σ I; each starting factor carries half the log-variance
        raw = {
            group: torch.diag(torch.full((size,), 0.25 * init_log_variance, **like))
            for group, size in (("block_row_tril", n), ("block_column_tril", p))
        }
        root = prior_variance[0].sqrt().sqrt()  # A_0 = B_0 = √σ I
        prior = {
            "prior_row_tril": root * torch.eye(n, **like),
            "prior_column_tril": root * torch.eye(p, **like),
        }
        return raw, prior

    def joint(self, loc: torch.Tensor, parameters: Mapping[str, torch.Tensor]) -> MatrixNormal:
        return MatrixNormal(
            loc,
            relative_tril(parameters["block_row_tril"]),
            relative_tril(parameters["block_column_tril"]),
        )

    def prior(self, loc: torch.Tensor, buffers: Mapping[str, torch.Tensor]) -> MatrixNormal:
        return MatrixNormal(loc, buffers["prior_row_tril"], buffers["prior_column_tril"])

    def hand_off(self, joint: MatrixNormal) -> dict[str, torch.Tensor]:
        return {"prior_row_tril": joint.row_tril, "prior_column_tril": joint.column_tril}

    def parameters_at(self, prior: MatrixNormal) -> dict[str, torch.Tensor]:
        return {
            "block_row_tril": tril_parameters(prior.row_tril),
            "block_column_tril": tril_parameters(prior.column_tril),
        }


class KroneckerFactored(JointGaussianFamily):
    """A matrix-normal Gaussian ``MN(M, U, V)`` over each chosen weight matrix (module
    docstring), every other site mean-field.

    :param sites: site names or module prefixes whose weight matrices to factor (``None``:
        every Gaussian weight matrix).
    """

    name = "kronecker"

    def __init__(self, sites: Sequence[str] | None = None) -> None:
        super().__init__(sites)

    def block_covariance(self) -> KroneckerBlocks:
        return KroneckerBlocks()
