"""Diagonal Laplace propagation (Smola et al. 2004; the VCL paper's "LP" baseline, section 5).

Each task's posterior is the Laplace approximation around the MAP estimate under the current
Gaussian prior ``N(μ_p, 1/λ_p)`` (the previous task's posterior)::

    θ_t   = argmin_θ  -Σ_n log p(y_n | θ, x_n) + ½ Σ_i λ_{p,i} (θ_i - μ_{p,i})²
    λ_t   = λ_p + s · diag H(θ_t),      H = Gauss-Newton (default) or empirical Fisher of the
                                        task's negative log-likelihood (pyro_cl.baselines.curvature)
    q_t   = N(θ_t, 1/λ_t)

and ``q_t`` is written into the guide, so it becomes the next prior through the same handoff as
VCL; it predicts with its mean, the MAP estimate (``predict="sample"`` averages over draws).
``s`` is the strength of the VCL paper's LP sweep (1 is Laplace's approximation). For a Gaussian
likelihood and a linear model the Gauss-Newton matrix is the exact Hessian, so ``θ_t`` is the exact posterior mean and ``λ_t`` the diagonal of
the exact posterior precision (tested).

We use our own per-example statistics rather than laplace-torch: they already give the GGN and
Fisher diagonals for every pyro_cl layer (and any PyroModule through torch.func) on the library's
sites, in the same units as the guide, without converting the Pyro model to a plain nn.Module.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.baselines.curvature import check_sample_count, diagonal_curvature
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.penalty import Penalty, check_strength, weighted_squared_distance
from pyro_cl.fitters.point_fit import fit_point_estimate
from pyro_cl.guides import MEAN_FIELD, MeanFieldGuide
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.per_example import checked_curvature
from pyro_cl.posterior import base_distribution, read_priors

__all__ = ["LaplacePropagation"]


class _GaussianPrior(Penalty):
    """``-log N(θ; μ_p, 1/λ_p)`` up to a constant: the MAP fit's prior term (not saved)."""

    def __init__(self, locs: dict[str, torch.Tensor], precisions: dict[str, torch.Tensor]):
        self.locs, self.precisions = locs, precisions

    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        return 0.5 * weighted_squared_distance(values, self.locs, self.precisions)


class LaplacePropagation(Fitter):
    """The diagonal Laplace posterior of each task, handed on as the next prior (module
    docstring).

    :param curvature: ``"ggn"`` (Gauss-Newton) or ``"fisher"`` (empirical Fisher).
    :param strength: ``s``, the Hessian's weight (the LP sweep's λ).
    :param hessian_samples: points per task for the curvature (``None``: all).
    :param predict: ``"mean"`` predicts with the MAP estimate (the VCL paper's baseline),
        ``"sample"`` averages over draws from the Laplace posterior.
    """

    name = "laplace"
    fits_local_guide = True
    #: A diagonal Laplace posterior (mean-field) from a Gaussian prior's precision.
    guide_families = (MEAN_FIELD,)

    def __init__(
        self,
        curvature: str = "ggn",
        strength: float = 1.0,
        hessian_samples: int | None = None,
        predict: str = "mean",
    ) -> None:
        curvature = checked_curvature(curvature)
        if predict not in ("mean", "sample"):
            raise ValueError(f"predict must be 'mean' or 'sample', got {predict!r}")
        self.curvature = curvature
        self.strength = check_strength(strength, "the strength")
        self.hessian_samples = check_sample_count(hessian_samples, "hessian_samples")
        self.predict = predict

    @property
    def predicts_with_mean(self) -> bool:
        return self.predict == "mean"

    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        problem: FitProblem,
    ) -> list[float]:
        data, sites = problem.data, problem.sites
        tasks = data.tasks()
        if len(tasks) != 1:
            raise ValueError(f"Laplace propagation fits one task's points, got tasks {tasks}")
        priors = {n: base_distribution(p) for n, p in read_priors(context.model.net, sites).items()}
        prior = _GaussianPrior(
            {n: p.loc.detach() for n, p in priors.items()},
            {n: p.scale.detach().pow(-2) for n, p in priors.items()},
        )
        history = fit_point_estimate(context, guide, problem, prior)
        values = {name: value.detach() for name, value in guide.locs(sites).items()}
        hessian = diagonal_curvature(
            context.model,
            values,
            data.x,
            data.y,
            tasks[0],
            self.curvature,
            self.hessian_samples,
        )
        with torch.no_grad():
            guide.set_precisions(
                {n: prior.precisions[n] + self.strength * hessian[n] for n in values}
            )
        return history
