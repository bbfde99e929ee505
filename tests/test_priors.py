"""A net's first prior as a part: per-layer scales, He's fan-in scaling, a user's own prior, and
a Laplace first prior (its closed-form KL against quadrature, both routes, the handoff, the parts
that refuse it)."""

import math

import pytest
import torch
from pyro.distributions import Laplace, Normal
from torch import nn
from torch.distributions import kl_divergence

import pyro_cl
from pyro_cl.baselines import OnlineEWC
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.objectives import kl_and_sites
from pyro_cl.infer.packed_gaussians import PackedGaussians
from pyro_cl.kl import gaussian_laplace_kl, kl_to_prior
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianMLP, GaussianPrior, LaplacePrior, make_bayesian
from pyro_cl.nn.priors import Prior
from pyro_cl.posterior import read_priors
from pyro_cl.transitions.base import TransitionContext
from tests.helpers import elbo_on_both_routes, two_class_data


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


# ---------------------------------------------------------------------------- a Laplace first prior
CASES = [(0.3, 0.5, 0.2, 0.7), (-2.0, 1.0, 0.2, 0.7), (0.0, 2.0, 0.0, 0.1), (5.0, 0.1, -1.0, 3.0)]


@pytest.mark.parametrize(("mu", "sigma", "m", "b"), CASES)
def test_the_kl_to_a_laplace_prior_is_its_integral(mu, sigma, m, b):
    """``∫ q log(q/p)`` by the trapezoidal rule on a fine grid, against the closed form and the
    KL that torch's registry dispatches to; the gradient in ``μ`` is ``erf(d/σ√2)/b``."""
    w = torch.linspace(mu - 12 * sigma, mu + 12 * sigma, 400_001, dtype=torch.float64)
    q = Normal(torch.tensor(mu, dtype=torch.float64), sigma)
    p = Laplace(torch.tensor(m, dtype=torch.float64), b)
    integral = torch.trapezoid(q.log_prob(w).exp() * (q.log_prob(w) - p.log_prob(w)), w)
    loc = torch.tensor(mu, dtype=torch.float64, requires_grad=True)
    variance = torch.tensor(sigma**2, dtype=torch.float64)
    closed = gaussian_laplace_kl(loc, variance, variance.log(), torch.tensor(m), torch.tensor(b))
    assert closed.item() == pytest.approx(integral.item(), rel=1e-7, abs=1e-9)
    assert kl_divergence(q, p).item() == pytest.approx(integral.item(), rel=1e-7, abs=1e-9)
    (gradient,) = torch.autograd.grad(closed, loc)
    assert gradient.item() == pytest.approx(math.erf((mu - m) / (sigma * 2**0.5)) / b)


def laplace_mlp(**options):
    return BayesianMLP(4, [8, 6], 2, heads=2, prior_family="laplace", **options)


def test_a_laplace_first_prior_gives_one_elbo_on_both_routes(monkeypatch):
    """Pyro's TraceMeanField_ELBO takes the registered KL, the fast route the per-site closed
    form: the same loss and gradients."""
    x, y = two_class_data(32, 4)
    model = SupervisedModel(laplace_mlp(), CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    guide.sites_for(x, y, task_id=1, dataset_size=500)
    (loss_pyro, grads_pyro), (loss_fast, grads_fast) = elbo_on_both_routes(
        model, guide, x, y, 1, 500, 1, monkeypatch
    )
    torch.testing.assert_close(loss_fast, loss_pyro, rtol=1e-5, atol=1e-6)
    for key in grads_pyro:
        torch.testing.assert_close(grads_fast[key], grads_pyro[key], rtol=1e-4, atol=1e-6)


def test_packing_leaves_laplace_sites_to_their_own_kl():
    """A fit packs the Gaussian-prior sites only; the KL over packed and per-site terms is the
    sum of every site's own KL to its prior."""
    torch.manual_seed(0)
    x, y = two_class_data(16, 4)
    net = laplace_mlp()
    net.hidden[1].set_prior("weight", Normal(torch.zeros(6, 8), 0.5))  # one Gaussian site
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0, init_loc_std=0.3)
    names = guide.sites_for(x, y, task_id=0, dataset_size=16)
    with PackedGaussians(model, guide, names) as packed:
        assert packed.names == ["hidden.1.weight"]
        kl, _ = kl_and_sites(model, guide, names, True, packed)
    expected = kl_to_prior(guide.posterior(names), read_priors(net, names))
    torch.testing.assert_close(kl, expected, rtol=1e-5, atol=1e-5)


