"""IVON (Shen et al. 2024, algorithm 1) with a per-parameter prior: one step against the update
written out by hand, and the prior's pull where the data carry no information."""

import torch
from torch.distributions import Normal

from pyro_cl import IVON, ContinualLearner, GaussianLikelihood
from pyro_cl.fitters.ivon import _ivon_step
from pyro_cl.nn import BayesianLinear


def test_one_step_on_a_quadratic_is_the_hand_computed_update():
    """Per-point loss ``½ a (θ - c)²`` with two fixed draws ``ε = ±1``: the per-sample batch
    gradients are ``a(m ± σ - c)``, so ``ĝ = a(m - c)`` and ``ĥ = (a(m+σ-c) - a(m-σ-c))/(2σ) = a``
    exactly. With ``h = 1``, ``a = 3``, ``β₂ = ½`` the Hessian's correction term
    ``½ (1-β₂)² (h - ĥ)² / (h + δ)`` is ``0.5 / (1 + δ)``, large enough to see its sign."""
    a, c, m, delta, prior_loc = 3.0, 0.5, 2.0, 0.25, 1.0
    lam, batch, lr, beta1, beta2 = 8.0, 4.0, 0.1, 0.9, 0.5
    precision = torch.tensor([lam * (1.0 + delta)])
    sigma = float(precision.rsqrt())
    noise = torch.tensor([[1.0], [-1.0]])
    gradients = batch * a * (m + sigma * noise - c)  # summed over the minibatch's M points
    loc, h, g = torch.tensor([m]), torch.tensor([1.0]), torch.tensor([0.0])
    steps = torch.tensor(0.0)
    kl = _ivon_step(
        loc, precision, torch.tensor([sigma]), torch.tensor([lam * delta]), h, g,
        torch.tensor([delta]), torch.tensor([prior_loc]), gradients, noise, steps,
        torch.tensor(batch), torch.tensor(lam), lr, beta1, beta2,
    )  # fmt: skip
    g_hat, h_hat = a * (m - c), a
    expected_g = (1 - beta1) * g_hat
    expected_h = (
        beta2 * 1.0
        + (1 - beta2) * h_hat
        + 0.5 * (1 - beta2) ** 2 * (1.0 - h_hat) ** 2 / (1.0 + delta)
    )
    debiased = expected_g / (1 - beta1)
    expected_m = m - lr * (debiased + delta * (m - prior_loc)) / (expected_h + delta)
    assert float(steps) == 1.0
    torch.testing.assert_close(g, torch.tensor([expected_g]))
    torch.testing.assert_close(h, torch.tensor([expected_h]))
    torch.testing.assert_close(loc, torch.tensor([expected_m]))
    torch.testing.assert_close(precision, torch.tensor([lam * (expected_h + delta)]))
    # the KL it returns is the closed form less its constant -½ (log λ_p + 1) per coordinate
    prior_precision = torch.tensor([lam * delta])
    closed_form = torch.distributions.kl_divergence(
        Normal(loc, precision.rsqrt()), Normal(torch.tensor([prior_loc]), prior_precision.rsqrt())
    ).sum()
    torch.testing.assert_close(kl, closed_form + 0.5 * (prior_precision.log() + 1).sum())


def test_a_task_without_information_leaves_the_previous_posterior_where_it_was():
    """Inputs of zeros make the likelihood constant in the weights: the gradient and the Hessian
    estimate vanish, so IVON's mean is pulled by the prior term alone back to the previous
    posterior's mean (from a fresh start), and its precision decays to the prior's."""
    torch.manual_seed(0)
    learner = ContinualLearner(
        BayesianLinear(3, 1, bias=False),
        fitter=IVON(learning_rate=0.1, beta2=0.99, hessian_init=None),
        likelihood=GaussianLikelihood(0.5),
        epochs=400,
        batch_size=None,
        ml_init_epochs=0,
        between_tasks="fresh",
        seed=0,
        progress=False,
    )
    x = torch.randn(40, 3)
    learner.observe((x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.5 * torch.randn(40)))
    first = learner.current_prior()["weight"].base_dist
    learner.observe((torch.zeros(40, 3), torch.randn(40)))
    second = learner.current_prior()["weight"].base_dist
    torch.testing.assert_close(second.loc, first.loc, atol=0.1 * float(first.scale.min()), rtol=0)
    torch.testing.assert_close(second.scale, first.scale, rtol=0.02, atol=0)
