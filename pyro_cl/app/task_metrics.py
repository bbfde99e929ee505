"""Task streams through the one runner: each task is a step, and after each the accuracy
matrix gets a row (every task seen so far, on its test set) and an IBP net's active units are
counted. Average accuracy, backward and forward transfer are read off the matrix (the VOGN
thesis's eq. 64-66; :class:`~pyro_cl.app.result.RunResult`).

A **task-free** stream (:func:`task_free_steps`; Aljundi et al. 2019, "Task-free continual
learning") hands the learner each task's training data in batches as they arrive, one
``observe`` a batch, each its own step, with no task label and no word of where a task ends; the
metrics still measure at the end of each task, so its accuracy matrix reads as a task
stream's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from pyro_cl.app.continual_run import Metric, Step, run_continual
from pyro_cl.app.result import RunResult
from pyro_cl.data.tasks import Task, TaskStream
from pyro_cl.infer.loggers import Logger
from pyro_cl.inspection import (
    PRUNED_KL,
    active_units,
    share_at_prior,
    shared_sites,
    units_in_use,
)
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.nn.structured import has_structured_sites
from pyro_cl.serialization import atomic_save, safe_load

__all__ = [
    "AccuracyMatrix",
    "ActiveUnits",
    "FreshFits",
    "Pruning",
    "forget_fresh_fits",
    "fresh_fits",
    "run_stream",
    "task_free_steps",
    "task_steps",
]


def task_steps(stream: TaskStream) -> Iterator[Step]:
    """One step per task of ``stream``: its training data under its task id."""
    for i, task in enumerate(stream):
        yield Step(task.train, task.name, i, task_id=task.id, source=task)


def task_free_steps(stream: TaskStream, batch_size: int, seed: int = 0) -> Iterator[Step]:
    """``stream``'s training data as a task-free stream (module docstring): each task's points
    shuffled (``seed``) and handed on in batches of ``batch_size`` (the last may be smaller), one
    step each; the last batch of a task ends it (:attr:`Step.ends_task`). The learner is told no
    task: each batch is a step of its own, its id its place in the stream (so a part that keeps
    points of earlier steps, function space's context among them, tells the batches apart).

    :raises ValueError: for a multi-head stream (a head is chosen by the task label this hides)
        or a batch size below 1.
    """
    if stream.multi_head:
        raise ValueError(
            f"{stream.name} has a head per task, chosen by the task label a task-free stream "
            "hides: run it with one head (a class-incremental stream)"
        )
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"a task-free stream's batch size must be a positive integer, got {batch_size!r}"
        )
    generator = torch.Generator().manual_seed(seed)
    index = 0
    for task in stream:
        x, y = task.train
        order = torch.randperm(len(x), generator=generator).to(x.device)
        batches = order.split(batch_size)
        for k, rows in enumerate(batches):
            last = k == len(batches) - 1
            name = f"{task.name} batch {k + 1}/{len(batches)}"
            yield Step((x[rows], y[rows]), name, index, task_id=index, source=task, ends_task=last)
            index += 1


#: The matrices :class:`AccuracyMatrix` fills, row ``i`` after step ``i``.
MATRICES = ("accuracy", "log_likelihood", "calibration_error")


class AccuracyMatrix(Metric):
    """After each task, the test accuracy, log-likelihood and expected calibration error on every
    task of ``stream`` seen so far: row ``i`` of ``matrices["accuracy"]``,
    ``matrices["log_likelihood"]`` and ``matrices["calibration_error"]``."""

    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        k = len(stream)
        self.accuracy = np.full((k, k), np.nan)
        self.log_likelihood = np.full((k, k), np.nan)
        self.calibration_error = np.full((k, k), np.nan)
        self._position = {task.id: i for i, task in enumerate(stream)}

    def after_step(self, learner, step: Step, seconds: float) -> None:
        if not step.ends_task:
            return
        i = self._position[step.source.id]
        for j in range(i + 1):
            metrics = learner.evaluate(self.stream[j].test, task_id=self.stream[j].id)
            self.accuracy[i, j] = metrics["accuracy"]
            self.log_likelihood[i, j] = metrics["log_likelihood"]
            self.calibration_error[i, j] = metrics.get("calibration_error", np.nan)

    def describe(self, step: Step) -> str:
        if not step.ends_task:
            return ""
        return f"mean accuracy {100 * self.scalars(step)['mean_accuracy']:.2f}%"

    def scalars(self, step: Step) -> dict[str, float]:
        """The means over the tasks so far, and row ``i`` of the accuracy matrix (each task's
        accuracy after task ``i``: a logger draws the matrix as one curve per task); nothing
        before a task-free stream's task ends."""
        if not step.ends_task:
            return {}
        i = self._position[step.source.id]
        return {
            "mean_accuracy": float(np.mean(self.accuracy[i, : i + 1])),
            "mean_log_likelihood": float(np.mean(self.log_likelihood[i, : i + 1])),
            **{f"accuracy/task{j + 1}": float(self.accuracy[i, j]) for j in range(i + 1)},
        }

    def record(self, result: RunResult) -> None:
        result.matrices["accuracy"] = self.accuracy
        result.matrices["log_likelihood"] = self.log_likelihood
        result.matrices["calibration_error"] = self.calibration_error

    def measured(self) -> dict:
        return {name: torch.from_numpy(getattr(self, name).copy()) for name in MATRICES}

    def load_measured(self, state: dict) -> None:
        for name in MATRICES:
            setattr(self, name, state[name].cpu().double().numpy().copy())


class ActiveUnits(Metric):
    """After each task of an IBP net, per masked layer, the quartiles ``[min, 25%, median, 75%,
    max]`` of the number of active units over the task's test points
    (:func:`~pyro_cl.inspection.active_units`, the H-IBP supplement's figure 7), recorded as
    ``details["active_units"]``."""

    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        self.quartiles: list[list[list[float]]] = []
        self._tests = {task.id: task.test[0] for task in stream}

    def after_step(self, learner, step: Step, seconds: float) -> None:
        if not step.ends_task:
            return
        counts = active_units(learner, self._tests[step.source.id], step.task_id)
        quantiles = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)
        self.quartiles.append([torch.quantile(c.double(), quantiles).tolist() for c in counts])

    def describe(self, step: Step) -> str:
        return f"median active units {self.quartiles[-1][0][2]:.0f}" if step.ends_task else ""

    def record(self, result: RunResult) -> None:
        result.details["active_units"] = self.quartiles

    def measured(self) -> dict:
        return {"quartiles": self.quartiles}

    def load_measured(self, state: dict) -> None:
        self.quartiles = [list(layer) for layer in state["quartiles"]]


