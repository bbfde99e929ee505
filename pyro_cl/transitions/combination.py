"""Combining several posteriors into one prior: the handoff along a graph instead of a line.

A domain's prior built from its neighbours' posteriors ``q_1 … q_K`` (issue 29's graph VCL, and a
target predicted from its metadata alone) with weights ``w_k ≥ 0``, normalised to ``Σ_k w_k = 1``
so that the result is a proper distribution. Per site, two ways:

* ``"product"`` — the weighted geometric mean ``p(θ) ∝ Π_k q_k(θ)^{w_k}``, which adds natural
  parameters. For diagonal Gaussians (``η_1 = μ/σ²``, ``η_2 = -1/(2σ²)``)::

      1/σ² = Σ_k w_k / σ_k²,      μ = σ² Σ_k w_k μ_k / σ_k²

  and for Beta sticks (natural parameters ``α - 1``, ``β - 1``)::

      α = Σ_k w_k α_k,            β = Σ_k w_k β_k

  A site that one posterior alone has is that posterior's, exactly: a path of one edge is
  plain VCL.
* ``"moment_match"`` — the mixture ``Σ_k w_k q_k`` projected onto the family by its mean and
  variance: ``m = Σ_k w_k μ_k``, ``v = Σ_k w_k (σ_k² + μ_k²) - m²`` (for a Beta,
  ``α = m ν``, ``β = (1 - m) ν`` with ``ν = m(1 - m)/v - 1``). Wider than the product where the
  neighbours disagree.

A site only some posteriors have (a head only some domains trained) combines those that have it,
their weights normalised among them. Other families are refused, naming the site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyro.distributions as dist
from torch.distributions import Beta, Distribution, Normal

from pyro_cl.posterior import Posterior, base_distribution

__all__ = ["COMBINATIONS", "combine_posteriors"]

#: The ways :func:`combine_posteriors` knows.
COMBINATIONS = ("product", "moment_match")


def combine_posteriors(
    posteriors: Sequence[Mapping[str, Distribution]],
    weights: Sequence[float] | None = None,
    how: str = "product",
) -> Posterior:
    """One posterior from ``posteriors`` (module docstring).

    :param weights: one non-negative weight per posterior (default: equal), normalised per site.
    :param how: one of :data:`COMBINATIONS`.
    :raises ValueError: for no posteriors, a weight that is negative or not finite, weights
        that sum to 0 over a site, an unknown ``how``, or a site of another family than diagonal
        Gaussian or Beta (or of different families or shapes across the posteriors).
    """
    if not posteriors:
        raise ValueError("give at least one posterior to combine")
    if how not in COMBINATIONS:
        raise ValueError(f"how must be one of {COMBINATIONS}, got {how!r}")
    weights = [1.0] * len(posteriors) if weights is None else [float(w) for w in weights]
    if len(weights) != len(posteriors):
        raise ValueError(f"give one weight per posterior: {len(weights)} for {len(posteriors)}")
    if any(not (w >= 0 and w < float("inf")) for w in weights):
        raise ValueError(f"weights must be finite and non-negative, got {weights}")
    names = list(dict.fromkeys(name for posterior in posteriors for name in posterior))
    combined = {}
    for name in names:
        parts = [(w, p[name]) for w, p in zip(weights, posteriors, strict=True) if name in p]
        total = sum(w for w, _ in parts)
        if not total > 0:
            raise ValueError(f"site {name!r}: the weights of the posteriors that have it sum to 0")
        combined[name] = _combine_site(name, [(w / total, q) for w, q in parts], how)
    return combined


def _combine_site(name: str, parts: list[tuple[float, Distribution]], how: str) -> Distribution:
    bases = [(base_distribution(q), q.event_dim) for _, q in parts]
    families = {_family(base) for base, _ in bases}
    event_dims = {event_dim for _, event_dim in bases}
    shapes = {tuple(base.batch_shape) for base, _ in bases}
    if len(families) != 1 or len(event_dims) != 1 or len(shapes) != 1:
        raise ValueError(f"site {name!r}: the posteriors disagree on its family or shape")
    family, event_dim = families.pop(), event_dims.pop()
    if family not in ("normal", "beta"):
        raise ValueError(
            f"site {name!r} is {family}: posteriors combine for diagonal Gaussian and Beta "
            "sites only"
        )
    if len(parts) == 1:  # one posterior is itself, exactly (not up to rounding)
        return parts[0][1]
    w = [weight for weight, _ in parts]
    if family == "normal":
        locs = [base.loc for base, _ in bases]
        variances = [base.scale.square() for base, _ in bases]
        if how == "product":
            precision = sum(wk / vk for wk, vk in zip(w, variances, strict=True))
            loc = sum(wk * mk / vk for wk, mk, vk in zip(w, locs, variances, strict=True))
            result = dist.Normal(loc / precision, precision.rsqrt())
        else:
            mean = sum(wk * mk for wk, mk in zip(w, locs, strict=True))
            # Σ w_k (v_k + (m_k - m̄)²): the mixture's variance without the cancellation of
            # E[θ²] - m̄² when the means are large against the spreads
            variance = sum(
                wk * (vk + (mk - mean).square())
                for wk, mk, vk in zip(w, locs, variances, strict=True)
            )
            result = dist.Normal(mean, variance.sqrt())
    else:  # "beta"
        alphas = [base.concentration1 for base, _ in bases]
        betas = [base.concentration0 for base, _ in bases]
        if how == "product":
            alpha = sum(wk * ak for wk, ak in zip(w, alphas, strict=True))
            beta = sum(wk * bk for wk, bk in zip(w, betas, strict=True))
        else:
            means = [a / (a + b) for a, b in zip(alphas, betas, strict=True)]
            variances = [base.variance for base, _ in bases]
            mean = sum(wk * mk for wk, mk in zip(w, means, strict=True))
            second = sum(
                wk * (vk + mk.square()) for wk, mk, vk in zip(w, means, variances, strict=True)
            )
            spread = mean * (1 - mean) / (second - mean.square()) - 1
            alpha, beta = mean * spread, (1 - mean) * spread
        result = dist.Beta(alpha, beta)
    return result.to_event(event_dim) if event_dim else result


def _family(base: Distribution) -> str:
    if isinstance(base, Normal):
        return "normal"
    if isinstance(base, Beta):
        return "beta"
    return type(base).__name__
