import pytest
import torch
from pyro.distributions import Beta, Normal, StudentT
from torch.distributions import kl_divergence

from pyro_cl.diagonal_gaussian import DiagonalGaussian
from pyro_cl.kl import gaussian_kl, kl_to_prior, monte_carlo_kl, site_kl


def test_analytic_gaussian_kl_equals_monte_carlo():
    torch.manual_seed(0)
    q = {"w": Normal(torch.randn(3, 2), torch.rand(3, 2) + 0.2).to_event(2)}
    p = {"w": Normal(torch.randn(3, 2), torch.rand(3, 2) + 0.5).to_event(2)}
    analytic = kl_to_prior(q, p)
    samples = q["w"].sample((200_000,))
    monte_carlo = (q["w"].log_prob(samples) - p["w"].log_prob(samples)).mean()
    assert abs(analytic - monte_carlo) < 0.02 * max(1.0, analytic.item())


def test_kl_of_identical_distributions_is_zero_and_sums_sites():
    a = Normal(torch.zeros(4), torch.ones(4)).to_event(1)
    b = Normal(torch.ones(4), 2 * torch.ones(4)).to_event(1)
    assert kl_to_prior({"a": a}, {"a": a}).item() == 0.0
    total = kl_to_prior({"a": a, "b": b}, {"a": b, "b": a})
    single = kl_to_prior({"a": a}, {"a": b}) + kl_to_prior({"b": b}, {"b": a})
    torch.testing.assert_close(total, single)
    # closed form for one coordinate: log(σp/σq) + (σq² + (μq-μp)²)/(2σp²) - 1/2
    expected = 4 * (torch.log(torch.tensor(2.0)) + (1 + 1) / 8 - 0.5)
    torch.testing.assert_close(kl_to_prior({"a": a}, {"a": b}), expected)


def test_fast_path_gaussian_kl_equals_the_distribution_kl():
    torch.manual_seed(1)
    loc_q, log_var_q = torch.randn(5, 3), torch.randn(5, 3)
    loc_p, scale_p = torch.randn(5, 3), torch.rand(5, 3) + 0.3
    fast = gaussian_kl(loc_q, log_var_q.exp(), log_var_q, loc_p, scale_p)
    reference = kl_divergence(Normal(loc_q, (0.5 * log_var_q).exp()), Normal(loc_p, scale_p))
    torch.testing.assert_close(fast, reference)


def test_a_diagonal_gaussian_takes_the_registered_closed_form_from_its_log_variance():
    torch.manual_seed(2)
    loc, log_variance = torch.randn(4, 3), torch.randn(4, 3)
    prior = Normal(torch.randn(4, 3), torch.rand(4, 3) + 0.3).to_event(2)
    q = DiagonalGaussian(loc, log_variance.exp(), log_variance)
    reference = kl_divergence(Normal(loc, (0.5 * log_variance).exp()), prior.base_dist).sum()
    torch.testing.assert_close(site_kl(q, prior), reference)
    # the log-variance the guide holds is the one read: a different one changes the KL by -½Δ
    shifted = DiagonalGaussian(loc, log_variance.exp(), log_variance + 1.0)
    torch.testing.assert_close(site_kl(shifted, prior), reference - 0.5 * loc.numel())
    # and it draws as the Normal it is
    torch.manual_seed(3)
    a = q.rsample((2,))
    torch.manual_seed(3)
    b = Normal(loc, log_variance.exp().sqrt()).rsample((2,))
    assert torch.equal(a, b)


def test_a_pair_without_a_closed_form_gets_an_unbiased_monte_carlo_kl():
    torch.manual_seed(4)
    q = Normal(torch.tensor([0.3, -1.0]), torch.tensor([0.5, 0.2]))
    p = StudentT(torch.tensor(3.0), torch.tensor([0.0, 0.5]), torch.tensor([1.0, 0.7]))
    with pytest.raises(NotImplementedError):
        kl_divergence(q, p)
    draws = q.sample((400_000,))
    exact = (q.log_prob(draws) - p.log_prob(draws)).mean(0).sum()
    estimates = torch.stack([site_kl(q, p) for _ in range(20_000)])
    assert abs(float(estimates.mean() - exact)) < 4 * float(estimates.std()) / 20_000**0.5
    # gradients reach q through the reparameterised draw
    loc = torch.tensor([0.3, -1.0], requires_grad=True)
    site_kl(Normal(loc, torch.tensor([0.5, 0.2])), p).backward()
    assert loc.grad is not None and bool((loc.grad != 0).all())


def test_a_monte_carlo_kl_needs_reparameterised_draws():
    from torch.distributions import Categorical

    q = Categorical(logits=torch.zeros(3))
    p = Beta(torch.ones(3), torch.ones(3))
    with pytest.raises(NotImplementedError, match="register one"):
        monte_carlo_kl(q, p)
