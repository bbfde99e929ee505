"""The KL term of the online ELBO, ``KL(q_t || q_{t-1})`` (VCL eq. 4), in one place: for any
registered pair of distributions, for mean-field Gaussians from raw parameters, in the precision
form natural-gradient steps keep, fused over a packed fit's flat tensors, and from a Gaussian
posterior to a Laplace first prior (registered with ``torch.distributions``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch.distributions import Distribution, Laplace, Normal, kl_divergence, register_kl

__all__ = [
    "PackedGaussianKL",
    "full_gaussian_kl",
    "gaussian_kl",
    "gaussian_laplace_kl",
    "kl_to_prior",
    "precision_kl",
]


def kl_to_prior(
    posterior: Mapping[str, Distribution], prior: Mapping[str, Distribution]
) -> torch.Tensor:
    """``Σ_site KL(q_site || p_site)`` summed over every element of every site.

    For mean-field Gaussians each term is closed-form,
    ``KL = Σ_d [log(σ_p/σ_q) + (σ_q² + (μ_q - μ_p)²) / (2σ_p²) - 1/2]``;
    any pair registered with ``torch.distributions.kl_divergence`` (Beta-Beta, …) works too.

    :raises KeyError: if a posterior site has no prior.
    """
    missing = sorted(set(posterior) - set(prior))
    if missing:
        raise KeyError(f"no prior for sites {missing}")
    total = None
    for name, q in posterior.items():
        term = kl_divergence(q, prior[name]).sum()
        total = term if total is None else total + term
    if total is None:
        raise ValueError("the posterior has no sites")
    return total


def gaussian_kl(
    loc_q: torch.Tensor,
    variance_q: torch.Tensor,
    log_variance_q: torch.Tensor,
    loc_p: torch.Tensor,
    scale_p: torch.Tensor,
) -> torch.Tensor:
    """``KL(N(μ_q, σ_q²) || N(μ_p, σ_p²))`` summed over elements, from the raw parameters.

    The same closed form as :func:`kl_to_prior` for Normals,
    ``½ Σ [(σ_q² + (μ_q - μ_p)²) / σ_p² - 1 - log σ_q² + log σ_p²]``, written with the
    log-variance the guide already holds so that the fast path spends as few operations as it can.
    """
    variance_p = scale_p * scale_p
    quadratic = ((variance_q + (loc_q - loc_p) ** 2) / variance_p).sum()
    log_ratio = (torch.log(variance_p) - log_variance_q).sum()
    return 0.5 * (quadratic + log_ratio - loc_q.numel())


def gaussian_laplace_kl(
    loc_q: torch.Tensor,
    variance_q: torch.Tensor,
    log_variance_q: torch.Tensor,
    loc_p: torch.Tensor,
    scale_p: torch.Tensor,
) -> torch.Tensor:
    """``KL(N(μ, σ²) ‖ Laplace(m, b))`` element by element, in closed form:

    ``KL = E_q[log q] - E_q[log p] = -½ log(2πe σ²) + log 2b + E_q|w - m| / b``,

    with the folded normal's mean ``E_q|w - m| = σ √(2/π) exp(-d²/2σ²) + d erf(d / σ√2)``,
    ``d = μ - m``. Its gradient in ``μ`` is ``erf(d / σ√2) / b``: a Laplace prior pulls a mean
    towards ``m`` with a force that does not grow with the distance (an L1 penalty, smoothed over
    ``σ``), where a Gaussian's grows linearly.
    """
    scale_q = variance_q.sqrt()
    difference = loc_q - loc_p
    standardised = difference / (scale_q * math.sqrt(2.0))
    folded_mean = scale_q * math.sqrt(2.0 / math.pi) * torch.exp(
        -standardised.square()
    ) + difference * torch.erf(standardised)
    entropy = 0.5 * (math.log(2.0 * math.pi * math.e) + log_variance_q)
    return (2.0 * scale_p).log() + folded_mean / scale_p - entropy


@register_kl(Normal, Laplace)
def _kl_normal_laplace(q: Normal, p: Laplace) -> torch.Tensor:
    return gaussian_laplace_kl(q.loc, q.variance, q.variance.log(), p.loc, p.scale)


def full_gaussian_kl(
    loc_q: torch.Tensor,
    tril_q: torch.Tensor,
    loc_p: torch.Tensor,
    tril_p: torch.Tensor,
) -> torch.Tensor:
    """``KL(N(μ_q, L_q L_qᵀ) ‖ N(μ_p, L_p L_pᵀ))`` from the Cholesky factors, with one triangular
    solve: ``½ [‖L_p⁻¹ L_q‖²_F + ‖L_p⁻¹ (μ_q - μ_p)‖² - D] + Σ log diag L_p - Σ log diag L_q``."""
    right = torch.cat([tril_q, (loc_q - loc_p).unsqueeze(-1)], dim=-1)
    solved = torch.linalg.solve_triangular(tril_p, right, upper=False)
    log_det = tril_p.diagonal().log().sum() - tril_q.diagonal().log().sum()
    return 0.5 * (solved.square().sum() - loc_q.shape[-1]) + log_det


def precision_kl(
    loc: torch.Tensor,
    precision: torch.Tensor,
    prior_loc: torch.Tensor,
    prior_precision: torch.Tensor,
) -> torch.Tensor:
    """``KL(N(μ, 1/s) ‖ N(μ_p, 1/λ_p))`` less its constant ``-½ (Σ log λ_p + D)``:
    ``½ [Σ λ_p/s + Σ λ_p (μ - μ_p)² + Σ log s]``."""
    difference = loc - prior_loc
    terms = prior_precision * (precision.reciprocal() + difference * difference) + precision.log()
    return 0.5 * terms.sum()


class PackedGaussianKL(torch.autograd.Function):
    """``KL(N(μ, diag σ²) ‖ N(μ_p, diag σ_p²))`` summed over a flat vector, with the prior's terms
    computed once per fit (they do not change during it):

    ``KL = ½ [Σ σ² λ_p + Σ (μ - μ_p)² λ_p - Σ log σ² + Σ log σ_p² - D]`` with ``λ_p = 1/σ_p²``.

    The gradient is written out rather than traced: ``∂KL/∂μ = (μ - μ_p) λ_p``,
    ``∂KL/∂σ² = ½ λ_p`` and ``∂KL/∂log σ² = -½`` (the path through ``σ² = exp(log σ²)`` is added
    by autograd), which saves the intermediate tensors of the traced form. With ``weight`` (1
    where a coordinate counts, 0 where it does not; ``λ_p`` and the constant already 0 and
    summed over the counted ones) the ``log σ²`` sum and its gradient count the same coordinates.
    """

    @staticmethod
    def forward(
        ctx, loc, log_variance, variance, prior_loc, prior_precision, constant, weight=None
    ):
        difference = loc - prior_loc
        scaled = difference * prior_precision
        ctx.save_for_backward(scaled, prior_precision, weight)
        quadratic = torch.dot(variance, prior_precision) + torch.dot(difference, scaled)
        log_terms = log_variance.sum() if weight is None else torch.dot(log_variance, weight)
        return 0.5 * (quadratic - log_terms + constant)

    @staticmethod
    def backward(ctx, grad):
        scaled, prior_precision, weight = ctx.saved_tensors
        half = 0.5 * grad
        grad_loc = scaled * grad
        if weight is None:
            grad_log_variance = (-half).expand_as(scaled)
        else:
            grad_log_variance = weight * (-half)
        grad_variance = prior_precision * half
        return grad_loc, grad_log_variance, grad_variance, None, None, None, None
