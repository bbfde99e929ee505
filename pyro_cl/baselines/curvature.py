"""The diagonal curvature of a task's negative log-likelihood at a point estimate, for the
quadratic baselines (EWC's Fisher, Laplace propagation's Hessian approximation).

For values ``θ`` and the ``N`` points of a task::

    C = N · (1/S) Σ_{n ∈ subset} c_n(θ)

with ``c_n`` the squared per-example gradient (``"fisher"``, the empirical Fisher) or the
generalised Gauss-Newton diagonal ``diag(J_nᵀ H_n J_n)`` (``"ggn"``), computed by
:func:`pyro_cl.infer.per_example.gradient_statistics` without a loop over examples, over a random
subset of ``S`` points (all of them by default), scaled to the whole task.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.checks import checked_count
from pyro_cl.infer.per_example import gradient_statistics
from pyro_cl.model import SupervisedModel

__all__ = ["check_sample_count", "curvature_rows", "diagonal_curvature"]


def check_sample_count(value: int | None, name: str) -> int | None:
    """The points to estimate a curvature from: a positive integer, or ``None`` for all.

    :raises ValueError: naming ``name`` otherwise.
    """
    return None if value is None else checked_count(value, name)


def curvature_rows(n: int, num_samples: int | None, device: torch.device) -> torch.Tensor:
    """The rows of a task's ``n`` points a curvature is estimated from: all of them, or a
    random ``num_samples`` drawn from torch's global generator (a learner's seed fixes it)."""
    if num_samples is not None and num_samples < n:
        return torch.randperm(n, device=device)[:num_samples]
    return torch.arange(n, device=device)


@torch.no_grad()
def diagonal_curvature(
    model: SupervisedModel,
    values: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    curvature: str = "fisher",
    num_samples: int | None = None,
    chunk: int = 512,
) -> dict[str, torch.Tensor]:
    """``{site: C}`` at ``values`` (see the module docstring); the subset is drawn from torch's
    global generator (a learner's seed fixes it)."""
    n = x.shape[0]
    index = curvature_rows(n, num_samples, x.device)
    theta = {name: value.detach().unsqueeze(0) for name, value in values.items()}
    total = {name: torch.zeros_like(value) for name, value in values.items()}
    for start in range(0, len(index), chunk):
        rows = index[start : start + chunk]
        with torch.enable_grad():
            stats = gradient_statistics(model, theta, x[rows], y[rows], task_id, curvature)
        for name in total:
            total[name] += stats.squared[name].reshape(total[name].shape)
    return {name: value * (n / len(index)) for name, value in total.items()}
