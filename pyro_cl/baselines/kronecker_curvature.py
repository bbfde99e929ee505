"""The Kronecker-factored curvature of a task's negative log-likelihood (KFAC), and a Kronecker
product in place of a prior's precision plus it: what Laplace propagation with a
Kronecker-factored guide is made of (Ritter et al. 2018, "Online structured Laplace
approximations for overcoming catastrophic forgetting").

For a linear layer ``s = W a + b`` the Gauss-Newton block of its weight matrix (``vec W`` by
rows, ``n`` outputs, ``p`` inputs) over the ``N`` points of a task is ``Σ_n G_n ⊗ A_n``, with
``A_n = a_n a_nᵀ`` and ``G_n`` the output side's Gauss-Newton matrix
(:func:`~pyro_cl.infer.per_example.kronecker_factor_sums`). KFAC (Martens & Grosse 2015, the
approximation Ritter et al. build on) takes the expectation of the product as the product of
the expectations::

    H_W ≈ N · Ḡ ⊗ Ā,        Ḡ = (1/N) Σ_n G_n,   Ā = (1/N) Σ_n A_n                      (1)

exact on one point, and wherever ``G_n`` is one matrix for every point (a linear-Gaussian
model's ``I/σ²``).

A matrix-normal prior's precision ``P_r ⊗ P_c`` (``U_p⁻¹ ⊗ V_p⁻¹``) plus ``H_W ≈ G ⊗ A`` is a sum
of two Kronecker products, which is not one. The guide keeps one: the sum of the factors side by
side, which is never less precise than the exact sum (the form of KFAC's factored Tikhonov
damping, Martens & Grosse 2015, with the prior in the damping's place)::

    Λ ≈ (P_r + α G) ⊗ (P_c + A/α)
      = P_r ⊗ P_c + G ⊗ A + α G ⊗ P_c + P_r ⊗ A/α  ⪰  P_r ⊗ P_c + G ⊗ A                  (2)

The split ``α`` is free (``G ⊗ A = αG ⊗ A/α``); we take the one that minimises the trace of the
excess in the prior's whitened coordinates (where ``P_r ⊗ P_c`` is ``I``), ``α p tr(G P_r⁻¹) +
n tr(A P_c⁻¹)/α``::

    α = √( n tr(A P_c⁻¹) / (p tr(G P_r⁻¹)) )                                              (3)

so the answer does not depend on how ``G`` and ``A`` share their scale. (laplace-torch's online
KFAC also sums the factors, with the split its factors come in.) The excess makes the posterior
more certain than Laplace's, never less: a softmax head's ``G`` is singular (the logits' common
shift), and the nearest Kronecker product in the Frobenius norm, which we tried first, gave
those directions *less* precision than the prior's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from pyro_cl.baselines.curvature import curvature_rows
from pyro_cl.infer.per_example import kronecker_factor_sums
from pyro_cl.model import SupervisedModel

__all__ = ["kronecker_curvature", "kronecker_sum"]


@torch.no_grad()
def kronecker_curvature(
    model: SupervisedModel,
    values: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    task_id: int,
    sites: Sequence[str],
    num_samples: int | None = None,
    chunk: int = 512,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{site: (N Ḡ, Ā)}``, eq. 1's two factors of each weight matrix ``sites`` at ``values``
    (``H_W ≈ N Ḡ ⊗ Ā``), the means over a random subset of ``num_samples`` points (all of them
    by default, drawn from torch's global generator)."""
    n = x.shape[0]
    index = curvature_rows(n, num_samples, x.device)
    theta = {name: value.detach().unsqueeze(0) for name, value in values.items()}
    totals: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for start in range(0, len(index), chunk):
        rows = index[start : start + chunk]
        with torch.enable_grad():
            sums = kronecker_factor_sums(model, theta, x[rows], task_id, list(sites))
        for name, (g, a) in sums.items():
            if name in totals:  # the chunk's sums are fresh tensors: the first is kept as is
                totals[name][0].add_(g)
                totals[name][1].add_(a)
            else:
                totals[name] = (g, a)
    used = len(index)
    return {name: (g * (n / used), a / used) for name, (g, a) in totals.items()}


def kronecker_sum(
    prior: tuple[torch.Tensor, torch.Tensor], curvature: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P_r + α G, P_c + A/α)`` for ``prior = (P_r, P_c)`` and ``curvature = (G, A)``: eq. 2
    with eq. 3's ``α`` (the prior alone where the curvature is zero)."""
    (rows, columns), (g, a) = prior, curvature
    spread_g = torch.linalg.solve(rows, g).diagonal().sum()  # tr(G P_r⁻¹)
    spread_a = torch.linalg.solve(columns, a).diagonal().sum()  # tr(A P_c⁻¹)
    if spread_g <= 0 or spread_a <= 0:
        return rows, columns
    alpha = torch.sqrt(len(rows) * spread_a / (len(columns) * spread_g))
    return rows + alpha * g, columns + a / alpha
