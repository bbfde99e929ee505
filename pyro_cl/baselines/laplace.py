"""Laplace propagation (Smola et al. 2004; the VCL paper's "LP" baseline, section 5), diagonal
or Kronecker-factored (Ritter et al. 2018) by the guide's family.

Each task's posterior is the Laplace approximation around the MAP estimate under the current
Gaussian prior ``N(μ_p, Λ_p⁻¹)`` (the previous task's posterior)::

    θ_t   = argmin_θ  -Σ_n log p(y_n | θ, x_n) + ½ (θ - μ_p)ᵀ Λ_p (θ - μ_p)
    Λ_t   = Λ_p + s · H(θ_t),       H = Gauss-Newton (default) or empirical Fisher of the
                                    task's negative log-likelihood
    q_t   = N(θ_t, Λ_t⁻¹)

and ``q_t`` is written into the guide, so it becomes the next prior through the same handoff as
VCL; it predicts with its mean, the MAP estimate (``predict="sample"`` averages over draws).
``s`` is the strength of the VCL paper's LP sweep (1 is Laplace's approximation).

* With the mean-field guide ``Λ`` and ``H`` are diagonal (:mod:`pyro_cl.baselines.curvature`).
  For a Gaussian likelihood and a linear model the Gauss-Newton matrix is the exact Hessian, so
  ``θ_t`` is the exact posterior mean and ``λ_t`` the diagonal of the exact posterior precision
  (tested).
* With :class:`~pyro_cl.guides.KroneckerFactored` each weight matrix's ``Λ_p = U_p⁻¹ ⊗ V_p⁻¹``
  is its matrix-normal prior's, ``H`` its KFAC block ``N Ḡ ⊗ Ā``, and ``Λ_t`` the factors
  summed side by side (:mod:`pyro_cl.baselines.kronecker_curvature`, eq. 1-3): the
  Kronecker-factored online Laplace of Ritter et al., at least as precise as the exact sum
  (tested); biases stay diagonal. The MAP fit's prior term is the matrix
  normal's density.

We use our own per-example statistics rather than laplace-torch: they already give the GGN and
Fisher diagonals and KFAC factors for every pyro_cl layer (the diagonals for any PyroModule
through torch.func) on the library's sites, in the same units as the guide, without converting
the Pyro model to a plain nn.Module.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pyro_cl.baselines.curvature import check_sample_count, diagonal_curvature
from pyro_cl.baselines.kronecker_curvature import kronecker_curvature, kronecker_sum
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.penalty import Penalty, check_strength, weighted_squared_distance
from pyro_cl.fitters.point_fit import fit_point_estimate
from pyro_cl.guides import MEAN_FIELD, KroneckerFactored, MeanFieldGuide
from pyro_cl.guides.joint_gaussian import JointGaussianGuide
from pyro_cl.guides.kronecker import MatrixNormal
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.parts import Parts
from pyro_cl.infer.per_example import checked_curvature
from pyro_cl.posterior import base_distribution, read_priors

__all__ = ["LaplacePropagation"]


class _GaussianPrior(Penalty):
    """``-log p(θ)`` up to a constant: the MAP fit's prior term (not saved), diagonal
    ``N(μ_p, 1/λ_p)`` over the mean-field sites and the joint prior of each block of the
    guide's (``{key: (layout, prior)}``)."""

    def __init__(
        self,
        locs: dict[str, torch.Tensor],
        precisions: dict[str, torch.Tensor],
        blocks: Mapping[str, tuple] | None = None,
    ) -> None:
        self.locs, self.precisions, self.blocks = locs, precisions, dict(blocks or {})

    def __call__(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor | float:
        own = {name: value for name, value in values.items() if name in self.locs}
        total = 0.5 * weighted_squared_distance(own, self.locs, self.precisions)
        for layout, prior in self.blocks.values():
            total = total - prior.log_prob(layout.join(values))
        return total


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
    #: A diagonal Laplace posterior (mean-field), or a Kronecker-factored one per weight matrix.
    guide_families = (MEAN_FIELD, KroneckerFactored.name)

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

    def check_parts(self, parts: Parts) -> None:
        """As :meth:`Fitter.check_parts`; and a Kronecker-factored guide takes the Gauss-Newton
        curvature (KFAC's factors are the Gauss-Newton matrix's), refused otherwise when the
        learner is built."""
        super().check_parts(parts)
        if parts.guide is not None and KroneckerFactored.name in parts.guide.lineage():
            self._check_kronecker_curvature()

    def _check_kronecker_curvature(self) -> None:
        if self.curvature != "ggn":
            raise ValueError(
                "a Kronecker-factored Laplace posterior takes curvature='ggn' (KFAC's factors "
                f"are the Gauss-Newton matrix's), not {self.curvature!r}"
            )

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
        blocks = guide.block_layouts(sites) if isinstance(guide, JointGaussianGuide) else {}
        if blocks:
            self._check_kronecker_curvature()
        in_blocks = {name for layout in blocks.values() for name in layout.names}
        priors = {
            name: base_distribution(prior)
            for name, prior in read_priors(context.model.net, sites).items()
            if name not in in_blocks
        }
        prior = _GaussianPrior(
            {n: p.loc.detach() for n, p in priors.items()},
            {n: p.scale.detach().pow(-2) for n, p in priors.items()},
            {
                key: (layout, guide.joint_prior(key).distribution())
                for key, layout in blocks.items()
            },
        )
        history = fit_point_estimate(context, guide, problem, prior)
        values = {name: value.detach() for name, value in guide.locs(sites).items()}
        args = (context.model, values, data.x)
        with torch.no_grad():
            if priors:
                hessian = diagonal_curvature(
                    *args, data.y, tasks[0], self.curvature, self.hessian_samples
                )
                guide.set_precisions(
                    {n: prior.precisions[n] + self.strength * hessian[n] for n in priors}
                )
            if blocks:
                kfac = kronecker_curvature(*args, tasks[0], sorted(in_blocks), self.hessian_samples)
                for key, layout in blocks.items():
                    (name,) = layout.names
                    guide.set_joint(
                        key,
                        self._kronecker_posterior(guide.joint_prior(key), values[name], kfac[name]),
                    )
        return history

    def _kronecker_posterior(
        self, prior: MatrixNormal, mean: torch.Tensor, factors: tuple[torch.Tensor, torch.Tensor]
    ) -> MatrixNormal:
        """``MN(θ_t, X⁻¹, Y⁻¹)`` with ``X ⊗ Y`` the factored sum of ``U_p⁻¹ ⊗ V_p⁻¹`` and
        ``s N Ḡ ⊗ Ā`` (module docstring)."""
        rows, columns = kronecker_sum(
            (torch.cholesky_inverse(prior.row_tril), torch.cholesky_inverse(prior.column_tril)),
            (self.strength * factors[0], factors[1]),
        )
        return MatrixNormal(mean.reshape(-1), _covariance_tril(rows), _covariance_tril(columns))


def _covariance_tril(precision: torch.Tensor) -> torch.Tensor:
    """The lower Cholesky factor of ``precision⁻¹``."""
    symmetric = 0.5 * (precision + precision.T)
    return torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(symmetric)))
