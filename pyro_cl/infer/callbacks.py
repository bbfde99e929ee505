"""Callbacks: code that runs at fixed points of a learner's work without changing it.

A learner calls its callbacks, in order, at

* :meth:`Callback.on_task_start` / :meth:`Callback.on_task_end` — around each ``observe``
  (``on_task_end`` only after the task was committed);
* :meth:`Callback.on_fit_start` / :meth:`Callback.on_fit_end` — around each fit (a task's
  propagation, a coreset refit, a maximum-likelihood initialisation);
* :meth:`Callback.on_step` — after every optimiser step, with the step's loss and the tensors
  that were optimised (their ``.grad`` still holds the step's gradient where the fitter uses
  autograd);
* :meth:`Callback.on_epoch_end` — with the epoch's mean loss (one host synchronisation).

Built-in: :class:`ProgressBar` (tqdm). The app's metrics (:mod:`pyro_cl.app.continual_run`)
are callbacks too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from tqdm import tqdm  # plain bars: tqdm.auto warns in notebooks without ipywidgets

from pyro_cl.infer.data_parallel import is_writer
from pyro_cl.spec import Registrable

__all__ = ["Callback", "CallbackList", "ProgressBar", "StepInfo"]


@dataclass(frozen=True)
class StepInfo:
    """One optimiser step.

    :ivar step: the step's index within the fit (from 0).
    :ivar loss: the minibatch's loss, detached (a tensor: reading it synchronises the device).
    :ivar parameters: ``{name: tensor}`` that the step changed, e.g. the guide's means by site.
    """

    step: int
    loss: torch.Tensor
    parameters: Mapping[str, torch.Tensor]


class Callback(Registrable, kind="callback"):
    """Base class: override the hooks you need; each does nothing by default."""

    def on_task_start(self, learner, task_id: int) -> None:
        """Before ``observe`` fits task ``task_id``."""

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        """After task ``task_id`` was learnt and committed (``history``: its epoch losses)."""

    def on_fit_start(self, description: str, epochs: int) -> None:
        """Before a fit of ``epochs`` epochs."""

    def on_step(self, info: StepInfo) -> None:
        """After every optimiser step."""

    def on_epoch_end(self, epoch: int, loss: float) -> None:
        """After every epoch, with its mean loss."""

    def on_fit_end(self) -> None:
        """After a fit, also when it failed."""


class CallbackList(Callback):
    """Several callbacks called in order."""

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be Callback instances, got {callback!r}")

    def __iter__(self):
        return iter(self.callbacks)

    def on_task_start(self, learner, task_id: int) -> None:
        for callback in self.callbacks:
            callback.on_task_start(learner, task_id)

    def on_task_end(self, learner, task_id: int, history: list[float]) -> None:
        for callback in self.callbacks:
            callback.on_task_end(learner, task_id, history)

    def on_fit_start(self, description: str, epochs: int) -> None:
        for callback in self.callbacks:
            callback.on_fit_start(description, epochs)

    def on_step(self, info: StepInfo) -> None:
        for callback in self.callbacks:
            callback.on_step(info)

    def on_epoch_end(self, epoch: int, loss: float) -> None:
        for callback in self.callbacks:
            callback.on_epoch_end(epoch, loss)

    def on_fit_end(self) -> None:
        for callback in self.callbacks:
            callback.on_fit_end()


class ProgressBar(Callback):
    """A tqdm bar per fit, showing the epoch's loss (the learner adds it when
    ``progress=True``). It shows only when standard error is a terminal, so logs and notebooks
    stay clean; ``force=True`` shows it anyway (pass ``callbacks=[ProgressBar(force=True)]``).
    """

    name = "progress_bar"

    def __init__(self, force: bool = False) -> None:
        self.force = bool(force)
        self._bar = None

    def on_fit_start(self, description: str, epochs: int) -> None:
        # one bar per run: in a data-parallel fit only rank 0 shows it; tqdm's disable=None
        # hides it where standard error is not a terminal
        disable = True if not is_writer() else (False if self.force else None)
        self._bar = tqdm(total=epochs, desc=description, leave=False, disable=disable)

    def on_epoch_end(self, epoch: int, loss: float) -> None:
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4f}")

    def on_fit_end(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
