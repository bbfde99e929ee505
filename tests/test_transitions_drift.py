"""Transitions for drifting data (Kurle et al. 2020, section 4): Bayesian forgetting, the
Ornstein-Uhlenbeck and Wiener processes, against their closed forms and exact conjugate models."""

import math

import pytest
import torch
from pyro.distributions import Beta, Normal

from pyro_cl import (
    IVON,
    VOGN,
    BayesianForgetting,
    BernoulliLikelihood,
    CategoricalLikelihood,
    ContinualLearner,
    ELBOFitter,
    GaussianLikelihood,
    Identity,
    OrnsteinUhlenbeck,
    Wiener,
)
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.memory import GaussianResidualMemory, RandomCoreset
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.posterior import detach_distribution, read_priors
from pyro_cl.transitions.base import TransitionContext
from pyro_cl.transitions.forgetting import forgetting_mix, retention
from tests.test_linear_regression_vcl import CONVERGED


def gaussian(loc, scale):
    return Normal(torch.as_tensor(loc), torch.as_tensor(scale)).to_event(1)


def context(elapsed, mean_lag=None, initial=None):
    initial = initial or {"w": gaussian([0.5, -1.0, 0.0], [2.0, 1.0, 0.5])}
    return TransitionContext(elapsed, 0.0, initial, torch.nn.Identity(), mean_lag)


POSTERIOR = {"w": gaussian([3.0, 1.0, -2.0], [0.1, 0.3, 0.2])}


def parameters(posterior):
    q = posterior["w"].base_dist
    return q.loc, q.scale


def test_bayesian_forgetting_of_a_gaussian_is_appendix_f_closed_form():
    epsilon, tau, elapsed = 0.2, 2.0, 3.0
    rho = (1 - epsilon) ** (elapsed / tau)
    loc, scale = parameters(BayesianForgetting(epsilon, tau)(POSTERIOR, context(elapsed)))
    mu0, s0 = parameters(context(elapsed).initial_prior)
    mu, s = parameters(POSTERIOR)
    precision = (1 - rho) / s0**2 + rho / s**2
    torch.testing.assert_close(scale, precision.rsqrt())
    torch.testing.assert_close(loc, ((1 - rho) * mu0 / s0**2 + rho * mu / s**2) / precision)


def test_bayesian_forgetting_mixes_beta_sticks_in_natural_parameters():
    initial = {"v": Beta(torch.tensor([5.0]), torch.tensor([1.0]))}
    posterior = {"v": Beta(torch.tensor([50.0]), torch.tensor([8.0]))}
    forgotten = BayesianForgetting(0.5, 1.0)(posterior, context(1.0, initial=initial))["v"]
    torch.testing.assert_close(forgotten.concentration1, torch.tensor([27.5]))
    torch.testing.assert_close(forgotten.concentration0, torch.tensor([4.5]))


def test_ornstein_uhlenbeck_mean_and_variance_follow_the_stated_exponentials():
    a, tau, elapsed = 0.7, 0.5, 0.3
    decay = math.exp(-a * elapsed / tau)
    loc, scale = parameters(OrnsteinUhlenbeck(a, tau)(POSTERIOR, context(elapsed)))
    mu0, s0 = parameters(context(elapsed).initial_prior)
    mu, s = parameters(POSTERIOR)
    torch.testing.assert_close(loc, (1 - decay) * mu0 + decay * mu)
    torch.testing.assert_close(scale**2, (1 - decay**2) * s0**2 + decay**2 * s**2)


def test_wiener_keeps_the_mean_and_adds_variance_proportional_to_the_prior_variance():
    c, tau, elapsed = 0.3, 2.0, 5.0
    loc, scale = parameters(Wiener(c, tau)(POSTERIOR, context(elapsed)))
    _, s0 = parameters(context(elapsed).initial_prior)
    mu, s = parameters(POSTERIOR)
    torch.testing.assert_close(loc, mu)
    torch.testing.assert_close(scale**2, s**2 + c**2 * s0**2 * elapsed / tau)


