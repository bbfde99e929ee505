"""The KL term of the online ELBO, ``KL(q_t || q_{t-1})`` (VCL eq. 4), in one place."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.distributions import Distribution, kl_divergence

__all__ = ["kl_to_prior", "gaussian_kl"]


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
