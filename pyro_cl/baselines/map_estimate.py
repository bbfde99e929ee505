"""MAP estimation with the last fit as the prior mean: the VCL paper's section 5 baseline.

Section 5 writes the regularised maximum-likelihood methods as one objective (unnumbered; the
first display of section 5)::

    L^t(θ) = Σ_n log p(y_n | θ, x_n) - ½ λ_t (θ - θ_{t-1})ᵀ Σ_{t-1}⁻¹ (θ - θ_{t-1})

and "a simple fix is to set Σ_t = I": MAP under the Gaussian prior ``N(θ_{t-1}, I/λ)``. At the
first task, and for sites no earlier task fitted (a new head), the prior mean is 0: the unit
Gaussian prior ``N(0, I/λ)``. The penalty is therefore::

    R(θ) = ½ λ Σ_i (θ_i - m_i)²,   m = θ_{t-1} where fitted, else 0

in the units of the total negative log-likelihood (:class:`~pyro_cl.fitters.penalty.Penalty`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.fitters.penalty import Penalty, check_strength, weighted_squared_distance
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.points import Points

__all__ = ["GaussianMAP"]


class GaussianMAP(Penalty):
    """``R(θ) = ½ λ ||θ - m||²`` with ``m`` the last fit (0 where nothing was fitted yet).

    :param strength: ``λ``, the prior precision.
    """

    name = "map"

    def __init__(self, strength: float = 1.0) -> None:
        self.strength = check_strength(strength, "the penalty strength λ")
        self.anchor: dict[str, torch.Tensor] = {}

    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        ones = {name: torch.ones((), device=value.device) for name, value in values.items()}
        return 0.5 * self.strength * weighted_squared_distance(values, self.anchor, ones)

    def before_fit(self, values: Mapping[str, torch.Tensor], num_data: int) -> None:
        for name, value in values.items():  # the unit Gaussian prior's mean for new sites
            self.anchor.setdefault(name, torch.zeros_like(value))

    def after_fit(self, context: FitContext, values, data: Points, task_id: int) -> None:
        self.anchor.update({name: value.detach().clone() for name, value in values.items()})

    def state_dict(self) -> dict:
        return {"anchor": self.anchor}

    def load_state_dict(self, state: dict) -> None:
        self.anchor = dict(state.get("anchor", {}))