class Pruning(Metric):
    """After each task, per Gaussian weight layer of the posterior handed on, the share of weights
    still at the learner's initial prior and the units in use
    (:func:`~pyro_cl.inspection.share_at_prior`, :func:`~pyro_cl.inspection.units_in_use`, at
    ``threshold`` nats): VI's over-pruning, as GVCL (Loo et al. 2021, section 4) measures it.
    Recorded as ``details["share_at_prior"]`` and ``details["units_in_use"]``, one dict per
    step; point-estimate learners hand on nothing and are not measured."""

    def __init__(self, threshold: float = PRUNED_KL) -> None:
        self.threshold = threshold
        self.shares: list[dict[str, float]] = []
        self.units: list[dict[str, int]] = []

    def after_step(self, learner, step: Step, seconds: float) -> None:
        if not step.ends_task:
            return
        posterior = learner.current_prior()
        self.shares.append(share_at_prior(posterior, learner.initial_prior, self.threshold))
        self.units.append(units_in_use(posterior, learner.initial_prior, self.threshold))

    def describe(self, step: Step) -> str:
        if not step.ends_task:
            return ""
        shares, units = self.shares[-1], self.units[-1]
        hidden = [shares[name] for name in shared_sites(units)]
        return (
            f"{100 * float(np.mean(hidden)):.0f}% of hidden weights at the prior" if hidden else ""
        )

    def record(self, result: RunResult) -> None:
        result.details["share_at_prior"] = self.shares
        result.details["units_in_use"] = self.units
        result.details["pruned_kl_threshold"] = self.threshold

    def measured(self) -> dict:
        return {"shares": self.shares, "units": self.units}

    def load_measured(self, state: dict) -> None:
        self.shares, self.units = list(state["shares"]), list(state["units"])


