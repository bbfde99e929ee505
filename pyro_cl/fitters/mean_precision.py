"""GVCL's λ: the data's share of the previous posterior's precision, weighed λ times in the KL's
mean term.

VCL's ``KL(q_t ‖ q_{t-1})`` holds each mean ``μ_i`` to ``μ_{t-1,i}`` with the previous posterior's
precision ``1/σ²_{t-1,i}``: the initial prior's ``1/σ²_{0,i}`` plus what the data have added
since. Online EWC holds each weight with ``λ`` times the data's curvature. GVCL (Loo, Swaroop &
Turner, ICLR 2021, section 3, and their reference code's ``compute_kl``) carries that ``λ`` into
the KL, in its mean term only::

    KL_λ(q ‖ q_{t-1}) = ½ Σ_i [σ_i²/σ²_{t-1,i} + P_i (μ_i - μ_{t-1,i})² + log(σ²_{t-1,i}/σ_i²) - 1]
    P_i = λ (1/σ²_{t-1,i} - 1/σ²_{0,i}) + 1/σ²_{0,i}

``λ = 1`` is the KL. Where a transition has widened a prior past the initial one the data hold
no precision there, and ``P_i = 1/σ²_{t-1,i}``, the KL's own (the reference code clips the data's
share at 0 and keeps ``1/σ²_{0,i}``, which at ``λ = 1`` would not be the KL); in general
``P_i = 1/σ²_{t-1,i} + (λ - 1)(1/σ²_{t-1,i} - 1/σ²_{0,i})₊``.

Under the β-ELBO the previous posterior's data precision is the summed curvature over β
(``1/σ²_{t-1} - 1/σ²_0 = H_{<t}/β``), so ``β P_i → λ H_{<t,i}`` as ``β → 0``: the update of the
means becomes online EWC's with strength ``λ`` (``λ = 1`` gives the strength 1 of plain
tempering). So β sets how far each task may move the variances, λ how firmly the
means are held.

A fit adds the difference to the KL it already computes::

    KL_λ - KL = ½ (λ - 1) Σ_i (1/σ²_{t-1,i} - 1/σ²_{0,i})₊ (μ_i - μ_{t-1,i})²

which is 0 on the first task (the previous posterior is the initial prior) and on every site
the data have not reached (a new task's head).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch.distributions import Distribution

from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.packed_gaussians import PackedGaussians, site_views
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import base_distribution, read_priors

__all__ = ["data_precision", "mean_precision_term"]


def data_precision(prior: Distribution, initial_prior: Distribution) -> torch.Tensor:
    """``(1/σ²_{t-1} - 1/σ²_0)₊``: the precision the data have added to a site's prior since the
    initial prior (0 where a transition widened it past the initial prior)."""
    added = base_distribution(prior).variance.reciprocal()
    added = added - base_distribution(initial_prior).variance.reciprocal()
    return added.clamp(min=0).detach()


def mean_precision_term(
    model: SupervisedModel,
    guide: MeanFieldGuide,
    names: Iterable[str],
    initial_prior: Mapping[str, Distribution],
    weight: float,
    packed: PackedGaussians | None = None,
) -> Callable[[], torch.Tensor] | None:
    """``KL_λ - KL`` over the Gaussian sites among ``names`` (module docstring), as a function of
    the guide's current means; ``None`` when it is 0 whatever the means (``λ = 1``, or no site
    holds data precision: the first task).

    The previous posterior is the model's current prior, read once; ``packed`` (the fit's flat
    leaves) supplies the means of the sites it packs, so the gradient reaches what Adam steps.
    """
    if weight == 1:
        return None
    names = guide.gaussian_sites(list(names))
    priors = read_priors(model.net, names)
    held = {}
    for name in names:
        precision = data_precision(priors[name], initial_prior[name])
        if bool((precision > 0).any()):
            held[name] = (base_distribution(priors[name]).loc.detach(), precision)
    if not held:
        return None
    inside = set(packed.names) if packed is not None else set()
    outside = [name for name in held if name not in inside]

    def term() -> torch.Tensor:
        locs = site_views(packed.loc, packed.site_shapes) if inside else {}
        locs |= {name: pair[0] for name, pair in guide.gaussian_parameters(outside).items()}
        total = sum(
            (precision * (locs[name] - loc).square()).sum()
            for name, (loc, precision) in held.items()
        )
        return 0.5 * (weight - 1) * total

    return term
