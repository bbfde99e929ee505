"""The continual-learning methods that benchmarks and the command line know by name."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import torch

from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.coresets import KCenterCoreset, RandomCoreset
from pyro_cl.infer.ivon import IVON
from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.infer.natural_gradient import NaturalGradientUpdate
from pyro_cl.infer.vcl import VCL
from pyro_cl.infer.vogn import VOGN

__all__ = ["Method", "METHODS", "VOGN_MNIST_SETTINGS", "make_method"]

#: The VOGN thesis's set-up for permuted and split MNIST (section 4.3): no maximum-likelihood
#: initialisation, PyTorch's initial means and precision 1e6, re-initialised before every task.
VOGN_MNIST_SETTINGS = {
    "ml_init_epochs": 0,
    "init_log_variance": -math.log(1e6),
    "between_tasks": "fresh",
}


@dataclass(frozen=True)
class Method:
    """How to build a learner: its class, an optional coreset selector and natural-gradient
    update class with the arguments that define the method (e.g. ``curvature="ggn"``), and
    training settings that differ from :class:`~pyro_cl.TrainingConfig`'s defaults (the caller's
    settings and update options win)."""

    learner: type[ContinualLearner]
    selector: type | None = None
    update: type[NaturalGradientUpdate] | None = None
    defaults: dict = field(default_factory=dict)
    update_defaults: dict = field(default_factory=dict)

    def update_parameters(self) -> set[str]:
        """Names of the keyword arguments the method's update takes (none without one)."""
        if self.update is None:
            return set()
        return set(inspect.signature(self.update).parameters)


METHODS: dict[str, Method] = {
    "vcl": Method(VCL),
    "vcl-random": Method(VCL, RandomCoreset),
    "vcl-kcenter": Method(VCL, KCenterCoreset),
    "coreset-only": Method(CoresetOnly, RandomCoreset),
    "kcenter-only": Method(CoresetOnly, KCenterCoreset),
    "finetune": Method(FineTuning),
    "vogn": Method(VCL, None, VOGN, VOGN_MNIST_SETTINGS),
    "vogn-ggn": Method(VCL, None, VOGN, VOGN_MNIST_SETTINGS, {"curvature": "ggn"}),
    "vogn-random": Method(VCL, RandomCoreset, VOGN, VOGN_MNIST_SETTINGS),
    "vogn-kcenter": Method(VCL, KCenterCoreset, VOGN, VOGN_MNIST_SETTINGS),
    "ivon": Method(VCL, None, IVON, {"ml_init_epochs": 0}),
}


def make_method(
    name: str,
    net: torch.nn.Module,
    coreset_size: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    update_options: dict | None = None,
    **training,
) -> ContinualLearner:
    """A fresh learner for method ``name`` on ``net``.

    :param coreset_size: points per task for the coreset methods.
    :param update_options: keyword arguments of the natural-gradient update (``learning_rate``,
        ``beta``, ``num_samples``, ``momentum``, ...), for the methods that have one.
    :param training: :class:`~pyro_cl.TrainingConfig` fields.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {list(METHODS)}")
    method = METHODS[name]
    extra: dict[str, object] = {}
    if method.selector is not None:
        extra["coreset"] = method.selector(coreset_size)
    if method.update is not None:
        extra["update"] = method.update(**{**method.update_defaults, **(update_options or {})})
    elif update_options:
        raise ValueError(f"method {name!r} has no natural-gradient update to take {update_options}")
    settings = {**method.defaults, **training}
    return method.learner(net, device=device, seed=seed, **extra, **settings)
