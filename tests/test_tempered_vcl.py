"""Tempered VCL (GVCL's β-ELBO and its λ, Loo, Swaroop & Turner 2021) against closed forms.

On Bayesian linear regression with known noise σ² the β-ELBO's optimum over all distributions is
the tempered posterior ``∝ prior · likelihood^{1/β}``: precision ``Λ = diag(1/v) + XᵀX/(βσ²)``
and mean ``Λ^{-1}(m/v + Xᵀy/(βσ²))``. The optimal mean-field Gaussian keeps that mean and the
diagonal of ``Λ`` (as for VCL, β = 1). As ``β → 0`` the variances are ``O(β)`` and the update of
the mean becomes online EWC's with the Gauss-Newton curvature and λ = 1 (GVCL section 3):
``μ_t = argmin NLL_t(μ) + ½ Σ_i H_{<t,i} (μ_i - μ_{t-1,i})²``.

GVCL's λ weighs the data's share of the previous precision λ times in the KL's mean term,
``P = λ (1/v - 1/v_0)₊ + 1/v_0``: the optimal mean becomes ``(P + diag... )`` with ``P`` in place of
``1/v`` (the variances are unchanged), and the β → 0 limit online EWC with strength λ.
"""

import pytest
import torch
from pyro.distributions import Normal

from pyro_cl import (
    VCL,
    VOGN,
    CategoricalLikelihood,
    ContinualLearner,
    ELBOFitter,
    GaussianLikelihood,
    MeanFieldGuide,
    PointEstimateFitter,
    SupervisedModel,
)
from pyro_cl.baselines import OnlineEWC
from pyro_cl.fitters.mean_precision import mean_precision_term
from pyro_cl.guides import LowRank
from pyro_cl.infer.packed_gaussians import PackedGaussians
from pyro_cl.kl import gaussian_kl
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.posterior import detach_distribution, install_prior, read_priors
from tests.helpers import two_class_data

NOISE = 0.5
DIM = 3


def tempered_diagonal_update(mean, variance, x, y, beta, strength=1.0, initial_variance=1.0):
    """The β-ELBO's mean-field optimum against ``N(mean, variance)``; with ``strength`` λ the mean
    term's precision is GVCL's ``P = λ (1/v - 1/v_0)₊ + 1/v_0``."""
    held = strength * (1 / variance - 1 / initial_variance).clamp(min=0) + 1 / initial_variance
    new_mean = torch.linalg.solve(
        torch.diag(held) + x.T @ x / (beta * NOISE**2), held * mean + x.T @ y / (beta * NOISE**2)
    )
    precision = 1 / variance + torch.diagonal(x.T @ x) / (beta * NOISE**2)
    return new_mean, 1 / precision


def tasks(num_tasks, per_task=40):
    generator = torch.Generator().manual_seed(3)
    weight = torch.tensor([1.0, -2.0, 0.5])
    out = []
    for task in range(num_tasks):
        # correlated features, so the diagonal of XᵀX is not the whole curvature
        x = (
            torch.randn(per_task, DIM, generator=generator)
            @ torch.tensor([[1.0, 0.6, 0.0], [0.0, 1.0, 0.4], [0.0, 0.0, 1.0]])
            + 0.5 * task
        )
        y = x @ (weight + task) + NOISE * torch.randn(per_task, generator=generator)
        out.append((x, y))
    return out


def learner_with(fitter, epochs=1500, learning_rate=0.01, prior_scale=1.0):
    return ContinualLearner(
        BayesianLinear(DIM, 1, bias=False, prior_scale=prior_scale),
        fitter=fitter,
        likelihood=GaussianLikelihood(NOISE),
        epochs=epochs,
        batch_size=None,
        learning_rate=learning_rate,
        num_particles=16,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )


def posterior_of(learner):
    prior = learner.current_prior()["weight"].base_dist
    return prior.loc.squeeze(0), prior.scale.squeeze(0) ** 2


def follows_the_tempered_recursion(
    learner, beta: float, strength: float = 1.0, variance_rtol: float = 0.1
) -> torch.Tensor:
    """Observe two tasks, checking the posterior after each against the tempered recursion (GVCL's
    λ = ``strength``); returns the last exact variance."""
    mean, variance = torch.zeros(DIM), torch.ones(DIM)
    for task, (x, y) in enumerate(tasks(2)):
        learner.observe((x, y), task_id=task)
        mean, variance = tempered_diagonal_update(mean, variance, x, y, beta, strength)
        loc, fitted_variance = posterior_of(learner)
        torch.testing.assert_close(loc, mean, atol=0.03, rtol=0)
        torch.testing.assert_close(1 / fitted_variance, 1 / variance, rtol=variance_rtol, atol=0)
    return variance


@pytest.mark.parametrize("beta", [0.25, 4.0])
def test_tempered_vcl_fits_the_tempered_posterior(beta):
    variance = follows_the_tempered_recursion(learner_with(ELBOFitter(kl_weight=beta)), beta)
    # the untempered recursion is far from it: the test tells β from 1
    plain_mean, plain_variance = torch.zeros(DIM), torch.ones(DIM)
    for x, y in tasks(2):
        plain_mean, plain_variance = tempered_diagonal_update(plain_mean, plain_variance, x, y, 1.0)
    assert (1 / plain_variance - 1 / variance).abs().max() > 0.5 / variance.max()


