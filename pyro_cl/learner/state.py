"""A learner's state as one value, and a step as a transaction over it.

Everything a step may change lives in a few stores: the guide's parameters, the net's priors
(the running posterior) and buffers (e.g. H-IBP's per-task concentrations), every part's state
(fitter, transition, memory, callbacks), the bookkeeping (trained sites, tasks, times), the
memory's points, the prediction posteriors and the random streams (training's and prediction's).
:meth:`LearnerState.of` copies all of them out as one value and :meth:`LearnerState.restore_into`
puts it back, so a step that fails leaves the learner exactly as it was (:func:`transaction`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.random_stream import RandomStream
from pyro_cl.model import SupervisedModel
from pyro_cl.points import Points
from pyro_cl.posterior import Posterior, detach_distribution, install_prior, read_priors
from pyro_cl.spec import Registrable

__all__ = ["LearnerState", "LearnerStores", "transaction"]


class LearnerStores(Protocol):
    """What :class:`pyro_cl.learner.learner.ContinualLearner` holds, as its state and its
    checkpoint (:mod:`pyro_cl.learner.checkpoint`) read it (a protocol, so that neither module
    imports the learner)."""

    net: torch.nn.Module
    model: SupervisedModel
    config: TrainingConfig
    device: torch.device
    seed: int | None
    callbacks: CallbackList
    refit_per_task: bool
    initial_prior: Posterior
    guide: MeanFieldGuide
    trained_sites: list[str]
    tasks_seen: list[int]
    times: list[float]
    memory_points: Points | None
    prediction_posteriors: dict[int, Posterior]
    random: RandomStream
    prediction_random: RandomStream

    def parts(self) -> dict[str, Registrable]: ...

    def part_states(self) -> dict: ...

    def current_prior(self) -> Posterior: ...

    def load_part_states(self, states: dict) -> None: ...


@dataclass(frozen=True)
class LearnerState:
    """A copy of everything a learner's steps change (see the module docstring)."""

    guide: dict
    priors: Posterior
    buffers: dict[str, torch.Tensor]
    parts: dict
    trained_sites: list[str]
    tasks_seen: list[int]
    times: list[float]
    memory_points: Points | None
    prediction_posteriors: dict[int, Posterior]
    random: dict[str, torch.Tensor]
    prediction_random: dict[str, torch.Tensor]

    @classmethod
    def of(cls, learner: LearnerStores) -> LearnerState:
        net = learner.net
        return cls(
            guide=copy.deepcopy(learner.guide.state_dict()),
            priors={name: detach_distribution(d) for name, d in read_priors(net).items()},
            buffers={name: b.clone() for name, b in net.named_buffers()},
            parts=copy.deepcopy(learner.part_states()),
            trained_sites=list(learner.trained_sites),
            tasks_seen=list(learner.tasks_seen),
            times=list(learner.times),
            memory_points=learner.memory_points,  # immutable
            prediction_posteriors=learner.prediction_posteriors,  # replaced, never edited
            random=learner.random.state(),
            prediction_random=learner.prediction_random.state(),
        )

    def restore_into(self, learner: LearnerStores) -> None:
        learner.guide.restore(self.guide)
        install_prior(learner.net, self.priors)
        with torch.no_grad():
            for name, buffer in learner.net.named_buffers():
                buffer.copy_(self.buffers[name])
        learner.load_part_states(self.parts)
        learner.trained_sites = list(self.trained_sites)
        learner.tasks_seen = list(self.tasks_seen)
        learner.times = list(self.times)
        learner.memory_points = self.memory_points
        learner.prediction_posteriors = self.prediction_posteriors
        learner.random.load_state(self.random)
        learner.prediction_random.load_state(self.prediction_random)


@contextlib.contextmanager
def transaction(learner: LearnerStores) -> Iterator[None]:
    """Within the block, any failure (a diverged fit, a refused input, an interrupt) restores
    ``learner`` to its state at the start, and re-raises."""
    before = LearnerState.of(learner)
    try:
        yield
    except BaseException:
        before.restore_into(learner)
        raise
