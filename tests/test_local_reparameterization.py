import pyro
import torch
from pyro import poutine
from pyro.distributions import Normal

from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.nn import BayesianLinear, local_reparameterization
from pyro_cl.nn.local_reparam import unbroadcast_normal


def _layer_with_posterior(local_reparameterization_on: bool):
    torch.manual_seed(0)
    layer = BayesianLinear(5, 3, local_reparameterization=local_reparameterization_on)
    sites = {
        "weight": Normal(torch.randn(3, 5), torch.rand(3, 5) + 0.1).to_event(2),
        "bias": Normal(torch.randn(3), torch.rand(3) + 0.1).to_event(1),
    }
    return layer, sites


def test_local_reparameterization_matches_weight_sampling_in_mean_and_variance():
    x = torch.randn(4, 5)
    moments = []
    for lrt in (True, False):
        layer, sites = _layer_with_posterior(lrt)
        with torch.no_grad(), substitute_sites(layer, sites, num_particles=100_000):
            out = layer(x.unsqueeze(0))
        moments.append((out.mean(0), out.var(0)))
    (mean_lrt, var_lrt), (mean_w, var_w) = moments
    weight, bias = _layer_with_posterior(True)[1].values()
    exact_mean = x @ weight.base_dist.loc.T + bias.base_dist.loc
    exact_var = (x**2) @ (weight.base_dist.scale**2).T + bias.base_dist.scale**2
    for mean, var in moments:
        torch.testing.assert_close(
            mean, exact_mean, atol=0.05 * exact_var.sqrt().max().item(), rtol=0
        )
        torch.testing.assert_close(var, exact_var, rtol=0.03, atol=0)
    torch.testing.assert_close(mean_lrt, mean_w, atol=0.1, rtol=0)


def test_messenger_hands_the_guides_normal_to_the_layer():
    layer = BayesianLinear(2, 1)
    loc, scale = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 0.5]])

    def guide(x):
        pyro.sample("weight", Normal(loc, scale).to_event(2))
        pyro.sample("bias", Normal(torch.zeros(1), 1e-3 * torch.ones(1)).to_event(1))

    x = torch.ones(20000, 2)
    with local_reparameterization():
        guide_trace = poutine.trace(guide).get_trace(x)
        out = poutine.replay(layer, trace=guide_trace)(x)
    # Each row gets its own draw: sample mean 3, sample std sqrt(0.5) — not one shared weight draw.
    assert abs(out.mean().item() - 3.0) < 0.03
    assert abs(out.std().item() - 0.5**0.5) < 0.03
    # Without the messenger the replayed weight is shared by every row.
    out_shared = poutine.replay(layer, trace=guide_trace)(x)
    assert out_shared.std().item() < 0.01


def test_a_normal_broadcast_by_a_plate_loses_its_batch_dimensions_and_a_varying_one_does_not():
    """The particle plate broadcasts a guide's Normal to ``(P, 1, *site)`` as stride-0 views: the
    layer gets the site-shaped Normal back (local reparameterisation applies once to all
    particles). A Normal that truly differs per particle is not collapsed."""
    loc, scale = torch.randn(3, 4), torch.rand(3, 4) + 0.1
    broadcast = Normal(loc, scale).expand(torch.Size([5, 1, 3, 4]))
    site = unbroadcast_normal(broadcast, event_dim=2)
    assert site.loc.shape == (3, 4)
    torch.testing.assert_close(site.loc, loc)
    torch.testing.assert_close(site.scale, scale)
    varying = Normal(torch.randn(5, 1, 3, 4), torch.ones(5, 1, 3, 4))
    assert unbroadcast_normal(varying, event_dim=2) is None
    unbatched = Normal(loc, scale)
    assert unbroadcast_normal(unbatched, event_dim=2) is unbatched


def test_the_written_out_backward_of_sampled_pre_activations_is_the_traced_one():
    from pyro_cl.nn.local_reparam import SampledGaussianLinear

    generator = torch.Generator().manual_seed(0)

    def leaf(*shape, positive=False):
        value = torch.rand(*shape, generator=generator, dtype=torch.float64)
        return (value + 0.1 if positive else value - 0.5).requires_grad_()

    x, loc, variance = leaf(2, 5, 4), leaf(3, 4), leaf(3, 4, positive=True)
    bias, floor = leaf(3), leaf(3, positive=True)
    noise = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64)
    inputs = (x, loc, variance, bias, floor, noise)
    assert torch.autograd.gradcheck(SampledGaussianLinear.apply, inputs)
    traced = torch.nn.functional.linear(x, loc, bias) + noise * torch.sqrt(
        torch.nn.functional.linear(x * x, variance, floor)
    )
    torch.testing.assert_close(SampledGaussianLinear.apply(*inputs), traced)
    # without a bias, and with inputs that need no gradient (a net's first layer)
    out = SampledGaussianLinear.apply(x.detach(), loc, variance, None, floor, noise)
    (grad_loc,) = torch.autograd.grad(out.sum(), [loc])
    expected = torch.nn.functional.linear(x.detach(), loc) + noise * torch.sqrt(
        torch.nn.functional.linear(x.detach() ** 2, variance, floor)
    )
    (traced_loc,) = torch.autograd.grad(expected.sum(), [loc])
    torch.testing.assert_close(grad_loc, traced_loc)
