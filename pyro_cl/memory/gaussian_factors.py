"""Gaussian factors of single data points (Kurle et al. 2020, section 3.1, eq. 5a/5b, appendices
C-E).

At a local optimum ``q(w) = N(μ, diag σ²)`` of the ELBO with Gaussian prior ``p_0 = N(μ_0, σ_0²)``,
the optimality conditions say that ``q`` factorises like the posterior::

    q(w) ∝ p_0(w) ∏_n r⁽ⁿ⁾(w),    r⁽ⁿ⁾(w) = exp(η⁽ⁿ⁾·w - ½ Λ⁽ⁿ⁾·w²)

with natural parameters (eq. 5a, 5b; diagonal, so per coordinate)::

    Λ⁽ⁿ⁾ = -2 ∂_{σ²} E_q[log p(d_n | w)]
    η⁽ⁿ⁾ = ∂_μ E_q[log p(d_n | w)] + Λ⁽ⁿ⁾ μ

Both expectations are estimated by Monte Carlo with the reparameterisation ``w_s = μ + σ ε_s``:
``∂_μ E[f] = E[∇f(w)]`` and ``∂_{σ²} E[f] = E[∇f(w) ε / (2σ)]``, so ``Λ⁽ⁿ⁾ ≈ -(1/S) Σ_s
∇ log p(d_n | w_s) ε_s / σ``. Per-example gradients come from
:func:`pyro_cl.infer.per_example.example_gradient_sums`, vectorised over samples and points.

**Bias correction (appendix C).** The Monte Carlo factors do not sum exactly to ``q``; the total
bias ``Λ_b = (Λ_q - Λ_0) - Σ_n Λ⁽ⁿ⁾`` (and ``η_b`` alike) is spread evenly over the ``N`` factors,
``Λ̂⁽ⁿ⁾ = Λ⁽ⁿ⁾ + Λ_b / N``, so that ``Λ_0 + Σ_n Λ̂⁽ⁿ⁾ = Λ_q`` exactly. (The appendix writes
``- Λ_b / N``; with its definition of ``Λ_b`` only ``+`` restores the identity the correction
is for, which is what the tests check.)

**Residuals (eq. 6, 8, appendix E).** ``E_q[log r⁽ⁿ⁾] = η⁽ⁿ⁾·μ - ½ Λ⁽ⁿ⁾·(μ² + σ²)`` in closed form;
``E_q[log p(d_n | w)]`` by Monte Carlo from the same samples. Their difference is the Gaussian
residual score of a data point.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pyro.distributions import Normal

from pyro_cl.infer.per_example import example_gradient_sums
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import Posterior, base_distribution

__all__ = [
    "FactorUpdate",
    "GaussianFactors",
    "NaturalGaussian",
    "estimate_gaussian_factors",
    "natural_parameters",
    "remove_memory_factors",
]

#: Floats of per-sample work in flight per chunk of samples (:func:`_floats_per_sample`).
_CHUNK_ELEMENTS = 2**24


@dataclass(frozen=True)
class NaturalGaussian:
    """A diagonal Gaussian per site in natural parameters: ``precision = 1/σ²`` and
    ``shift = μ/σ²`` (``{site: tensor}``)."""

    precision: dict[str, torch.Tensor]
    shift: dict[str, torch.Tensor]

    def distributions(self) -> Posterior:
        """``{site: Normal(shift/precision, precision^-½)}`` with the site's event dimensions."""
        return {
            name: Normal(self.shift[name] / p, p.rsqrt()).to_event(p.dim())
            for name, p in self.precision.items()
        }


def natural_parameters(posterior: Posterior) -> NaturalGaussian:
    """The natural parameters of a posterior of (possibly ``Independent``) Normal sites.

    :raises TypeError: naming a site that is not Gaussian.
    """
    precision, shift = {}, {}
    for name, q in posterior.items():
        normal = base_distribution(q)
        if not isinstance(normal, Normal):
            raise TypeError(
                f"Gaussian factors need Gaussian sites; {name!r} is {type(normal).__name__}"
            )
        precision[name] = normal.scale.detach().pow(-2)
        shift[name] = normal.loc.detach() * precision[name]
    return NaturalGaussian(precision, shift)


