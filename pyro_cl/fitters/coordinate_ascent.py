"""Mean-field coordinate-ascent VI (the VCL slides' methodology): Bayesian linear regression with
an unknown noise precision, fitted factor by factor in closed form.

The model and the mean-field family::

    y_n = x_nᵀ w + ε_n,   ε_n ~ N(0, 1/τ),   w_d ~ N(m_d, v_d),   τ ~ Gamma(α, β)
    q(w, τ) = Π_d N(w_d; μ_d, s_d²) · Gamma(τ; a, b)

Initialise each factor, then cycle over them, revising each given the others (CAVI: the optimal
factor is ``q*(z_j) ∝ exp E_{q(z_-j)}[log p(y, z)]``), until the free energy stops improving.
For this conjugate-exponential model every update is closed form, with ``E[τ] = a/b`` and
``c_d = Σ_n x_nd²``::

    q(w_d):  1/s_d² = 1/v_d + E[τ] c_d,
             μ_d = s_d² (m_d/v_d + E[τ] Σ_n x_nd (y_n - Σ_{j≠d} x_nj μ_j))
    q(τ):    a = α + N/2,   b = β + ½ E[Σ_n (y_n - x_nᵀw)²]
             E[Σ_n (y_n - x_nᵀw)²] = Σ_n (y_n - x_nᵀμ)² + Σ_d s_d² c_d

and each sweep reports the evidence lower bound ``L = E_q[log p(y | w, τ)] - KL(q(w) ‖ p(w)) -
KL(q(τ) ‖ p(τ))``, the negative of the slides' free energy ``F``; no update can lower ``L``
(tested, sweep by sweep). Online mean-field VB is the same fit with yesterday's ``q`` as today's
prior: standalone (:class:`CoordinateAscentRegression`), or as the :class:`CoordinateAscent`
fitter of any :class:`~pyro_cl.learner.learner.ContinualLearner` whose net is a
:class:`~pyro_cl.nn.linear_regression.BayesianLinearRegression`, so that transitions,
checkpoints and the rest of the library apply::

    learner = ContinualLearner(BayesianLinearRegression(D), PrecisionGaussianLikelihood(),
                               fitter=CoordinateAscent(), ml_init_epochs=0)
    for x, y in batches:
        learner.observe((x, y))
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch.distributions import Gamma, Normal, kl_divergence

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.finite import all_finite
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.nn.linear_regression import BayesianLinearRegression
from pyro_cl.points import Points
from pyro_cl.posterior import base_distribution, read_priors

__all__ = ["CoordinateAscent", "CoordinateAscentRegression", "NormalGammaPosterior"]


@dataclass
class NormalGammaPosterior:
    """``Π_d N(w_d; loc_d, scale_d²) · Gamma(τ; concentration, rate)``."""

    loc: torch.Tensor
    scale: torch.Tensor
    concentration: torch.Tensor
    rate: torch.Tensor

    @property
    def weights(self) -> Normal:
        return Normal(self.loc, self.scale)

    @property
    def precision(self) -> Gamma:
        return Gamma(self.concentration, self.rate)

    def copy(self) -> NormalGammaPosterior:
        return NormalGammaPosterior(
            self.loc.clone(), self.scale.clone(), self.concentration.clone(), self.rate.clone()
        )


@dataclass
class CoordinateAscentRegression:
    """Bayesian linear regression with unknown noise precision, fitted by CAVI (module docstring)
    and learnt online: after each :meth:`observe`, the posterior is the next prior.

    :param features: ``D``, the inputs' size (add a column of ones for an intercept).
    :param prior_scale: the weights' prior standard deviation (mean 0).
    :param concentration: ``α`` of the noise precision's Gamma prior.
    :param rate: ``β`` of that prior.
    :param max_sweeps: at most this many sweeps over the factors per step.
    :param tolerance: stop when a sweep raises the bound by less than this (nats).
    """

    features: int
    prior_scale: float = 1.0
    concentration: float = 1.0
    rate: float = 1.0
    max_sweeps: int = 500
    tolerance: float = 1e-10
    prior: NormalGammaPosterior = field(init=False)
    #: the bound after every sweep of the last step (non-decreasing)
    history: list[float] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        features = checked_count(self.features, "features")
        scale = checked_real(self.prior_scale, "prior_scale", 0.0, low_open=True)
        alpha = checked_real(self.concentration, "concentration", 0.0, low_open=True)
        beta = checked_real(self.rate, "rate", 0.0, low_open=True)
        checked_count(self.max_sweeps, "max_sweeps")
        checked_real(self.tolerance, "tolerance", 0.0)
        double = torch.float64
        self.prior = NormalGammaPosterior(
            torch.zeros(features, dtype=double),
            torch.full((features,), scale, dtype=double),
            torch.tensor(alpha, dtype=double),
            torch.tensor(beta, dtype=double),
        )

    def observe(self, x: torch.Tensor, y: torch.Tensor) -> NormalGammaPosterior:
        """Fit ``q`` to ``(x, y)`` against the current prior by CAVI, and make it the prior."""
        posterior, self.history = fit_coordinate_ascent(
            x, y, self.prior, self.max_sweeps, self.tolerance
        )
        self.prior = posterior
        return posterior


def fit_coordinate_ascent(
    x: torch.Tensor,
    y: torch.Tensor,
    prior: NormalGammaPosterior,
    max_sweeps: int = 500,
    tolerance: float = 1e-10,
) -> tuple[NormalGammaPosterior, list[float]]:
    """CAVI for the module docstring's model from ``q = prior``: sweeps of the ``D`` weight
    updates and then the precision's update, until a sweep gains less than ``tolerance``.

    :returns: the fitted ``q`` and the bound after every sweep.
    :raises ValueError: if ``x`` is not ``(N, D)`` for the prior's ``D`` or ``y`` not ``(N,)``.
    :raises DivergenceError: if the bound or ``q`` stops being finite (targets too large for
        float64's squares).
    :warns RuntimeWarning: when ``max_sweeps`` end before a sweep gains less than
        ``tolerance``: one-coordinate updates crawl along strongly correlated inputs, and the
        returned ``q`` is then not the fixed point.
    """
    x, y = x.to(torch.float64), y.to(torch.float64).reshape(-1)
    if x.dim() != 2 or x.shape[1] != prior.loc.shape[0] or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x must be (N, {prior.loc.shape[0]}) and y (N,), got {tuple(x.shape)} and "
            f"{tuple(y.shape)}"
        )
    q = prior.copy()
    column_squares = x.square().sum(0)
    prior_precision = prior.scale.pow(-2)
    q.concentration = prior.concentration + 0.5 * x.shape[0]  # fixed by the data's size
    history = [evidence_lower_bound(x, y, q, prior)]
    for _ in range(max_sweeps):
        expected_precision = q.concentration / q.rate
        residual = y - x @ q.loc
        for d in range(x.shape[1]):
            residual = residual + x[:, d] * q.loc[d]  # y - Σ_{j≠d} x_j μ_j
            precision = prior_precision[d] + expected_precision * column_squares[d]
            q.loc[d] = (
                prior.loc[d] * prior_precision[d] + expected_precision * (x[:, d] @ residual)
            ) / precision
            q.scale[d] = precision.rsqrt()
            residual = residual - x[:, d] * q.loc[d]
        expected_error = residual.square().sum() + (q.scale.square() * column_squares).sum()
        q.rate = prior.rate + 0.5 * expected_error
        history.append(evidence_lower_bound(x, y, q, prior))
        if not math.isfinite(history[-1]) or not all_finite(q.loc) or not all_finite(q.rate):
            raise DivergenceError(
                f"coordinate ascent's bound is {history[-1]} after {len(history) - 1} sweeps: "
                "the targets are too large for the updates' squares; standardise them"
            )
        if history[-1] - history[-2] < tolerance:
            break
    else:
        warnings.warn(
            f"coordinate ascent stopped after {max_sweeps} sweeps without converging: the last "
            f"sweep still gained {history[-1] - history[-2]:.3g} nats (tolerance {tolerance:g}). "
            "Strongly correlated inputs make one-coordinate updates slow; raise max_sweeps, "
            "decorrelate the inputs, or fit with SVI",
            RuntimeWarning,
            stacklevel=2,
        )
    return q, history


def evidence_lower_bound(
    x: torch.Tensor, y: torch.Tensor, q: NormalGammaPosterior, prior: NormalGammaPosterior
) -> float:
    """``L(q) = E_q[log p(y | w, τ)] - KL(q(w) ‖ p(w)) - KL(q(τ) ‖ p(τ))`` (minus the free
    energy)."""
    expected_precision = q.concentration / q.rate
    expected_log_precision = torch.digamma(q.concentration) - q.rate.log()
    expected_error = (y - x @ q.loc).square().sum() + (q.scale.square() * x.square().sum(0)).sum()
    n = x.shape[0]
    log_likelihood = 0.5 * n * (expected_log_precision - math.log(2 * math.pi))
    log_likelihood = log_likelihood - 0.5 * expected_precision * expected_error
    kl = kl_divergence(q.weights, prior.weights).sum() + kl_divergence(q.precision, prior.precision)
    return float(log_likelihood - kl)


class CoordinateAscent(Fitter):
    """CAVI as a fitter: fits the guide's ``q(w) q(τ)`` of a
    :class:`~pyro_cl.nn.linear_regression.BayesianLinearRegression` net to a step's points
    against the net's current priors (:func:`fit_coordinate_ascent`, in float64), sweeping until
    a sweep gains less than ``tolerance`` (``problem.epochs`` and the batch size do not apply:
    each update reads all the points). The returned history is ``-L`` after every sweep.

    :param max_sweeps: at most this many sweeps per step.
    :param tolerance: the smallest gain in nats that keeps the sweeps going.
    """

    name = "coordinate_ascent"
    uses_optimiser = False

    def __init__(self, max_sweeps: int = 500, tolerance: float = 1e-10) -> None:
        self.max_sweeps = checked_count(max_sweeps, "max_sweeps")
        self.tolerance = checked_real(tolerance, "tolerance", 0.0)

    def prepare(self, context, guide, data, task_id, sites, first_task) -> None:
        """Nothing: the sweeps start from the prior, whatever the guide holds."""

    def fit(self, context: FitContext, guide: MeanFieldGuide, problem: FitProblem) -> list[float]:
        net = context.model.net
        if not isinstance(net, BayesianLinearRegression):
            raise TypeError(
                "CoordinateAscent fits BayesianLinearRegression nets (its updates are that "
                f"model's closed forms), got {type(net).__name__}"
            )
        data: Points = problem.data
        if data.weights is not None:
            raise ValueError("CoordinateAscent does not weigh points; give unweighted data")
        priors = read_priors(net, ["weight", "noise_precision"])
        weight, precision = (base_distribution(priors[n]) for n in ("weight", "noise_precision"))
        double = torch.float64
        prior = NormalGammaPosterior(
            weight.loc.to(double).clone(),
            weight.scale.to(double).clone(),
            precision.concentration.to(double).clone(),
            precision.rate.to(double).clone(),
        )
        q, history = fit_coordinate_ascent(data.x, data.y, prior, self.max_sweeps, self.tolerance)
        with torch.no_grad():
            loc, log_variance = guide.gaussian_parameters(["weight"])["weight"]
            loc.copy_(q.loc)
            log_variance.copy_(2 * q.scale.log())
            guide.log_shape["noise_precision"].copy_(q.concentration.log())
            guide.log_rate["noise_precision"].copy_(q.rate.log())
        return [-bound for bound in history]