def run_stream(
    learner: ContinualLearner,
    stream: TaskStream,
    method: str | None = None,
    settings: dict | None = None,
    verbose: bool = True,
    seed: int | None = None,
    loggers: Sequence[Logger] = (),
    checkpoint: str | Path | None = None,
    task_free: int | None = None,
) -> RunResult:
    """:func:`~pyro_cl.app.continual_run.run_continual` over the tasks of ``stream`` with the
    accuracy matrix (:class:`AccuracyMatrix`) and, for nets with IBP masks, the active units.

    :param verbose: print one line per step (mean accuracy so far, elapsed time).
    :param checkpoint: a folder to save the run in after every step, and resume it from
        (:class:`~pyro_cl.app.run_checkpoint.RunCheckpoint`).
    :param task_free: a batch size: the stream is run task-free (:func:`task_free_steps`, its
        batches shuffled by ``seed``); the result's steps are still the tasks, and
        ``details["task_free_batches"]`` counts the observes.
    """
    metrics: list[Metric] = [AccuracyMatrix(stream)]
    if not learner.fitter.point_estimate:
        metrics.append(Pruning())
    if has_structured_sites(learner.net):
        # units first: counting them draws random numbers, before the evaluation does
        metrics.insert(0, ActiveUnits(stream))
    steps = list(
        task_steps(stream) if task_free is None else task_free_steps(stream, task_free, seed or 0)
    )
    result = run_continual(
        learner,
        steps,
        metrics,
        method=method,
        stream=stream.name,
        seed=seed,
        settings=settings,
        verbose=verbose,
        loggers=loggers,
        checkpoint=checkpoint,
    )
    if task_free is not None:  # the rows of the matrix are the tasks
        result.step_names = [task.name for task in stream]
        result.details["task_free_batches"] = len(steps)
    return result


class FreshFits(NamedTuple):
    """What :func:`fresh_fits` measured: each task's test accuracy, and the seconds it took."""

    accuracy: list[float]
    seconds: float


#: The file a fresh fit is kept in (:func:`fresh_fits`), ``{}`` the task's place in the stream.
FRESH_FIT_FILE = "fresh-fit-{}.pt"


def fresh_fits(
    make_learner: Callable[[], ContinualLearner],
    stream: TaskStream,
    saved: str | Path | None = None,
    settings: dict | None = None,
) -> FreshFits:
    """``s_i`` of the FWT definition (thesis eq. 66): test accuracy on task ``i`` of a fresh
    learner from ``make_learner()`` trained on task ``i`` alone. A seeded learner draws from
    random streams of its own, so a run fits the same whether its fresh fits come before it or
    not.

    :param saved: a folder that keeps each task's accuracy and seconds as they are measured
        (``fresh-fit-<i>.pt``, ``i`` the task's place in the stream, written with
        :func:`~pyro_cl.serialization.atomic_save`) and gives them back instead of a refit:
        fresh fits stopped with their session resume at the next task
        (:func:`forget_fresh_fits` removes them once the run has ended).
    :param settings: what the learner was built with, kept beside each accuracy: a saved fit
        of other settings is refused, not read.
    :raises ValueError: when ``saved`` holds a fresh fit of other ``settings``.
    """
    fits = [_fresh_fit(make_learner, task, i, saved, settings) for i, task in enumerate(stream)]
    return FreshFits([fit["accuracy"] for fit in fits], sum(fit["seconds"] for fit in fits))


def forget_fresh_fits(saved: str | Path) -> None:
    """Remove the fresh fits :func:`fresh_fits` kept in ``saved`` (the folder too, if left
    empty)."""
    saved = Path(saved)
    for path in saved.glob(FRESH_FIT_FILE.format("*")):
        path.unlink()
    if saved.exists() and not any(saved.iterdir()):
        saved.rmdir()


def _fresh_fit(
    make_learner: Callable[[], ContinualLearner],
    task: Task,
    index: int,
    saved: str | Path | None,
    settings: dict | None,
) -> dict:
    """Task ``index``'s fresh fit: read from ``saved`` if kept there, else fitted (and kept)."""
    path = None if saved is None else Path(saved) / FRESH_FIT_FILE.format(index)
    if path is not None and path.exists():
        fit = safe_load(path)
        if fit["settings"] != settings:
            raise ValueError(
                f"{path} holds a fresh fit of other settings: use another folder, or empty "
                "this one to start again"
            )
        return fit
    start = time.perf_counter()
    learner = make_learner()
    learner.observe(task.train, task_id=task.id)
    accuracy = learner.evaluate(task.test, task_id=task.id)["accuracy"]
    fit = {"task": task.name, "accuracy": accuracy, "seconds": time.perf_counter() - start}
    if path is not None:
        atomic_save({**fit, "settings": settings}, path)
    return fit
