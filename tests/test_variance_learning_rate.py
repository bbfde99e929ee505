"""A learning rate of its own for the guide's log-variances (``variance_learning_rate``).

Adam's first steps on a loss of constant gradient move each parameter by exactly its learning
rate, so the two groups can be told apart step by step; and on Bayesian linear regression, whose
mean-field posterior is known in closed form, a short schedule at Adam's 10⁻³ leaves a small
initial variance where it started while a variance step of its own reaches the exact one.
"""

import pytest
import torch

from pyro_cl import IVON, VOGN, ContinualLearner, GaussianLikelihood, PointEstimateFitter
from pyro_cl.infer.config import Optimisation
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.training import minimise
from pyro_cl.nn import BayesianLinear
from pyro_cl.points import Points

NOISE = 0.5


def test_the_log_variances_step_at_their_own_rate_and_everything_else_at_the_learning_rate():
    loc, log_variance, net = (torch.nn.Parameter(torch.zeros(())) for _ in range(3))
    one_point = Points.of_task(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), 0)
    minimise(
        lambda index: loc + log_variance + net,
        {"loc.w": loc, "log_variance.w": log_variance, "net.b": net},
        FitProblem(one_point, [], epochs=3, batch_size=1),
        Optimisation(learning_rate=0.1, variance_learning_rate=0.01),
    )
    assert loc.item() == pytest.approx(-0.3, rel=1e-4)
    assert net.item() == pytest.approx(-0.3, rel=1e-4)
    assert log_variance.item() == pytest.approx(-0.03, rel=1e-4)


def test_without_it_every_parameter_steps_at_the_learning_rate():
    loc, log_variance = torch.nn.Parameter(torch.zeros(())), torch.nn.Parameter(torch.zeros(()))
    one_point = Points.of_task(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), 0)
    minimise(
        lambda index: loc + log_variance,
        {"loc.w": loc, "packed.log_variance": log_variance},
        FitProblem(one_point, [], epochs=2, batch_size=1),
        Optimisation(learning_rate=0.1),
    )
    assert loc.item() == log_variance.item() == pytest.approx(-0.2, rel=1e-4)


@pytest.mark.parametrize("bad", [0.0, -1e-3, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match=r"variance_learning_rate must lie in \(0,"):
        Optimisation(variance_learning_rate=bad)


@pytest.mark.parametrize(
    "fitter", [VOGN(), IVON(), PointEstimateFitter()], ids=lambda f: type(f).__name__
)
def test_a_fitter_that_does_not_fit_the_variances_with_adam_refuses_it(fitter):
    with pytest.raises(ValueError, match="does not fit them with Adam"):
        ContinualLearner(BayesianLinear(2, 1), fitter=fitter, variance_learning_rate=0.1)


def fitted_log_variance(**options) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=generator)
    y = x @ torch.tensor([1.0, -1.0]) + NOISE * torch.randn(50, generator=generator)
    learner = ContinualLearner(
        BayesianLinear(2, 1, bias=False),
        likelihood=GaussianLikelihood(NOISE),
        epochs=300,
        batch_size=None,
        num_particles=8,
        ml_init_epochs=0,
        init_log_variance=-12.0,
        seed=0,
        progress=False,
        **options,
    )
    learner.observe((x, y))
    exact = 1 / (1 + (x**2).sum(0) / NOISE**2)  # the optimal mean-field variance, prior N(0, 1)
    return learner.current_prior()["weight"].base_dist.scale.squeeze(0).log() * 2, exact.log()


def test_a_short_fit_leaves_a_small_variance_where_it_started_unless_it_has_its_own_rate():
    stuck, exact = fitted_log_variance()
    # 300 steps of at most ~10⁻³ each: still near -12, far below the exact ~-5.3
    assert (stuck < -11.0).all() and (exact > -6.0).all()
    freed, exact = fitted_log_variance(variance_learning_rate=0.1)
    torch.testing.assert_close(freed, exact, atol=0.3, rtol=0)  # Monte Carlo jitter