def test_vogn_takes_the_same_tempering():
    """VOGN with the Gauss-Newton curvature has the mean-field optimum as its fixed point: with
    ``kl_weight`` it is the tempered one."""
    beta = 0.25
    learner = learner_with(
        VOGN(learning_rate=0.05, beta=0.05, num_samples=8, curvature="ggn", kl_weight=beta),
        epochs=600,
    )
    follows_the_tempered_recursion(learner, beta)


def ewc_limit(data, strength=1.0):
    """Online EWC with strength λ and the exact Gauss-Newton curvature, in closed form: the first
    task's maximum-likelihood weights, then ``argmin NLL_t + ½ λ Σ_i H_{<t,i} (μ_i - μ_{t-1,i})²``."""
    x, y = data[0]
    mean = torch.linalg.solve(x.T @ x, x.T @ y)
    curvature = torch.diagonal(x.T @ x) / NOISE**2
    for x, y in data[1:]:
        precision = x.T @ x / NOISE**2 + strength * torch.diag(curvature)
        mean = torch.linalg.solve(precision, x.T @ y / NOISE**2 + strength * curvature * mean)
        curvature = curvature + torch.diagonal(x.T @ x) / NOISE**2
    return mean


def online_ewc_mean(data, strength: float) -> torch.Tensor:
    """The weights our ``OnlineEWC`` (Gauss-Newton curvature) ends at over ``data``."""
    ewc = learner_with(
        PointEstimateFitter(OnlineEWC(strength=strength, fisher_samples=None, curvature="ggn")),
        epochs=600,  # a convex quadratic: Adam at 0.1 is within 1e-6 of its minimum
        learning_rate=0.1,
    )
    for task, (x, y) in enumerate(data):
        ewc.observe((x, y), task_id=task)
    return ewc.guide.locs(["weight"])["weight"].detach().squeeze(0)


def test_tempered_vcl_tends_to_online_ewc_as_beta_goes_to_zero():
    """VOGN with the Gauss-Newton curvature reaches the β-ELBO's mean-field optimum exactly (its
    curvature of a linear model does not depend on the draws), so the limit is seen without SVI's
    noise; a prior of scale 0.3 makes VCL (β = 1) visibly different from the limit."""
    data = tasks(3, per_task=20)
    limit = ewc_limit(data)
    distance = {}
    for beta in (1.0, 1e-1, 1e-3):
        learner = learner_with(
            VOGN(learning_rate=0.2, beta=0.2, num_samples=4, curvature="ggn", kl_weight=beta),
            epochs=300,
            prior_scale=0.3,
        )
        for task, (x, y) in enumerate(data):
            learner.observe((x, y), task_id=task)
        distance[beta] = (posterior_of(learner)[0] - limit).abs().max().item()
    # our OnlineEWC reaches the closed form ...
    torch.testing.assert_close(online_ewc_mean(data, 1.0), limit, atol=0.02, rtol=0)
    # ... and tempered VCL approaches it as β shrinks, from a VCL (β = 1) that is elsewhere
    assert distance[1.0] > 0.2
    assert distance[1e-1] < distance[1.0] / 2
    assert distance[1e-3] < 0.02, distance


def test_gvcl_lambda_fits_the_mean_with_lambda_times_the_data_precision():
    """Task 2's mean is the closed form with ``P = λ (1/v - 1/v_0) + 1/v_0``; the variances are
    the β-ELBO's. λ = 1's recursion is far from λ = 10's, so the test tells λ from 1."""
    beta, strength = 0.25, 10.0
    learner = learner_with(ELBOFitter(kl_weight=beta, mean_precision_weight=strength))
    # the variances do not depend on λ (and their SVI noise is the β-ELBO's): 15%
    follows_the_tempered_recursion(learner, beta, strength, variance_rtol=0.15)
    means = {}
    for lam in (1.0, strength):
        mean, variance = torch.zeros(DIM), torch.ones(DIM)
        for x, y in tasks(2):
            mean, variance = tempered_diagonal_update(mean, variance, x, y, beta, lam)
        means[lam] = mean
    assert (means[1.0] - means[strength]).abs().max() > 0.2


def test_gvcl_lambda_tends_to_online_ewc_at_strength_lambda_as_beta_goes_to_zero():
    """At small β the λ-weighted update is online EWC at strength λ (GVCL section 3): the
    closed forms meet, at a limit λ = 1's is far from, and our ``OnlineEWC(strength=λ)`` reaches
    it. (That the fitter follows the λ-weighted closed form is the test above: SVI's noise on
    variances of order β is too large to see the limit itself.)"""
    data, strength = tasks(3, per_task=20), 5.0
    limit = ewc_limit(data, strength)
    assert (ewc_limit(data, 1.0) - limit).abs().max() > 0.1
    mean, variance = torch.zeros(DIM), torch.ones(DIM)
    for x, y in data:
        mean, variance = tempered_diagonal_update(mean, variance, x, y, 1e-4, strength)
    torch.testing.assert_close(mean, limit, atol=2e-3, rtol=0)
    torch.testing.assert_close(online_ewc_mean(data, strength), limit, atol=0.02, rtol=0)