@pytest.mark.parametrize(
    "transition", [BayesianForgetting(0.3, 1.0), OrnsteinUhlenbeck(0.8, 1.0), Wiener(0.5, 1.0)]
)
def test_two_half_steps_equal_one_whole_step(transition):
    """All three are Markov in continuous time: transitions compose over non-equidistant lags."""
    once = transition(POSTERIOR, context(1.4))
    twice = transition(transition(POSTERIOR, context(0.5)), context(0.9))
    for a, b in zip(parameters(once), parameters(twice), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("transition", [BayesianForgetting(0.3, 1.0), OrnsteinUhlenbeck(0.8, 1.0)])
def test_after_a_very_long_time_forgetting_and_ou_return_the_initial_prior(transition):
    forgotten = transition(POSTERIOR, context(1e4))
    for a, b in zip(parameters(forgotten), parameters(context(1.0).initial_prior), strict=True):
        torch.testing.assert_close(a, b)


def test_the_time_constant_defaults_to_the_mean_lag_so_far():
    by_mean_lag = BayesianForgetting(0.3)(POSTERIOR, context(2.0, mean_lag=4.0))
    explicit = BayesianForgetting(0.3, time_constant=4.0)(POSTERIOR, context(2.0, mean_lag=1.0))
    torch.testing.assert_close(parameters(by_mean_lag)[0], parameters(explicit)[0])


@pytest.mark.parametrize(
    "make,bad",
    [
        (BayesianForgetting, 1.0),
        (BayesianForgetting, -0.1),
        (OrnsteinUhlenbeck, -1.0),
        (Wiener, float("nan")),
    ],
)
def test_adaptation_parameters_out_of_range_are_refused_by_name(make, bad):
    with pytest.raises(ValueError, match="must lie in"):
        make(bad)
    with pytest.raises(ValueError, match="time constant"):
        make(0.1, time_constant=0.0)


# ---------------------------------------------------------------- exact conjugate regression


def test_recursive_forgetting_equals_the_batch_weighted_posterior_for_linear_regression():
    """Eq. 11 applied step by step to the exact (full-covariance) Bayesian linear regression
    posterior equals eq. 10, the batch posterior with likelihoods weighted by (1-ε)^{(t_K-t_k)/τ},
    at every step of a non-equidistant stream."""
    torch.manual_seed(0)
    dim, noise, epsilon, tau = 3, 0.5, 0.25, 1.5
    prior_precision = torch.diag(torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64))
    prior_shift = prior_precision @ torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    times = [0.0, 1.0, 1.5, 4.0, 4.2, 7.0]
    steps = []
    precision, shift = prior_precision, prior_shift
    for k, t in enumerate(times):
        x = torch.randn(5, dim, dtype=torch.float64)
        y = x @ torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64) * math.cos(t) + 0.1 * k
        steps.append((t, x, y))
        if k:
            rho = retention(epsilon, (t - times[k - 1]) / tau)
            precision = forgetting_mix(prior_precision, precision, rho)
            shift = forgetting_mix(prior_shift, shift, rho)
        precision = precision + x.T @ x / noise**2
        shift = shift + x.T @ y / noise**2
        batch_precision, batch_shift = prior_precision.clone(), prior_shift.clone()
        for t_j, x_j, y_j in steps:
            weight = (1 - epsilon) ** ((t - t_j) / tau)
            batch_precision += weight * x_j.T @ x_j / noise**2
            batch_shift += weight * x_j.T @ y_j / noise**2
        torch.testing.assert_close(precision, batch_precision)
        torch.testing.assert_close(shift, batch_shift)


