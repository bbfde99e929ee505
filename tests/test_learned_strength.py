"""A transition's strength learnt online by empirical Bayes (issue 72): on a Gaussian random walk
of known rate the learnt Wiener diffusion recovers the rate; without drift it stays at the
bottom of its range; through a learner it is learnt from the step's data before the fit, and
saved and restored with the learner."""

from __future__ import annotations

import math

import pytest
import torch
from pyro.distributions import Normal

from pyro_cl import VCL, GaussianLikelihood
from pyro_cl.nn import BayesianLinear
from pyro_cl.transitions import TransitionContext
from pyro_cl.transitions.learned_strength import LearnedStrength

NOISE = 0.1


def _walk(rate: float, steps: int, dim: int = 4, points: int = 200, seed: int = 0):
    """Data of linear regression whose weights take a Gaussian random walk: ``w_t = w_{t-1} +
    rate · ε``, ``ε ~ N(0, I)`` (the prior's sd is 1, so ``rate`` is Wiener's ``c`` at τ = 1)."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(dim, generator=generator, dtype=torch.float64)
    for _ in range(steps):
        weight = weight + rate * torch.randn(dim, generator=generator, dtype=torch.float64)
        x = torch.randn(points, dim, generator=generator, dtype=torch.float64)
        yield x, x @ weight + NOISE * torch.randn(points, generator=generator, dtype=torch.float64)


def _exact_evidence(x, y):
    """``Σ_n log N(y_n | x_n μ, x_n diag(σ²) x_nᵀ + noise²)``: the exact one-step predictive of a
    diagonal Gaussian prior (what the learner estimates by Monte Carlo)."""

    def evidence(prior):
        q = prior["weight"]
        mean, variance = q.loc, q.scale.square()
        return float(Normal(x @ mean, (x.square() @ variance + NOISE**2).sqrt()).log_prob(y).sum())

    return evidence


def _learn(rate: float, steps: int, discount: float = 1.0) -> list[float]:
    """The exact diagonal recursion (a mean-field posterior of every step's data) with the
    strength learnt before each step."""
    dim = 4
    initial = {
        "weight": Normal(
            torch.zeros(dim, dtype=torch.float64), torch.ones(dim, dtype=torch.float64)
        )
    }
    transition = LearnedStrength("wiener", time_constant=1.0, discount=discount)
    posterior = initial
    for step, (x, y) in enumerate(_walk(rate, steps)):
        if step:
            context = TransitionContext(
                elapsed=1.0, time=float(step), initial_prior=initial, net=torch.nn.Module(),
                mean_lag=1.0, evidence=_exact_evidence(x, y),
            )  # fmt: skip
            posterior = transition(posterior, context)
        prior = posterior["weight"]
        precision = torch.diag(prior.scale**-2) + x.T @ x / NOISE**2
        mean = torch.linalg.solve(precision, prior.loc / prior.scale**2 + x.T @ y / NOISE**2)
        posterior = {"weight": Normal(mean, torch.diagonal(precision) ** -0.5)}
    return transition.history


@pytest.mark.parametrize("rate", [0.05, 0.3, 1.0])
def test_the_learnt_diffusion_recovers_a_random_walks_known_rate(rate):
    """The evidence gathered over the steps (eq. 2, γ = 1) ends at the rate, within the grid's
    spacing and the 60 steps' noise; each step's own maximum (γ = 0) scatters around it."""
    gathered = _learn(rate, 60)
    assert all(s == pytest.approx(rate, rel=0.3) for s in gathered[-20:])  # settled at the rate
    per_step = _learn(rate, 60, discount=0.0)[9:]  # after the posterior's variance settled
    geometric_mean = math.exp(sum(map(math.log, per_step)) / len(per_step))
    assert geometric_mean == pytest.approx(rate, rel=0.35)
    assert max(per_step) / min(per_step) > 3  # a step's own evidence is noisy


def test_without_drift_the_learnt_diffusion_stays_near_the_bottom_of_its_range():
    assert _learn(0.0, 30)[-1] < 0.01  # the range starts at 1e-4


def test_the_grid_finds_the_maximum_of_a_known_score():
    transition = LearnedStrength("wiener", low=1e-3, high=10.0, time_constant=1.0)
    initial = {"weight": Normal(torch.zeros(2), torch.ones(2))}
    target = 0.7

    def evidence(prior):  # a score peaked at σ² = 0.01 + target²
        variance = float(prior["weight"].scale.square().mean())
        return -((math.log(variance) - math.log(0.01 + target**2)) ** 2)

    context = TransitionContext(1.0, 1.0, initial, torch.nn.Module(), 1.0, evidence)
    transition({"weight": Normal(torch.zeros(2), torch.full((2,), 0.1))}, context)
    # the nearest of 41 strengths log-spaced over four decades: within a factor 10^(1/20)
    assert transition.strength == pytest.approx(target, rel=0.13)


def test_through_a_learner_the_strength_is_learnt_before_each_step_and_saved(tmp_path):
    """A jump in the weights between two steps: the strength learnt at the jump is far above
    the one learnt where nothing moved; the learner saves and restores it."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 2, generator=generator)
    before, after = torch.tensor([1.0, -1.0]), torch.tensor([-2.0, 2.0])
    steps = [(x, x @ before + NOISE * torch.randn(300, generator=generator)) for _ in range(2)]
    steps.append((x, x @ after + NOISE * torch.randn(300, generator=generator)))
    learner = VCL(
        BayesianLinear(2, 1, bias=False),
        likelihood=GaussianLikelihood(NOISE),
        transition=LearnedStrength("wiener", time_constant=1.0, discount=0.0),
        epochs=200, batch_size=None, learning_rate=0.05, ml_init_epochs=0, num_particles=4,
        num_predictive_samples=64, seed=0, progress=False,
    )  # fmt: skip
    for data in steps:
        learner.observe(data)
    still, jump = learner.transition.history
    assert jump > 10 * still and jump > 0.5
    learner.save(tmp_path / "l.pt")
    loaded = VCL.load(tmp_path / "l.pt", net=BayesianLinear(2, 1, bias=False))
    assert loaded.transition.history == learner.transition.history
    assert loaded.transition.strength == learner.transition.strength
    assert torch.equal(loaded.transition.evidence, learner.transition.evidence)


def test_bad_ranges_and_families_are_refused():
    with pytest.raises(ValueError, match="family"):
        LearnedStrength("brownian")
    with pytest.raises(ValueError, match="high"):
        LearnedStrength("wiener", low=1.0, high=0.5)
    with pytest.raises(ValueError, match="below 1"):
        LearnedStrength("bayesian_forgetting", high=1.0)


def test_the_learners_evidence_is_the_one_step_predictive_of_the_steps_data():
    """Monte Carlo against the closed form of linear regression: ``Σ_n log N(y_n | x_n μ,
    x_n² σ² + noise²)`` under a diagonal Gaussian prior."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(50, 2, generator=generator)
    y = x @ torch.tensor([0.5, -1.0]) + NOISE * torch.randn(50, generator=generator)
    learner = VCL(
        BayesianLinear(2, 1, bias=False),
        likelihood=GaussianLikelihood(NOISE),
        num_predictive_samples=20_000, seed=0, progress=False,
    )  # fmt: skip
    prior = {"weight": Normal(torch.tensor([[0.3, -0.8]]), torch.tensor([[0.2, 0.1]])).to_event(2)}
    evidence = learner.prediction.evidence(x, y, 0)
    mean, variance = prior["weight"].base_dist.loc[0], prior["weight"].base_dist.scale[0] ** 2
    exact = Normal(x @ mean, (x.square() @ variance + NOISE**2).sqrt()).log_prob(y).sum()
    assert evidence(prior) == pytest.approx(float(exact), abs=0.5)
    assert evidence(prior) == evidence(prior)  # the same draws for every candidate


def _learn_per(per: str, steps: int = 60, rate: float = 0.3) -> LearnedStrength:
    """The exact diagonal recursion of a regression on two layers' weights, ``a`` taking a
    random walk of ``rate`` and ``b`` fixed, with the strengths learnt per ``per``."""
    sizes = {"a.weight": 2, "b.weight": 2}
    initial = {
        site: Normal(torch.zeros(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64))
        for site, n in sizes.items()
    }
    transition = LearnedStrength("wiener", time_constant=1.0, per=per)
    generator = torch.Generator().manual_seed(4)
    weight = torch.randn(4, generator=generator, dtype=torch.float64)
    posterior = initial
    for step in range(steps):
        weight[:2] += rate * torch.randn(2, generator=generator, dtype=torch.float64)
        x = torch.randn(200, 4, generator=generator, dtype=torch.float64)
        y = x @ weight + NOISE * torch.randn(200, generator=generator, dtype=torch.float64)

        def evidence(prior, x=x, y=y):
            mean = torch.cat([prior[s].loc for s in sizes])
            variance = torch.cat([prior[s].scale.square() for s in sizes])
            scale = (x.square() @ variance + NOISE**2).sqrt()
            return float(Normal(x @ mean, scale).log_prob(y).sum())

        if step:
            context = TransitionContext(1.0, float(step), initial, torch.nn.Module(), 1.0, evidence)
            posterior = transition(posterior, context)
        loc = torch.cat([posterior[s].loc for s in sizes])
        scale = torch.cat([posterior[s].scale for s in sizes])
        precision = torch.diag(scale**-2) + x.T @ x / NOISE**2
        mean = torch.linalg.solve(precision, loc / scale**2 + x.T @ y / NOISE**2)
        sd = torch.diagonal(precision) ** -0.5
        posterior = {"a.weight": Normal(mean[:2], sd[:2]), "b.weight": Normal(mean[2:], sd[2:])}
    return transition


def test_per_layer_a_drifting_layer_and_a_still_one_each_find_their_rate():
    """Eq. (3): the layer whose weights walk at 0.3 learns about 0.3, the still one a strength
    far below it (not the floor: the mean-field posterior of the still layer takes up some of
    the drifting one's change); one strength for the net settles between them, and the evidence
    gathered per layer is higher than the one strength's."""
    per_layer = _learn_per("layer")
    assert set(per_layer.strengths) == {"a", "b"}
    assert all(h["a"] == pytest.approx(0.3, rel=0.3) for h in per_layer.history[-20:])
    assert all(h["b"] < min(0.06, h["a"] / 5) for h in per_layer.history[-20:])
    shared = _learn_per("net")
    assert 0.01 < shared.strength < per_layer.strengths["a"]
    assert per_layer.evidences["b"].max() > shared.evidence.max()  # eq. (3) ends after b
    assert _learn_per("site").strengths.keys() == {"a.weight", "b.weight"}
    with pytest.raises(AttributeError, match="strengths"):
        _ = per_layer.strength


def test_per_layer_strengths_save_load_and_refuse_what_they_cannot_carry(tmp_path):
    learnt = _learn_per("layer", steps=5)
    again = LearnedStrength("wiener", time_constant=1.0, per="layer")
    again.load_state_dict(learnt.state_dict())
    assert again.strengths == learnt.strengths and again.history == learnt.history
    assert all(torch.equal(again.evidences[g], learnt.evidences[g]) for g in learnt.evidences)
    with pytest.raises(ValueError, match="per layer"):
        LearnedStrength("wiener").load_state_dict(learnt.state_dict())
    with pytest.raises(ValueError, match="per"):
        LearnedStrength("wiener", per="weight")
    with pytest.raises(TypeError, match="mean-field"):
        learnt.gaussian_step(torch.zeros(2), torch.ones(2), None)
    forgetting = LearnedStrength("bayesian_forgetting", per="layer")
    with pytest.raises(TypeError, match="memory"):
        forgetting.likelihood_weights(torch.ones(3), TransitionContext(1.0, 1.0, {}, None, 1.0))
    assert learnt.likelihood_weights(torch.ones(3), None) is None  # Wiener weighs no point
    from pyro_cl.guides import FullCovariance

    with pytest.raises(ValueError, match="mean-field"):
        VCL(
            BayesianLinear(2, 1), likelihood=GaussianLikelihood(NOISE), guide=FullCovariance(),
            transition=LearnedStrength("wiener", per="layer"), progress=False,
        )  # fmt: skip
