"""The continual-learning methods that benchmarks and the command line know by name."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.coresets import KCenterCoreset, RandomCoreset
from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.infer.vcl import VCL

__all__ = ["METHODS", "make_method"]

#: ``name -> (learner class, coreset selector class or None)``.
METHODS: dict[str, tuple[type[ContinualLearner], type | None]] = {
    "vcl": (VCL, None),
    "vcl-random": (VCL, RandomCoreset),
    "vcl-kcenter": (VCL, KCenterCoreset),
    "coreset-only": (CoresetOnly, RandomCoreset),
    "kcenter-only": (CoresetOnly, KCenterCoreset),
    "finetune": (FineTuning, None),
}


def make_method(
    name: str,
    net: torch.nn.Module,
    coreset_size: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **training,
) -> ContinualLearner:
    """A fresh learner for method ``name`` on ``net`` (``coreset_size`` points per task for the
    coreset methods; ``training`` are :class:`~pyro_cl.TrainingConfig` fields)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {list(METHODS)}")
    learner_class, selector_class = METHODS[name]
    extra: dict[str, Callable | object] = {}
    if selector_class is not None:
        extra["coreset"] = selector_class(coreset_size)
    return learner_class(net, device=device, seed=seed, **extra, **training)