def test_a_learner_with_forgetting_matches_the_exact_mean_field_linear_regression_recursion():
    """The ELBO optimum for a Gaussian likelihood and diagonal prior is the exact diagonal
    update; with forgetting, the prior of each later step is eq. 11's mix."""
    torch.manual_seed(1)
    dim, noise, epsilon = 2, 0.5, 0.4
    net = BayesianLinear(dim, 1, bias=False, prior_scale=1.0)
    learner = ContinualLearner(
        net,
        GaussianLikelihood(noise),
        transition=BayesianForgetting(epsilon, time_constant=1.0),
        **CONVERGED,
    )
    mean, variance = torch.zeros(dim), torch.ones(dim)
    for step, time in enumerate([0.0, 2.0]):
        x = torch.randn(40, dim) + 0.3 * step
        y = x @ torch.tensor([1.0, -2.0]) * (1 - 2 * step) + noise * torch.randn(40)
        learner.observe((x, y), time=time)
        if step:
            rho = (1 - epsilon) ** 2.0
            precision = (1 - rho) * 1.0 + rho / variance
            mean, variance = (rho * mean / variance) / precision, 1 / precision
        precision = torch.diag(1 / variance) + x.T @ x / noise**2
        mean = torch.linalg.solve(precision, mean / variance + x.T @ y / noise**2)
        variance = 1 / torch.diagonal(precision)
        prior = learner.current_prior()["weight"].base_dist
        torch.testing.assert_close(prior.loc.squeeze(0), mean, atol=0.03, rtol=0)
        torch.testing.assert_close(prior.scale.squeeze(0) ** -2, variance**-1, rtol=0.1, atol=0)


# ---------------------------------------------------------------- in the learner


def drift_data(steps=4, n=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    data = []
    for k in range(steps):
        x = torch.randn(n, 2, generator=generator)
        angle = 0.6 * k
        y = ((x[:, 0] * math.cos(angle) + x[:, 1] * math.sin(angle)) > 0).long()
        data.append((x, y))
    return data


def drift_learner(transition, memory=None, fitter=None, seed=0):
    return ContinualLearner(
        BayesianMLP(2, [6], 2),
        transition=transition,
        memory=memory,
        fitter=fitter,
        epochs=15,
        batch_size=None,
        ml_init_epochs=0,
        seed=seed,
        progress=False,
    )


def run(learner, times, data=None):
    for (x, y), time in zip(data or drift_data(len(times)), times, strict=True):
        learner.observe((x, y), time=time)
    return learner


def assert_same_posterior(a, b):
    pa, pb = a.current_prior(), b.current_prior()
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name].base_dist.loc, pb[name].base_dist.loc), name
        assert torch.equal(pa[name].base_dist.scale, pb[name].base_dist.scale), name


@pytest.mark.parametrize(
    "transition",
    [BayesianForgetting(0.0), OrnsteinUhlenbeck(0.0), Wiener(0.0)],
    ids=["forgetting", "ou", "wiener"],
)
@pytest.mark.parametrize("memory", [None, "grs"])
def test_zero_adaptation_is_exactly_online_vb(transition, memory):
    def make_memory():
        return None if memory is None else GaussianResidualMemory(4, 20)

    times = [0.0, 1.0, 3.0]
    adapted = run(drift_learner(transition, make_memory()), times)
    plain = run(drift_learner(Identity(), make_memory()), times)
    assert_same_posterior(adapted, plain)


@pytest.mark.parametrize(
    "make",
    [lambda tau: BayesianForgetting(0.3, tau), lambda tau: OrnsteinUhlenbeck(0.5, tau)],
    ids=["forgetting", "ou"],
)
def test_a_non_equidistant_stream_equals_its_rescaled_twin(make):
    """Only Δt/τ matters: the same stream with every time doubled and τ doubled learns the same."""
    times = [0.0, 1.0, 3.0, 3.5]
    memory = GaussianResidualMemory(4, 20)
    one = run(drift_learner(make(1.0), memory), times)
    two = run(drift_learner(make(2.0), GaussianResidualMemory(4, 20)), [2 * t for t in times])
    assert_same_posterior(one, two)
    assert torch.equal(one.memory_points.x, two.memory_points.x)


