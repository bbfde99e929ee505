"""Guide families as parts: full-covariance and low-rank Gaussians against exact online Bayes.

On Bayesian linear regression with known noise σ² the posterior after each task is Gaussian,
``Λ_t = Λ_{t-1} + XᵀX/σ²``, ``μ_t = Λ_t⁻¹ (Λ_{t-1} μ_{t-1} + Xᵀy/σ²)``, and it lies in the
full-covariance family (and in the low-rank-plus-diagonal family once ``r ≥ D``): VCL with
such a guide is exact online inference, step after step, when the posterior is handed over
whole. A mean-field posterior is not: it loses the correlations at the first step, and the second
step's prior is then the wrong one.
"""

import copy
import math
from pathlib import Path

import pyro
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO
from torch.distributions import MultivariateNormal, kl_divergence

from pyro_cl import VOGN, ContinualLearner, GaussianLikelihood, GraphVCL
from pyro_cl.guides import FullCovariance, LowRank, MeanField
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.memory import GaussianResidualMemory, RandomCoreset
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.transitions import BayesianForgetting, OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.base import TransitionContext
from tests.helpers import exact_regression_settings

NOISE = 0.5
DIM = 3


def tasks(num_tasks, per_task=40):
    generator = torch.Generator().manual_seed(3)
    weight = torch.tensor([1.0, -2.0, 0.5])
    mixing = torch.tensor([[1.0, 0.6, 0.0], [0.0, 1.0, 0.4], [0.0, 0.0, 1.0]])
    out = []
    for task in range(num_tasks):
        # correlated features shifted per task: a posterior far from diagonal
        x = torch.randn(per_task, DIM, generator=generator) @ mixing + 0.5 * task
        y = x @ (weight + task) + NOISE * torch.randn(per_task, generator=generator)
        out.append((x, y))
    return out


def exact_online_posteriors(data):
    precision, mean, out = torch.eye(DIM), torch.zeros(DIM), []
    for x, y in data:
        new_precision = precision + x.T @ x / NOISE**2
        mean = torch.linalg.solve(new_precision, precision @ mean + x.T @ y / NOISE**2)
        precision = new_precision
        out.append(MultivariateNormal(mean, precision_matrix=precision))
    return out


def regression_learner(family, epochs=600, learning_rate=0.05, bias=False, **settings):
    return ContinualLearner(
        BayesianLinear(DIM, 1, bias=bias),
        likelihood=GaussianLikelihood(NOISE),
        guide=family,
        **exact_regression_settings(epochs, learning_rate),
        **settings,
    )


def fitted_weight_posterior(learner):
    """The learner's posterior of ``weight`` as one Gaussian over its ``D`` numbers."""
    if learner.guide.mean_field:
        q = learner.current_prior()["weight"].base_dist
        return MultivariateNormal(q.loc.reshape(-1), torch.diag(q.scale.reshape(-1) ** 2))
    return learner.guide.joint_prior("block0").distribution()


@pytest.mark.parametrize("family", [FullCovariance(), LowRank(rank=DIM)], ids=["full", "low-rank"])
def test_a_joint_gaussian_guide_is_exact_online_bayes(family):
    learner = regression_learner(family)
    data = tasks(2)
    for (x, y), exact in zip(data, exact_online_posteriors(data), strict=True):
        learner.observe((x, y))
        assert kl_divergence(exact, fitted_weight_posterior(learner)) < 0.1


def test_a_mean_field_guide_is_not():
    data = tasks(2)
    learner = regression_learner(MeanField(), epochs=200)
    for step in data:
        learner.observe(step)
    assert kl_divergence(exact_online_posteriors(data)[-1], fitted_weight_posterior(learner)) > 2


