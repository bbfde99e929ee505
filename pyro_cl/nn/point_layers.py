"""Deterministic layers of pyro_cl's own nets: point values the learner fits beside the posterior.

``BayesianMLP(..., deterministic=["hidden.0"])`` or ``BayesianCNN(..., deterministic=["convs.0",
"convs.1"])`` builds the named layers as ordinary PyTorch layers — a feature extractor kept as
values, as ``make_bayesian(module, deterministic=...)`` keeps a user's modules — whose
parameters every fit trains beside the guide, which a failed step puts back and a checkpoint
saves (:meth:`~pyro_cl.model.SupervisedModel.point_parameters`). They carry no prior and are
never handed on. On the fast route a layer's input may have a leading particle dimension, so a
deterministic convolution folds it into the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

__all__ = ["PointConv2d", "checked_deterministic"]


class PointConv2d(nn.Conv2d):
    """``nn.Conv2d`` over inputs ``(..., C, H, W)`` with any leading dimensions (particles)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        y = super().forward(x.reshape(-1, *x.shape[-3:]))
        return y.reshape(*lead, *y.shape[1:])


def checked_deterministic(paths: Sequence[str], layers: Iterable[str]) -> list[str]:
    """``paths`` as a list if each names one of ``layers`` (a net's layer paths), else a
    ``ValueError`` naming the unknown ones and the layers there are."""
    if isinstance(paths, str):
        raise TypeError(f"deterministic takes a list of layer paths, got the string {paths!r}")
    paths, layers = [str(p) for p in paths], list(layers)
    unknown = [p for p in paths if p not in layers]
    if unknown:
        raise ValueError(
            f"deterministic names {unknown}, which are not layers of the net (its layers: "
            f"{', '.join(layers)})"
        )
    return paths