class FitRecorder(ELBOFitter):
    """Records the weights and times of every fit's data (not registered: no name)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def fit(self, context, guide, problem):
        data = problem.data
        self.seen.append((data.times.clone(), None if data.weights is None else data.weights))
        return super().fit(context, guide, problem)


def test_memory_likelihoods_are_weighted_by_age_in_every_fit():
    epsilon = 0.4
    recorder = FitRecorder()
    times = [0.0, 1.0, 3.0, 4.0]
    learner = drift_learner(BayesianForgetting(epsilon), GaussianResidualMemory(5, 20), recorder)
    run(learner, times)
    assert recorder.seen[0][1] is None  # the first step has no memory
    for (point_times, weights), now, k in zip(
        recorder.seen[1:], times[1:], range(1, 4), strict=True
    ):
        tau = (now - times[0]) / k  # the mean lag so far
        expected = (1 - epsilon) ** ((now - point_times) / tau)
        torch.testing.assert_close(weights, expected.to(weights))
        assert (weights[point_times == now] == 1).all() and (weights[point_times < now] < 1).all()


def test_a_weight_zero_point_changes_nothing_and_unit_weights_are_the_plain_elbo():
    torch.manual_seed(0)
    net = BayesianMLP(2, [5], 2, local_reparameterization=False)  # draws independent of N
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model)
    x, y = torch.randn(6, 2), torch.tensor([0, 1, 1, 0, 1, 0])
    model.sites(guide, x, [0])
    far_x, far_y = torch.cat([x, torch.randn(1, 2) * 5]), torch.cat([y, torch.tensor([1])])
    weights = torch.tensor([1.0, 0.5, 1.0, 0.2, 1.0, 1.0])

    def loss(inputs, targets, w):
        torch.manual_seed(3)
        size = float(w.sum()) if w is not None else len(inputs)
        scaled = None if w is None else w * len(w) / w.sum()
        return negative_elbo(model, guide, Minibatch(inputs, targets, 0, scaled), size, 4)

    with_zero = torch.cat([weights, torch.zeros(1)])
    torch.testing.assert_close(loss(far_x, far_y, with_zero), loss(x, y, weights))
    torch.testing.assert_close(loss(x, y, torch.ones(6)), loss(x, y, None))
    assert not torch.allclose(loss(x, y, weights), loss(x, y, None))


def test_save_and_load_mid_stream_resumes_identically(tmp_path):
    times = [0.0, 1.0, 2.5, 3.0]
    data = drift_data(4)
    straight = run(
        drift_learner(BayesianForgetting(0.3), GaussianResidualMemory(4, 20)), times, data
    )
    first = run(
        drift_learner(BayesianForgetting(0.3), GaussianResidualMemory(4, 20)), times[:2], data[:2]
    )
    first.save(tmp_path / "learner.pt")
    resumed = run(ContinualLearner.load(tmp_path / "learner.pt"), times[2:], data[2:])
    assert_same_posterior(straight, resumed)
    assert isinstance(resumed.transition, BayesianForgetting)
    assert resumed.transition.forgetting_rate == 0.3


class PriorRecorder:
    """Mixin for a fitter: records the priors the fit starts from."""

    def prepare(self, context, guide, data, task_id, sites, first_task):
        self.priors = getattr(self, "priors", [])
        self.priors.append(
            {n: detach_distribution(read_priors(context.model.net)[n]) for n in sites}
        )
        return super().prepare(context, guide, data, task_id, sites, first_task)


@pytest.mark.parametrize("fitter_class", [ELBOFitter, VOGN, IVON], ids=["svi", "vogn", "ivon"])
@pytest.mark.parametrize(
    "transition",
    [BayesianForgetting(0.5), OrnsteinUhlenbeck(1.0), Wiener(0.5)],
    ids=["forgetting", "ou", "wiener"],
)
def test_every_fitter_starts_from_the_transitioned_posterior(fitter_class, transition):
    recording = type("Recording", (PriorRecorder, fitter_class), {})
    fitter = recording() if fitter_class is ELBOFitter else recording(learning_rate=0.05)
    learner = drift_learner(transition, fitter=fitter)
    x, y = drift_data(2)[0]
    learner.observe((x, y), time=0.0)
    posterior = {n: detach_distribution(d) for n, d in learner.current_prior().items()}
    learner.observe(drift_data(2)[1], time=2.0)
    initial = learner.initial_prior
    expected = transition(posterior, TransitionContext(2.0, 2.0, initial, learner.net, 2.0))
    for name, prior in fitter.priors[1].items():
        torch.testing.assert_close(prior.base_dist.loc, expected[name].base_dist.loc)
        torch.testing.assert_close(prior.base_dist.scale, expected[name].base_dist.scale)


def test_a_fitter_that_cannot_weigh_likelihoods_is_refused_and_the_step_rolled_back():
    learner = drift_learner(BayesianForgetting(0.5), RandomCoreset(4, budget="total"), VOGN(0.05))
    data = drift_data(2)
    learner.observe(data[0], time=0.0)
    before = {n: d.base_dist.loc.clone() for n, d in learner.current_prior().items()}
    with pytest.raises(ValueError, match="cannot weigh the memory's likelihoods"):
        learner.observe(data[1], time=1.0)
    after = learner.current_prior()
    assert all(torch.equal(before[n], after[n].base_dist.loc) for n in before)
    assert learner.times == [0.0]


def test_diffusion_transitions_refuse_nets_with_priors_off_the_real_line():
    from pyro_cl.nn import IndianBuffetMLP

    net = IndianBuffetMLP(2, [4], 2)
    with pytest.raises(TypeError, match="priors on the real line; site 'sticks.0.v' has a Beta"):
        ContinualLearner(net, transition=OrnsteinUhlenbeck(1.0))
    ContinualLearner(IndianBuffetMLP(2, [4], 2), transition=BayesianForgetting(0.1))


def test_bernoulli_likelihood_scores_and_curvature():
    likelihood = BernoulliLikelihood()
    f = torch.tensor([[0.3], [-1.2]], requires_grad=True)
    y = torch.tensor([1.0, 0.0])
    log_p = likelihood.log_prob(f, y)
    torch.testing.assert_close(
        log_p, torch.stack([torch.sigmoid(f[0, 0]).log(), torch.sigmoid(-f[1, 0]).log()])
    )
    second = torch.autograd.functional.hessian(
        lambda v: -likelihood.log_prob(v.unsqueeze(-1), y).sum(), f.detach().squeeze(-1)
    )
    factor = likelihood.hessian_factor(f.detach())
    torch.testing.assert_close(
        (factor @ factor.transpose(-1, -2)).squeeze(), torch.diagonal(second)
    )
    with pytest.raises(ValueError, match="0 or 1"):
        likelihood.check_targets(torch.tensor([0, 2]), 1)


def test_transitions_leave_sites_no_step_has_trained_untouched():
    net = BayesianMLP(2, [4], 2, heads=2)
    learner = ContinualLearner(
        net, transition=Wiener(1.0), epochs=3, batch_size=None, progress=False, seed=0
    )
    data = drift_data(2)
    learner.observe(data[0], task_id=0, time=0.0)
    learner.observe(data[1], task_id=0, time=5.0)
    priors = read_priors(learner.net)
    for name in ("heads.1.weight", "heads.1.bias"):
        assert torch.equal(
            priors[name].base_dist.scale, learner.initial_prior[name].base_dist.scale
        )
    assert "heads.1.weight" not in learner.trained_sites


def test_forgetting_weighs_a_memory_chosen_before_the_fit_and_its_refit():
    recorder = FitRecorder()
    memory = RandomCoreset(6, budget="total")
    learner = drift_learner(BayesianForgetting(0.5, time_constant=1.0), memory, recorder)
    run(learner, [0.0, 1.0, 2.0])
    # step 3: the propagation fit sees dropped old points, the refit the whole memory, weighted
    for point_times, weights in recorder.seen[-2:]:
        if weights is not None:
            torch.testing.assert_close(weights, (0.5 ** (2.0 - point_times)).to(weights))
    assert any(w is not None and (w < 1).any() for _, w in recorder.seen[-2:])


def test_between_tasks_prior_starts_each_fit_at_the_transitioned_posterior():
    learner = ContinualLearner(
        BayesianMLP(2, [4], 2),
        transition=OrnsteinUhlenbeck(1.0),
        first_epochs=20,
        epochs=0,  # later fits leave the guide where it starts
        between_tasks="prior",
        batch_size=None,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    data = drift_data(2)
    learner.observe(data[0], time=0.0)
    first = {n: detach_distribution(d) for n, d in learner.current_prior().items()}
    learner.observe(data[1], time=1.0)
    context = TransitionContext(1.0, 1.0, learner.initial_prior, learner.net, 1.0)
    expected = OrnsteinUhlenbeck(1.0)(first, context)
    for name, q in learner.current_prior().items():
        torch.testing.assert_close(q.base_dist.loc, expected[name].base_dist.loc)
        torch.testing.assert_close(q.base_dist.scale, expected[name].base_dist.scale)
