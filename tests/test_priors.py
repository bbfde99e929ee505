"""A net's first prior as a part: per-layer scales, He's fan-in scaling, a user's own prior."""

import pytest
import torch
from torch import nn

import pyro_cl
from pyro_cl.nn import GaussianPrior, make_bayesian
from pyro_cl.nn.priors import Prior
from pyro_cl.posterior import read_priors


def scales(net):
    """``{site: (mean, scale)}`` of every weight's first prior (each site's values are equal)."""
    out = {}
    for name, prior in read_priors(net).items():
        base = prior.base_dist
        assert torch.equal(base.scale, base.scale.flatten()[0].expand_as(base.scale))
        out[name] = (base.loc.flatten()[0].item(), base.scale.flatten()[0].item())
    return out


def test_a_layer_takes_its_own_scale_and_the_fan_in_divides_it():
    body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
    prior = GaussianPrior(2.0, loc=0.5, layers={"3": 0.1}, fan_in=True)
    got = scales(make_bayesian(body, prior=prior))
    assert got["0.weight"] == pytest.approx((0.5, 2.0 / 27**0.5))  # 3 channels × 3 × 3
    assert got["0.bias"] == pytest.approx((0.5, 2.0 / 27**0.5))
    assert got["3.weight"] == pytest.approx((0.5, 0.1 / 16**0.5))
    plain = scales(make_bayesian(body, prior_scale=0.3))
    assert all(value == pytest.approx((0.0, 0.3)) for value in plain.values())


def test_the_learner_starts_from_the_prior_and_fits_against_it():
    torch.manual_seed(0)
    x = torch.randn(200, 4)
    data = (x, (x[:, 0] > 0).long())
    means = {}
    for scale in (1.0, 0.01):
        net = make_bayesian(
            nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),
            prior=GaussianPrior(1.0, layers={"2": scale}),
        )
        learner = pyro_cl.VCL(net, epochs=20, seed=0, progress=False, learning_rate=0.01)
        assert learner.initial_prior["2.weight"].base_dist.scale.max().item() == pytest.approx(
            scale
        )
        learner.observe(data)
        means[scale] = learner.current_prior()["2.weight"].base_dist.loc.abs().mean()
    assert means[0.01] < 0.5 * means[1.0]  # a narrow prior holds the classifier near 0


def test_a_prior_is_refused_where_it_does_not_fit():
    body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"names layers \['1'\].*those are: 0, 2"):
        make_bayesian(body, prior=GaussianPrior(layers={"1": 0.1}))
    with pytest.raises(ValueError, match="not both"):
        make_bayesian(body, prior_scale=0.5, prior=GaussianPrior())
    with pytest.raises(TypeError, match="must be a pyro_cl.nn.priors.Prior"):
        make_bayesian(body, prior=0.5)
    with pytest.raises(ValueError, match="scale"):
        GaussianPrior(scale=0.0)


def test_a_users_prior_is_asked_for_each_layer_by_path_and_fan_in():
    asked = []

    class Recorded(Prior):
        def layer_prior(self, path, fan_in):
            asked.append((path, fan_in))
            return 0.0, 1.0 / (1 + len(asked))

    net = make_bayesian(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), prior=Recorded()
    )
    assert asked == [("0", 4), ("2", 8)]
    assert scales(net)["2.bias"] == pytest.approx((0.0, 1 / 3))
