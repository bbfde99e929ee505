"""Run a continual VAE over a one-class task stream and score it after every task (VCL section
6.2): the test log-likelihood and classifier uncertainty of every head learnt so far (figure 7)
and a grid of samples (figure 6)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from pyro_cl.data.tasks import TaskStream
from pyro_cl.generative.evaluation import (
    classifier_uncertainty,
    generate,
    importance_log_likelihood,
)
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.learner import ContinualLearner

__all__ = ["GenerativeEvaluation", "GenerativeMetrics", "GenerativeResult", "run_generative_stream"]


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


@dataclass
class GenerativeResult:
    """One run: ``test_ll[i, j]`` and ``uncertainty[i, j]`` score head ``j`` after task ``i``
    (NaN for ``j > i``); ``samples[i, j]`` are the grid's images of head ``j`` after task ``i``."""

    method: str
    stream: str
    task_names: list[str]
    test_ll: np.ndarray
    uncertainty: np.ndarray
    samples: np.ndarray
    classifier_accuracy: float | None
    wall_time_s: float
    settings: dict = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        """After the last task: the mean over all tasks of the test log-likelihood and of the
        classifier uncertainty."""
        return {
            "test_ll": float(np.mean(self.test_ll[-1])),
            "uncertainty": float(np.mean(self.uncertainty[-1])),
        }

    def to_json(self) -> dict:
        def matrix(m: np.ndarray) -> list:
            return [[None if np.isnan(v) else float(v) for v in row] for row in m]

        return {
            "method": self.method,
            "stream": self.stream,
            "task_names": self.task_names,
            "test_ll": matrix(self.test_ll),
            "uncertainty": matrix(self.uncertainty),
            "classifier_accuracy": self.classifier_accuracy,
            "wall_time_s": self.wall_time_s,
            "summary": self.summary(),
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, data: dict, samples: np.ndarray | None = None) -> GenerativeResult:
        def matrix(m: list) -> np.ndarray:
            return np.array([[np.nan if v is None else v for v in row] for row in m], dtype=float)

        k = len(data["task_names"])
        return cls(
            method=data["method"],
            stream=data["stream"],
            task_names=list(data["task_names"]),
            test_ll=matrix(data["test_ll"]),
            uncertainty=matrix(data["uncertainty"]),
            samples=np.full((k, k, 0, 0), np.nan) if samples is None else samples,
            classifier_accuracy=data["classifier_accuracy"],
            wall_time_s=float(data["wall_time_s"]),
            settings=dict(data.get("settings", {})),
        )


class GenerativeMetrics(Callback):
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

    def on_task_end(self, learner: ContinualLearner, task_id: int, history: list[float]) -> None:
        i = self._position[task_id]
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

    def describe(self, i: int) -> str:
        text = f"mean test-LL {np.mean(self.test_ll[i, : i + 1]):.1f}"
        if self.classifier is not None:
            text += f", classifier uncertainty {np.mean(self.uncertainty[i, : i + 1]):.2f}"
        return text


def run_generative_stream(
    learner: ContinualLearner,
    stream: TaskStream,
    evaluation: GenerativeEvaluation,
    classifier: torch.nn.Module | None = None,
    classifier_accuracy: float | None = None,
    method: str | None = None,
    settings: dict | None = None,
    verbose: bool = True,
) -> GenerativeResult:
    """Observe each task's images in turn and score every head seen so far after each
    (:class:`GenerativeMetrics`, a callback of each ``observe``)."""
    start = time.perf_counter()
    metrics = GenerativeMetrics(stream, evaluation, classifier)
    label = method or type(learner).__name__
    for i, task in enumerate(stream):
        learner.observe(task.x_train, task_id=task.id, callbacks=[metrics])
        if verbose:
            print(
                f"  {label}: after {task.name} ({i + 1}/{len(stream)}), {metrics.describe(i)} "
                f"[{time.perf_counter() - start:.0f} s]",
                flush=True,
            )
    return GenerativeResult(
        method=label,
        stream=stream.name,
        task_names=[t.name for t in stream],
        test_ll=metrics.test_ll,
        uncertainty=metrics.uncertainty,
        samples=metrics.samples,
        classifier_accuracy=classifier_accuracy,
        wall_time_s=time.perf_counter() - start,
        settings=dict(settings or {}),
    )
