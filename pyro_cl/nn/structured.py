"""Structured sites: latent variables whose posterior is the model's own conditional.

In the H-IBP posterior (supplement eq. 7-12) only the global sticks and the Gaussian weights have
variational parameters. Given the sticks, the per-layer probabilities ``π_j`` and the per-point
masks ``z_i`` follow fixed conditionals: ``q(π_j | v) = p(π_j | v)`` (eq. 10) and ``q(z_i | v)``
is the prior's Concrete at the posterior temperature ``λ1`` instead of ``λ2`` (eq. 11, 21).

Such sites carry ``infer={"structured": True}`` (:data:`~pyro_cl.nn.site_flags.STRUCTURED_FLAG`).
A guide does not give them parameters; it draws them by running the model with the global sites
fixed to its own draws under :class:`~pyro_cl.nn.effects.PosteriorConditionals`, so the module
switches to its posterior conditional.

On the fast path no ``pyro.sample`` runs: a module draws from the posterior conditional itself
and reports ``log q(site) - log p(site)`` per data point to
:class:`~pyro_cl.nn.effects.CollectLocalKL`, and its relaxed masks to
:class:`~pyro_cl.nn.effects.RecordMasks`.

The local sites live in the same ``pyro.plate("data")`` as the observations, with the same
size and subsample, so a minibatch's local KL terms are scaled like its log-likelihood;
:class:`pyro_cl.model.SupervisedModel` creates that plate once per run and shares it through
:class:`~pyro_cl.nn.effects.DataPlate`.
"""

from __future__ import annotations

import torch

from pyro_cl.nn.module_walks import modules_of_type

__all__ = ["StructuredSites", "has_structured_sites", "structured_modules"]


class StructuredSites:
    """Marker mixin for modules with structured sites (they read
    :class:`~pyro_cl.nn.effects.PosteriorConditionals`, report to
    :class:`~pyro_cl.nn.effects.CollectLocalKL` and :class:`~pyro_cl.nn.effects.RecordMasks`)."""


def structured_modules(net: torch.nn.Module) -> list[StructuredSites]:
    """The modules of ``net`` with structured sites, in module order."""
    return modules_of_type(net, StructuredSites)


def has_structured_sites(net: torch.nn.Module) -> bool:
    """Whether ``net`` contains modules with structured sites (IBP masks)."""
    return bool(structured_modules(net))
