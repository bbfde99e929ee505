"""Bayesian linear layer: a ``PyroModule`` whose weight and bias are ``PyroSample`` sites."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pyro_cl.nn.layer import BayesianLayer
from pyro_cl.nn.local_reparam import gaussian_linear

__all__ = ["BayesianLinear", "outer_product_sums"]

#: Floats of one output unit's ``(samples, N, in)`` products at a time in
#: :func:`outer_product_sums` (1 MiB).
_BLOCK_FLOATS = 2**18


class BayesianLinear(BayesianLayer):
    """``y = x W^T + b`` with mean-field Gaussian priors on ``W`` and ``b``.

    The priors ``W_ij ~ N(prior_loc, prior_scale^2)`` live in buffers and are read by the
    ``PyroSample`` sites ``weight`` and ``bias`` (see :class:`~pyro_cl.nn.layer.BayesianLayer`).

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
        self.in_features = in_features
        self.out_features = out_features
        weight_shape = (out_features, in_features)
        self._register_sites(weight_shape, bias, prior_loc, prior_scale, local_reparameterization)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features but the layer expects {self.in_features}"
            )
        weight = self._site("weight")
        bias = self._site("bias") if self.has_bias else None
        gaussians = self._gaussians(weight, bias)
        if gaussians is not None:
            return self._record(x, gaussian_linear(x, *gaussians, self.num_particles))
        weight = self._draw(weight)
        bias = None if bias is None else self._draw(bias)
        if weight.dim() == 2 or weight.shape[0] == 1:  # one weight for every particle
            weight, bias = (
                weight.reshape(weight.shape[-2:]),
                None if bias is None else bias.view(-1),
            )
            return self._record(x, F.linear(x, weight, bias))
        if bias is None or x.dim() != 3:
            out = torch.matmul(x, weight.transpose(-1, -2))
            return self._record(x, out if bias is None else out + bias.unsqueeze(-2))
        # (P, N, in) inputs, P of 1 or S: the bias added inside the batched product (one pass
        # over the outputs fewer, which is most of a small layer's time with many samples)
        x_rows = x.expand(weight.shape[0], *x.shape[1:])
        return self._record(x, torch.baddbmm(bias.unsqueeze(-2), x_rows, weight.transpose(-1, -2)))

    def squared_gradient_sums(
        self, x: torch.Tensor, output_gradient: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Per-example gradients of a linear map are outer products, ``∂ℓ_n/∂W = g_n x_nᵀ``, so
        ``Σ_n (∂ℓ_n/∂W)² = (g∘g)ᵀ (x∘x)`` without forming them (Goodfellow, 2015).

        ``x`` is ``(P, N, in)`` with ``P`` 1 or the particles of ``output_gradient`` ``(S, N, out)``.
        """
        g2 = output_gradient.square()
        x2 = x.square()
        if x2.shape[0] == 1:  # inputs shared by all particles: sum the particles first
            weight = g2.sum(0).transpose(0, 1) @ x2[0]
        else:
            weight = torch.einsum("sno,sni->oi", g2, x2)
        sums = {"weight": weight}
        if self.has_bias:
            sums["bias"] = g2.sum((0, 1))
        return sums

    def example_variances(
        self, x: torch.Tensor, output_gradient: torch.Tensor, variances: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``∂(g·out_n)/∂W = g_n x_nᵀ``, so ``Σ_oi g_no² x_ni² V_oi + Σ_o g_no² V_b,o``: one
        matrix product, no per-example gradient formed. ``x`` is ``(P, N, in)``, ``g``
        ``(S, N, out)``."""
        g2 = output_gradient.square()
        total = ((g2 @ variances["weight"]) * x.square()).sum(-1)
        if self.has_bias:
            total = total + g2 @ variances["bias"]
        return total

    def example_gradient_sums(
        self,
        x: torch.Tensor,
        output_gradient: torch.Tensor,
        weights: dict[str, torch.Tensor | None],
    ) -> dict[str, torch.Tensor]:
        """``∂ℓ_{s,n}/∂W_s = g_{s,n} x_{s,n}ᵀ``, so ``Σ_s (∂ℓ_{s,n}/∂W_s) ⊙ A_s`` is the contraction
        ``Σ_s g_{s,n,o} x_{s,n,i} A_{s,o,i}`` (:func:`outer_product_sums`: no per-example gradient
        of every sample is formed), and the bias's is ``Σ_s g_{s,n} ⊙ a_s``.

        ``x`` is ``(P, N, in)`` with ``P`` 1 or the ``S`` samples of ``output_gradient``
        ``(S, N, out)``; a weight ``A`` is ``(S, *site shape)`` or ``None`` (all ones).
        """
        g = output_gradient
        sums = {}
        for name, weight in weights.items():
            if name == "weight":
                sums[name] = outer_product_sums(g, x, weight)
            elif name == "bias" and self.has_bias:
                sums[name] = g.sum(0) if weight is None else torch.einsum("sno,so->no", g, weight)
            else:
                raise KeyError(f"{type(self).__name__} has no site {name!r}")
        return sums

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.has_bias}, local_reparameterization={self.local_reparameterization}"
        )


def outer_product_sums(
    output_gradient: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """``Σ_s g_{s,n,o} x_{s,n,i} A_{s,o,i}`` (``A`` all ones when ``None``), shape ``(N, out, in)``:
    per example ``n``, the sum over samples ``s`` of the outer products ``g_{s,n} x_{s,n}ᵀ``,
    weighted elementwise by ``A_s``.

    ``x`` is ``(P, N, in)``. With ``P = 1`` (inputs shared by every sample, a first layer) ``x_n``
    leaves the sum: ``(Σ_s g_{s,n,o} A_{s,o,i}) x_{n,i}``, the bracket a matrix product batched
    over ``o``. With ``P = S`` the unweighted sum is a matrix product batched over ``n``; the
    weighted one shares every index with two operands, so no order of it is a matrix product
    (``torch.einsum`` goes through an ``(S, N, out, in)`` intermediate) and it runs one output unit
    at a time, ``Σ_s (g_{s,·,o} x_s) ⊙ A_{s,o}``, over blocks of samples small enough to stay in
    cache. Measured against the three-operand einsum in ``benchmarks/factor_speed.py``
    (docs/lab/speed.md, "GRS's factors").
    """
    if x.shape[0] == 1:
        if weight is None:
            per_unit = output_gradient.sum(0).unsqueeze(-1)  # (N, out, 1)
        else:  # (out, N, S) @ (out, S, in)
            per_unit = torch.bmm(output_gradient.permute(2, 1, 0), weight.transpose(0, 1))
            per_unit = per_unit.transpose(0, 1)
        return per_unit * x[0].unsqueeze(1)
    if weight is None:
        return torch.einsum("sno,sni->noi", output_gradient, x)
    samples, points, outputs = output_gradient.shape
    sums = output_gradient.new_zeros(points, outputs, x.shape[-1])
    block = max(1, _BLOCK_FLOATS // (points * x.shape[-1]))  # keeps (block, N, in) in cache
    for first in range(0, samples, block):
        rows = slice(first, first + block)
        g, inputs, a = output_gradient[rows], x[rows], weight[rows]
        for unit in range(outputs):
            sums[:, unit] += (g[:, :, unit, None] * inputs).mul_(a[:, None, unit]).sum(0)
    return sums
