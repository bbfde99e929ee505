import torch
from pyro.distributions import Normal

from pyro_cl.kl import kl_to_prior


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
    from pyro_cl.kl import gaussian_kl

    fast = gaussian_kl(loc_q, log_var_q.exp(), log_var_q, loc_p, scale_p)
    reference = kl_to_prior(
        {"w": Normal(loc_q, (0.5 * log_var_q).exp()).to_event(2)},
        {"w": Normal(loc_p, scale_p).to_event(2)},
    )
    torch.testing.assert_close(fast, reference)
