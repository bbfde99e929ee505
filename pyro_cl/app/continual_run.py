"""The one runner: a learner observes a sequence of steps, and metrics measure it.

Every experiment of the app is this loop with different steps and metrics::

    for step in steps:                         # a task, a time step, a one-class task
        metric.before_step(learner, step)      # e.g. the one-step-ahead LML (Kurle et al.)
        learner.observe(step.data, step.task_id, step.time, callbacks=metrics)
                                               # metric.on_task_end: e.g. the accuracy matrix row
        metric.after_step(learner, step, s)    # e.g. the test LML, the memory's size
    metric.record(result)                      # each metric writes into the one RunResult

:func:`~pyro_cl.app.task_metrics.task_steps`, :func:`~pyro_cl.app.online_metrics.online_steps`
and :func:`~pyro_cl.app.generative_metrics.generative_steps` turn the three kinds of stream into
steps; the metrics next to them measure what the papers report. A user adds a measurement by
writing one :class:`Metric`.
"""

from __future__ import annotations

import re
import time as clock
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm  # plain bars: tqdm.auto warns in notebooks without ipywidgets

from pyro_cl.app.result import RunResult
from pyro_cl.app.run_checkpoint import RunCheckpoint
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.loggers import CSVLogger, Logger, TensorBoardLogger
from pyro_cl.learner.learner import ContinualLearner

__all__ = ["Metric", "Step", "file_slug", "run_continual", "run_loggers"]


@dataclass(frozen=True)
class Step:
    """One ``observe``: its data, task (head) and time, a name for tables, its position in the
    stream, and the stream's own object for it (a task, a time step) for metrics that need more.
    ``ends_task`` is ``False`` for a task-free stream's batches before the last of their task: the
    learner is not told where a task ends (each batch is a step of its own), the metrics measure
    there.
    """

    data: Any
    name: str
    index: int
    task_id: int | None = None
    time: float | None = None
    source: Any = None
    ends_task: bool = True


class Metric(Callback):
    """A measurement of a run. It is also a learner callback of every ``observe`` (e.g.
    ``on_task_end`` evaluates right after the step is committed); the runner calls its other
    hooks around each step. Override what you need; each does nothing by default. A metric that
    runs with a checkpoint also says what it measured so far
    (:class:`~pyro_cl.app.run_checkpoint.Resumable`: ``measured``/``load_measured``); one
    that does not is refused before the run starts, never dropped silently."""

    def before_step(self, learner: ContinualLearner, step: Step) -> None:
        """Before ``step`` is observed (the previous posterior is current)."""

    def after_step(self, learner: ContinualLearner, step: Step, seconds: float) -> None:
        """After ``step`` was observed, which took ``seconds``."""

    def describe(self, step: Step) -> str:
        """A few words on what was measured at ``step`` for the progress line ("" for none)."""
        return ""

    def scalars(self, step: Step) -> dict[str, float]:
        """What was measured at ``step`` as named numbers, for the run's loggers."""
        return {}

    def record(self, result: RunResult) -> None:
        """Write what was measured into ``result`` once the run is over."""


def file_slug(label: str) -> str:
    """``label`` as a file name: ASCII letters, digits and ``-``, other runs of characters as
    ``_`` (``"ewc λ=10"`` → ``"ewc_10"``)."""
    return re.sub(r"[^A-Za-z0-9-]+", "_", label).strip("_")


def run_loggers(
    log_dir: str | Path | None, run_name: str, tensorboard: bool = False
) -> list[Logger]:
    """The loggers of one run: ``<log_dir>/<run_name>.csv`` (and, with ``tensorboard``, the
    event files in ``<log_dir>/<run_name>/``); none without a ``log_dir``."""
    if log_dir is None:
        return []
    slug = file_slug(run_name)
    loggers: list[Logger] = [CSVLogger(Path(log_dir) / f"{slug}.csv")]
    if tensorboard:
        loggers.append(TensorBoardLogger(Path(log_dir) / slug))
    return loggers


def run_continual(
    learner: ContinualLearner,
    steps: Iterable[Step],
    metrics: Sequence[Metric] = (),
    method: str | None = None,
    stream: str = "stream",
    seed: int | None = None,
    settings: dict | None = None,
    verbose: bool = False,
    progress: bool = False,
    loggers: Sequence[Logger] = (),
    checkpoint: str | Path | None = None,
) -> RunResult:
    """Observe every step with ``learner`` and measure it with ``metrics`` (module docstring).

    :param method: the result's method name (default: the learner's class name).
    :param verbose: print one line per step (the metrics' descriptions, elapsed time), so long
        runs show progress in logs too.
    :param progress: a progress bar over the steps (shown only on a terminal).
    :param loggers: :class:`~pyro_cl.infer.loggers.Logger` callbacks of every ``observe`` (losses,
        timings) that also get every metric's :meth:`Metric.scalars` after each step.
    :param checkpoint: a folder where the learner and the run so far are saved after every step
        (:class:`RunCheckpoint`); a run started again with the same folder, and a learner and
        metrics built the same way, resumes after the last saved step and ends where the
        uninterrupted run would have. The folder is emptied when the run ends.
    """
    steps = list(steps)
    label = method or type(learner).__name__
    names = [step.name for step in steps]
    saved = None if checkpoint is None else RunCheckpoint(checkpoint, names)
    done, earlier = saved.resume(learner, metrics) if saved else (0, {})
    start = clock.perf_counter() - earlier.get("elapsed", 0.0)
    bar = tqdm(steps[done:], desc=f"{stream} {label}", disable=None if progress else True)
    watchers = [*metrics, *loggers]  # the learner's callbacks of every observe
    # seconds per step in observe and in the metrics
    training, evaluation = earlier.get("training", []), earlier.get("evaluation", [])
    for finished, step in enumerate(bar, start=done + 1):  # steps done once this one is
        began = clock.perf_counter()
        for metric in metrics:
            metric.before_step(learner, step)
        observing = clock.perf_counter()
        learner.observe(step.data, task_id=step.task_id, time=step.time, callbacks=watchers)
        seconds = clock.perf_counter() - observing
        for metric in metrics:
            metric.after_step(learner, step, seconds)
        training.append(seconds)
        evaluation.append(clock.perf_counter() - began - seconds)
        if loggers:
            scalars = {"step_seconds": seconds}
            for metric in metrics:
                scalars.update(metric.scalars(step))
            for logger in loggers:
                logger.log_metrics(scalars)
        described = ", ".join(filter(None, (metric.describe(step) for metric in metrics)))
        if described:
            bar.set_postfix_str(described, refresh=False)
        if verbose:
            print(
                f"  {label}: after {step.name} ({step.index + 1}/{len(steps)}), {described} "
                f"[{clock.perf_counter() - start:.0f} s]",
                flush=True,
            )
        if saved is not None:
            elapsed = clock.perf_counter() - start
            times = {"elapsed": elapsed, "training": training, "evaluation": evaluation}
            saved.save(learner, metrics, finished, times)
    if saved is not None:
        saved.clear()
    result = RunResult(
        method=label,
        stream=stream,
        step_names=names,
        seed=seed,
        wall_time_s=clock.perf_counter() - start,
        settings=dict(settings or {}),
    )
    result.series["training_seconds"] = training
    result.series["evaluation_seconds"] = evaluation
    if earlier:  # the run's seconds before its checkpoint, in an earlier process
        result.details["seconds_before_resume"] = earlier["elapsed"]
    for metric in metrics:
        metric.record(result)
    return result
