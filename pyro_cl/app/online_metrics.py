"""Online streams through the one runner, measured as Kurle et al. 2020 (section 6) do.

After every step ``t_k`` the learner's predictive (``q̃_{t_k}``) is scored by

* the average **test log marginal likelihood** ``1/N Σ_n log E_q̃[p(d_n | w)]`` on the held-out
  set, a log-mean-exp over posterior samples; and, before step ``t_{k+1}`` is observed,
* the average **one-step-ahead log marginal likelihood** on ``D_{t_{k+1}}`` (and accuracy, for
  classification).

:meth:`~pyro_cl.app.result.RunResult.summary` averages them over the last 10% of the steps
(table 1); drift streams (no test set) are summarised over the last 50% (section 6.2).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pyro_cl.app.continual_run import Metric, Step, run_continual
from pyro_cl.app.result import RunResult, last_fraction_mean
from pyro_cl.data.streams import OnlineStream
from pyro_cl.infer.loggers import Logger
from pyro_cl.learner.learner import ContinualLearner

__all__ = ["OnlineMetrics", "last_fraction_mean", "online_steps", "run_online"]


def online_steps(stream: OnlineStream) -> Iterator[Step]:
    """One step per time step of ``stream``: its data at its time stamp."""
    for step in stream.steps:
        yield Step(step.data, str(step.index), step.index, time=step.time, source=step)


class OnlineMetrics(Metric):
    """Per step (as ``series``): ``one_step_ahead`` (and ``one_step_ahead_accuracy``) before
    each step after the first, ``test_lml`` after each when the stream has a test set, the
    seconds of each ``observe`` and of its memory update, the memory's size and clipped
    precisions; once (as ``details``): the memory's budget and the transition's spec.

    :param num_samples: posterior samples for the marginal likelihoods (the learner's
        ``num_predictive_samples`` by default; the paper's drift experiments use 500).
    """

    def __init__(self, stream: OnlineStream, num_samples: int | None = None) -> None:
        self.stream = stream
        self.num_samples = num_samples
        self.series: dict[str, list] = {
            name: []
            for name in (
                "times",
                "test_lml",
                "one_step_ahead",
                "one_step_ahead_accuracy",
                "memory_sizes",
                "step_seconds",
                "memory_seconds",
                "clipped",
            )
        }
        self.details: dict = {}

    def before_step(self, learner: ContinualLearner, step: Step) -> None:
        if step.index > 0:
            ahead = learner.evaluate(step.data, num_samples=self.num_samples)
            self.series["one_step_ahead"].append(ahead["log_likelihood"])
            if "accuracy" in ahead:
                self.series["one_step_ahead_accuracy"].append(ahead["accuracy"])

    def after_step(self, learner: ContinualLearner, step: Step, seconds: float) -> None:
        memory = learner.memory
        statistics = getattr(memory, "statistics", {})
        points = learner.memory_points
        self.series["step_seconds"].append(seconds)
        self.series["memory_seconds"].append(float(statistics.get("seconds", 0.0)))
        self.series["clipped"].append(int(statistics.get("clipped", 0)))
        self.series["times"].append(step.time)
        self.series["memory_sizes"].append(0 if points is None else len(points))
        if self.stream.test is not None:
            lml = learner.evaluate(self.stream.test, num_samples=self.num_samples)
            self.series["test_lml"].append(lml["log_likelihood"])
        self.details = {
            "memory_size": 0 if memory is None else memory.size,
            "transition": learner.transition.spec(),
        }

    def describe(self, step: Step) -> str:
        if self.series["test_lml"]:
            return f"test LML {self.series['test_lml'][-1]:.3f}"
        if self.series["one_step_ahead"]:
            return f"one-step-ahead LML {self.series['one_step_ahead'][-1]:.3f}"
        return ""

    def scalars(self, step: Step) -> dict[str, float]:
        names = ("test_lml", "one_step_ahead", "one_step_ahead_accuracy", "memory_sizes")
        return {name: float(self.series[name][-1]) for name in names if self.series[name]}

    def record(self, result: RunResult) -> None:
        result.series.update(self.series)
        result.details.update(self.details)


def run_online(
    learner: ContinualLearner,
    stream: OnlineStream,
    method: str = "",
    seed: int = 0,
    num_samples: int | None = None,
    progress: bool = True,
    metrics: Sequence[Metric] = (),
    settings: dict | None = None,
    loggers: Sequence[Logger] = (),
) -> RunResult:
    """:func:`~pyro_cl.app.continual_run.run_continual` over the time steps of ``stream`` with
    :class:`OnlineMetrics` (and ``metrics``, called after it: e.g. figure 3's snapshots).

    :param num_samples: posterior samples for the marginal likelihoods (see
        :class:`OnlineMetrics`).
    :param progress: a progress bar over the steps (only on a terminal).
    """
    return run_continual(
        learner,
        online_steps(stream),
        [OnlineMetrics(stream, num_samples), *metrics],
        method=method,
        stream=stream.name,
        seed=seed,
        settings=settings,
        progress=progress,
        loggers=loggers,
    )
