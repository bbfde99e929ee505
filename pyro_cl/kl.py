"""The KL term of the online ELBO, ``KL(q_t || q_{t-1})`` (VCL eq. 4), in one place."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.distributions import Distribution, kl_divergence

__all__ = ["kl_to_prior"]


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
