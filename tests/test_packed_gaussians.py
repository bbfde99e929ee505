"""Packed Gaussian sites: the fused KL and the packed ELBO equal the per-site computation."""

import pyro
import pytest
import torch

from pyro_cl import VCL, CategoricalLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.finite import all_finite
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.infer.packed_gaussians import PackedGaussians, site_views
from pyro_cl.kl import PackedGaussianKL, gaussian_kl, precision_kl
from pyro_cl.nn import BayesianMLP
from pyro_cl.posterior import install_prior
from tests.helpers import fixed_preactivation_noise, two_class_data


def test_packed_kl_and_its_gradient_match_the_closed_form():
    torch.manual_seed(0)
    loc, log_variance = torch.randn(40, dtype=torch.double), torch.randn(40, dtype=torch.double)
    prior_loc, prior_scale = torch.randn(40, dtype=torch.double), torch.rand(40).double() + 0.5
    prior_precision = prior_scale.pow(-2)
    constant = float(2 * prior_scale.log().sum()) - 40

    def packed(loc, log_variance):
        return PackedGaussianKL.apply(
            loc, log_variance, log_variance.exp(), prior_loc, prior_precision, constant
        )

    def reference(loc, log_variance):
        return gaussian_kl(loc, log_variance.exp(), log_variance, prior_loc, prior_scale).sum()

    inputs = (loc.requires_grad_(), log_variance.requires_grad_())
    torch.testing.assert_close(packed(*inputs), reference(*inputs))
    assert torch.autograd.gradcheck(packed, inputs)
    grads = torch.autograd.grad(packed(*inputs), inputs)
    expected = torch.autograd.grad(reference(*inputs), inputs)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_packed_elbo_equals_the_per_site_elbo_and_shares_the_guides_memory(monkeypatch):
    x, y = two_class_data(24, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    names = guide.sites_for(x, y, task_id=1, dataset_size=100)
    # a prior that is not the initial N(0, 1): a posterior with per-weight means and scales
    install_prior(net, {n: guide.posterior([n])[n] for n in names})
    with torch.no_grad():
        for parameter in guide.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    generator = fixed_preactivation_noise(monkeypatch)

    def loss(packed=None):
        generator.manual_seed(7)
        pyro.set_rng_seed(3)
        return negative_elbo(model, guide, Minibatch(x, y, 1), 100, num_particles=3, packed=packed)

    reference = loss()
    site_grads = torch.autograd.grad(reference, [guide.loc[k] for k in guide.loc.keys()])
    with PackedGaussians(model, guide, names) as packed:
        value = loss(packed)
        flat_grad = torch.autograd.grad(value, [packed.loc])[0]
        torch.testing.assert_close(value, reference)
        torch.testing.assert_close(flat_grad, torch.cat([g.reshape(-1) for g in site_grads]))
        with torch.no_grad():  # the guide shows what the fit does to the flat tensor
            packed.loc.add_(1.0)
        first = guide.loc[next(iter(guide.loc.keys()))]
        assert first.data_ptr() == packed.loc.data_ptr()
    moved = guide.loc[next(iter(guide.loc.keys()))]
    assert moved.data_ptr() != packed.loc.data_ptr()  # its own memory again, values kept
    torch.testing.assert_close(moved, packed.loc.detach()[: moved.numel()].view_as(moved))


def test_a_packed_fit_equals_a_fit_without_packing(monkeypatch):
    """One VCL task through the learner (packed) and the same Adam steps on the per-site
    objective give the same posterior."""
    import pyro_cl.fitters.elbo_fitter as elbo_fitter

    x, y = two_class_data(64, 4)
    results = []
    for packing in (True, False):
        if not packing:
            monkeypatch.setattr(elbo_fitter, "_packed", lambda *a: elbo_fitter.nullcontext())
        learner = VCL(BayesianMLP(4, [8], 2), seed=0, epochs=3, batch_size=16, progress=False)
        learner.observe((x, y))
        state = learner.guide.state_dict()
        results.append({k: v.clone() for k, v in state.items() if torch.is_tensor(v)})
    assert results[0].keys() == results[1].keys()
    for key in results[0]:
        torch.testing.assert_close(results[0][key], results[1][key], rtol=1e-5, atol=1e-6)


def test_all_finite_is_exact_even_when_the_sum_overflows():
    big = torch.full((10,), 3e38)
    assert all_finite(big)  # the sum is inf, every element finite
    assert not all_finite(torch.tensor([1.0, float("nan")]))
    assert not all_finite(torch.tensor([1.0, float("-inf")]))
    assert all_finite(torch.arange(5))


def test_the_natural_gradient_kl_is_the_closed_form_kl():
    torch.manual_seed(1)
    loc, precision = torch.randn(30).double(), torch.rand(30).double() + 0.2
    prior_loc, prior_precision = torch.randn(30).double(), torch.rand(30).double() + 0.5
    constant = float(-prior_precision.log().sum()) - 30  # NaturalGradientState.kl_constant
    variance = precision.reciprocal()
    expected = gaussian_kl(loc, variance, variance.log(), prior_loc, prior_precision.rsqrt()).sum()
    got = precision_kl(loc, precision, prior_loc, prior_precision) + 0.5 * constant
    torch.testing.assert_close(got, expected)


def test_callbacks_of_a_packed_fit_see_the_guides_values_by_site():
    from pyro_cl.infer.callbacks import Callback

    class Watch(Callback):
        def __init__(self):
            self.seen = []

        def on_step(self, info):
            self.seen.append({k: v.detach().clone() for k, v in info.parameters.items()})

    watch = Watch()
    x, y = two_class_data(32, 4)
    learner = VCL(
        BayesianMLP(4, [8], 2), seed=0, epochs=1, batch_size=16, progress=False, callbacks=[watch]
    )
    learner.observe((x, y))
    fitted = [step for step in watch.seen if "loc.hidden/0/weight" in step]
    assert len(fitted) == 2  # the ELBO fit's two steps, by the guide's parameter names
    assert not torch.equal(fitted[-1]["loc.hidden/0/weight"], fitted[-2]["loc.hidden/0/weight"])
    final = learner.guide.loc["hidden/0/weight"]
    torch.testing.assert_close(fitted[-1]["loc.hidden/0/weight"], final.detach())


def test_site_views_share_memory_for_any_leading_dimensions_and_scalar_sites():
    shapes = {"w": torch.Size((2, 3)), "scale": torch.Size(()), "b": torch.Size((2,))}
    flat = torch.arange(18.0).view(2, 9)  # two draws of 6 + 1 + 2 numbers
    views = site_views(flat, shapes)
    assert {name: view.shape for name, view in views.items()} == {
        "w": (2, 2, 3),
        "scale": (2,),
        "b": (2, 2),
    }
    assert torch.equal(views["scale"], torch.tensor([6.0, 15.0]))
    views["b"][1, 0] = -1.0
    assert flat[1, 7] == -1.0
    assert site_views(flat[0], shapes)["scale"].shape == ()


def test_sites_left_out_of_the_kl_count_nothing_and_get_no_kl_gradient():
    from pyro_cl.fitters.elbo_fitter import ELBOFitter
    from pyro_cl.spec import from_spec

    x, y = two_class_data(24, 4)
    net = BayesianMLP(4, [8], 2, heads=2)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    names = guide.sites_for(x, y, task_id=1, dataset_size=100)
    install_prior(net, {n: guide.posterior([n])[n] for n in names})  # a non-trivial prior
    with torch.no_grad():
        for parameter in guide.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    heads = net.head_sites(names)
    assert heads == ["heads.1.weight", "heads.1.bias"]
    expected = 0.0
    for name, (loc, log_variance) in guide.gaussian_parameters(names).items():
        if name not in heads:
            module, attribute = model.site_index[name]
            prior = module.prior_parameters(attribute)
            expected = expected + gaussian_kl(loc, log_variance.exp(), log_variance, *prior).sum()
    with PackedGaussians(model, guide, names, kl_free=heads) as packed:
        kl, _ = packed.kl_and_sites()
        torch.testing.assert_close(kl, expected.detach())
        grad_loc, grad_log_variance = torch.autograd.grad(kl, [packed.loc, packed.log_variance])
        views = (
            site_views(grad_loc, packed.site_shapes),
            site_views(grad_log_variance, packed.site_shapes),
        )
        for gradients in views:
            assert all(torch.all(gradients[h] == 0) for h in heads)
            assert any(torch.any(gradients[n] != 0) for n in names if n not in heads)
    fitter = ELBOFitter(heads_in_kl=False)
    assert from_spec(fitter.spec()).heads_in_kl is False
    learner = VCL(BayesianMLP(4, [8], 2, heads=2), fitter=fitter, epochs=2, ml_init_epochs=0)
    learner.observe((x, y), task_id=0)  # fits
    pyro_route = VCL(BayesianMLP(4, [8], 2, heads=2), fitter=fitter, elbo="pyro", epochs=1)
    with pytest.raises(ValueError, match="heads_in_kl=False needs"):
        pyro_route.observe((x, y), task_id=0)
