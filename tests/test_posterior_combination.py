"""Combining posteriors into one prior (the graph handoff): the weighted product in natural
parameters against the densities themselves, the moment-matched mixture against its moments."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch

from pyro_cl.transitions.combination import combine_posteriors


def gaussian(loc, scale):
    return dist.Normal(torch.tensor(loc), torch.tensor(scale)).to_event(1)


def test_the_weighted_product_is_the_normalised_geometric_mean_of_the_densities():
    a = {"w": gaussian([0.0, 1.0], [1.0, 0.5])}
    b = {"w": gaussian([2.0, -1.0], [0.5, 2.0])}
    combined = combine_posteriors([a, b], weights=[1.0, 3.0])["w"]  # normalised: 0.25, 0.75
    # log p(θ) - Σ w_k log q_k(θ) is the same constant at every θ
    thetas = torch.tensor([[0.3, -0.2], [1.5, 2.0], [-1.0, 0.7]])
    gaps = combined.log_prob(thetas) - (
        0.25 * a["w"].log_prob(thetas) + 0.75 * b["w"].log_prob(thetas)
    )
    torch.testing.assert_close(gaps, gaps[:1].expand(3))
    precision = 0.25 / torch.tensor([1.0, 0.25]) + 0.75 / torch.tensor([0.25, 4.0])
    torch.testing.assert_close(combined.base_dist.scale.pow(-2), precision)
    assert combined.event_dim == 1
    same = combine_posteriors([a, b], weights=[0.25, 0.75])["w"]
    torch.testing.assert_close(same.base_dist.loc, combined.base_dist.loc)


def test_one_posterior_of_weight_one_is_itself_so_a_one_edge_path_is_plain_vcl():
    a = {"w": gaussian([0.5, -0.5], [0.3, 0.7]), "v": dist.Beta(torch.tensor([2.0]), 3.0)}
    for how in ("product", "moment_match"):
        combined = combine_posteriors([a], how=how)
        torch.testing.assert_close(combined["w"].base_dist.loc, a["w"].base_dist.loc)
        torch.testing.assert_close(combined["w"].base_dist.scale, a["w"].base_dist.scale)
        torch.testing.assert_close(combined["v"].concentration1, torch.tensor([2.0]))
        torch.testing.assert_close(combined["v"].concentration0, torch.tensor([3.0]))


def test_the_moment_matched_mixture_has_the_mixtures_mean_and_variance():
    a, b = {"w": gaussian([0.0], [1.0])}, {"w": gaussian([4.0], [0.5])}
    combined = combine_posteriors([a, b], weights=[0.5, 0.5], how="moment_match")["w"]
    mean = 2.0
    variance = 0.5 * (1.0 + 0.0) + 0.5 * (0.25 + 16.0) - mean**2
    torch.testing.assert_close(combined.base_dist.loc, torch.tensor([mean]))
    torch.testing.assert_close(combined.base_dist.scale.square(), torch.tensor([variance]))
    # wider than the product where the two disagree
    product = combine_posteriors([a, b], weights=[0.5, 0.5])["w"]
    assert combined.base_dist.scale > product.base_dist.scale


def test_beta_sticks_combine_by_natural_parameters_and_by_moments():
    a, b = {"v": dist.Beta(torch.tensor(2.0), 5.0)}, {"v": dist.Beta(torch.tensor(6.0), 1.0)}
    product = combine_posteriors([a, b], weights=[0.5, 0.5])["v"]
    torch.testing.assert_close(product.concentration1, torch.tensor(4.0))
    torch.testing.assert_close(product.concentration0, torch.tensor(3.0))
    matched = combine_posteriors([a, b], weights=[0.5, 0.5], how="moment_match")["v"]
    samples = torch.cat([a["v"].sample((200_000,)), b["v"].sample((200_000,))])
    assert float(matched.mean) == pytest.approx(float(samples.mean()), abs=2e-3)
    assert float(matched.variance) == pytest.approx(float(samples.var()), abs=2e-3)


def test_a_site_some_posteriors_lack_combines_those_that_have_it():
    a = {"shared": gaussian([0.0], [1.0]), "heads.0": gaussian([3.0], [0.1])}
    b = {"shared": gaussian([1.0], [1.0])}
    combined = combine_posteriors([a, b], weights=[0.2, 0.8])
    torch.testing.assert_close(combined["heads.0"].base_dist.loc, torch.tensor([3.0]))
    torch.testing.assert_close(combined["shared"].base_dist.loc, torch.tensor([0.8]))


def test_what_cannot_combine_is_refused_naming_the_site():
    gamma = {"tau": dist.Gamma(torch.tensor(2.0), 1.0)}
    with pytest.raises(ValueError, match="site 'tau' is Gamma"):
        combine_posteriors([gamma])
    with pytest.raises(ValueError, match="disagree"):
        combine_posteriors([{"w": gaussian([0.0], [1.0])}, {"w": gaussian([0.0, 1.0], [1.0, 1.0])}])
    with pytest.raises(ValueError, match="non-negative"):
        combine_posteriors([{"w": gaussian([0.0], [1.0])}], weights=[-1.0])
    with pytest.raises(ValueError, match="how must be one of"):
        combine_posteriors([{"w": gaussian([0.0], [1.0])}], how="mean")