def test_the_mean_precision_term_is_the_difference_of_the_kls():
    """``KL_λ - KL`` at any means, written out from GVCL's KL_λ: where a prior is wider than the
    initial one the data hold no precision and the KL's own term stands; ½ and λ - 1 in front."""
    learner = learner_with(ELBOFitter(), epochs=1)
    x, y = tasks(1)[0]
    learner.observe((x, y), task_id=0)
    model, guide = learner.model, learner.guide
    prior = read_priors(model.net, ["weight"])["weight"]
    # one coordinate's prior wider than the initial N(0, 1): no data precision there
    prior_loc, scale = prior.base_dist.loc, prior.base_dist.scale.clone()
    scale[0, 1] = 2.0
    install_prior(model.net, {"weight": Normal(prior_loc, scale).to_event(2)})
    prior_variance = scale.square()
    loc, log_variance = guide.gaussian_parameters(["weight"])["weight"]
    with torch.no_grad():
        loc.add_(torch.tensor([[0.3, -0.7, 0.2]]))
    strength = 4.0
    term = mean_precision_term(model, guide, ["weight"], learner.initial_prior, strength)
    variance = log_variance.exp()
    data = 1 / prior_variance - 1
    held = torch.where(data > 0, strength * data + 1, 1 / prior_variance)
    kl_lambda = (
        0.5
        * (
            variance / prior_variance
            + held * (loc - prior_loc).square()
            + (prior_variance / variance).log()
            - 1
        ).sum()
    )
    kl = gaussian_kl(loc, variance, log_variance, prior_loc, scale).sum()
    torch.testing.assert_close(term(), kl_lambda - kl)
    assert term().item() > 0.01
    assert mean_precision_term(model, guide, ["weight"], learner.initial_prior, 1.0) is None
    # nothing is held on the first task: the prior is the initial one
    assert mean_precision_term(model, guide, ["weight"], read_priors(model.net), strength) is None


def test_kl_weight_is_refused_unless_positive():
    for fitter in (ELBOFitter, VOGN):
        with pytest.raises(ValueError, match="kl_weight"):
            fitter(kl_weight=0.0)


def test_gvcl_lambda_is_refused_when_negative_or_beside_a_joint_guide():
    with pytest.raises(ValueError, match="mean_precision_weight"):
        ELBOFitter(mean_precision_weight=-1.0)
    with pytest.raises(ValueError, match="mean-field"):
        ContinualLearner(
            BayesianLinear(DIM, 1, bias=False),
            fitter=ELBOFitter(mean_precision_weight=10.0),
            guide=LowRank(rank=1),
            likelihood=GaussianLikelihood(NOISE),
            progress=False,
        )


def test_a_tempered_learner_saves_and_resumes_identically(tmp_path):
    data = tasks(2, per_task=20)
    runs = []
    for stop in (False, True):
        learner = VCL(
            BayesianLinear(DIM, 1, bias=False),
            likelihood=GaussianLikelihood(NOISE),
            fitter=ELBOFitter(kl_weight=0.1, mean_precision_weight=100.0),
            epochs=20,
            batch_size=10,
            seed=1,
            progress=False,
        )
        learner.observe(data[0], task_id=0)
        if stop:
            learner.save(tmp_path / "tempered.pt")
            learner = VCL.load(tmp_path / "tempered.pt", net=BayesianLinear(DIM, 1, bias=False))
            assert learner.fitter.kl_weight == 0.1
            assert learner.fitter.mean_precision_weight == 100.0
        learner.observe(data[1], task_id=1)
        runs.append(posterior_of(learner))
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_the_mean_precision_term_is_the_same_packed_and_per_site():
    """The fast route's flat means give the per-site value and gradient (a term that read the
    guide's own tensors while packed would be constant to Adam: λ silently 1)."""
    x, y = two_class_data(24, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    names = guide.sites_for(x, y, task_id=1, dataset_size=100)
    initial = {name: detach_distribution(prior) for name, prior in read_priors(net).items()}
    install_prior(net, {n: guide.posterior([n])[n] for n in names})  # precision e² > 1
    with torch.no_grad():
        for parameter in guide.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    reference = mean_precision_term(model, guide, names, initial, 30.0)()
    site_grads = torch.autograd.grad(reference, [guide.loc[k] for k in guide.loc.keys()])
    with PackedGaussians(model, guide, names) as packed:
        value = mean_precision_term(model, guide, names, initial, 30.0, packed)()
        flat_grad = torch.autograd.grad(value, [packed.loc])[0]
    assert reference.item() > 0
    torch.testing.assert_close(value, reference)
    torch.testing.assert_close(flat_grad, torch.cat([g.reshape(-1) for g in site_grads]))