def test_the_first_posterior_is_the_next_prior_and_untrained_heads_keep_the_laplace():
    x, y = two_class_data(60, 4)
    learner = pyro_cl.VCL(laplace_mlp(), epochs=5, seed=0, progress=False)
    families = lambda: {  # noqa: E731
        n: type(p.base_dist).__name__ for n, p in read_priors(learner.net).items()
    }
    assert set(families().values()) == {"Laplace"}
    learner.observe((x, y), task_id=0)
    assert families()["heads.1.weight"] == "Laplace"
    assert {families()[n] for n in ("hidden.0.weight", "hidden.1.bias", "heads.0.weight")} == {
        "Normal"
    }
    learner.observe((x, 1 - y), task_id=1)
    assert set(families().values()) == {"Normal"}
    assert type(learner.initial_prior["heads.1.weight"].base_dist).__name__ == "Laplace"


@pytest.mark.parametrize("make", ["mlp", "make_bayesian"])
def test_a_laplace_first_prior_saves_loads_and_resumes_identically(make, tmp_path):
    x, y = two_class_data(60, 4)

    def net():
        if make == "mlp":
            return laplace_mlp()
        body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        return make_bayesian(body, prior=LaplacePrior(0.3))

    learner = pyro_cl.VCL(net(), epochs=3, seed=0, progress=False)
    learner.save(tmp_path / "fresh.pt")  # before any step: the Laplace priors themselves
    learner.observe((x, y), task_id=0)
    loaded = pyro_cl.VCL.load(tmp_path / "fresh.pt", net=None if make == "mlp" else net())
    loaded.observe((x, y), task_id=0)
    for a, b in zip(learner.posterior(0).values(), loaded.posterior(0).values(), strict=True):
        torch.testing.assert_close(a.base_dist.loc, b.base_dist.loc, rtol=0, atol=0)
        torch.testing.assert_close(a.base_dist.scale, b.base_dist.scale, rtol=0, atol=0)


def test_parts_that_read_a_gaussian_prior_refuse_a_laplace_by_name():
    with pytest.raises(ValueError, match="VOGN fits against Normal priors.*Laplace prior"):
        pyro_cl.VCL(laplace_mlp(), fitter=pyro_cl.VOGN())
    with pytest.raises(ValueError, match="IVON fits against Normal priors"):
        pyro_cl.VCL(laplace_mlp(), fitter=pyro_cl.IVON())
    with pytest.raises(ValueError, match="PointEstimateFitter fits against Normal"):
        pyro_cl.VCL(laplace_mlp(), fitter=pyro_cl.PointEstimateFitter(OnlineEWC()))
    with pytest.raises(TypeError, match="has a Laplace prior"):
        laplace_mlp().hidden[0].prior_parameters("weight")
    with pytest.raises(ValueError, match="family is one of normal, .*laplace.*not 'cauchy'"):
        BayesianMLP(4, [8], 2, prior_family="cauchy")


def test_a_diffusion_moves_towards_a_laplace_first_priors_moments():
    """A Wiener step adds ``c² σ_0² Δt`` with ``σ_0 = √2 b``, the Laplace's standard deviation."""
    x, y = two_class_data(40, 4)
    learner = pyro_cl.VCL(
        laplace_mlp(), transition=pyro_cl.Wiener(0.5, time_constant=1.0), epochs=2
    )
    learner.observe((x, y), task_id=0, time=0.0)
    posterior = learner.current_prior()["hidden.0.weight"].base_dist
    learner._apply_transition(
        TransitionContext.after(learner.times, 2.0, learner.initial_prior, learner.net)
    )
    moved = read_priors(learner.net)["hidden.0.weight"].base_dist
    b = learner.initial_prior["hidden.0.weight"].base_dist.scale
    expected = (posterior.scale.square() + 0.25 * 2 * b.square() * 2.0).sqrt()
    torch.testing.assert_close(moved.scale, expected)


def test_a_joint_block_refuses_a_laplace_prior_and_the_learner_is_unchanged():
    x, y = two_class_data(40, 4)
    learner = pyro_cl.VCL(laplace_mlp(), guide=pyro_cl.FullCovariance(sites=["heads"]), epochs=2)
    before = read_priors(learner.net)
    with pytest.raises(TypeError, match="Gaussian priors; site 'heads.0.weight' has a Laplace"):
        learner.observe((x, y), task_id=0)
    assert learner.trained_sites == []
    after = read_priors(learner.net)
    for name, prior in before.items():
        assert type(after[name].base_dist) is type(prior.base_dist)
        assert torch.equal(after[name].base_dist.scale, prior.base_dist.scale)
