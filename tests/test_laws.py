"""Laws the math obeys, checked on random instances (hypothesis): a KL is zero between equal
distributions and positive otherwise for every site family; transitions of zero strength are
the identity and two steps of Δt are one of 2Δt where the transition says so; combining one
posterior with weight 1 is that posterior; handing on a posterior equal to the prior changes
nothing."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro.distributions import Beta, Gamma, Normal

from pyro_cl.kl import kl_to_prior
from pyro_cl.nn import BayesianLinear
from pyro_cl.posterior import install_prior, read_priors
from pyro_cl.transitions import (
    BayesianForgetting,
    OrnsteinUhlenbeck,
    TransitionContext,
    Wiener,
    combine_posteriors,
)

positive = st.floats(0.05, 20.0)
real = st.floats(-5.0, 5.0)
FAMILIES = {
    "normal": lambda a, b: Normal(torch.tensor([a]), torch.tensor([b])).to_event(1),
    "beta": lambda a, b: Beta(torch.tensor([abs(a) + 0.05]), torch.tensor([b])).to_event(1),
    "gamma": lambda a, b: Gamma(torch.tensor([abs(a) + 0.05]), torch.tensor([b])).to_event(1),
}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(FAMILIES)), real, positive, real, positive)
def test_a_kl_is_zero_for_equal_sites_and_positive_otherwise(family, a, b, c, d):
    make = FAMILIES[family]
    q, p = make(a, b), make(c, d)
    assert float(kl_to_prior({"w": q}, {"w": q})) == 0.0
    value = float(kl_to_prior({"w": q}, {"w": p}))
    assert value >= -1e-6  # non-negative up to float32 rounding (Beta's digamma terms)
    same = torch.equal(q.base_dist.mean, p.base_dist.mean) and torch.equal(
        q.base_dist.variance, p.base_dist.variance
    )
    assert same or value > 0.0 or abs(value) < 1e-6  # nearly equal sites: rounding decides


def gaussian_sites(loc: float, scale: float, initial_scale: float):
    posterior = {
        "w": Normal(torch.tensor([loc, -loc]), torch.tensor([scale, 2 * scale])).to_event(1)
    }
    initial = {"w": Normal(torch.zeros(2), torch.full((2,), initial_scale)).to_event(1)}
    return posterior, initial


def context(elapsed: float, initial):
    return TransitionContext(
        elapsed=elapsed,
        time=elapsed,
        initial_prior=initial,
        net=torch.nn.Linear(1, 1),
        mean_lag=1.0,
    )


def close(a, b) -> bool:
    return all(
        torch.allclose(a[k].base_dist.loc, b[k].base_dist.loc, rtol=1e-5, atol=1e-6)
        and torch.allclose(a[k].base_dist.scale, b[k].base_dist.scale, rtol=1e-5, atol=1e-6)
        for k in a
    )


TRANSITIONS = {
    "wiener": lambda strength: Wiener(strength, time_constant=1.0),
    "ornstein_uhlenbeck": lambda strength: OrnsteinUhlenbeck(strength, time_constant=1.0),
    "forgetting": lambda strength: BayesianForgetting(min(strength, 0.9), time_constant=1.0),
}


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(sorted(TRANSITIONS)),
    real,
    positive,
    positive,
    st.floats(0.01, 2.0),
    st.floats(0.1, 3.0),
)
def test_transitions_compose_over_time_and_vanish_at_zero_strength(
    name, loc, scale, initial_scale, strength, elapsed
):
    posterior, initial = gaussian_sites(loc, min(scale, 5.0), initial_scale)
    transition = TRANSITIONS[name](strength)
    twice = transition(transition(posterior, context(elapsed, initial)), context(elapsed, initial))
    once = transition(posterior, context(2 * elapsed, initial))
    assert close(twice, once)
    still = TRANSITIONS[name](0.0)(posterior, context(elapsed, initial))
    assert close(still, posterior)


@settings(max_examples=30, deadline=None)
@given(real, positive, real, positive)
def test_combining_with_all_the_weight_on_one_posterior_is_that_posterior(a, b, c, d):
    first = {"w": Normal(torch.tensor([a]), torch.tensor([b])).to_event(1)}
    second = {"w": Normal(torch.tensor([c]), torch.tensor([d])).to_event(1)}
    for how in ("product", "moment_match"):
        combined = combine_posteriors([first, second], [1.0, 0.0], how)
        assert close(combined, first)
        assert close(combine_posteriors([first], [3.0], how), first)


@settings(max_examples=20, deadline=None)
@given(real, positive)
def test_handing_on_the_prior_itself_changes_nothing(loc, scale):
    layer = BayesianLinear(2, 1, prior_loc=loc, prior_scale=scale)
    before = {
        k: (v.base_dist.loc.clone(), v.base_dist.scale.clone())
        for k, v in read_priors(layer).items()
    }
    install_prior(layer, read_priors(layer))
    after = read_priors(layer)
    for name, (mean, spread) in before.items():
        assert torch.equal(after[name].base_dist.loc, mean)
        assert torch.equal(after[name].base_dist.scale, spread)
    assert math.isfinite(float(kl_to_prior(after, read_priors(layer))))
