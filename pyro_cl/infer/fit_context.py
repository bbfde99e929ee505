"""What every fit of a learner shares (:class:`FitContext`): the model, the settings, the device
and the callbacks, with the minibatch loops that every fitter trains through."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch.distributions import Distribution

from pyro_cl.infer.adam_moments import AdamMoments
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.training import minimise, run_epochs
from pyro_cl.model import SupervisedModel

__all__ = ["FitContext"]


@dataclass(frozen=True)
class FitContext:
    """What every fit of a learner shares: the model (its priors are the current prior), the
    settings, the device, the callbacks that watch the fit and the sites' priors before the first
    step (``initial_prior``, e.g. for GVCL's λ, :mod:`~pyro_cl.fitters.mean_precision`) and
    Adam's state carried between fits (``adam_moments``, ``None``: a fresh Adam a fit; see
    :mod:`~pyro_cl.infer.adam_moments`)."""

    model: SupervisedModel
    config: TrainingConfig
    device: torch.device
    callbacks: Callback
    initial_prior: Mapping[str, Distribution]
    adam_moments: AdamMoments | None = None

    def with_fresh_adam(self) -> FitContext:
        """This context without Adam's carried state: for a fit that is not a task's (VCL's
        maximum-likelihood start, a memory's refit for prediction), which starts a fresh Adam
        and leaves the carried state to the task's fits."""
        return dataclasses.replace(self, adam_moments=None)

    def batch_size(self, batch_size: int | str | None = "same") -> int | None:
        """``batch_size``, where ``"same"`` means the schedule's."""
        return self.config.schedule.batch_size if batch_size == "same" else batch_size

    def minimise(
        self,
        loss: Callable[[torch.Tensor], torch.Tensor],
        parameters: Mapping[str, torch.Tensor],
        problem: FitProblem,
        callbacks: Callback | None = None,
        watched: Mapping[str, torch.Tensor] | None = None,
    ) -> list[float]:
        """:func:`~pyro_cl.infer.training.minimise` with the configuration's Adam settings, the
        context's carried Adam state and, by default, its callbacks (``watched``: what they see,
        default ``parameters``)."""
        return minimise(
            loss,
            parameters,
            problem,
            self.config.optimisation,
            self.device,
            self.callbacks if callbacks is None else callbacks,
            self.config.divergence,
            watched,
            self.adam_moments,
        )

    def run_epochs(
        self,
        step: Callable[[torch.Tensor], torch.Tensor],
        parameters: Mapping[str, torch.Tensor],
        problem: FitProblem,
    ) -> list[float]:
        """:func:`~pyro_cl.infer.training.run_epochs` with the context's device, callbacks and
        divergence test, for fitters with their own update rule (natural gradients)."""
        return run_epochs(
            step, problem, self.device, self.callbacks, parameters, self.config.divergence
        )
