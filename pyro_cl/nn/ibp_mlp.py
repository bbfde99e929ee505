"""Indian Buffet neural nets: an MLP whose hidden units are switched on per data point by IBP
masks, so it chooses how many units it uses (IBNN) — with a hierarchy shared by all layers
(H-IBP, supplement eq. 1-6)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pyro.nn import PyroModule
from torch import nn

from pyro_cl.checks import checked_real
from pyro_cl.nn.ibp_mask import IBPMask
from pyro_cl.nn.mlp import BayesianMLP
from pyro_cl.nn.moment_matching import ACTIVATIONS
from pyro_cl.nn.sticks import BetaSticks

__all__ = ["IndianBuffetMLP"]


class IndianBuffetMLP(BayesianMLP):
    """A :class:`BayesianMLP` with IBP masks on its hidden units: ``h_j = f(h_{j-1} W_j) ∘ Z_j``.

    **IBNN** (``hierarchical=False``): each hidden layer ``j`` has its own sticks
    ``v_jk ~ Beta(α, β)`` (site ``sticks.{j}.v``), ``π_jk = ∏_{i≤k} v_ji`` and per-point masks
    ``z_ijk ~ Bern(π_jk)`` (sites ``masks.{j}.mask_logit`` / ``masks.{j}.mask``).

    **H-IBP** (``hierarchical=True``, eq. 1-6): global sticks ``v_k ~ Beta(α, β)`` (site
    ``global_sticks.v``) give ``π^0_k = ∏_{i≤k} v_i``; each layer draws
    ``π_jk ~ Beta(α_j π^0_k, α_j (1 - π^0_k))`` (site ``masks.{j}.unit_probs``) and its masks
    from ``π_j``. All hidden layers then need the same width ``K``.

    The Gaussian weights are the MLP's (mean-field, local reparameterisation); the hidden sizes
    are the truncations ``K``. Continual learning needs nothing special: the sticks' Beta
    posterior becomes their prior like the weights' Gaussians (supplement section 1, "follow the
    VCL framework"). Section 6.1's "multiple of α after each new dataset" is a transition between
    tasks, :class:`~pyro_cl.transitions.base.ChildConcentrationGrowth`. The learner's maximum-likelihood
    initialisation (``ml_init_epochs``) fits the weight means with the sticks at their prior and
    the masks drawn from it, so the means start where the IBP posterior starts.

    :param alpha: prior (and initial posterior) concentration ``α`` of every stick; the
        supplement uses 5 for MNIST.
    :param beta: the sticks' other concentration (1 in eq. 1).
    :param hierarchical: H-IBP instead of independent IBPs per layer.
    :param child_concentration: ``α_j`` of every layer (H-IBP only).
    :param posterior_temperature: ``λ1`` of the posterior's Concrete masks.
    :param prior_temperature: ``λ2`` of the prior's Concrete masks.
    :param mask_parameterisation: ``"log_odds"`` (standard) or ``"log_probability"`` (the
        supplement's formula); see :mod:`pyro_cl.nn.concrete`.

    The other parameters are :class:`BayesianMLP`'s.
    """

    name = "IndianBuffetMLP"

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        heads: int = 1,
        activation: str = "relu",
        prior_loc: float | Sequence[float] = 0.0,
        prior_scale: float | Sequence[float] = 1.0,
        local_reparameterization: bool = True,
        alpha: float = 5.0,
        beta: float = 1.0,
        hierarchical: bool = False,
        child_concentration: float = 1.0,
        posterior_temperature: float = 1.0,
        prior_temperature: float = 1.0,
        mask_parameterisation: str = "log_odds",
    ) -> None:
        super().__init__(
            in_features,
            hidden_sizes,
            out_features,
            heads,
            activation,
            prior_loc,
            prior_scale,
            local_reparameterization,
        )
        checked_real(child_concentration, "the child concentration", 0, low_open=True)
        widths = [int(h) for h in hidden_sizes]
        if not widths:
            raise ValueError("an Indian Buffet net needs at least one hidden layer")
        if hierarchical and len(set(widths)) != 1:
            raise ValueError(f"H-IBP layers share their sticks, so need equal widths, got {widths}")
        self.hierarchical = hierarchical
        # no FiLM layers in an Indian Buffet net, and Gaussian first priors
        for key in ("film_tasks", "film_prior_scale", "prior_family", "deterministic"):
            self._config.pop(key)
        self._config.update(
            alpha=float(alpha),
            beta=float(beta),
            hierarchical=hierarchical,
            child_concentration=float(child_concentration),
            posterior_temperature=float(posterior_temperature),
            prior_temperature=float(prior_temperature),
            mask_parameterisation=mask_parameterisation,
        )
        if hierarchical:
            self.global_sticks = BetaSticks(widths[0], alpha, beta)
        else:
            self.sticks = PyroModule[nn.ModuleList]([BetaSticks(k, alpha, beta) for k in widths])
        self.masks = PyroModule[nn.ModuleList](
            [
                IBPMask(
                    k,
                    posterior_temperature,
                    prior_temperature,
                    mask_parameterisation,
                    child_concentration if hierarchical else None,
                )
                for k in widths
            ]
        )

    def stick_log_probabilities(self) -> list[torch.Tensor]:
        """Draw the sticks: ``log π`` for each hidden layer (the same ``log π^0`` for all, H-IBP)."""
        if self.hierarchical:
            return [self.global_sticks()] * len(self.masks)
        return [sticks() for sticks in self.sticks]

    def forward(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        head = self.check_task_id(task_id)
        activation = ACTIVATIONS[self.activation]
        log_probabilities = self.stick_log_probabilities()
        for layer, mask, log_pi in zip(self.hidden, self.masks, log_probabilities, strict=True):
            x = mask(activation(layer(x)), log_pi)
        return self.heads[head](x)
