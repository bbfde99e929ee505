"""Run a learner through a task stream and record the accuracy matrix (and save it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pyro_cl.data.tasks import TaskStream
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.inspection import active_units
from pyro_cl.metrics import (
    average_accuracy,
    average_accuracy_curve,
    backward_transfer,
    forward_transfer,
)
from pyro_cl.nn.structured import has_structured_sites

__all__ = [
    "ActiveUnits",
    "StreamMetrics",
    "ContinualResult",
    "mean_result",
    "run_stream",
    "scratch_accuracies",
    "summarise",
]


@dataclass
class ContinualResult:
    """What one run of a method over a stream measured.

    ``accuracy[i, j]`` is the test accuracy on task ``j`` after training on task ``i`` (NaN for
    ``j > i``), ``log_likelihood`` likewise holds the mean test log predictive density.
    """

    method: str
    stream: str
    task_names: list[str]
    accuracy: np.ndarray
    log_likelihood: np.ndarray
    wall_time_s: float
    settings: dict = field(default_factory=dict)
    #: ``s_i``: accuracy on task ``i`` of the same learner trained on task ``i`` alone (for FWT).
    scratch_accuracy: list[float] | None = None
    #: IBP nets: after learning task ``i``, per masked layer, the quartiles ``[min, 25%, median,
    #: 75%, max]`` of the number of active units over task ``i``'s test points.
    active_units: list[list[list[float]]] | None = None

    @property
    def acc(self) -> float:
        return average_accuracy(self.accuracy)

    @property
    def bwt(self) -> float | None:
        return backward_transfer(self.accuracy) if len(self.task_names) > 1 else None

    @property
    def fwt(self) -> float | None:
        if self.scratch_accuracy is None or len(self.task_names) < 2:
            return None
        return forward_transfer(self.accuracy, self.scratch_accuracy)

    def summary(self) -> dict:
        return {
            "method": self.method,
            "stream": self.stream,
            "ACC": self.acc,
            "BWT": self.bwt,
            "FWT": self.fwt,
            "scratch_accuracy": self.scratch_accuracy,
            "active_units": self.active_units,
            "average_accuracy_after_each_task": average_accuracy_curve(self.accuracy).tolist(),
            "wall_time_s": self.wall_time_s,
        }

    def to_json(self) -> dict:
        def matrix(m: np.ndarray) -> list:
            return [[None if np.isnan(v) else float(v) for v in row] for row in m]

        return {
            **self.summary(),
            "task_names": self.task_names,
            "accuracy_matrix": matrix(self.accuracy),
            "log_likelihood_matrix": matrix(self.log_likelihood),
            "settings": self.settings,
        }

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2))

    def format_matrix(self) -> str:
        """The accuracy matrix as text, one row per training step."""
        width = max(7, *(len(name) for name in self.task_names))
        header = f"{'after':>{width}} | " + " ".join(f"{n:>{width}}" for n in self.task_names)
        lines = [header, "-" * len(header)]
        for i, row in enumerate(self.accuracy):
            cells = " ".join(
                " " * width if np.isnan(v) else f"{100 * v:{width - 1}.2f}%" for v in row
            )
            lines.append(f"{self.task_names[i]:>{width}} | {cells}")
        return "\n".join(lines)


class StreamMetrics(Callback):
    """After each task, the test accuracy and log-likelihood on every task of ``stream`` seen
    so far: row ``i`` of the accuracy matrix."""

    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        k = len(stream)
        self.accuracy = np.full((k, k), np.nan)
        self.log_likelihood = np.full((k, k), np.nan)
        self._position = {task.id: i for i, task in enumerate(stream)}

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        i = self._position[task_id]
        for j in range(i + 1):
            metrics = learner.evaluate(self.stream[j].test, task_id=self.stream[j].id)
            self.accuracy[i, j] = metrics["accuracy"]
            self.log_likelihood[i, j] = metrics["log_likelihood"]

    def describe(self, i: int) -> str:
        return f"mean accuracy {100 * np.mean(self.accuracy[i, : i + 1]):.2f}%"


class ActiveUnits(Callback):
    """After each task of an IBP net, per masked layer, the quartiles ``[min, 25%, median, 75%,
    max]`` of the number of active units over the task's test points
    (:func:`~pyro_cl.inspection.active_units`, the H-IBP supplement's figure 7)."""

    def __init__(self, stream: TaskStream) -> None:
        self.stream = stream
        self.quartiles: list[list[list[float]]] = []
        self._tests = {task.id: task.test[0] for task in stream}

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        counts = active_units(learner, self._tests[task_id], task_id)
        quantiles = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)
        self.quartiles.append([torch.quantile(c.double(), quantiles).tolist() for c in counts])

    def describe(self, i: int) -> str:
        return f"median active units {self.quartiles[i][0][2]:.0f}"


