"""Mean-field coordinate ascent (CAVI) on Bayesian linear regression with an unknown noise
precision, against its own fixed-point equations, a Monte Carlo estimate of its bound and the
exact posterior where the noise is known."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from torch.distributions import Gamma, Normal

from pyro_cl.fitters.coordinate_ascent import (
    CoordinateAscentRegression,
    evidence_lower_bound,
    fit_coordinate_ascent,
)


def regression(n: int = 50, seed: int = 0, shift: float = 0.0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator, dtype=torch.float64) + shift
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return x, y + 0.5 * torch.randn(n, generator=generator, dtype=torch.float64)


def test_every_sweep_raises_the_bound_and_the_fixed_point_solves_the_mean_field_equations():
    x, y = regression()
    learner = CoordinateAscentRegression(3, prior_scale=2.0, concentration=2.0, rate=1.0)
    q = learner.observe(x, y)
    history = learner.history
    assert len(history) > 3 and all(b >= a - 1e-9 for a, b in pairwise(history))
    assert history[-1] - history[0] > 10  # it moved far from the prior
    # the mean-field equations at the fixed point: μ solves the linear system with E[τ] = a/b,
    # s_d² = 1 / (1/v_d + E[τ] Σ x_d²), b = β + ½ E[SSE], a = α + N/2
    tau = q.concentration / q.rate
    system = torch.eye(3, dtype=torch.float64) / 4.0 + tau * x.T @ x
    torch.testing.assert_close(q.loc, torch.linalg.solve(system, tau * x.T @ y), atol=1e-6, rtol=0)
    torch.testing.assert_close(q.scale.pow(-2), 0.25 + tau * x.square().sum(0))
    expected_error = (y - x @ q.loc).square().sum() + (q.scale.square() * x.square().sum(0)).sum()
    torch.testing.assert_close(q.rate, 1.0 + 0.5 * expected_error)
    assert float(q.concentration) == 2.0 + 0.5 * len(y)
    assert 1 / tau.sqrt() == pytest.approx(0.5, rel=0.25)  # the noise it was drawn with


def test_the_closed_form_bound_equals_a_monte_carlo_estimate():
    x, y = regression(n=20, seed=1)
    prior = CoordinateAscentRegression(3, concentration=2.0, rate=1.0).prior
    with pytest.warns(RuntimeWarning, match="without converging"):  # a q short of the optimum
        q, _ = fit_coordinate_ascent(x, y, prior, max_sweeps=3)
    torch.manual_seed(0)
    w = q.weights.sample((200_000,))
    tau = q.precision.sample((200_000,))
    log_joint = (
        Normal(w @ x.T, tau.rsqrt()[:, None]).log_prob(y).sum(-1)
        + prior.weights.log_prob(w).sum(-1)
        + prior.precision.log_prob(tau)
    )
    log_q = q.weights.log_prob(w).sum(-1) + q.precision.log_prob(tau)
    estimate = (log_joint - log_q).mean()
    assert float(estimate) == pytest.approx(evidence_lower_bound(x, y, q, prior), abs=0.05)


def test_with_the_noise_known_online_coordinate_ascent_is_the_exact_diagonal_recursion():
    """A Gamma prior of concentration 1e9 pins τ at 4 (σ = 0.5): each step's q(w) then has the
    exact posterior mean under the previous q and the diagonal of its precision (VCL appendix F),
    the recursion online mean-field VB follows."""
    learner = CoordinateAscentRegression(3, concentration=4e9, rate=1e9)
    mean = torch.zeros(3, dtype=torch.float64)
    variance = torch.ones(3, dtype=torch.float64)
    for step in range(3):
        x, y = regression(n=30, seed=step, shift=0.3 * step)
        q = learner.observe(x, y)
        precision = torch.diag(1 / variance) + 4.0 * x.T @ x
        mean = torch.linalg.solve(precision, mean / variance + 4.0 * x.T @ y)
        variance = 1 / torch.diagonal(precision)
        torch.testing.assert_close(q.loc, mean, atol=1e-6, rtol=0)
        torch.testing.assert_close(q.scale.square(), variance, rtol=1e-6, atol=0)
        assert learner.prior is q  # the posterior is the next prior


def test_bad_input_is_refused_in_the_users_terms():
    with pytest.raises(ValueError, match="prior_scale"):
        CoordinateAscentRegression(3, prior_scale=0.0)
    with pytest.raises(ValueError, match=r"x must be \(N, 3\)"):
        CoordinateAscentRegression(3).observe(torch.zeros(5, 2), torch.zeros(5))
    assert isinstance(CoordinateAscentRegression(2).prior.precision, Gamma)


def test_the_bound_stays_below_the_exact_log_evidence_and_close_to_it():
    from tests.helpers import load_benchmark_script

    script = load_benchmark_script("coordinate_ascent")
    x, y = regression(n=40)
    prior = CoordinateAscentRegression(3, concentration=2.0, rate=1.0).prior
    exact = script.log_evidence(x, y, prior)  # w integrated out exactly, τ by quadrature
    _, history = fit_coordinate_ascent(x, y, prior)
    assert history[-1] < exact < history[-1] + 0.5


def _cavi_learner():
    from pyro_cl import ContinualLearner, CoordinateAscent, PrecisionGaussianLikelihood
    from pyro_cl.nn import BayesianLinearRegression

    net = BayesianLinearRegression(3, prior_scale=2.0, concentration=2.0, rate=1.0)
    return ContinualLearner(
        net, PrecisionGaussianLikelihood(), fitter=CoordinateAscent(), ml_init_epochs=0
    )


def test_as_a_fitter_of_the_learner_it_is_online_mean_field_vb(tmp_path):
    from pyro_cl import ContinualLearner

    x, y = regression(80)
    first, second = (x[:40].float(), y[:40].float()), (x[40:].float(), y[40:].float())
    standalone = CoordinateAscentRegression(3, prior_scale=2.0, concentration=2.0, rate=1.0)
    standalone.observe(x[:40].float(), y[:40].float())
    expected = standalone.observe(x[40:].float(), y[40:].float())

    learner = _cavi_learner()
    learner.observe(first)
    learner.save(tmp_path / "cavi.pt")
    history = learner.observe(second)
    assert all(b <= a + 1e-9 for a, b in pairwise(history))  # -L never rises
    posterior = learner.current_prior()
    weight, precision = posterior["weight"].base_dist, posterior["noise_precision"]
    torch.testing.assert_close(weight.loc.double(), expected.loc, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weight.scale.double(), expected.scale, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(precision.rate.double(), expected.rate, rtol=1e-5, atol=1e-6)
    assert float(precision.concentration) == pytest.approx(float(expected.concentration))

    resumed = ContinualLearner.load(tmp_path / "cavi.pt")  # the net rebuilds from its spec
    assert type(resumed.fitter).__name__ == "CoordinateAscent"
    resumed.observe(second)
    again = resumed.current_prior()
    assert torch.equal(again["weight"].base_dist.loc, weight.loc)
    assert torch.equal(again["noise_precision"].rate, precision.rate)


def test_svi_with_a_gamma_factor_reaches_the_coordinate_ascent_solution():
    from pyro_cl import ContinualLearner, PrecisionGaussianLikelihood
    from pyro_cl.nn import BayesianLinearRegression, BayesianMLP

    x, y = regression(100)
    x, y = x.float(), y.float()
    cavi = _cavi_learner()
    cavi.observe((x, y))
    exact = cavi.current_prior()
    net = BayesianLinearRegression(3, prior_scale=2.0, concentration=2.0, rate=1.0)
    settings = {"epochs": 400, "learning_rate": 0.05, "num_particles": 4, "batch_size": None}
    svi = ContinualLearner(net, PrecisionGaussianLikelihood(), ml_init_epochs=0, seed=0, **settings)
    svi.observe((x, y))
    fitted = svi.current_prior()
    loc, target = fitted["weight"].base_dist.loc, exact["weight"].base_dist.loc
    assert (loc - target).abs().max() < 0.05
    ratio = fitted["noise_precision"].mean / exact["noise_precision"].mean
    assert 0.85 < float(ratio) < 1.15
    with pytest.raises(TypeError, match="fits BayesianLinearRegression nets"):
        learner = _cavi_learner()
        ContinualLearner(
            BayesianMLP(3, [4], 2), PrecisionGaussianLikelihood(), fitter=learner.fitter
        ).observe((x, y))


def test_sweeps_that_end_before_convergence_say_so():
    """Two nearly collinear columns: one-coordinate updates zig-zag along the ridge, so 20 sweeps
    end far from the fixed point, and the fit warns instead of returning it as converged."""
    from pyro_cl.fitters.coordinate_ascent import NormalGammaPosterior

    generator = torch.Generator().manual_seed(0)
    base = torch.randn(60, 1, generator=generator, dtype=torch.float64)
    x = torch.cat(
        [base, base + 1e-3 * torch.randn(60, 1, generator=generator, dtype=torch.float64)], 1
    )
    y = x @ torch.tensor([1.0, 1.0], dtype=torch.float64)
    prior = NormalGammaPosterior(
        torch.zeros(2, dtype=torch.float64),
        torch.full((2,), 10.0, dtype=torch.float64),
        torch.tensor(2.0, dtype=torch.float64),
        torch.tensor(1.0, dtype=torch.float64),
    )
    with pytest.warns(RuntimeWarning, match="stopped after 20 sweeps without converging"):
        fit_coordinate_ascent(x, y, prior, max_sweeps=20)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a well-conditioned problem converges without a word
        fit_coordinate_ascent(*regression(), prior=_prior3(), max_sweeps=500)


def _prior3():
    from pyro_cl.fitters.coordinate_ascent import NormalGammaPosterior

    double = torch.float64
    return NormalGammaPosterior(
        torch.zeros(3, dtype=double),
        torch.full((3,), 2.0, dtype=double),
        torch.tensor(2.0, dtype=double),
        torch.tensor(1.0, dtype=double),
    )


def test_targets_too_large_to_square_diverge_and_the_learner_names_no_learning_rate():
    from pyro_cl import DivergenceError

    x, y = regression(20)
    with pytest.raises(DivergenceError, match="standardise them"):
        fit_coordinate_ascent(x, y * 1e200, _prior3())
    learner = _cavi_learner()
    with pytest.raises(DivergenceError) as error:
        learner.observe((x.float(), y.float() * 1e30))
    assert "learning rate" not in str(error.value)
    assert learner.tasks_seen == []