def test_predictions_draw_a_block_together():
    """The predictive variance of ``f = xᵀw + b`` under a block over the weight and the bias is
    ``[x, 1] Σ [x, 1]ᵀ``; drawing the sites (or the numbers of one site) apart gives the sum of
    the marginal variances instead."""
    learner = regression_learner(FullCovariance(), epochs=1, bias=True)
    x, y = tasks(1)[0]
    learner.observe((x, y))
    guide = learner.guide
    assert guide._blocks["block0"].names == ("weight", "bias")
    covariance = torch.tensor(
        [[1.0, 0.9, 0.0, 0.5], [0.9, 1.0, 0.0, 0.5], [0.0, 0.0, 0.5, 0.0], [0.5, 0.5, 0.0, 1.0]]
    )
    with torch.no_grad():
        guide.prior_loc["block0"].copy_(torch.tensor([0.5, -1.0, 2.0, 0.3]))
        guide.prior_tril["block0"].copy_(torch.linalg.cholesky(covariance))
    inputs = torch.tensor([[1.0, 1.0, 0.0], [1.0, -1.0, 2.0]])
    samples = learner.predictive_samples(inputs, num_samples=40_000).squeeze(-1)
    rows = torch.cat([inputs, torch.ones(2, 1)], dim=1)
    expected_mean = rows @ torch.tensor([0.5, -1.0, 2.0, 0.3])
    expected_variance = torch.einsum("nd,de,ne->n", rows, covariance, rows)
    torch.testing.assert_close(samples.mean(0), expected_mean, atol=0.05, rtol=0)
    torch.testing.assert_close(samples.var(0), expected_variance, rtol=0.05, atol=0)
    apart = (rows**2 @ covariance.diagonal()).tolist()
    assert all(abs(a - e) > 1.5 for a, e in zip(apart, expected_variance.tolist(), strict=True))


def test_both_routes_compute_the_same_joint_elbo():
    """The fast route (one vectorised block draw) and the Pyro route (one block draw per
    particle, replayed into the model) estimate the same negative ELBO."""
    learner = regression_learner(FullCovariance(), epochs=1)
    x, y = tasks(1)[0]
    learner.observe((x, y))
    batch = Minibatch(x, y, 0)
    torch.manual_seed(0)
    fast = negative_elbo(learner.model, learner.guide, batch, len(x), 4000, fast=True)
    pyro_route = negative_elbo(learner.model, learner.guide, batch, len(x), 4000, fast=False)
    torch.testing.assert_close(fast, pyro_route, rtol=0.01, atol=0)


def test_the_guide_is_an_ordinary_pyro_guide():
    """``SVI(model, guide, Adam, Trace_ELBO())`` scores the joint ``q`` through the block's
    auxiliary site; on the conjugate model the expected loss at the exact posterior is the
    negative log evidence."""
    learner = regression_learner(FullCovariance(), epochs=1)
    x, y = tasks(1)[0]
    learner.observe((x, y))
    exact = exact_online_posteriors([(x, y)])[0]
    guide = learner.guide
    with torch.no_grad():
        guide.loc["weight"].copy_(exact.loc.reshape(1, DIM))
        tril = exact.scale_tril
        relative = tril.tril(-1) / tril.diagonal().unsqueeze(-1)  # L = diag(s) (I + N)
        guide.block_tril["block0"].copy_(relative + torch.diag(tril.diagonal().log()))
        guide.prior_loc["block0"].zero_()
        guide.prior_tril["block0"].copy_(torch.eye(DIM))
    learner.net.set_prior("weight", pyro.distributions.Normal(torch.zeros(1, DIM), 1.0))
    pyro.clear_param_store()
    svi = SVI(learner.model, guide, pyro.optim.Adam({"lr": 0.0}), Trace_ELBO())
    # at the exact posterior log p(y, w) - log q(w) is the log evidence for every draw w
    loss = svi.evaluate_loss(x, y, task_id=0, dataset_size=len(x))
    marginal = MultivariateNormal(torch.zeros(len(x)), x @ x.T + NOISE**2 * torch.eye(len(x)))
    assert loss == pytest.approx(-marginal.log_prob(y).item(), rel=1e-4)


def test_a_multi_head_net_gets_a_block_per_first_use():
    net = BayesianMLP(4, [6], 2, heads=2)
    learner = ContinualLearner(net, guide=LowRank(rank=2), epochs=2, seed=0, progress=False)
    generator = torch.Generator().manual_seed(0)
    for task in range(2):
        x = torch.randn(20, 4, generator=generator)
        learner.observe((x, (x[:, 0] > 0).long()), task_id=task)
    blocks = {key: layout.names for key, layout in learner.guide._blocks.items()}
    assert blocks["block0"][-2:] == ("heads.0.weight", "heads.0.bias")
    assert blocks["block1"] == ("heads.1.weight", "heads.1.bias")
    assert set(blocks["block0"]) >= {"hidden.0.weight", "hidden.0.bias"}


