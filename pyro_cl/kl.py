"""The KL term of the online ELBO, ``KL(q_t || q_{t-1})`` (VCL eq. 4), in one place.

:func:`site_kl` is the one route: torch's ``kl_divergence`` registry where a closed form is
registered for the pair of distributions, a Monte Carlo estimate ``log q(θ) - log p(θ)`` at a
reparameterised draw ``θ ~ q`` where none is (as Pyro's ``TraceMeanField_ELBO`` falls back).
The closed forms this library adds are registrations, not routes of their own:

* a guide's :class:`~pyro_cl.diagonal_gaussian.DiagonalGaussian` to a Gaussian prior, from the
  log-variance the guide already holds (:func:`gaussian_kl`);
* a Gaussian to a Laplace prior (:func:`gaussian_laplace_kl`);
* a fit's packed Gaussian sites to their packed prior (:class:`PackedGaussianPrior`, one fused
  function with its gradient written out, :class:`PackedGaussianKL`).

A new prior family needs nothing here: without a registered closed form its KL is the Monte
Carlo term; register one (``@register_kl(DiagonalGaussian, MyPrior)``) to make it exact.
:func:`precision_kl` is the natural-gradient fitters' own form (precision parameters, less a
constant), read by their update kernels rather than by an objective.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch.distributions import (
    Distribution,
    Independent,
    Laplace,
    Normal,
    constraints,
    kl_divergence,
    register_kl,
)

from pyro_cl.diagonal_gaussian import DiagonalGaussian

__all__ = [
    "PackedGaussianKL",
    "PackedGaussianPrior",
    "full_gaussian_kl",
    "gaussian_kl",
    "gaussian_laplace_kl",
    "kl_to_prior",
    "monte_carlo_kl",
    "precision_kl",
    "site_kl",
]


def site_kl(q: Distribution, p: Distribution) -> torch.Tensor:
    """``KL(q || p)`` of one site, summed over its elements: the registered closed form of the
    pair (``Independent`` wrappers looked through), else :func:`monte_carlo_kl`."""
    q, p = _base(q), _base(p)
    try:
        return kl_divergence(q, p).sum()
    except NotImplementedError:
        return monte_carlo_kl(q, p)


def monte_carlo_kl(q: Distribution, p: Distribution) -> torch.Tensor:
    """``log q(θ) - log p(θ)`` summed over the elements of one reparameterised draw
    ``θ ~ q``: an unbiased estimate of ``KL(q || p)`` whose gradient reaches ``q``'s parameters.

    :raises NotImplementedError: if ``q`` has no reparameterised draws.
    """
    if not q.has_rsample:
        raise NotImplementedError(
            f"no closed-form KL from {type(q).__name__} to {type(p).__name__} is registered, "
            f"and {type(q).__name__} has no reparameterised draws for a Monte Carlo estimate: "
            "register one with torch.distributions.register_kl"
        )
    value = q.rsample()
    return (q.log_prob(value) - p.log_prob(value)).sum()


def kl_to_prior(
    posterior: Mapping[str, Distribution], prior: Mapping[str, Distribution]
) -> torch.Tensor:
    """``Σ_site KL(q_site || p_site)``, each term by :func:`site_kl`.

    :raises KeyError: if a posterior site has no prior.
    """
    missing = sorted(set(posterior) - set(prior))
    if missing:
        raise KeyError(f"no prior for sites {missing}")
    if not posterior:
        raise ValueError("the posterior has no sites")
    return sum(site_kl(q, prior[name]) for name, q in posterior.items())


def _base(distribution: Distribution) -> Distribution:
    while isinstance(distribution, Independent):
        distribution = distribution.base_dist
    return distribution


def _log_variance(q: Normal) -> torch.Tensor:
    return q.log_variance if isinstance(q, DiagonalGaussian) else 2.0 * q.scale.log()


def gaussian_kl(
    loc_q: torch.Tensor,
    variance_q: torch.Tensor,
    log_variance_q: torch.Tensor,
    loc_p: torch.Tensor,
    scale_p: torch.Tensor,
) -> torch.Tensor:
    """``KL(N(μ_q, σ_q²) || N(μ_p, σ_p²))`` element by element, from the raw parameters:

    ``½ [(σ_q² + (μ_q - μ_p)²) / σ_p² - 1 - log σ_q² + log σ_p²]``,

    written with the log-variance the guide already holds so that the fast path spends as few
    operations as it can (registered for a :class:`~pyro_cl.diagonal_gaussian.DiagonalGaussian`
    against a Normal).
    """
    variance_p = scale_p * scale_p
    quadratic = (variance_q + (loc_q - loc_p) ** 2) / variance_p
    return 0.5 * (quadratic - 1.0 - log_variance_q + variance_p.log())


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


@register_kl(DiagonalGaussian, Normal)
def _kl_diagonal_gaussian_normal(q: DiagonalGaussian, p: Normal) -> torch.Tensor:
    return gaussian_kl(q.loc, q.variance, q.log_variance, p.loc, p.scale)


@register_kl(Normal, Laplace)
def _kl_normal_laplace(q: Normal, p: Laplace) -> torch.Tensor:
    return gaussian_laplace_kl(q.loc, q.variance, _log_variance(q), p.loc, p.scale)


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


class PackedGaussianPrior(Distribution):
    """The Gaussian priors of a fit's packed sites as one flat distribution:
    ``N(μ_p, 1/λ_p)`` over ``D`` coordinates, with the fit's constant ``Σ log σ_p² - D`` and the
    weight of each coordinate in the KL (:class:`PackedGaussianKL`) computed once per fit. It
    exists for its KL from the packed :class:`~pyro_cl.diagonal_gaussian.DiagonalGaussian`,
    which is registered (nothing draws from it or scores points under it).
    """

    arg_constraints = {"loc": constraints.real, "precision": constraints.positive}

    def __init__(
        self,
        loc: torch.Tensor,
        precision: torch.Tensor,
        constant: float,
        weight: torch.Tensor | None = None,
    ) -> None:
        self.loc, self.precision, self.constant, self.weight = loc, precision, constant, weight
        super().__init__(loc.shape, validate_args=False)


@register_kl(DiagonalGaussian, PackedGaussianPrior)
def _kl_packed(q: DiagonalGaussian, p: PackedGaussianPrior) -> torch.Tensor:
    return PackedGaussianKL.apply(
        q.loc, q.log_variance, q.variance, p.loc, p.precision, p.constant, p.weight
    )
