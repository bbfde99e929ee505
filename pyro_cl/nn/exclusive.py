"""Running a model exclusively: one thread at a time, in a chosen train/eval mode.

Pyro's effect-handler stack (``pyro.poutine.runtime._PYRO_STACK``), its parameter store and
torch's global random number generator are shared by every thread of a process, and a module's
``training`` flag is shared by everyone holding the module. Two threads running models at once
(even two learners) would push handlers onto one stack and flip each other's modes, giving
wrong results or shape errors. :func:`exclusive_mode` serialises those runs with one re-entrant
lock per process and sets the mode for the duration, restoring it afterwards, so a learner's
``observe``, ``predict`` and ``evaluate`` may be called from several threads: they then run one
after another.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["MODEL_LOCK", "exclusive_mode"]

#: Held while any pyro_cl model runs (re-entrant: a run may start nested runs).
MODEL_LOCK = threading.RLock()


@contextlib.contextmanager
def exclusive_mode(module: torch.nn.Module, training: bool) -> Iterator[None]:
    """Hold :data:`MODEL_LOCK` and keep ``module`` in training (``True``) or evaluation mode
    inside the block; its previous mode is restored on exit."""
    with MODEL_LOCK:
        previous = module.training
        module.train(training)
        try:
            yield
        finally:
            module.train(previous)
