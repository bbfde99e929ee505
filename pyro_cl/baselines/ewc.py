"""Elastic weight consolidation (Kirkpatrick et al. 2017) and online EWC (Schwarz et al. 2018),
as quadratic penalties of a point-estimate fit.

After task ``t`` with fitted values ``θ_t``, the diagonal empirical Fisher of the task's data is
estimated from per-example gradients of a random subset of ``S`` points (200 in the VCL paper,
section 5)::

    F_t = N_t · (1/S) Σ_{n ∈ subset} (∂ log p(y_n | θ_t, x_n) / ∂θ)²

(scaled to the whole task, so that with ``λ = 1`` the penalty is the Laplace approximation of the
task's log-likelihood). ``curvature="ggn"`` uses the generalised Gauss-Newton diagonal instead
(the expected Fisher; the Hessian of a linear-Gaussian model), the curvature tempered VCL's
``β → 0`` limit reaches (GVCL, Loo et al. 2021, section 3). Later fits minimise the negative log-likelihood plus

* EWC: ``R(θ) = ½ λ Σ_t Σ_i F_{t,i} (θ_i - θ_{t,i})²`` (one anchor per task; VCL paper section 5);
* online EWC: ``R(θ) = ½ λ Σ_i F̃_i (θ_i - θ_{t,i})²`` with one running Fisher
  ``F̃ ← γ F̃ + F_t`` and the latest values as the anchor.

The fitter divides ``R`` by the current task's size, so for tasks of equal size this is the common
"mean loss + λ/2 Σ F̄ (θ - θ_t)²" with ``F̄`` the mean per-example Fisher.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.baselines.curvature import check_sample_count, diagonal_curvature
from pyro_cl.checks import checked_real
from pyro_cl.fitters.penalty import Penalty, check_strength, weighted_squared_distance
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.per_example import checked_curvature
from pyro_cl.points import Points

__all__ = ["EWC", "OnlineEWC"]


class EWC(Penalty):
    """EWC: one quadratic per earlier task, weighted by its diagonal Fisher (module docstring).

    :param strength: ``λ``.
    :param fisher_samples: points per task for the Fisher (``None``: all).
    :param curvature: ``"fisher"`` (the empirical Fisher, the papers') or ``"ggn"``.
    """

    name = "ewc"

    def __init__(
        self, strength: float = 1.0, fisher_samples: int | None = 200, curvature: str = "fisher"
    ) -> None:
        self.strength = check_strength(strength, "the penalty strength λ")
        self.fisher_samples = check_sample_count(fisher_samples, "fisher_samples")
        self.curvature = checked_curvature(curvature)
        self.anchors: list[dict[str, torch.Tensor]] = []
        self.fishers: list[dict[str, torch.Tensor]] = []

    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        total = 0.0
        for anchor, fisher in zip(self.anchors, self.fishers, strict=True):
            total = total + weighted_squared_distance(values, anchor, fisher)
        return 0.5 * self.strength * total

    def after_fit(self, context: FitContext, values, data: Points, task_id: int) -> None:
        fisher = diagonal_curvature(
            context.model, values, data.x, data.y, task_id, self.curvature, self.fisher_samples
        )
        self._consolidate({n: v.detach().clone() for n, v in values.items()}, fisher)

    def _consolidate(self, anchor: dict, fisher: dict) -> None:
        self.anchors.append(anchor)
        self.fishers.append(fisher)

    def state_dict(self) -> dict:
        return {"anchors": self.anchors, "fishers": self.fishers}

    def load_state_dict(self, state: dict) -> None:
        self.anchors = list(state.get("anchors", []))
        self.fishers = list(state.get("fishers", []))


class OnlineEWC(EWC):
    """Online EWC: one running Fisher ``F̃ ← γ F̃ + F_t`` and the latest fit as the only anchor
    (Schwarz et al. 2018; module docstring).

    :param decay: ``γ`` in ``[0, 1]`` (1 keeps every task's Fisher at full weight).
    """

    name = "online_ewc"

    def __init__(
        self,
        strength: float = 1.0,
        fisher_samples: int | None = 200,
        decay: float = 1.0,
        curvature: str = "fisher",
    ) -> None:
        super().__init__(strength, fisher_samples, curvature)
        self.decay = checked_real(decay, "the decay γ", 0, 1)

    def _consolidate(self, anchor: dict, fisher: dict) -> None:
        if self.fishers:
            previous = self.fishers[0]
            fisher = {
                name: value + self.decay * previous[name] if name in previous else value
                for name, value in fisher.items()
            }
            fisher.update({n: self.decay * v for n, v in previous.items() if n not in fisher})
            anchor = {**self.anchors[0], **anchor}
        self.anchors, self.fishers = [anchor], [fisher]
