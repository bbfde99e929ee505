"""The one minibatch training loop every fitter uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from pyro_cl.infer.adam_moments import AdamMoments
from pyro_cl.infer.callbacks import Callback, CallbackList, StepInfo
from pyro_cl.infer.config import Optimisation
from pyro_cl.infer.data_parallel import sharded_step, synchronise_random_state
from pyro_cl.infer.divergence import Divergence, DivergenceError
from pyro_cl.infer.fit_problem import FitProblem

__all__ = ["DivergenceError", "make_adam", "minimise", "parameter_groups", "run_epochs"]


def make_adam(
    parameters: list[torch.nn.Parameter] | list[dict], learning_rate: float
) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one (CPU and CUDA floats): the same update
    rule in one kernel instead of ~10 small ones per parameter, which matters for the many small
    tensors of a mean-field guide. ``parameters`` may be torch's parameter groups."""
    try:
        return torch.optim.Adam(parameters, lr=learning_rate, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(parameters, lr=learning_rate)


def run_epochs(
    step: Callable[[torch.Tensor], torch.Tensor],
    problem: FitProblem,
    device: torch.device | str = "cpu",
    callbacks: Callback | None = None,
    parameters: Mapping[str, torch.Tensor] | None = None,
    divergence: Divergence | None = None,
) -> list[float]:
    """Call ``step(batch_indices)`` over shuffled minibatches for ``problem.epochs`` passes.

    Each epoch draws a random permutation of ``range(problem.num_data)`` and calls ``step`` on
    consecutive slices of ``problem.batch_size`` indices (``None``: the whole data at once). Inside
    a process group every rank draws the same permutation (:mod:`pyro_cl.infer.data_parallel`);
    ``step`` shards each minibatch itself. ``step``
    updates whatever it trains and returns the batch's (detached) loss. ``callbacks`` see every
    step (with ``parameters``, what the steps change) and every epoch's mean loss.

    :param divergence: when the losses count as diverged (default:
        :class:`~pyro_cl.infer.config.Divergence`'s defaults); checked after every epoch against
        the first step's loss.
    :returns: the mean loss of every epoch.
    :raises DivergenceError: as soon as an epoch's loss diverges.
    """
    divergence = divergence or Divergence()
    callbacks = callbacks or CallbackList()
    parameters = parameters or {}
    num_data, epochs, description = problem.num_data, problem.epochs, problem.description
    batch_size = num_data if problem.batch_size is None else min(int(problem.batch_size), num_data)
    history = []
    steps_done = 0
    first_loss = None
    callbacks.on_fit_start(description, epochs)
    synchronise_random_state()  # data-parallel fits: every rank draws the same permutations
    try:
        for epoch in range(epochs):
            permutation = torch.randperm(num_data, device=device)
            total = torch.zeros((), device=device)
            steps = 0
            for start in range(0, num_data, batch_size):
                loss = step(permutation[start : start + batch_size])
                if first_loss is None:
                    first_loss = loss.item()
                    divergence.check_loss(first_loss, first_loss, description)
                callbacks.on_step(StepInfo(steps_done, loss, parameters))
                total = total + loss
                steps += 1
                steps_done += 1
            mean_loss = (total / steps).item()
            divergence.check_loss(mean_loss, first_loss, f"{description}, epoch {epoch + 1}")
            history.append(mean_loss)
            callbacks.on_epoch_end(epoch, mean_loss)
    finally:
        callbacks.on_fit_end()
    return history


#: The name of the mean-field guide's log-variances, packed (``packed.log_variance``) or per
#: site (``log_variance.<site>``).
LOG_VARIANCE = "log_variance"


def parameter_groups(
    parameters: Mapping[str, torch.nn.Parameter], optimisation: Optimisation
) -> list[dict]:
    """Adam's parameter groups: the log-variances at ``variance_learning_rate`` where one is set
    and everything else at ``learning_rate`` (one group without it)."""
    if optimisation.variance_learning_rate is None:
        return [{"params": list(parameters.values())}]
    rest, variances = [], []
    for name, parameter in parameters.items():
        (variances if LOG_VARIANCE in name.split(".") else rest).append(parameter)
    groups = [{"params": rest}] if rest else []
    if variances:
        groups.append({"params": variances, "lr": optimisation.variance_learning_rate})
    return groups


def minimise(
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    parameters: Mapping[str, torch.nn.Parameter],
    problem: FitProblem,
    optimisation: Optimisation,
    device: torch.device | str = "cpu",
    callbacks: Callback | None = None,
    divergence: Divergence | None = None,
    watched: Mapping[str, torch.Tensor] | None = None,
    moments: AdamMoments | None = None,
) -> list[float]:
    """Minimise ``loss_fn(batch_indices)`` over ``parameters`` (``{name: tensor}``) with Adam over
    shuffled minibatches (:func:`run_epochs`).

    ``loss_fn`` must be a mean over the batch's points plus terms that do not depend on them
    (a KL, a penalty): inside a process group each rank evaluates it on its shard and the
    gradients are all-reduced with weights ``M_r / M``, which gives the whole minibatch's
    gradient (:class:`~pyro_cl.infer.data_parallel.Shard`).

    :param optimisation: Adam's learning rate and its decay: at step ``s`` the learning rate is
        ``learning_rate · rate^(s / steps)`` (``rate = 1`` keeps it constant); the log-variances
        step at ``variance_learning_rate`` where one is set (:func:`parameter_groups`), decayed
        alike.
    :param watched: what the callbacks see after each step (default ``parameters``; a packed fit
        shows them the guide's per-site tensors, which share the packed memory).
    :param moments: Adam's state carried from the last fit (:mod:`~pyro_cl.infer.adam_moments`):
        the fit starts from it and leaves its own there once it has run (``None``: a fresh Adam).
    :returns: the mean loss of every epoch.
    :raises DivergenceError: as soon as an epoch's loss diverges (:func:`run_epochs`).
    """
    optimizer = make_adam(parameter_groups(parameters, optimisation), optimisation.learning_rate)
    if moments is not None:
        moments.load_into(optimizer, parameters)
    rate, steps = optimisation.decay
    schedule = None
    if rate != 1.0:
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: rate ** (s / steps))

    trained = list(parameters.values())

    def adam_step(index: torch.Tensor) -> torch.Tensor:
        with sharded_step(index) as shard:  # the whole minibatch without a process group
            optimizer.zero_grad(set_to_none=True)
            loss = None
            if not shard.empty:
                loss = loss_fn(shard.index)
                loss.backward()
            loss = shard.all_reduce_gradients(trained, loss)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        return loss

    watched = parameters if watched is None else watched
    history = run_epochs(adam_step, problem, device, callbacks, watched, divergence)
    if moments is not None:
        moments.keep_from(optimizer, parameters)
    return history
