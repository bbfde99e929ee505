"""Improved Variational Online Newton (Shen et al., 2024) with a per-parameter Gaussian prior."""

from __future__ import annotations

import torch

from pyro_cl.checks import checked_real
from pyro_cl.fitters.natural_gradient import (
    NaturalGradientState,
    NaturalGradientUpdate,
    check_rate,
)
from pyro_cl.kl import precision_kl

__all__ = ["IVON"]


class IVON(NaturalGradientUpdate):
    """IVON (Shen et al., 2024, algorithm 1): VOGN's update with a reparameterisation-trick
    Hessian estimate instead of per-example gradients, so a step costs about what Adam's does.

    In per-point units (``λ = ρN`` the effective data size, ``δ = λ_p/λ`` the prior precision per
    point, ``h`` the Hessian estimate) the guide is ``N(m, 1/(λ(h + δ)))`` and each step, with
    ``θ_s = m + ε_s σ``::

        ĝ = (1/S) Σ_s ĝ_s,   ĝ_s = (1/M) Σ_n ∇ℓ_n(θ_s)
        ĥ = (1/S) Σ_s ĝ_s ε_s / σ                        (Stein/Price estimate of the Hessian)
        g ← β₁ g + (1 - β₁) ĝ
        h ← β₂ h + (1 - β₂) ĥ + ½ (1 - β₂)² (h - ĥ)² / (h + δ)
        m ← m - α (g / (1 - β₁ᵗ) + δ (m - μ_p)) / (h + δ)

    The last term of the ``h`` update keeps ``h + δ`` positive (Shen et al., section 3). Unlike
    the published optimiser, whose weight decay is a zero-mean isotropic prior, ``δ`` and ``μ_p``
    are per parameter: the previous task's posterior. The fitted guide's precision is
    ``λ(h + δ) = λh + λ_p``.

    :param learning_rate: ``α`` (Shen et al. use 0.1-0.2 for image classifiers).
    :param beta1: ``β₁``, the gradient's momentum.
    :param beta2: ``β₂``, the Hessian's moving average.
    :param num_samples: ``S`` (1 in Shen et al.).
    :param hessian_init: initial ``h``; ``None`` derives it from the guide's precision,
        ``h = max(s - λ_p, 0)/λ`` (so ``between_tasks="keep"`` resumes where the last task ended).
    :param data_scale: ``ρ``.
    :param compiled: fuse the update into one kernel with ``torch.compile``.
    :param kl_weight: ``β``, the KL's weight (GVCL's β-ELBO; see
        :class:`~pyro_cl.fitters.natural_gradient.NaturalGradientUpdate`).
    :param spread_samples: spread the samples over data-parallel ranks, one per rank as Osawa et
        al. 2019 (both: see :class:`~pyro_cl.fitters.natural_gradient.NaturalGradientUpdate`).
    """

    name = "ivon"

    def __init__(
        self,
        learning_rate: float = 0.1,
        beta1: float = 0.9,
        beta2: float = 0.99999,
        num_samples: int = 1,
        hessian_init: float | None = 0.1,
        data_scale: float = 1.0,
        compiled: bool = False,
        spread_samples: bool = False,
        kl_weight: float = 1.0,
    ) -> None:
        super().__init__(
            learning_rate, num_samples, data_scale, compiled, spread_samples, kl_weight
        )
        self.beta1 = checked_real(beta1, "beta1", 0, 1, high_open=True)
        self.beta2 = checked_real(beta2, "beta2", 0, 1, high_open=True)
        check_rate("1 - beta2", 1 - self.beta2)
        self.hessian_init = (
            None if hessian_init is None else checked_real(hessian_init, "hessian_init", 0)
        )

    def _initialise(self, state: NaturalGradientState, effective_size: float) -> None:
        state.buffers["steps"] = torch.zeros((), dtype=state.loc.dtype, device=state.loc.device)
        if self.hessian_init is None:
            hessian = (state.precision - state.prior_precision).clamp_min(0) / effective_size
        else:
            hessian = torch.full_like(state.loc, self.hessian_init)
        state.buffers["hessian"] = hessian.detach().clone()
        state.buffers["gradient"] = torch.zeros_like(state.loc)
        state.buffers["prior_per_point"] = state.prior_precision / effective_size
        state.set_precision(effective_size * (hessian + state.buffers["prior_per_point"]))

    def _update(
        self,
        state: NaturalGradientState,
        gradients: torch.Tensor,
        squared: torch.Tensor | None,
        noise: torch.Tensor,
        batch_size: int,
        effective_size: float,
    ) -> torch.Tensor:
        b = state.buffers
        return self._fused(_ivon_step)(
            state.loc,
            state.precision,
            state.scale,
            state.prior_precision,
            b["hessian"],
            b["gradient"],
            b["prior_per_point"],
            state.prior_loc,
            gradients,
            noise,
            b["steps"],
            self._constant(batch_size, state.loc),
            self._constant(effective_size, state.loc),
            self.learning_rate,
            self.beta1,
            self.beta2,
        )


def _ivon_step(
    loc: torch.Tensor,
    precision: torch.Tensor,
    scale: torch.Tensor,
    prior_precision: torch.Tensor,
    h: torch.Tensor,
    g: torch.Tensor,
    delta: torch.Tensor,
    prior_loc: torch.Tensor,
    gradients: torch.Tensor,
    noise: torch.Tensor,
    steps: torch.Tensor,
    batch_size: torch.Tensor,
    effective_size: torch.Tensor,
    learning_rate: float,
    beta1: float,
    beta2: float,
) -> torch.Tensor:
    """One IVON step in place on flat tensors (the class docstring's update), returning the new
    guide's :func:`~pyro_cl.kl.precision_kl`. ``steps`` (``t``, counted here), the minibatch
    size ``M`` and ``λ`` are 0-d tensors on the device, so neither a host-to-device copy per
    step nor a recompilation of a compiled step as they change."""
    steps.add_(1)
    debias = 1 / (1 - beta1**steps)
    per_sample = gradients / batch_size  # (S, D) batch means
    gradient = per_sample.mean(0)
    hessian = (per_sample * noise).mean(0) / scale
    g.mul_(beta1).add_(gradient, alpha=1 - beta1)
    correction = 0.5 * (1 - beta2) ** 2 * (h - hessian).square() / (h + delta)
    h.mul_(beta2).add_(hessian, alpha=1 - beta2).add_(correction)
    direction = g * debias + delta * (loc - prior_loc)
    loc.sub_(learning_rate * direction / (h + delta))
    precision.copy_(effective_size * (h + delta))
    scale.copy_(precision.rsqrt())
    return precision_kl(loc, precision, prior_loc, prior_precision)
