"""The one-step-ahead protocol on a drifting stream, for any learner: ours or another library's.

At every time step after the first, the learner predicts every row of the step *before any of its
labels is read*; then the labels are read, the predictions scored, and the learner learns the
step (a pyro_cl learner as one step, an online learner from river one row at a time, in order).
The first step is learnt without being scored. A learner is anything with

* ``predict_proba(x: ndarray (N, D), time: float) -> ndarray (N, C)`` (``time``: the step's) on
  a classification stream, or ``predict_normals(x, time) -> (means, scales)``, each an ndarray
  ``(S, N)``, on a regression stream: row ``n``'s predictive the equal-weight mixture of the
  ``S`` normals ``N(means[s, n], scales[s, n]²)`` (a Bayesian net's ``S`` draws; ``S = 1`` for
  a point prediction with a noise level), and
* ``learn(x: ndarray (N, D), y: ndarray (N,), time: float) -> None``;

:class:`OnStream` makes one of a :class:`~pyro_cl.learner.ContinualLearner` or a
:class:`~pyro_cl.learner.bank.LearnerBank`, :class:`RiverOnStream` of a river classifier (any
object with river's ``predict_proba_one`` / ``learn_one``) and :class:`RiverRegressorOnStream`
of a river regressor (``predict_one`` / ``learn_one``).

Scores are per step: accuracy (classification) or the root mean squared error of the
predictive mean (regression), the mean log-likelihood of the labels (class probabilities
floored at ``floor``, so a learner that gives a seen label probability 0 is charged
``log floor``, not ``-inf``), and the seconds spent predicting and learning; :func:`summary`
averages them over the last fraction of the steps and, on a classification stream, adds the
expected calibration error of those steps' predictions.
"""

from __future__ import annotations

import time as clock
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from scipy.special import logsumexp

from pyro_cl.data.streams import OnlineStream
from pyro_cl.metrics import expected_calibration_error

__all__ = [
    "FLOOR",
    "OnStream",
    "RegressionStepLearner",
    "RiverOnStream",
    "RiverRegressorOnStream",
    "StepLearner",
    "StreamScores",
    "one_step_ahead",
    "summary",
]


#: The smallest probability a label is charged at: ``log FLOOR`` for a probability of 0.
FLOOR = 1e-6


class StepLearner(Protocol):
    def predict_proba(self, x: np.ndarray, time: float) -> np.ndarray: ...

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None: ...


class RegressionStepLearner(Protocol):
    def predict_normals(self, x: np.ndarray, time: float) -> tuple[np.ndarray, np.ndarray]: ...

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None: ...


class OnStream:
    """A pyro_cl learner (or bank) under the protocol: one ``observe`` per time step.

    :param at_time: predict a step with the posterior carried to the step's time by the
        learner's transition (its prior for that step); ``False`` predicts with the last
        posterior, as Kurle et al. (2020, section 6) score their one-step-ahead LML.
    """

    def __init__(self, learner, at_time: bool = True) -> None:
        self.learner = learner
        self.at_time = at_time

    def prediction_time(self, time: float) -> float | None:
        """The time a step at ``time`` is predicted at: ``time``, or ``None`` (the last
        posterior) when ``at_time`` is false."""
        return time if self.at_time else None

    def predict_proba(self, x: np.ndarray, time: float) -> np.ndarray:
        inputs = torch.as_tensor(x, dtype=torch.float32)
        when = self.prediction_time(time)
        return self.learner.predict(inputs, time=when).detach().cpu().double().numpy()

    def predict_normals(self, x: np.ndarray, time: float) -> tuple[np.ndarray, np.ndarray]:
        """The means and scales ``(S, N)`` of the likelihood's normal at each predictive draw."""
        inputs = torch.as_tensor(x, dtype=torch.float32)
        samples = self.learner.predictive_samples(inputs, time=self.prediction_time(time))
        normal = self.learner.model.likelihood.distribution(samples.detach())
        means, scales = torch.broadcast_tensors(normal.loc, normal.scale)
        return means.cpu().double().numpy(), scales.cpu().double().numpy()

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None:
        kind = torch.float32 if np.issubdtype(np.asarray(y).dtype, np.floating) else torch.long
        data = (torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=kind))
        self.learner.observe(data, time=time)


class RiverOnStream:
    """A river classifier under the protocol: rows as ``{column index: value}`` dicts, learnt one
    at a time in the stream's order; a class it has not seen yet gets probability 0 (before the
    floor), and a model with no opinion yet predicts uniformly.

    :param num_classes: the stream's classes ``0 .. C-1``.
    """

    def __init__(self, model, num_classes: int) -> None:
        self.model = model
        self.num_classes = num_classes

    def predict_proba(self, x: np.ndarray, time: float) -> np.ndarray:
        out = np.zeros((len(x), self.num_classes))
        for n, row in enumerate(x):
            opinion = self.model.predict_proba_one(_row(row))
            for label, probability in opinion.items():
                out[n, int(label)] = probability
        totals = out.sum(1, keepdims=True)
        return np.where(totals > 0, out / np.where(totals > 0, totals, 1.0), 1 / self.num_classes)

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None:
        for row, label in zip(x, y, strict=True):
            self.model.learn_one(_row(row), int(label))