@pytest.mark.parametrize("family", [FullCovariance(sites=["weight"]), LowRank(rank=2)])
def test_each_family_saves_loads_and_resumes_identically(family, tmp_path):
    data = tasks(2)
    learner = regression_learner(family, epochs=30)
    learner.observe(data[0])
    learner.save(tmp_path / "learner.pt")
    loaded = ContinualLearner.load(tmp_path / "learner.pt", net=BayesianLinear(DIM, 1, bias=False))
    assert loaded.guide_family.spec() == family.spec()
    for each in (learner, loaded):
        each.observe(data[1])
    for key in learner.guide._blocks:
        mine, theirs = learner.guide.joint_prior(key), loaded.guide.joint_prior(key)
        for a, b in zip(mine, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    x = data[1][0][:5]
    torch.testing.assert_close(
        learner.predictive_samples(x), loaded.predictive_samples(x), rtol=0, atol=0
    )


@pytest.mark.parametrize("family", [FullCovariance(), LowRank(rank=DIM)], ids=["full", "low-rank"])
def test_a_coreset_refit_of_a_block_is_exact_bayes_on_all_the_data(family):
    """VCL eq. 3 with the whole covariance: ``q̃_t`` is fitted on each task without its
    coreset, the refit multiplies in the coreset's likelihood, so on the conjugate model the
    refit is ``p(w | all the data)``, which the propagated ``q̃_t`` is not."""
    data = tasks(2)
    learner = regression_learner(family, memory=RandomCoreset(20))
    for step in data:
        learner.observe(step)
    exact = exact_online_posteriors(data)[-1]
    (refit,) = learner.prediction_posteriors.values()
    assert kl_divergence(exact, refit["weight"].base_dist.joint.distribution()) < 0.1
    assert kl_divergence(exact, fitted_weight_posterior(learner)) > 1  # half of each task left


def test_a_refit_block_predicts_jointly_and_saves_and_loads_whole(tmp_path):
    """The refit posterior keeps its block: predictions draw it together (the variance of
    ``f = xᵀw + b`` is ``[x, 1] Σ [x, 1]ᵀ`` of the refit's ``Σ``), and a saved learner rebuilds one
    block for its sites and predicts the same draws."""
    learner = regression_learner(FullCovariance(), epochs=100, bias=True, memory=RandomCoreset(10))
    for step in tasks(2):
        learner.observe(step)
    (refit,) = learner.prediction_posteriors.values()
    weight, bias = (refit[name].base_dist for name in ("weight", "bias"))
    assert weight.joint is bias.joint
    distribution = weight.joint.distribution()
    inputs = torch.tensor([[1.0, 1.0, 0.0], [1.0, -1.0, 2.0]])
    rows = torch.cat([inputs, torch.ones(2, 1)], dim=1)
    expected = torch.einsum("nd,de,ne->n", rows, distribution.covariance_matrix, rows)
    samples = learner.predictive_samples(inputs, num_samples=40_000).squeeze(-1)
    torch.testing.assert_close(samples.var(0), expected, rtol=0.05, atol=0)
    apart = rows**2 @ distribution.variance
    assert abs(apart[0] - expected[0]) > 0.2 * expected[0]  # drawn apart, the variance is off

    learner.save(tmp_path / "learner.pt")
    loaded = ContinualLearner.load(tmp_path / "learner.pt", net=BayesianLinear(DIM, 1, bias=True))
    (saved,) = loaded.prediction_posteriors.values()
    assert saved["weight"].base_dist.joint is saved["bias"].base_dist.joint  # one block, rebuilt
    for a, b in zip(saved["weight"].base_dist.joint, weight.joint, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(
        learner.predictive_samples(inputs), loaded.predictive_samples(inputs), rtol=0, atol=0
    )


def test_a_failed_step_leaves_the_joint_prior_and_the_guide_as_they_were():
    data = tasks(2)
    learner = regression_learner(FullCovariance(), epochs=30)
    learner.observe(data[0])
    before = copy.deepcopy(learner.guide.state_dict())
    prior_before = learner.guide.joint_prior("block0")
    hand_off = learner.guide.hand_off

    def hand_off_then_fail(names):
        hand_off(names)
        raise RuntimeError("after the handoff")

    learner.guide.hand_off = hand_off_then_fail
    with pytest.raises(RuntimeError, match="after the handoff"):
        learner.observe(data[1])
    del learner.guide.hand_off
    after = learner.guide.state_dict()
    for name, value in before.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(after[name], value, rtol=0, atol=0)
    for a, b in zip(learner.guide.joint_prior("block0"), prior_before, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert learner.tasks_seen == [0]


@pytest.mark.parametrize(
    "parts, named",
    [
        ({"memory": GaussianResidualMemory(10)}, "GaussianResidualMemory"),
        ({"fitter": VOGN()}, "VOGN"),
        ({"transition": BayesianForgetting(0.1)}, "BayesianForgetting"),
        ({"between_tasks": "reset"}, "between_tasks='reset'"),
    ],
)
def test_parts_refuse_a_family_they_do_not_support_by_name(parts, named):
    with pytest.raises(ValueError, match=named):
        ContinualLearner(BayesianLinear(DIM, 1), guide=FullCovariance(), **parts)


#: Each transition, and its step ``(a, b, v)`` at Δt = 3 with τ = 1.5 from the prior N(0, 1).
GAUSSIAN_STEPS = {
    # Wiener: w' = w + ε, v = c² σ_0² Δt/τ
    "wiener": (Wiener(0.5, time_constant=1.5), (1.0, 0.0, 0.25 * 2.0)),
    # Ornstein-Uhlenbeck: a = e^{-sΔt/τ}, b = (1 - a) μ_0, v = (1 - a²) σ_0²
    "ornstein-uhlenbeck": (
        OrnsteinUhlenbeck(0.2, time_constant=1.5),
        (math.exp(-0.4), 0.0, 1 - math.exp(-0.8)),
    ),
}


@pytest.mark.parametrize("family", [FullCovariance(), LowRank(rank=2)], ids=["full", "low-rank"])
@pytest.mark.parametrize("kind", list(GAUSSIAN_STEPS))
def test_a_joint_prior_goes_through_a_gaussian_transition_whole(family, kind):
    """``N(μ, Σ) → N(a μ + b, a² Σ + v I)``: the correlations carried, not dropped."""
    transition, (a, b, v) = GAUSSIAN_STEPS[kind]
    learner = regression_learner(family, epochs=30, transition=transition)
    learner.observe(tasks(1)[0], time=0.0)
    before = learner.guide.joint_prior("block0").distribution()
    carried = learner.prior_at(3.0)["weight"].base_dist.joint.distribution()
    torch.testing.assert_close(carried.loc, a * before.loc + b)
    expected = a**2 * before.covariance_matrix + v * torch.eye(DIM)
    torch.testing.assert_close(carried.covariance_matrix, expected, rtol=1e-5, atol=1e-6)
    # prior_at leaves the learner as it was; a step at that time starts from the same prior
    torch.testing.assert_close(learner.guide.joint_prior("block0").distribution().loc, before.loc)
    learner._apply_transition(
        TransitionContext.after(learner.times, 3.0, learner.initial_prior, learner.net)
    )
    after = learner.guide.joint_prior("block0").distribution()
    torch.testing.assert_close(after.covariance_matrix, expected, rtol=1e-5, atol=1e-6)


def test_a_joint_prior_is_never_replaced_site_by_site():
    learner = regression_learner(FullCovariance(), epochs=5)
    learner.observe(tasks(1)[0])
    marginals = learner.current_prior()
    with pytest.raises(ValueError, match="keeps a joint prior"):
        learner.observe(tasks(2)[1], prior=marginals)
    with pytest.raises(ValueError, match="mean-field guide family"):
        GraphVCL(learner, torch.ones(2, 2))


def test_a_family_is_refused_unless_it_is_one():
    with pytest.raises(TypeError, match="guide must be a GuideFamily"):
        ContinualLearner(BayesianLinear(DIM, 1), guide="full")
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        LowRank(rank=0)
    with pytest.raises(TypeError, match="sites must be a list"):
        FullCovariance(sites="head")
    with pytest.raises(ValueError, match=r"joins sites \['head'\], which the net does not have"):
        ContinualLearner(BayesianMLP(4, [6], 2), guide=FullCovariance(sites=["head"]))


def test_pyros_gaussian_autoguides_are_taken_as_the_families_they_are():
    """``guide=AutoNormal`` fits what ``MeanField()`` fits, to the bit; the multivariate ones are
    the joint families (a low-rank guide's rank carried over)."""
    from functools import partial

    from pyro.infer import autoguide

    data = tasks(1)[0]
    fitted = {}
    for name, family in {"ours": MeanField(), "pyro": autoguide.AutoNormal}.items():
        learner = regression_learner(family, epochs=20)
        learner.observe(data)
        fitted[name] = learner.current_prior()["weight"].base_dist
    assert torch.equal(fitted["ours"].loc, fitted["pyro"].loc)
    assert torch.equal(fitted["ours"].scale, fitted["pyro"].scale)
    low_rank = regression_learner(partial(autoguide.AutoLowRankMultivariateNormal, rank=2))
    assert isinstance(low_rank.guide_family, LowRank) and low_rank.guide_family.rank == 2
    full = regression_learner(autoguide.AutoMultivariateNormal)
    assert type(full.guide_family) is FullCovariance
    assert type(regression_learner(autoguide.AutoDiagonalNormal).guide_family) is MeanField


def test_autoguides_without_a_gaussian_handoff_are_refused_by_name():
    from functools import partial

    from pyro.infer import autoguide

    with pytest.raises(TypeError, match="AutoDelta is a point estimate"):
        regression_learner(autoguide.AutoDelta)
    with pytest.raises(TypeError, match="AutoIAFNormal has no Gaussian handoff"):
        regression_learner(autoguide.AutoIAFNormal)
    with pytest.raises(TypeError, match="not a guide built for a model"):
        regression_learner(autoguide.AutoNormal(lambda: None))
    with pytest.raises(TypeError, match="init_scale is not carried over"):
        regression_learner(partial(autoguide.AutoNormal, init_scale=0.1))


@pytest.mark.parametrize("name", ["full", "low_rank"])
def test_a_joint_guide_saved_before_the_block_forms_loads_and_predicts_the_same(name):
    """tests/data/*_covariance_before_block_forms.pt were written by commit 866095e, when the
    joint guide branched on its rank: the same tensors under the same names load into the
    guide built over a BlockCovariance."""
    data = Path(__file__).parent / "data"
    expected = torch.load(data / "joint_covariance_before_block_forms_expected.pt")[name]
    saved = data / f"{name}_covariance_before_block_forms.pt"
    learner = ContinualLearner.load(saved, net=BayesianLinear(3, 1))
    for mine, saved in zip(learner.guide.joint_prior("block0"), expected["prior"], strict=True):
        torch.testing.assert_close(mine, saved, rtol=0, atol=0)
    torch.manual_seed(0)
    x = torch.randn(20, 3)[:4]  # the inputs the file's predictions were made at
    samples = learner.predictive_samples(x, num_samples=5)
    torch.testing.assert_close(samples, expected["samples"], rtol=0, atol=0)


def test_a_blocks_kl_is_the_registered_closed_form_of_its_distributions():
    """The full covariance's KL (one triangular solve, registered for its Cholesky Gaussians) is
    torch's multivariate normal KL; the low rank's is torch's own registered one."""
    from pyro_cl.guides.full_covariance import FullGaussian
    from pyro_cl.guides.low_rank import LowRankGaussian
    from pyro_cl.kl import site_kl

    generator = torch.Generator().manual_seed(0)

    def tril():
        raw = torch.randn(4, 4, generator=generator, dtype=torch.float64).tril(-1)
        return raw + torch.diag(torch.rand(4, generator=generator, dtype=torch.float64) + 0.5)

    def loc():
        return torch.randn(4, generator=generator, dtype=torch.float64)

    q, p = FullGaussian(loc(), tril()), FullGaussian(loc(), tril())
    expected = kl_divergence(
        MultivariateNormal(q.loc, scale_tril=q.scale_tril),
        MultivariateNormal(p.loc, scale_tril=p.scale_tril),
    )
    torch.testing.assert_close(site_kl(q.distribution(), p.distribution()), expected)
    low = LowRankGaussian(loc(), tril()[:, :2], torch.rand(4, dtype=torch.float64) + 0.1)
    other = LowRankGaussian(loc(), tril()[:, :2], torch.rand(4, dtype=torch.float64) + 0.1)
    expected = kl_divergence(
        MultivariateNormal(low.loc, low.cov_factor @ low.cov_factor.T + torch.diag(low.cov_diag)),
        MultivariateNormal(
            other.loc, other.cov_factor @ other.cov_factor.T + torch.diag(other.cov_diag)
        ),
    )
    torch.testing.assert_close(site_kl(low.distribution(), other.distribution()), expected)
