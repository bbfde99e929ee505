"""A continual VAE through the one runner: a one-class task stream, each task's images a step,
every head learnt so far scored after each task (VCL section 6.2): the test log-likelihood and
classifier uncertainty (figure 7, ``matrices["test_ll"]`` and ``matrices["uncertainty"]``) and a
grid of samples (figure 6, :attr:`~pyro_cl.app.result.RunResult.samples`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pyro_cl.app.continual_run import Metric, Step, run_continual
from pyro_cl.app.result import RunResult
from pyro_cl.data.tasks import TaskStream
from pyro_cl.generative.evaluation import (
    classifier_uncertainty,
    generate,
    importance_log_likelihood,
)
from pyro_cl.infer.loggers import Logger
from pyro_cl.learner.learner import ContinualLearner

__all__ = [
    "GenerativeEvaluation",
    "GenerativeMetrics",
    "generative_steps",
    "run_generative_stream",
]


def generative_steps(stream: TaskStream) -> Iterator[Step]:
    """One step per one-class task of ``stream``: its training images (no labels) under its
    task id (the decoder's head)."""
    for i, task in enumerate(stream):
        yield Step(task.x_train, task.name, i, task_id=task.id, source=task)


@dataclass(frozen=True)
class GenerativeEvaluation:
    """How each head is scored after each task.

    :ivar test_samples: importance samples per test image (the paper: 5,000).
    :ivar test_points: test images per task (``None``: all of them).
    :ivar generated: generated images per head for the classifier uncertainty.
    :ivar grid: samples per head in the picture of figure 6.
    :ivar mean_weights: generate with the posterior mean of the decoder's weights (the VCL
        reference code's choice) rather than a draw per image.
    """

    test_samples: int = 5000
    test_points: int | None = None
    generated: int = 100
    grid: int = 1
    mean_weights: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.mean_weights, bool):
            raise ValueError(f"mean_weights must be True or False, got {self.mean_weights!r}")
        for name in ("test_samples", "generated", "grid", "test_points"):
            value = getattr(self, name)
            if value is None and name == "test_points":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class GenerativeMetrics(Metric):
    """After each task, every head seen so far: the mean importance-sampled test
    log-likelihood, the classifier uncertainty of generated images (with a ``classifier``) and
    the grid's samples."""

    def __init__(
        self,
        stream: TaskStream,
        evaluation: GenerativeEvaluation,
        classifier: torch.nn.Module | None = None,
    ) -> None:
        self.stream = stream
        self.evaluation = evaluation
        self.classifier = classifier
        k = len(stream)
        self.test_ll = np.full((k, k), np.nan)
        self.uncertainty = np.full((k, k), np.nan)
        self.samples = np.full((k, k, evaluation.grid, stream.in_features), np.nan)
        self._position = {task.id: i for i, task in enumerate(stream)}

    def after_step(self, learner: ContinualLearner, step: Step, seconds: float) -> None:
        i = self._position[step.task_id]
        settings = self.evaluation
        for j in range(i + 1):
            task = self.stream[j]
            x = task.x_test[: settings.test_points]
            ll = importance_log_likelihood(learner, x, task.id, settings.test_samples)
            self.test_ll[i, j] = ll.mean().item()
            count = max(settings.generated, settings.grid)
            images = generate(learner, task.id, count, mean_weights=settings.mean_weights)
            self.samples[i, j] = images[: settings.grid].cpu().numpy()
            if self.classifier is not None:
                label = int(task.y_train[0])
                self.uncertainty[i, j] = classifier_uncertainty(
                    self.classifier, images[: settings.generated], label
                )

    def describe(self, step: Step) -> str:
        i = step.index
        text = f"mean test-LL {np.mean(self.test_ll[i, : i + 1]):.1f}"
        if self.classifier is not None:
            text += f", classifier uncertainty {np.mean(self.uncertainty[i, : i + 1]):.2f}"
        return text

    def scalars(self, step: Step) -> dict[str, float]:
        i = step.index
        values = {"mean_test_ll": float(np.mean(self.test_ll[i, : i + 1]))}
        if self.classifier is not None:
            values["mean_uncertainty"] = float(np.mean(self.uncertainty[i, : i + 1]))
        return values

    def record(self, result: RunResult) -> None:
        result.matrices["test_ll"] = self.test_ll
        result.matrices["uncertainty"] = self.uncertainty
        result.samples = self.samples


def run_generative_stream(
    learner: ContinualLearner,
    stream: TaskStream,
    evaluation: GenerativeEvaluation,
    classifier: torch.nn.Module | None = None,
    classifier_accuracy: float | None = None,
    method: str | None = None,
    settings: dict | None = None,
    verbose: bool = True,
    seed: int | None = None,
    loggers: Sequence[Logger] = (),
) -> RunResult:
    """:func:`~pyro_cl.app.continual_run.run_continual` over the one-class tasks of ``stream``
    with :class:`GenerativeMetrics`; the judging classifier's test accuracy is recorded as
    ``details["classifier_accuracy"]``."""
    result = run_continual(
        learner,
        generative_steps(stream),
        [GenerativeMetrics(stream, evaluation, classifier)],
        method=method,
        stream=stream.name,
        seed=seed,
        settings=settings,
        verbose=verbose,
        loggers=loggers,
    )
    result.details["classifier_accuracy"] = classifier_accuracy
    return result
