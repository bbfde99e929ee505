"""A learner's state as one value: a step's transaction and a checkpoint's body.

Everything a step may change lives in a few stores: the guide's parameters, the net's priors
(the running posterior), buffers (e.g. H-IBP's per-task concentrations, batch statistics) and
own parameters (deterministic parts, point values), every part's state
(fitter, transition, memory, callbacks), the bookkeeping (trained sites, tasks, times), the
memory's points, the prediction posteriors, the random streams (training's and prediction's) and
Adam's carried state (``carry_adam_state``).
:meth:`LearnerState.of` copies all of them out as one value and :meth:`LearnerState.restore_into`
puts it back, so a step that fails leaves the learner exactly as it was (:func:`transaction`).
The same value, as tensors and plain containers (:meth:`LearnerState.to_state`), is what a
checkpoint stores (:mod:`pyro_cl.learner.checkpoint`): the stores are listed here once.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.adam_moments import AdamMoments
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.random_stream import RandomStream
from pyro_cl.model import SupervisedModel
from pyro_cl.points import Points
from pyro_cl.posterior import (
    Posterior,
    detach_distribution,
    install_prior,
    posterior_from_state,
    posterior_to_state,
    read_priors,
)
from pyro_cl.spec import Registrable

__all__ = ["LearnerState", "LearnerStores", "net_values_kept", "transaction"]


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
    adam_moments: AdamMoments

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
    parameters: dict[str, torch.Tensor]
    parts: dict
    trained_sites: list[str]
    tasks_seen: list[int]
    times: list[float]
    memory_points: Points | None
    prediction_posteriors: dict[int, Posterior]
    random: dict[str, torch.Tensor]
    prediction_random: dict[str, torch.Tensor]
    adam_moments: dict

    @classmethod
    def of(cls, learner: LearnerStores) -> LearnerState:
        net = learner.net
        return cls(
            guide=copy.deepcopy(learner.guide.state_dict()),
            priors={name: detach_distribution(d) for name, d in read_priors(net).items()},
            **_net_values(net),
            parts=copy.deepcopy(learner.part_states()),
            trained_sites=list(learner.trained_sites),
            tasks_seen=list(learner.tasks_seen),
            times=list(learner.times),
            memory_points=learner.memory_points,  # immutable
            prediction_posteriors=learner.prediction_posteriors,  # replaced, never edited
            random=learner.random.state(),
            prediction_random=learner.prediction_random.state(),
            adam_moments=learner.adam_moments.state_dict(),
        )

    def to_state(self) -> dict:
        """Tensors and plain containers only (a checkpoint's body, :mod:`pyro_cl.serialization`)."""
        return {
            "guide": self.guide,
            "priors": posterior_to_state(self.priors),
            "buffers": self.buffers,
            "parameters": self.parameters,
            "parts": self.parts,
            "trained_sites": self.trained_sites,
            "tasks_seen": self.tasks_seen,
            "times": self.times,
            "memory_points": None if self.memory_points is None else self.memory_points.state(),
            "prediction_posteriors": [
                [key, posterior_to_state(posterior)]
                for key, posterior in self.prediction_posteriors.items()
            ],
            "random": self.random,
            "prediction_random": self.prediction_random,
            "adam_moments": self.adam_moments,
        }

    @classmethod
    def from_state(cls, state: dict, device: torch.device) -> LearnerState:
        """The value :meth:`to_state` wrote, its tensors on ``device``."""
        points = state["memory_points"]
        return cls(
            guide=state["guide"],
            priors=posterior_from_state(state["priors"], device),
            buffers=state["buffers"],
            parameters=state.get("parameters", {}),  # none before deterministic parts
            parts=state["parts"],
            trained_sites=list(state["trained_sites"]),
            tasks_seen=[int(task) for task in state["tasks_seen"]],
            times=[float(time) for time in state["times"]],
            memory_points=None if points is None else Points.from_state(points, device),
            prediction_posteriors={
                int(key): posterior_from_state(posterior, device)
                for key, posterior in state["prediction_posteriors"]
            },
            random=state["random"],
            prediction_random=state["prediction_random"],
            adam_moments=state.get("adam_moments", {}),  # none before carry_adam_state
        )

    def restore_into(self, learner: LearnerStores) -> None:
        learner.guide.restore(self.guide)
        learner.guide.to(learner.device)
        _put_net_values(learner.net, self.buffers, self.parameters)
        install_prior(learner.net, self.priors)
        learner.load_part_states(self.parts)
        learner.trained_sites = list(self.trained_sites)
        learner.tasks_seen = list(self.tasks_seen)
        learner.times = list(self.times)
        learner.memory_points = self.memory_points
        learner.prediction_posteriors = self.prediction_posteriors
        learner.random.load_state(self.random)
        learner.prediction_random.load_state(self.prediction_random)
        learner.adam_moments.load_state_dict(self.adam_moments)


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


@contextlib.contextmanager
def net_values_kept(net: torch.nn.Module) -> Iterator[None]:
    """The net's own parameters and buffers (deterministic parts, batch statistics) as they were
    on entry once the block ends, whatever it trained: a fit for prediction only (a memory's
    refit) leaves the values the next step starts from alone."""
    values = _net_values(net)
    try:
        yield
    finally:
        _put_net_values(net, values["buffers"], values["parameters"])


def _net_values(net: torch.nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """Copies of the net's buffers and own parameters, ``{"buffers": ..., "parameters": ...}``."""
    return {
        "buffers": {name: b.clone() for name, b in net.named_buffers()},
        "parameters": {name: p.detach().clone() for name, p in net.named_parameters()},
    }


@torch.no_grad()
def _put_net_values(
    net: torch.nn.Module, buffers: dict[str, torch.Tensor], parameters: dict[str, torch.Tensor]
) -> None:
    """Copy ``buffers`` (every one of the net's) and ``parameters`` (those given: a state from
    before deterministic parts holds none) back into ``net``."""
    for name, buffer in net.named_buffers():
        buffer.copy_(buffers[name])
    for name, parameter in net.named_parameters():
        if name in parameters:
            parameter.copy_(parameters[name])
