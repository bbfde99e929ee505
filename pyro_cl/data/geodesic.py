"""Intermediate domains along the Wasserstein geodesic between two samples (GOAT, He et al.,
"Gradual domain adaptation: theory and algorithms", 2023).

Gradual self-training (:mod:`pyro_cl.learner.self_training`) needs domains between the source and
the target, each a small shift from the last. Where none are given, He et al. generate them: the
optimal transport plan ``π`` between the source's points ``x_i`` and the target's ``z_j``
(squared Euclidean cost, uniform weights) couples each source point with where it goes, and the
displacement interpolation

    ``μ_t = Σ_ij π_ij δ((1 - t) x_i + t z_j)``,   ``0 < t < 1``,

is the Wasserstein geodesic from the source to the target: ``W_2(μ_s, μ_t) = |t - s|
W_2(μ_0, μ_1)``, so domains at ``t_k = k / (K + 1)`` are evenly spaced along it, which their
bound says is where intermediate domains should be. They interpolate in an encoder's feature
space; :func:`geodesic_domains` takes whatever points it is given (inputs, standardised inputs or
features).
"""

from __future__ import annotations

import torch

from pyro_cl.data.domain_graph import pot, uniform_transport_problem

__all__ = ["geodesic_domains", "transport_plan"]


def transport_plan(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The exact optimal transport plan ``π`` (``(N, M)``, rows summing to ``1/N``, columns to
    ``1/M``) between ``source`` ``(N, ...)`` and ``target`` ``(M, ...)`` for the squared
    Euclidean cost, uniform weights (``ot.emd``; for ``N = M`` a permutation over ``N``).

    :raises ImportError: naming the package when POT is missing.
    """
    ot = pot("transport plans")
    x = source.reshape(len(source), -1).double().cpu()
    z = target.reshape(len(target), -1).double().cpu()
    plan = ot.emd(*uniform_transport_problem(x, z))
    return torch.from_numpy(plan).to(source.device)


def geodesic_domains(source: torch.Tensor, target: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """``steps`` domains evenly spaced on the geodesic from ``source`` to ``target`` (module
    docstring): the domain at ``t_k = k / (steps + 1)`` holds ``(1 - t_k) x_i + t_k z_j`` for
    every coupled pair ``π_ij > 0`` of :func:`transport_plan` (``N`` points when ``N = M``; at most
    ``N + M - 1`` otherwise), in the dtype and shape of ``source``'s points.

    :raises ValueError: for ``steps`` that is not a positive integer, or points of two shapes.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps is the number of intermediate domains (>= 1), not {steps!r}")
    if source.shape[1:] != target.shape[1:]:
        raise ValueError(
            f"source points {tuple(source.shape[1:])} and target points "
            f"{tuple(target.shape[1:])} differ in shape"
        )
    rows, columns = torch.nonzero(transport_plan(source, target) > 0, as_tuple=True)
    start, end = source[rows.to(source.device)], target[columns.to(source.device)].to(source)
    return [torch.lerp(start, end, k / (steps + 1)) for k in range(1, steps + 1)]
