"""Loggers: callbacks that write a learner's losses, timings and metrics where tools can read
them — a CSV file (always available) or TensorBoard (the ``tensorboard`` extra).

Every logger records, as scalars with a global step that keeps counting across tasks:

* ``loss`` — each epoch's mean loss of a step's fit (the objective of its fitter, e.g. the
  negative ELBO), or each optimiser step's with ``every_step=True`` (which reads the loss every
  step: one host synchronisation per step on a GPU); the other fits, whose losses are of other
  objectives and scales, get series of their own (:data:`OTHER_FITS`: ``loss/ml_initialisation``,
  ``loss/coreset_refit``, ``loss/unsupervised_step``; the CSV's ``fit`` column names every fit);
* ``seconds/fit`` — the wall time of every fit, and ``seconds/task`` of every ``observe``;
* whatever :meth:`Logger.log_metrics` is given (the app's runner passes each step's accuracy
  or log-likelihood; a user may pass ``learner.evaluate(...)``'s dictionary).

Pass a logger to a learner (``VCL(net, callbacks=[CSVLogger("run.csv")])``: it is saved with the
learner and keeps appending after a load) or to one ``observe(..., callbacks=[...])``.
"""

from __future__ import annotations

import csv
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from pyro_cl.infer.callbacks import Callback, StepInfo
from pyro_cl.infer.data_parallel import is_writer

__all__ = ["CSVLogger", "Logger", "OTHER_FITS", "TensorBoardLogger"]

#: Fits that are not a step's own fit, by how their description starts, and the loss series of
#: each: their losses are of other objectives (a maximum-likelihood start's mean negative
#: log-likelihood beside an ELBO) and would make one series unreadable.
OTHER_FITS = {
    "ML initialisation": "loss/ml_initialisation",
    "coreset refit": "loss/coreset_refit",
    "unsupervised step": "loss/unsupervised_step",
}


class Logger(Callback, ABC):
    """Base class: turns the learner's hooks into named scalars and hands each to :meth:`write`.

    :param every_step: log each optimiser step's loss instead of each epoch's mean.
    """

    def __init__(self, every_step: bool = False) -> None:
        self.every_step = bool(every_step)
        self._step = 0  # the global step of the scalars: epochs (or optimiser steps) so far
        self._task: int | None = None
        self._fit = ""
        self._series = "loss"
        self._fit_start = self._task_start = 0.0

    @abstractmethod
    def write(self, name: str, value: float, step: int, task_id: int | None, fit: str) -> None:
        """Record one scalar; ``fit`` describes the running fit ("" outside one)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record ``metrics`` (e.g. ``learner.evaluate(...)``'s dictionary) at ``step`` (default:
        the current global step); values that are not numbers are skipped."""
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._emit(f"metric/{name}", float(value), step)

    def _emit(self, name: str, value: float, step: int | None = None) -> None:
        if is_writer():  # a data-parallel run logs once, from rank 0
            self.write(name, value, self._step if step is None else step, self._task, self._fit)

    def on_task_start(self, learner, task_id: int) -> None:
        self._task, self._task_start = task_id, time.perf_counter()

    def on_fit_start(self, description: str, epochs: int) -> None:
        self._fit, self._fit_start = description, time.perf_counter()
        starts = [s for start, s in OTHER_FITS.items() if description.startswith(start)]
        self._series = starts[0] if starts else "loss"

    def on_step(self, info: StepInfo) -> None:
        if self.every_step:
            self._step += 1
            self._emit(self._series, float(info.loss))

    def on_epoch_end(self, epoch: int, loss: float) -> None:
        if not self.every_step:
            self._step += 1
            self._emit(self._series, loss)

    def on_fit_end(self) -> None:
        self._emit("seconds/fit", time.perf_counter() - self._fit_start)
        self._fit = ""

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        self._emit("seconds/task", time.perf_counter() - self._task_start)

    def state_dict(self) -> dict:
        """The global step, so a saved learner's logger keeps counting after a load (and a
        failed step, rolled back, leaves it where it was)."""
        return {"step": self._step}

    def load_state_dict(self, state: dict) -> None:
        self._step = int(state.get("step", 0))


class CSVLogger(Logger):
    """Appends one row per scalar to the CSV file ``path``: ``run, wall_time, task, fit, step,
    name, value`` (the header when the file is new; ``run`` tells apart runs logged into one
    file, and stays with a saved learner). The file is opened before every task, so a path that
    cannot be written fails before the step (which is then not taken), and flushed at every
    task's end, so a crash loses at most the running task's rows.

    :param path: the CSV file (its folder is created).
    :param every_step: log each optimiser step's loss instead of each epoch's mean.
    """

    name = "csv_logger"
    COLUMNS = ("run", "wall_time", "task", "fit", "step", "name", "value")

    def __init__(self, path: str | os.PathLike, every_step: bool = False) -> None:
        super().__init__(every_step)
        self.path = str(path)
        self.run = uuid.uuid4().hex[:8]
        self._rows: list[tuple] = []

    def write(self, name: str, value: float, step: int, task_id: int | None, fit: str) -> None:
        task = "" if task_id is None else task_id
        self._rows.append((self.run, f"{time.time():.3f}", task, fit, step, name, value))

    def on_task_start(self, learner, task_id: int) -> None:
        self._appended([])  # a path that cannot be written fails here, before the step
        super().on_task_start(learner, task_id)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "run": self.run}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.run = str(state.get("run", self.run))
        self._rows.clear()  # a rolled-back step's rows are not the run's

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        super().on_task_end(learner, task_id, history)
        self.flush()

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics, step)
        self.flush()

    def flush(self) -> None:
        """Append the rows written so far to the file."""
        if self._rows:
            self._appended(self._rows)
            self._rows.clear()

    def _appended(self, rows: list[tuple]) -> None:
        """Append ``rows`` (the header first in a new file).

        :raises ValueError: naming the path, when it cannot be written.
        """
        path = Path(self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            new = not path.exists() or path.stat().st_size == 0
            with path.open("a", newline="", encoding="utf-8") as file:
                writer = csv.writer(file)
                if new:
                    writer.writerow(self.COLUMNS)
                writer.writerows(rows)
        except OSError as error:
            raise ValueError(
                f"the CSV log {self.path} cannot be written: {error.strerror or error}"
            ) from error


class TensorBoardLogger(Logger):
    """Writes every scalar to a TensorBoard event file in ``log_dir`` (``tensorboard --logdir``);
    needs the ``tensorboard`` package (``pip install "pyro_cl[tensorboard]"``).

    :param log_dir: the run's folder of event files.
    :param every_step: log each optimiser step's loss instead of each epoch's mean.
    :raises ImportError: naming the extra to install when tensorboard is missing.
    """

    name = "tensorboard_logger"

    def __init__(self, log_dir: str | os.PathLike, every_step: bool = False) -> None:
        super().__init__(every_step)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # torch's module imports the tensorboard package
            raise ImportError(
                'TensorBoardLogger needs tensorboard: pip install "pyro_cl[tensorboard]"'
            ) from error
        self.log_dir = str(log_dir)
        try:
            self._writer = SummaryWriter(self.log_dir)
        except OSError as error:
            raise ValueError(
                f"the TensorBoard folder {self.log_dir} cannot be written: "
                f"{error.strerror or error}"
            ) from error

    def write(self, name: str, value: float, step: int, task_id: int | None, fit: str) -> None:
        self._writer.add_scalar(name, value, step)

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        super().on_task_end(learner, task_id, history)
        self._writer.flush()
