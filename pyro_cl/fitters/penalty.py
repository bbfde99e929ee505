"""Penalties: a regulariser ``R(θ)`` added to a point-estimate fit's negative log-likelihood
(EWC, online EWC, Synaptic Intelligence, Laplace propagation's quadratic)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import torch

from pyro_cl.checks import checked_real
from pyro_cl.infer.callbacks import StepInfo
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.points import Points
from pyro_cl.spec import Registrable

__all__ = ["Penalty", "check_strength", "weighted_squared_distance"]


def weighted_squared_distance(
    values: Mapping[str, torch.Tensor],
    anchor: Mapping[str, torch.Tensor],
    weights: Mapping[str, torch.Tensor],
) -> torch.Tensor | float:
    """``Σ_i w_i (θ_i - anchor_i)²`` over the sites of ``values`` that ``anchor`` names (others,
    e.g. a head no earlier task used, add nothing): the quadratic of every penalty here."""
    total = 0.0
    for name, value in values.items():
        if name in anchor:
            total = total + (weights[name] * (value - anchor[name]).square()).sum()
    return total


def check_strength(value: float, name: str) -> float:
    """A penalty's strength as a float, or a ``ValueError`` naming it unless non-negative."""
    return checked_real(value, name, 0)


class Penalty(Registrable, ABC, kind="penalty"):
    """A regulariser ``R(θ)`` added to the negative log-likelihood of a point-estimate fit.

    ``R`` is in the units of the *total* negative log-likelihood ``-Σ_n log p(y_n | θ)`` (like
    ``-log p(θ)``); the fitter divides it by the data's size, as it does the likelihood. Subclass
    it and implement :meth:`__call__`; :meth:`on_step` sees every optimiser step (Synaptic
    Intelligence's path integral) and :meth:`after_fit` the fitted values and the task's data
    (EWC's Fisher). Keep what they accumulate in :meth:`state_dict` so saving, loading and the
    learner's rollback see it.
    """

    @abstractmethod
    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        """``R(θ)`` at the current ``values`` (``{site: tensor}``), differentiable."""

    def before_fit(self, values: Mapping[str, torch.Tensor], num_data: int) -> None:
        """Before a fit on ``num_data`` points starts from ``values`` (detached)."""

    def on_step(self, info: StepInfo) -> None:
        """After every optimiser step of the fit (``info.parameters``: the values by site, with
        the step's gradients in ``.grad``)."""

    def after_fit(
        self,
        context: FitContext,
        values: Mapping[str, torch.Tensor],
        data: Points,
        task_id: int,
    ) -> None:
        """After a successful fit of task ``task_id`` on ``data``, at the fitted ``values``."""
