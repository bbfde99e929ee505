"""The point-estimate fit: Adam on the guide's means for maximum likelihood, or MAP under a
:class:`~pyro_cl.fitters.penalty.Penalty`; also VCL appendix A's maximum-likelihood
initialisation."""

from __future__ import annotations

import torch

from pyro_cl.fitters.penalty import Penalty
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.callbacks import Callback, CallbackList, StepInfo
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.objectives import negative_log_likelihood
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.points import data_size

__all__ = ["fit_point_estimate", "net_point_parameters"]


class _PenaltySteps(Callback):
    def __init__(self, penalty: Penalty) -> None:
        self.penalty = penalty

    def on_step(self, info: StepInfo) -> None:
        self.penalty.on_step(info)


def fit_point_estimate(
    context: FitContext,
    guide: MeanFieldGuide,
    problem: FitProblem,
    penalty: Penalty | None = None,
) -> list[float]:
    """Minimise ``-(1/M) Σ_{batch} log p(y_n | θ, x_n) + R(θ)/N`` over the guide's means of
    ``sites`` with Adam (the configuration's learning rate and decay); a model with amortised
    local sites (a VAE) trains the task's encoder with them, on the bound of
    :func:`~pyro_cl.infer.objectives.negative_log_likelihood`."""
    data, sites = problem.data, problem.sites
    model = context.model
    task_id = model.task_argument(data)  # one task, or one per point of a multi-head net
    values = guide.locs(sites)
    # a generative model's encoders
    trained = {**values, **guide.amortised_parameters(data.tasks())}
    trained.update(net_point_parameters(model))  # deterministic parts: point values already
    num_data = len(data)
    rows_of = RowGather(data.x)
    # weighted likelihoods (a balanced replay buffer): rescaled to mean 1, as the ELBO's
    weights = (
        None if data.weights is None else data.likelihood_weights() * (num_data / data_size(data))
    )

    def loss(index: torch.Tensor) -> torch.Tensor:
        ids = task_id if isinstance(task_id, int) else task_id[index]
        rows = None if weights is None else weights[index]
        nll = negative_log_likelihood(
            model, values, rows_of(index), data.y[index], ids, weights=rows
        )
        return nll if penalty is None else nll + penalty(values) / num_data

    callbacks = None
    if penalty is not None:
        penalty.before_fit(
            {name: value.detach().clone() for name, value in values.items()}, num_data
        )
        callbacks = CallbackList([context.callbacks, _PenaltySteps(penalty)])
    return context.minimise(loss, trained, problem, callbacks)


def net_point_parameters(model) -> dict[str, torch.nn.Parameter]:
    """``{"net.<name>": parameter}``: the net's own parameters (deterministic parts), which a fit
    trains as point values beside the guide's, under names no guide parameter takes."""
    return {f"net.{name}": p for name, p in model.point_parameters().items()}
