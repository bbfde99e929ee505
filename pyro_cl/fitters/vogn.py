"""Variational Online Gauss-Newton (Khan et al., 2018; Osawa et al., 2019) with a per-parameter
Gaussian prior, for continual learning (VOGN thesis, sections 3.2-3.4, eq. 52/53)."""

from __future__ import annotations

import torch

from pyro_cl.checks import checked_real
from pyro_cl.fitters.natural_gradient import (
    NaturalGradientState,
    NaturalGradientUpdate,
    check_rate,
)
from pyro_cl.infer.per_example import checked_curvature
from pyro_cl.kl import precision_kl

__all__ = ["VOGN"]


class VOGN(NaturalGradientUpdate):
    """The VOGN update of a mean-field Gaussian guide, eq. 52 with the prior of eq. 53.

    For a minibatch of ``M`` of the task's ``N`` points and ``S`` weights ``θ_s`` drawn from the
    guide ``N(μ, diag(1/s))``::

        ĝ = (N/M) (1/S) Σ_s Σ_n ∇ℓ_n(θ_s)                 (minibatch gradient)
        F̂ = (N/M) (1/S) Σ_s Σ_n ∇ℓ_n(θ_s)²               (diagonal empirical Fisher, eq. 50)
        s ← (1 - β) s + β (F̂ + λ_p)
        m ← γ m + (1 - γ) ĝ        (momentum γ; without it m = ĝ)
        μ ← μ - α (m + λ_p (μ - μ_p)) / s

    with ``ℓ_n = -log p(y_n | x_n, θ)``, ``μ_p`` and ``λ_p`` the prior's mean and precision (the
    posterior of the previous task, eq. 53), ``N`` multiplied by ``data_scale`` ``ρ``
    (section 3.4). The mean step uses the *new* precision, as eq. 52 writes it (eq. 53's
    ``σ²_{k,t}`` index reads as a typo for ``t+1``; Khan et al. 2018 and Osawa et al. 2019 use the
    updated precision). Momentum (section 3.4) is a moving average of the data gradient; the prior
    term is added to it fresh at every step.

    While ``s`` is still near its initial value ``s₀`` (a small ``β`` keeps it there for ~1/β
    steps) the mean's step is SGD on the mean loss at rate ``αN/s₀`` with weight decay ``λ_p/N``,
    its gradients taken at weights drawn with ``σ₀ = 1/√s₀``: settings tuned for one ``N`` take
    another step at another ``N`` (``benchmarks/vogn_cifar_diagnosis.py`` measures what this does
    to the thesis's split CIFAR settings on 10,000 images a task).

    With ``curvature="ggn"`` the Fisher is replaced by the diagonal of the generalised
    Gauss-Newton matrix ``(N/M)(1/S) Σ_{s,n} diag(Jᵀ H J)`` (``H`` the likelihood's Hessian in the
    net output, see :meth:`~pyro_cl.likelihoods.Likelihood.hessian_factor`), exact for linear
    regression, where VOGN's fixed point is then the exact posterior's mean and diagonal precision.

    The precision can only grow towards ``F̂ + λ_p``, which is positive, so it stays positive for
    any data; a non-finite loss or posterior raises :class:`~pyro_cl.DivergenceError`.

    :param learning_rate: ``α``.
    :param beta: ``β``, the rate of the precision's moving average.
    :param num_samples: ``S``.
    :param momentum: ``γ`` (0 switches it off; the thesis uses 0.9 on split CIFAR).
    :param curvature: "fisher" (the thesis's empirical Fisher) or "ggn".
    :param data_scale: ``ρ``.
    :param compiled: fuse the update into one kernel with ``torch.compile``.
    :param kl_weight: ``β``, the KL's weight (GVCL's β-ELBO; see
        :class:`~pyro_cl.fitters.natural_gradient.NaturalGradientUpdate`).
    :param spread_samples: spread the samples over data-parallel ranks, one per rank as Osawa et
        al. 2019 (both: see :class:`~pyro_cl.fitters.natural_gradient.NaturalGradientUpdate`).

    Example::

        learner = VCL(BayesianMLP(784, [100, 100], 10), fitter=VOGN(1e-3, beta=1e-3),
                      init_log_variance=-math.log(1e6), ml_init_epochs=0, between_tasks="fresh")
    """

    name = "vogn"

    def __init__(
        self,
        learning_rate: float = 1e-3,
        beta: float = 1e-3,
        num_samples: int = 10,
        momentum: float = 0.0,
        curvature: str = "fisher",
        data_scale: float = 1.0,
        compiled: bool = False,
        spread_samples: bool = False,
        kl_weight: float = 1.0,
    ) -> None:
        super().__init__(
            learning_rate, num_samples, data_scale, compiled, spread_samples, kl_weight
        )
        self.curvature = checked_curvature(curvature)
        self.beta = check_rate("beta", beta)
        self.momentum = checked_real(momentum, "momentum", 0, 1, high_open=True)

    def _initialise(self, state: NaturalGradientState, effective_size: float) -> None:
        if self.momentum:
            state.buffers["momentum"] = torch.zeros_like(state.loc)

    def _update(
        self,
        state: NaturalGradientState,
        gradients: torch.Tensor,
        squared: torch.Tensor | None,
        noise: torch.Tensor,
        batch_size: int,
        effective_size: float,
    ) -> torch.Tensor:
        scale = self._constant(effective_size / (batch_size * self.num_samples), state.loc)
        momentum = state.buffers.get("momentum")
        return self._fused(_vogn_step)(
            state.loc,
            state.precision,
            state.scale,
            momentum if momentum is not None else state.loc,  # unused without momentum
            state.prior_loc,
            state.prior_precision,
            gradients,
            squared,
            scale,
            self.learning_rate,
            self.beta,
            self.momentum,
        )


def _vogn_step(
    loc: torch.Tensor,
    precision: torch.Tensor,
    sample_scale: torch.Tensor,
    average: torch.Tensor,
    prior_loc: torch.Tensor,
    prior_precision: torch.Tensor,
    gradients: torch.Tensor,
    squared: torch.Tensor,
    scale: torch.Tensor,
    learning_rate: float,
    beta: float,
    momentum: float,
) -> torch.Tensor:
    """One VOGN step (eq. 52/53) in place on flat tensors, returning the new guide's
    :func:`~pyro_cl.kl.precision_kl`; ``scale`` is ``ρN/(MS)``, a tensor so a
    compiled step is not recompiled as the minibatch size changes."""
    gradient = gradients.sum(0) * scale
    precision.mul_(1 - beta).add_(squared * scale + prior_precision, alpha=beta)
    if momentum:
        gradient = average.mul_(momentum).add_(gradient, alpha=1 - momentum)
    direction = gradient + prior_precision * (loc - prior_loc)
    loc.sub_(learning_rate * direction / precision)
    sample_scale.copy_(precision.rsqrt())
    return precision_kl(loc, precision, prior_loc, prior_precision)
