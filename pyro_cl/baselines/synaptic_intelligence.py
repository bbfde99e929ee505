"""Synaptic Intelligence (Zenke et al. 2017): importance accumulated along the optimisation path.

During the fit of task ``t`` every optimiser step ``k`` adds, per parameter,
``ω_i += -g_{k,i} Δθ_{k,i}`` (the step's gradient times its change: the path integral of the
loss decrease each parameter is responsible for). At the end of the task::

    Ω_i += ω_i / ((θ_{t,i} - θ_{t-1,i})² + ξ),     ω_i ← 0

and later fits add ``c Σ_i Ω_i (θ_i - θ_{t,i})²`` to the mean negative log-likelihood (eq. 4 of the
paper, strength ``c``, damping ``ξ``). The gradient is the one the optimiser used (the whole
objective's), read from each step; ``Ω`` and ``ω`` are in per-point units, as in the paper's
mean loss. Where a parameter's ``ω`` ends a task negative (its steps raised the loss on
balance, which Adam's momentum can do), its importance gain is taken as 0, so that the penalty
stays a convex quadratic (the paper does not clip; plain gradient descent never needs it).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.checks import checked_real
from pyro_cl.fitters.penalty import Penalty, check_strength, weighted_squared_distance
from pyro_cl.infer.callbacks import StepInfo
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.points import Points

__all__ = ["SynapticIntelligence"]


class SynapticIntelligence(Penalty):
    """SI's penalty (module docstring).

    :param strength: ``c`` (λ in the VCL paper's sweep).
    :param damping: ``ξ``, keeps the importance finite for parameters that did not move.
    """

    name = "synaptic_intelligence"

    def __init__(self, strength: float = 1.0, damping: float = 0.1) -> None:
        self.strength = check_strength(strength, "the strength c")
        self.damping = checked_real(damping, "the damping ξ", 0, low_open=True)
        #: ``Ω`` and the values at the end of the last task (the anchor).
        self.importance: dict[str, torch.Tensor] = {}
        self.anchor: dict[str, torch.Tensor] = {}
        #: The running path integral ``ω`` of the current task and the values it started from.
        self.path: dict[str, torch.Tensor] = {}
        self.start: dict[str, torch.Tensor] = {}
        self.previous: dict[str, torch.Tensor] = {}
        self.num_data = 1

    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        total = weighted_squared_distance(values, self.anchor, self.importance)
        # the fitter divides R by the task's size; SI's penalty is on the mean loss
        return self.num_data * self.strength * total

    def before_fit(self, values: Mapping[str, torch.Tensor], num_data: int) -> None:
        self.num_data = num_data
        self.start = {name: value.clone() for name, value in values.items()}
        self.previous = {name: value.clone() for name, value in values.items()}
        self.path = {name: torch.zeros_like(value) for name, value in values.items()}

    @torch.no_grad()
    def on_step(self, info: StepInfo) -> None:
        for name, value in info.parameters.items():
            if name in self.path and value.grad is not None:
                self.path[name] -= value.grad * (value - self.previous[name])
                self.previous[name] = value.detach().clone()

    def after_fit(self, context: FitContext, values, data: Points, task_id: int) -> None:
        for name, value in values.items():
            change = (value - self.start[name]).square()
            # a negative path integral (steps that raised the loss, e.g. Adam overshooting) would
            # make the quadratic concave and the objective unbounded below: count it as 0
            gain = self.path[name].clamp_min(0) / (change + self.damping)
            self.importance[name] = self.importance.get(name, torch.zeros_like(value)) + gain
            self.anchor[name] = value.detach().clone()
        self.path, self.start, self.previous = {}, {}, {}

    def state_dict(self) -> dict:
        return {"importance": self.importance, "anchor": self.anchor}

    def load_state_dict(self, state: dict) -> None:
        self.importance = dict(state.get("importance", {}))
        self.anchor = dict(state.get("anchor", {}))