@dataclass(frozen=True)
class GaussianFactors:
    """The Gaussian factor ``r⁽ⁿ⁾`` of each of ``N`` data points under a fitted ``q``.

    :ivar precision: ``{site: Λ⁽ⁿ⁾}``, shape ``(N, *site shape)``.
    :ivar shift: ``{site: η⁽ⁿ⁾}``, shape ``(N, *site shape)``.
    :ivar expected_log_likelihood: ``E_q[log p(d_n | w)]`` (Monte Carlo), shape ``(N,)``.
    :ivar num_samples: the Monte Carlo samples behind the estimates.
    """

    precision: dict[str, torch.Tensor]
    shift: dict[str, torch.Tensor]
    expected_log_likelihood: torch.Tensor
    num_samples: int

    def __len__(self) -> int:
        return self.expected_log_likelihood.shape[0]

    def select(self, index: torch.Tensor) -> GaussianFactors:
        """The factors of the points ``index`` (a boolean mask or integer indices)."""
        return GaussianFactors(
            {n: p[index] for n, p in self.precision.items()},
            {n: s[index] for n, s in self.shift.items()},
            self.expected_log_likelihood[index],
            self.num_samples,
        )

    def weighted(self, weights: torch.Tensor) -> GaussianFactors:
        """The factors of the likelihoods ``p(d_n | w)^{w_n}``: every natural parameter and
        ``E_q[log p]`` times ``w_n`` (a weighted term's factor is the weighted factor, by eq.
        5a/5b's linearity), so residual scores scale by ``w_n`` too (Kurle et al. 2020,
        algorithm 1 with Bayesian forgetting)."""

        def scaled(value: torch.Tensor) -> torch.Tensor:
            return value * weights.to(value).reshape(-1, *([1] * (value.dim() - 1)))

        return GaussianFactors(
            {n: scaled(p) for n, p in self.precision.items()},
            {n: scaled(s) for n, s in self.shift.items()},
            scaled(self.expected_log_likelihood),
            self.num_samples,
        )

    def total(self) -> NaturalGaussian:
        """``Σ_n`` of the factors' natural parameters (a product of the factors)."""
        return NaturalGaussian(
            {n: p.sum(0) for n, p in self.precision.items()},
            {n: s.sum(0) for n, s in self.shift.items()},
        )

    def bias_corrected(self, prior: NaturalGaussian, posterior: NaturalGaussian) -> GaussianFactors:
        """Appendix C: spread ``(q - p_0) - Σ_n r⁽ⁿ⁾`` evenly over the ``N`` factors, so that
        ``prior + Σ_n factors = posterior`` in natural parameters (exactly, up to rounding)."""
        n = len(self)
        total = self.total()
        precision = {
            name: p
            + ((posterior.precision[name] - prior.precision[name]) - total.precision[name]) / n
            for name, p in self.precision.items()
        }
        shift = {
            name: s + ((posterior.shift[name] - prior.shift[name]) - total.shift[name]) / n
            for name, s in self.shift.items()
        }
        return GaussianFactors(precision, shift, self.expected_log_likelihood, self.num_samples)

    def expected_log_factor(self, posterior: Posterior) -> torch.Tensor:
        """``E_q[log r⁽ⁿ⁾(w)] = η⁽ⁿ⁾·μ - ½ Λ⁽ⁿ⁾·(μ² + σ²)`` per point (appendix E), shape ``(N,)``."""
        total = self.expected_log_likelihood.new_zeros(len(self))
        for name, q in posterior.items():
            normal = base_distribution(q)
            mean, variance = normal.loc.detach(), normal.scale.detach().square()
            term = self.shift[name] * mean - 0.5 * self.precision[name] * (mean.square() + variance)
            total = total + term.reshape(len(self), -1).sum(1)
        return total

    def residual_scores(self, posterior: Posterior) -> torch.Tensor:
        """Gaussian residual scores ``E_q[log p(d_n | w)] - E_q[log r⁽ⁿ⁾(w)]`` (eq. 8): how much
        of point ``n``'s likelihood its Gaussian factor misses, shape ``(N,)``."""
        return self.expected_log_likelihood - self.expected_log_factor(posterior)


