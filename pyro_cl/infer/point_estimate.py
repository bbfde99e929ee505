"""Point estimates: maximum likelihood, or MAP under a quadratic (or any) penalty.

Fine-tuning is this fitter with no penalty; EWC, online EWC, SI and the maximum-likelihood
initialisation of VCL (appendix A) are the same fit with a different :class:`Penalty` or none.
The fitted values are the guide's means, so the guide carries them from task to task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import torch

from pyro_cl.coresets.coreset import Coreset
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.callbacks import Callback, CallbackList, StepInfo
from pyro_cl.infer.fitter import FitContext, Fitter
from pyro_cl.infer.objectives import negative_log_likelihood
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.spec import Registrable

__all__ = [
    "Penalty",
    "PointEstimateFitter",
    "check_strength",
    "fit_point_estimate",
    "weighted_squared_distance",
]


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
    if isinstance(value, bool) or not float(value) >= 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return float(value)


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
        data: Coreset,
        task_id: int,
    ) -> None:
        """After a successful fit of task ``task_id`` on ``data``, at the fitted ``values``."""


class _PenaltySteps(Callback):
    def __init__(self, penalty: Penalty) -> None:
        self.penalty = penalty

    def on_step(self, info: StepInfo) -> None:
        self.penalty.on_step(info)


def fit_point_estimate(
    context: FitContext,
    guide: MeanFieldGuide,
    data: Coreset,
    sites: list[str],
    epochs: int,
    batch_size: int | None,
    description: str,
    penalty: Penalty | None = None,
) -> list[float]:
    """Minimise ``-(1/M) Σ_{batch} log p(y_n | θ, x_n) + R(θ)/N`` over the guide's means of
    ``sites`` with Adam (the configuration's learning rate and decay); a model with amortised
    local sites (a VAE) trains the task's encoder with them, on the bound of
    :func:`~pyro_cl.infer.objectives.negative_log_likelihood`."""
    tasks = data.tasks()
    if len(tasks) != 1:
        raise ValueError(f"a point-estimate fit takes one task's points, got tasks {tasks}")
    task_id = tasks[0]
    model = context.model
    values = guide.locs(sites)
    trained = {**values, **guide.amortised_parameters(tasks)}  # a generative model's encoder
    num_data = len(data)
    rows_of = RowGather(data.x)

    def loss(index: torch.Tensor) -> torch.Tensor:
        nll = negative_log_likelihood(model, values, rows_of(index), data.y[index], task_id)
        return nll if penalty is None else nll + penalty(values) / num_data

    callbacks = None
    if penalty is not None:
        penalty.before_fit(
            {name: value.detach().clone() for name, value in values.items()}, num_data
        )
        callbacks = CallbackList([context.callbacks, _PenaltySteps(penalty)])
    return context.minimise(loss, trained, num_data, epochs, batch_size, description, callbacks)


class PointEstimateFitter(Fitter):
    """Maximum likelihood for the guide's means (fine-tuning), or MAP with a ``penalty``.

    Each task starts from the previous task's values; prediction uses them as a point estimate
    and no posterior is handed on (:attr:`Fitter.point_estimate`).

    :param penalty: a :class:`Penalty` (EWC, SI, ...), or ``None`` for plain fine-tuning.
    """

    name = "point_estimate"
    point_estimate = True
    fits_local_guide = True

    def __init__(self, penalty: Penalty | None = None) -> None:
        if penalty is not None and not isinstance(penalty, Penalty):
            raise TypeError(f"penalty must be a Penalty or None, got {penalty!r}")
        self.penalty = penalty

    def prepare(self, context, guide, data, task_id, sites, first_task) -> None:
        """Nothing: the fit starts from the previous task's values."""

    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        data: Coreset,
        sites: list[str],
        epochs: int,
        batch_size: int | None,
        description: str,
    ) -> list[float]:
        history = fit_point_estimate(
            context, guide, data, sites, epochs, batch_size, description, self.penalty
        )
        if self.penalty is not None:
            values = {name: value.detach() for name, value in guide.locs(sites).items()}
            self.penalty.after_fit(context, values, data, data.tasks()[0])
        return history

    def posterior(self, guide: MeanFieldGuide, sites: list[str]) -> None:
        """Nothing is handed on: the fitted values stay in the guide's means."""
        return None

    def state_dict(self) -> dict:
        return {} if self.penalty is None else {"penalty": self.penalty.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.penalty is not None:
            self.penalty.load_state_dict(state.get("penalty", {}))
