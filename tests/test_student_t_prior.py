"""A Student-t first prior, the family added in one file (pyro_cl/nn/student_t_prior.py): its
Monte Carlo KL against quadrature, the fast route's KL term, VCL with a coreset and a Wiener
transition, save and resume, and the parts that refuse it."""

import math

import pytest
import torch
from pyro.distributions import Normal, StudentT
from torch import nn

import pyro_cl
from pyro_cl.diagonal_gaussian import DiagonalGaussian
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.objectives import kl_and_sites
from pyro_cl.kl import site_kl
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianMLP, StudentTPrior, make_bayesian
from pyro_cl.posterior import read_priors
from pyro_cl.transitions import TransitionContext, initial_moments
from tests.helpers import (
    check_monte_carlo_kl_against_quadrature,
    coreset_and_wiener_vcl,
    two_class_data,
)


def families(net) -> dict[str, str]:
    return {name: type(prior.base_dist).__name__ for name, prior in read_priors(net).items()}


@pytest.mark.parametrize(
    ("mu", "sigma", "df", "m", "s"), [(0.3, 0.5, 3.0, 0.0, 1.0), (2.0, 0.1, 1.0, -0.5, 0.3)]
)
def test_the_monte_carlo_kl_to_a_student_t_averages_to_its_integral(mu, sigma, df, m, s):
    double = {"dtype": torch.float64}
    prior = StudentT(*(torch.tensor(v, **double) for v in (df, m, s)))
    assert check_monte_carlo_kl_against_quadrature(mu, sigma, prior) > 0.05


def student_t_mlp(**options):
    return BayesianMLP(4, [8, 6], 2, heads=2, prior_family=StudentTPrior(3.0, 0.5), **options)


def test_the_fast_route_takes_the_student_t_term_site_by_site():
    net = student_t_mlp()
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model)
    names = model.sites(guide, torch.zeros(2, 4), [0])
    torch.manual_seed(1)
    kl, sites = kl_and_sites(model, guide, names, fast=True)
    torch.manual_seed(1)
    priors = read_priors(net, names)
    expected = sum(site_kl(sites[n], priors[n]) for n in names)
    torch.testing.assert_close(kl, expected)
    assert all(isinstance(sites[n], DiagonalGaussian) for n in names)


def test_a_student_t_first_prior_runs_through_vcl_a_coreset_and_a_transition():
    x, y = two_class_data(120, 4)
    learner = coreset_and_wiener_vcl(student_t_mlp())
    assert set(families(learner.net).values()) == {"StudentT"}
    learner.observe((x, y), task_id=0)
    got = families(learner.net)
    assert got["heads.1.weight"] == "StudentT"  # a head not trained yet keeps its first prior
    assert {got[n] for n in ("hidden.0.weight", "hidden.1.bias", "heads.0.weight")} == {"Normal"}
    assert learner.evaluate((x, y), task_id=0)["accuracy"] > 0.95  # it learns (Normal prior: 1.0)
    learner.observe((x, 1 - y), task_id=1)
    assert set(families(learner.net).values()) == {"Normal"}
    assert type(learner.initial_prior["heads.1.weight"].base_dist).__name__ == "StudentT"


def test_the_wiener_step_moves_towards_the_student_t_moments():
    """``σ² ← σ² + c² σ_0² Δt`` with ``σ_0 = s √(ν/(ν-2))``, the initial prior's standard
    deviation (a Normal's scale when the prior is Gaussian)."""
    df, s = 5.0, 0.4
    initial = {"w": StudentT(torch.full((3,), df), torch.zeros(3), torch.full((3,), s))}
    posterior = {"w": Normal(torch.ones(3), torch.full((3,), 0.1))}
    context = TransitionContext(
        elapsed=2.0, time=2.0, initial_prior=initial, net=nn.Linear(1, 1), mean_lag=1.0
    )
    moved = pyro_cl.Wiener(0.5, time_constant=1.0)(posterior, context)["w"]
    expected = math.sqrt(0.1**2 + 0.5**2 * s**2 * df / (df - 2) * 2.0)
    torch.testing.assert_close(moved.scale, torch.full((3,), expected))
    torch.testing.assert_close(moved.loc, torch.ones(3))
    loc, scale = initial_moments("w", Normal(torch.zeros(1), torch.full((1,), 0.3)))
    assert float(scale) == pytest.approx(0.3)


@pytest.mark.parametrize("make", ["mlp", "make_bayesian"])
def test_a_student_t_first_prior_saves_loads_and_resumes_identically(make, tmp_path):
    x, y = two_class_data(60, 4)

    def net():
        if make == "mlp":
            return student_t_mlp()
        body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        return make_bayesian(body, prior=StudentTPrior(4.0, 0.3))

    learner = pyro_cl.VCL(net(), epochs=3, seed=0, progress=False)
    learner.save(tmp_path / "fresh.pt")  # before any step: the Student-t priors themselves
    learner.observe((x, y), task_id=0)
    loaded = pyro_cl.VCL.load(tmp_path / "fresh.pt", net=None if make == "mlp" else net())
    assert set(families(loaded.net).values()) == {"StudentT"}
    df = {float(p.base_dist.df.flatten()[0]) for p in read_priors(loaded.net).values()}
    assert df == ({3.0} if make == "mlp" else {4.0})
    loaded.observe((x, y), task_id=0)
    for a, b in zip(learner.posterior(0).values(), loaded.posterior(0).values(), strict=True):
        torch.testing.assert_close(a.base_dist.loc, b.base_dist.loc, rtol=0, atol=0)
        torch.testing.assert_close(a.base_dist.scale, b.base_dist.scale, rtol=0, atol=0)


def test_a_student_t_moves_with_the_net_and_the_parts_that_need_a_gaussian_refuse_it():
    net = student_t_mlp().double()
    assert read_priors(net)["hidden.0.weight"].base_dist.df.dtype == torch.float64
    with pytest.raises(ValueError, match="VOGN fits against Normal priors.*StudentT prior"):
        pyro_cl.VCL(student_t_mlp(), fitter=pyro_cl.VOGN())
    with pytest.raises(TypeError, match="has a StudentT prior"):
        student_t_mlp().hidden[0].prior_parameters("weight")
    cauchy = BayesianMLP(4, [8], 2, prior_family=StudentTPrior(1.0))
    with pytest.raises(TypeError, match="a Student-t needs df > 2"):
        pyro_cl.VCL(cauchy, transition=pyro_cl.Wiener(0.1))
    with pytest.raises(ValueError, match="df"):
        StudentTPrior(0.0)