def _floats_per_sample(locs: dict[str, torch.Tensor], points: int, fast: bool) -> int:
    """About how many floats one Monte Carlo sample holds in flight. The layers' route (fast)
    keeps a sample's draws and noise (twice every site's size) and, per point, a few vectors as
    wide as the widest layer's outputs (a weight site is ``(out, in)``; no per-example gradient
    of a sample is formed, :func:`~pyro_cl.nn.linear.outer_product_sums`); ``torch.func``'s
    route forms every point's gradient of the largest site."""
    if not fast:
        return max(1, points * max(m.numel() for m in locs.values()))
    total = sum(m.numel() for m in locs.values())
    width = max((m.shape[0] for m in locs.values() if m.dim()), default=1)
    return 2 * total + 4 * points * width


@torch.no_grad()
def _draw(locs: dict, scales: dict, count: int) -> tuple[dict, dict]:
    """``count`` draws ``θ_s = μ + σ ε_s`` per site, and the noise ``ε``."""
    noise = {
        n: torch.randn((count, *m.shape), device=m.device, dtype=m.dtype) for n, m in locs.items()
    }
    theta = {n: locs[n] + scales[n] * noise[n] for n in locs}
    return theta, noise


def estimate_gaussian_factors(
    model: SupervisedModel,
    posterior: Posterior,
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int = 0,
    num_samples: int = 1000,
    samples_per_chunk: int | None = None,
) -> GaussianFactors:
    """Monte Carlo estimates of every point's Gaussian factor under ``posterior`` (eq. 5a, 5b),
    without bias correction (see :meth:`GaussianFactors.bias_corrected`).

    Sites of the net that ``posterior`` does not name are drawn from their priors (they are then
    not part of any factor). Draws come from torch's global generator (a learner's seed fixes them).

    :param posterior: ``{site: Normal}``, the fitted ``q`` (e.g. a learner's ``q̃_t``).
    :param num_samples: ``K_term``, the Monte Carlo samples (50k in the paper, table 2).
    :param samples_per_chunk: samples per vectorised pass (default: as many as keep about
        ``2**24`` floats in flight, :func:`_floats_per_sample`). The draws depend on it: the same
        seed with another chunk size gives other (equally distributed) samples.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    natural_parameters(posterior)  # refuses non-Gaussian sites by name
    locs = {n: base_distribution(q).loc.detach() for n, q in posterior.items()}
    scales = {n: base_distribution(q).scale.detach() for n, q in posterior.items()}
    points = x.shape[0]
    if samples_per_chunk is None:
        per_sample = _floats_per_sample(locs, points, model.fast)
        samples_per_chunk = max(1, min(num_samples, _CHUNK_ELEMENTS // per_sample))
    log_likelihood = x.new_zeros(points)
    gradients = {n: m.new_zeros((points, *m.shape)) for n, m in locs.items()}
    weighted = {n: m.new_zeros((points, *m.shape)) for n, m in locs.items()}
    done = 0
    while done < num_samples:
        count = min(samples_per_chunk, num_samples - done)
        theta, noise = _draw(locs, scales, count)
        with torch.enable_grad():
            sums = example_gradient_sums(model, theta, noise, x, y, task_id)
        log_likelihood += sums.log_likelihood
        for name in locs:
            gradients[name] += sums.gradients[name]
            weighted[name] += sums.weighted[name]
        done += count
    precision = {n: -(weighted[n] / num_samples) / scales[n] for n in locs}
    shift = {n: gradients[n] / num_samples + precision[n] * locs[n] for n in locs}
    return GaussianFactors(precision, shift, log_likelihood / num_samples, num_samples)


@dataclass(frozen=True)
class FactorUpdate:
    """The Gaussian part ``q_t`` after the memory's factors are taken out (eq. 9a/9b).

    :ivar posterior: ``q_t`` in natural parameters.
    :ivar equation: ``"9a"`` (prior times the factors outside the memory) or ``"9b"`` (the fit
        divided by the memory's factors), whichever sums fewer Monte Carlo estimates.
    :ivar clipped: coordinates whose precision fell below the floor and were clipped to it.
    :ivar coordinates: all coordinates of ``q_t``.
    """

    posterior: NaturalGaussian
    equation: str
    clipped: int
    coordinates: int


def remove_memory_factors(
    prior: NaturalGaussian,
    fitted: NaturalGaussian,
    factors: GaussianFactors,
    in_memory: torch.Tensor,
    precision_floor: float = 0.01,
    equation: str | None = None,
) -> FactorUpdate:
    """The Gaussian update of Kurle et al. (eq. 9a, 9b, section 3.3).

    With ``p`` the step's prior, ``q̃`` the fit on ``D_t ∪ M_{t-1}`` and bias-corrected factors
    ``r⁽ⁿ⁾`` of those points (so ``p ∏_n r⁽ⁿ⁾ = q̃``)::

        q_t = p ∏_{n ∉ M_t} r⁽ⁿ⁾     (9a, used when no more points lie outside the memory than in it)
        q_t = q̃ / ∏_{n ∈ M_t} r⁽ⁿ⁾   (9b, otherwise)

    The two agree exactly on bias-corrected factors; the paper picks the one that sums fewer
    noisy estimates. Factors of non-log-concave likelihood terms (any hidden layer) can be
    negative, so ``q_t``'s precision can fall below the prior's or below zero. Such coordinates
    are **clipped** to ``precision_floor × (the prior's precision)`` and keep the fit's mean. The
    count is returned (and reported by the memory) rather than refused, because a long stream
    would otherwise stop on the first noisy coordinate. The paper's equations have no floor; the
    default of 1% of the prior's precision only catches precisions that are (nearly) invalid. A
    floor of 1 — the data outside the memory never lowers a precision below the prior's — was the
    default before, and clipped 44-45% of the coordinates a step on spam and 6-11% on energy,
    costing GRS 0.17 and 0.08 nats of test LML; at 0.01 neither stream nor yacht clips any
    (docs/lab/online_memory.md, "GRS's precision floor").

    :param in_memory: boolean mask over the points of ``factors``: the new memory ``M_t``.
    :param precision_floor: the floor as a fraction of the prior precision (positive).
    :param equation: ``"9a"`` or ``"9b"`` to force one (default: the paper's rule).
    """
    if not precision_floor > 0:
        raise ValueError(f"precision_floor must be positive, got {precision_floor}")
    outside = ~in_memory
    if equation is None:
        equation = "9a" if int(outside.sum()) <= int(in_memory.sum()) else "9b"
    if equation not in ("9a", "9b"):
        raise ValueError(f"equation must be '9a' or '9b', got {equation!r}")
    if equation == "9a":
        rest = factors.select(outside).total()
        precision = {n: prior.precision[n] + rest.precision[n] for n in prior.precision}
        shift = {n: prior.shift[n] + rest.shift[n] for n in prior.precision}
    else:
        memory = factors.select(in_memory).total()
        precision = {n: fitted.precision[n] - memory.precision[n] for n in prior.precision}
        shift = {n: fitted.shift[n] - memory.shift[n] for n in prior.precision}
    clipped = coordinates = 0
    for name, value in precision.items():
        floor = precision_floor * prior.precision[name]
        low = ~(value >= floor)  # also catches NaN
        fitted_mean = fitted.shift[name] / fitted.precision[name]
        precision[name] = torch.where(low, floor, value)
        shift[name] = torch.where(low, floor * fitted_mean, shift[name])
        clipped += int(low.sum())
        coordinates += value.numel()
    return FactorUpdate(NaturalGaussian(precision, shift), equation, clipped, coordinates)