def run_stream(
    learner: ContinualLearner,
    stream: TaskStream,
    method: str | None = None,
    settings: dict | None = None,
    verbose: bool = True,
) -> ContinualResult:
    """Observe each task of ``stream`` in turn, evaluating all tasks seen so far after each
    (:class:`StreamMetrics`), and counting active units for nets with IBP masks
    (:class:`ActiveUnits`); both are callbacks of each ``observe``.

    :param verbose: print one line per task (mean accuracy so far, elapsed time), so that long
        runs show progress even without progress bars.
    """
    k = len(stream)
    start = time.perf_counter()
    metrics = StreamMetrics(stream)
    units = ActiveUnits(stream) if has_structured_sites(learner.net) else None
    reports = [metrics] if units is None else [metrics, units]
    for i, task in enumerate(stream):
        # units first: counting them draws random numbers, as it did before evaluation
        learner.observe(task.train, task_id=task.id, callbacks=reports[::-1])
        if verbose:
            described = ", ".join(report.describe(i) for report in reports)
            print(
                f"  {method or type(learner).__name__}: after {task.name} ({i + 1}/{k}), "
                f"{described} [{time.perf_counter() - start:.0f} s]",
                flush=True,
            )
    return ContinualResult(
        method=method or type(learner).__name__,
        stream=stream.name,
        task_names=[t.name for t in stream],
        accuracy=metrics.accuracy,
        log_likelihood=metrics.log_likelihood,
        wall_time_s=time.perf_counter() - start,
        settings=dict(settings or {}),
        active_units=None if units is None else units.quartiles,
    )


def scratch_accuracies(
    make_learner: Callable[[], ContinualLearner], stream: TaskStream
) -> list[float]:
    """``s_i`` of the FWT definition (thesis eq. 66): test accuracy on task ``i`` of a fresh
    learner from ``make_learner()`` trained on task ``i`` alone."""
    accuracies = []
    for task in stream:
        learner = make_learner()
        learner.observe(task.train, task_id=task.id)
        accuracies.append(learner.evaluate(task.test, task_id=task.id)["accuracy"])
    return accuracies


def mean_result(results: list[ContinualResult]) -> ContinualResult:
    """The element-wise mean of several runs of one method on one stream (e.g. over seeds)."""
    if not results:
        raise ValueError("no results to average")
    first = results[0]
    if any(r.method != first.method or r.task_names != first.task_names for r in results):
        raise ValueError("can only average runs of the same method on the same tasks")
    label = first.method if len(results) == 1 else f"{first.method} (mean of {len(results)})"
    return ContinualResult(
        method=label,
        stream=first.stream,
        task_names=first.task_names,
        accuracy=np.mean([r.accuracy for r in results], axis=0),
        log_likelihood=np.mean([r.log_likelihood for r in results], axis=0),
        wall_time_s=float(np.mean([r.wall_time_s for r in results])),
        settings=first.settings,
    )


def summarise(results: list[ContinualResult]) -> dict[str, dict]:
    """Per method: mean and standard deviation (ddof 0) over runs of ACC and BWT, and the runs'
    count and mean wall time."""
    summary = {}
    for method in dict.fromkeys(r.method for r in results):
        runs = [r for r in results if r.method == method]
        acc = np.array([r.acc for r in runs])
        bwt = np.array([np.nan if r.bwt is None else r.bwt for r in runs])
        summary[method] = {
            "runs": len(runs),
            "ACC_mean": float(acc.mean()),
            "ACC_std": float(acc.std()),
            "BWT_mean": float(bwt.mean()),
            "BWT_std": float(bwt.std()),
            "ACC_per_run": acc.tolist(),
            "wall_time_s_mean": float(np.mean([r.wall_time_s for r in runs])),
        }
    return summary