class RiverRegressorOnStream:
    """A river regressor under the protocol, rows learnt one at a time in order. Its predictive
    is a normal around its prediction whose variance is the mean squared error of its
    one-step-ahead predictions so far (each row predicted before it is learnt; 1 before any),
    so it is charged a log-likelihood for the errors it has made."""

    def __init__(self, model) -> None:
        self.model = model
        self.squared_errors, self.rows = 0.0, 0

    def predict_normals(self, x: np.ndarray, time: float) -> tuple[np.ndarray, np.ndarray]:
        means = np.array([[self.model.predict_one(_row(row)) for row in x]], dtype=np.float64)
        variance = self.squared_errors / self.rows if self.rows else 1.0
        return means, np.full_like(means, np.sqrt(max(variance, 1e-12)))

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None:
        for row, target in zip(x, y, strict=True):
            features = _row(row)
            self.squared_errors += (float(target) - self.model.predict_one(features)) ** 2
            self.rows += 1
            self.model.learn_one(features, float(target))


def _row(values: np.ndarray) -> dict[int, float]:
    return {i: float(v) for i, v in enumerate(values)}


@dataclass
class StreamScores:
    """Per scored step: ``accuracy`` (classification) or ``rmse`` (regression),
    ``log_likelihood`` (mean over its rows), ``predict_seconds`` and ``learn_seconds`` (every
    step, the first included), ``times``; and, on a classification stream, every scored row's
    predicted probabilities and label, for the calibration error."""

    accuracy: list[float] = field(default_factory=list)
    rmse: list[float] = field(default_factory=list)
    log_likelihood: list[float] = field(default_factory=list)
    predict_seconds: list[float] = field(default_factory=list)
    learn_seconds: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    probabilities: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)

    def score(self, probabilities: np.ndarray, labels: np.ndarray, floor: float = FLOOR) -> None:
        """Record one step's predicted probabilities ``(N, C)`` of its ``labels``: accuracy and
        the mean log-likelihood, each probability floored at ``floor``."""
        seen = probabilities[np.arange(len(labels)), labels]
        self.accuracy.append(float((probabilities.argmax(1) == labels).mean()))
        self.log_likelihood.append(float(np.log(np.maximum(seen, floor)).mean()))
        self.probabilities.append(probabilities)
        self.labels.append(labels)

    def score_normals(self, means: np.ndarray, scales: np.ndarray, targets: np.ndarray) -> None:
        """Record one step's predictive mixtures (means and scales ``(S, N)``, the ``S`` normals
        equally weighted) of its real ``targets``: the root mean squared error of the mixture's
        mean and the mean of ``log (1/S) Σ_s N(y_n; means[s, n], scales[s, n]²)``."""
        z = (targets - means) / scales
        log_density = -0.5 * z**2 - np.log(scales) - 0.5 * np.log(2 * np.pi)
        per_row = logsumexp(log_density, axis=0) - np.log(len(means))
        self.rmse.append(float(np.sqrt(np.mean((means.mean(0) - targets) ** 2))))
        self.log_likelihood.append(float(per_row.mean()))


def one_step_ahead(
    learner: StepLearner, stream: OnlineStream, floor: float = FLOOR, progress=None
) -> StreamScores:
    """Run ``learner`` over ``stream`` under the protocol (see the module docstring).

    :param progress: called with ``(step index, scores so far)`` after every step (e.g. a
        progress bar's update).
    """
    scores = StreamScores()
    for step in stream.steps:
        x = step.x.detach().cpu().numpy()
        if step.index > 0:
            start = clock.perf_counter()
            if stream.regression:
                means, scales = learner.predict_normals(x, step.time)
                predicted = (np.asarray(means, np.float64), np.asarray(scales, np.float64))
            else:
                predicted = np.asarray(learner.predict_proba(x, step.time), dtype=np.float64)
            scores.predict_seconds.append(clock.perf_counter() - start)
            labels = _labels(step.y, stream.regression)  # read only now: the step is predicted
            rows = predicted[0].shape[-1] if stream.regression else predicted.shape[0]
            if rows != len(labels):
                raise ValueError(f"the learner predicted {rows} rows of a {len(labels)}-row step")
            if stream.regression:
                scores.score_normals(*predicted, labels)
            else:
                scores.score(predicted, labels, floor)
            scores.times.append(step.time)
        start = clock.perf_counter()
        learner.learn(x, _labels(step.y, stream.regression), step.time)
        scores.learn_seconds.append(clock.perf_counter() - start)
        if progress is not None:
            progress(step.index, scores)
    return scores


def _labels(y, regression: bool = False) -> np.ndarray:
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    return np.asarray(y, dtype=np.float64 if regression else np.int64)


def summary(scores: StreamScores, fraction: float = 0.5) -> dict[str, float]:
    """Accuracy (or RMSE), log-likelihood and, on a classification stream, the expected
    calibration error over the last ``fraction`` of the scored steps, and the seconds per step
    (predicting and learning) over all of them."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    scored = len(scores.log_likelihood)
    if not scored:
        raise ValueError("no step was scored: the stream has one step only")
    first = scored - max(1, int(round(fraction * scored)))
    log_likelihood = float(np.mean(scores.log_likelihood[first:]))
    if scores.rmse:
        measured = {"rmse": float(np.mean(scores.rmse[first:])), "log_likelihood": log_likelihood}
    else:
        probabilities = torch.as_tensor(np.concatenate(scores.probabilities[first:]))
        labels = torch.as_tensor(np.concatenate(scores.labels[first:]))
        measured = {
            "accuracy": float(np.mean(scores.accuracy[first:])),
            "log_likelihood": log_likelihood,
            "calibration_error": expected_calibration_error(probabilities, labels),
        }
    seconds = np.add(scores.predict_seconds, scores.learn_seconds[1:]).mean()
    return {**measured, "seconds_per_step": float(seconds), "steps": scored - first}
