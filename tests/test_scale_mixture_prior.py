"""A spike-and-slab (scale mixture) first prior, the family added in one file
(pyro_cl/nn/scale_mixture_prior.py): its density against torch's mixture, its Monte Carlo KL
against quadrature, VCL with a coreset and a Wiener transition, save and resume."""

import math

import pytest
import torch
from pyro.distributions import Normal
from torch import distributions as td
from torch import nn

import pyro_cl
from pyro_cl.nn import BayesianMLP, ScaleMixturePrior, make_bayesian
from pyro_cl.nn.priors import prior_named
from pyro_cl.nn.scale_mixture_prior import ScaleMixtureNormal
from pyro_cl.posterior import (
    posterior_from_state,
    posterior_to_state,
    read_priors,
    saveable_distribution,
)
from pyro_cl.transitions import TransitionContext
from tests.helpers import (
    check_monte_carlo_kl_against_quadrature,
    coreset_and_wiener_vcl,
    two_class_data,
)

DOUBLE = {"dtype": torch.float64}


def mixture(loc, scale, spike, weight, shape=()):
    return ScaleMixtureNormal(
        *(torch.full(shape, v, **DOUBLE) for v in (loc, scale, spike, weight))
    )


def test_the_density_is_blundell_et_als_two_gaussian_mixture_and_draws_have_its_moments():
    d = mixture(0.2, 1.5, 0.05, 0.3, (4,))
    value = torch.tensor([-3.0, 0.2, 0.25, 2.0], **DOUBLE)
    reference = td.MixtureSameFamily(
        td.Categorical(torch.tensor([0.3, 0.7], **DOUBLE)),
        td.Normal(torch.tensor([0.2, 0.2], **DOUBLE), torch.tensor([1.5, 0.05], **DOUBLE)),
    )
    torch.testing.assert_close(d.log_prob(value), reference.log_prob(value))
    torch.testing.assert_close(d.variance, torch.full((4,), 0.3 * 1.5**2 + 0.7 * 0.05**2, **DOUBLE))
    torch.manual_seed(0)
    draws = d.sample((200_000,))
    assert draws.shape == (200_000, 4)
    torch.testing.assert_close(draws.mean(0), d.mean, atol=0.01, rtol=0)
    torch.testing.assert_close(draws.var(0), d.variance, atol=0.02, rtol=0)
    # a third of the draws in the slab: the share beyond the spike's reach
    assert abs(float(((draws - 0.2).abs() > 0.3).double().mean()) - 0.3 * 0.8445) < 0.005
    assert d.expand((3, 4)).log_prob(value).shape == (3, 4)
    assert mixture(0.0, 1.0, 0.1, 1.0).log_prob(torch.tensor(0.5, **DOUBLE)) == pytest.approx(
        float(Normal(0.0, 1.0).log_prob(torch.tensor(0.5)))
    )


@pytest.mark.parametrize(("mu", "sigma"), [(0.3, 0.5), (0.01, 0.02)])
def test_the_monte_carlo_kl_to_the_mixture_averages_to_its_integral(mu, sigma):
    prior = mixture(0.0, 1.0, math.exp(-6), 0.5)
    assert abs(check_monte_carlo_kl_against_quadrature(mu, sigma, prior)) > 0.05


def mixture_mlp():
    return BayesianMLP(4, [8, 6], 2, heads=2, prior_family=ScaleMixturePrior(0.25, 0.5, 0.01))


def families(net) -> set[str]:
    return {type(prior.base_dist).__name__ for prior in read_priors(net).values()}


def test_a_mixture_first_prior_runs_through_vcl_a_coreset_and_a_wiener_transition():
    x, y = two_class_data(120, 4)
    learner = coreset_and_wiener_vcl(mixture_mlp())
    assert families(learner.net) == {"ScaleMixtureNormal"}
    learner.observe((x, y), task_id=0)
    assert learner.evaluate((x, y), task_id=0)["accuracy"] > 0.95
    learner.observe((x, 1 - y), task_id=1)
    assert families(learner.net) == {"Normal"}


def test_the_wiener_step_moves_towards_the_mixtures_variance():
    initial = {"w": mixture(0.0, 0.4, 0.01, 0.25, (3,))}
    posterior = {"w": Normal(torch.ones(3, **DOUBLE), torch.full((3,), 0.1, **DOUBLE))}
    context = TransitionContext(
        elapsed=2.0, time=2.0, initial_prior=initial, net=nn.Linear(1, 1), mean_lag=1.0
    )
    moved = pyro_cl.Wiener(0.5, time_constant=1.0)(posterior, context)["w"]
    variance = 0.25 * 0.4**2 + 0.75 * 0.01**2
    expected = math.sqrt(0.1**2 + 0.5**2 * variance * 2.0)
    torch.testing.assert_close(moved.scale, torch.full((3,), expected, **DOUBLE))


@pytest.mark.parametrize("make", ["mlp", "make_bayesian"])
def test_a_mixture_first_prior_saves_loads_and_resumes_identically(make, tmp_path):
    x, y = two_class_data(60, 4)

    def net():
        if make == "mlp":
            return mixture_mlp()
        body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        return make_bayesian(body, prior=ScaleMixturePrior(0.5, 0.3, 0.02))

    learner = pyro_cl.VCL(net(), epochs=3, seed=0, progress=False)
    learner.save(tmp_path / "fresh.pt")
    learner.observe((x, y), task_id=0)
    loaded = pyro_cl.VCL.load(tmp_path / "fresh.pt", net=None if make == "mlp" else net())
    assert families(loaded.net) == {"ScaleMixtureNormal"}
    initial = loaded.initial_prior["hidden.0.weight" if make == "mlp" else "0.weight"].base_dist
    assert float(initial.spike_scale.flatten()[0]) == pytest.approx(0.01 if make == "mlp" else 0.02)
    loaded.observe((x, y), task_id=0)
    for a, b in zip(learner.posterior(0).values(), loaded.posterior(0).values(), strict=True):
        torch.testing.assert_close(a.base_dist.loc, b.base_dist.loc, rtol=0, atol=0)
        torch.testing.assert_close(a.base_dist.scale, b.base_dist.scale, rtol=0, atol=0)


def test_a_saved_mixture_is_rebuilt_and_a_clashing_name_is_refused():
    prior = {"w": mixture(0.0, 1.0, 0.1, 0.5, (2, 3)).to_event(2)}
    rebuilt = posterior_from_state(posterior_to_state(prior))["w"]
    assert isinstance(rebuilt.base_dist, ScaleMixtureNormal) and rebuilt.event_shape == (2, 3)
    torch.testing.assert_close(rebuilt.base_dist.slab_weight, prior["w"].base_dist.slab_weight)
    with pytest.raises(ValueError, match="'Normal' is saveable already"):
        saveable_distribution(type("Normal", (ScaleMixtureNormal,), {}))


def test_the_mixture_is_a_named_prior_checks_its_arguments_and_refuses_gaussian_only_parts():
    assert isinstance(prior_named("scale_mixture"), ScaleMixturePrior)
    assert (
        read_priors(mixture_mlp().double())["hidden.0.weight"].base_dist.loc.dtype == torch.float64
    )
    with pytest.raises(ValueError, match="slab_weight"):
        ScaleMixturePrior(1.5)
    with pytest.raises(ValueError, match="spike_scale"):
        ScaleMixturePrior(spike_scale=0.0)
    with pytest.raises(ValueError, match="VOGN fits against Normal priors.*ScaleMixtureNormal"):
        pyro_cl.VCL(mixture_mlp(), fitter=pyro_cl.VOGN())
