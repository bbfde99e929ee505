"""Prediction at a time (the posterior carried forward by the transition) and the bank of
learners that chooses a transition's strength by its one-step-ahead evidence."""

import math

import pytest
import torch

from pyro_cl import (
    VOGN,
    BayesianForgetting,
    ContinualLearner,
    GaussianLikelihood,
    Identity,
    PointEstimateFitter,
    Wiener,
)
from pyro_cl.learner.bank import LearnerBank
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianLinear, BayesianMLP, IBPMask
from tests.helpers import float32_tolerance, two_class_data
from tests.test_ibp import _learner as ibp_learner
from tests.test_transitions_drift import assert_same_posterior, drift_data, drift_learner, run


# ---------------------------------------------------------------- prediction at a time
def test_prior_at_is_the_transition_of_the_posterior_and_changes_nothing():
    c = 0.5
    learner = run(drift_learner(Wiener(c, time_constant=1.0)), [0.0, 1.0])
    twin = run(drift_learner(Wiener(c, time_constant=1.0)), [0.0, 1.0])
    posterior = learner.current_prior()
    initial = learner.initial_prior
    carried = learner.prior_at(3.0)  # Δt = 2 time constants
    assert carried.keys() == posterior.keys()
    for name, q in carried.items():
        scale = posterior[name].base_dist.scale
        growth = 2 * c**2 * initial[name].base_dist.scale ** 2
        torch.testing.assert_close(q.base_dist.scale, (scale**2 + growth).sqrt())
        torch.testing.assert_close(q.base_dist.loc, posterior[name].base_dist.loc)
    # nothing moved: the next step equals the twin's, which never predicted at a time
    x = drift_data(1)[0][0]
    learner.predict(x, time=2.5)
    assert_same_posterior(learner, twin)
    data = drift_data(3)[2]
    learner.observe(data, time=2.0)
    twin.observe(data, time=2.0)
    assert_same_posterior(learner, twin)


def test_predicting_at_a_time_widens_the_predictive_only_with_a_transition():
    x = drift_data(1)[0][0]
    still = run(drift_learner(Identity()), [0.0, 1.0])
    assert still.prior_at(5.0).keys() == still.current_prior().keys()
    for name, q in still.prior_at(5.0).items():
        assert torch.equal(q.base_dist.scale, still.current_prior()[name].base_dist.scale)
    drifting = ContinualLearner(
        BayesianMLP(2, [6], 2),
        transition=BayesianForgetting(0.9, time_constant=1.0),
        epochs=150,
        learning_rate=0.05,
        batch_size=None,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    run(drifting, [0.0, 1.0])
    near = drifting.predict(x, num_samples=400)
    far = drifting.predict(x, time=50.0, num_samples=400)  # back at the initial prior
    # far in the future the confident posterior is forgotten: predictions move toward ½
    assert (far - 0.5).abs().mean() < (near - 0.5).abs().mean() - 0.05


def test_a_time_not_after_the_last_step_and_a_memory_refit_are_refused():
    learner = run(drift_learner(Wiener(0.1)), [0.0, 1.0])
    x = drift_data(1)[0][0]
    with pytest.raises(ValueError, match="not after the last step"):
        learner.predict(x, time=1.0)
    with pytest.raises(ValueError, match="sites or a time"):
        learner.evaluate(drift_data(1)[0], time=2.0, sites={})
    with_memory = run(drift_learner(Wiener(0.1), memory=RandomCoreset(4)), [0.0, 1.0])
    with pytest.raises(ValueError, match="memory's refit"):
        with_memory.predict(x, time=2.0)


# ---------------------------------------------------------------- the bank
def point_learner(transition, seed=0):
    return ContinualLearner(
        BayesianMLP(2, [4], 2),
        fitter=PointEstimateFitter(),
        transition=transition,
        epochs=10,
        batch_size=None,
        ml_init_epochs=0,
        seed=seed,
        progress=False,
    )


def test_the_weights_are_the_normalised_discounted_evidence_and_predictions_their_mixture():
    """Deterministic (point-estimate) members, so each member's own predictions are an
    independent route to the evidence and to the mixture."""
    members = {"a": point_learner(Identity(), 0), "b": point_learner(Identity(), 1)}
    discount = 0.7
    bank = LearnerBank(members, discount=discount)
    expected = torch.full((2,), -math.log(2), dtype=torch.float64)
    steps = drift_data(4)
    # the members predict in float32: every step's evidence sums len(y) float32 log-probabilities
    tolerance = float32_tolerance(sum(len(y) for _, y in steps))
    for time, (x, y) in enumerate(steps):
        own = torch.stack([m.predict(x).double() for m in members.values()])
        evidence = own[:, torch.arange(len(y)), y].log().sum(1)
        bank.observe((x, y), time=float(time))
        expected = discount * expected + evidence
        expected = expected - torch.logsumexp(expected, 0)
        torch.testing.assert_close(bank.log_weights, expected, **tolerance)
    x, y = drift_data(5)[4]
    own = torch.stack([m.predict(x).double() for m in members.values()])
    mixture = torch.einsum("m,mnk->nk", expected.exp(), own)
    torch.testing.assert_close(bank.predict(x).double(), mixture, **tolerance)
    result = bank.evaluate((x, y))
    assert result["log_likelihood"] == pytest.approx(
        mixture[torch.arange(len(y)), y].log().mean().item(), rel=1e-6
    )
    assert result["accuracy"] == pytest.approx((mixture.argmax(1) == y).double().mean().item())
    assert bank.chosen == max(bank.weights, key=bank.weights.get)


def test_members_with_a_memory_are_weighed_by_their_refit_without_a_time():
    """``at_time=False``: each member is scored by its own prediction posterior (the memory's
    refit), as a twin learner that predicts and then learns the same steps scores itself; the
    bank then refuses a time, and a bank that carries to the step's time refuses the members."""

    def members():
        return {
            "slow": drift_learner(Wiener(0.1), memory=RandomCoreset(4), seed=0),
            "fast": drift_learner(Wiener(1.0), memory=RandomCoreset(4), seed=1),
        }

    bank, twins = LearnerBank(members(), at_time=False), members()
    expected = torch.full((2,), -math.log(2), dtype=torch.float64)
    data = drift_data(4)
    for time, (x, y) in enumerate(data):
        own = [twin.predictive_samples(x) for twin in twins.values()]
        evidence = torch.stack(
            [bank.likelihood.predictive_log_likelihood(s, y).double().sum() for s in own]
        )
        expected = expected + evidence
        expected = expected - torch.logsumexp(expected, 0)
        bank.observe((x, y), time=float(time))
        for twin in twins.values():
            twin.observe((x, y), time=float(time))
        torch.testing.assert_close(bank.log_weights, expected)
    assert all(m.prediction_posteriors for m in bank.members.values())  # the refits exist
    with pytest.raises(ValueError, match="at_time=False"):
        bank.predict(data[0][0], time=9.0)
    carried = LearnerBank(members())
    carried.observe(data[0], time=0.0)
    with pytest.raises(ValueError, match="memory's refit"):
        carried.observe(data[1], time=1.0)


def random_walk_regression(diffusion, steps=20, per_step=10, seed=0):
    """``y = x·w_k + noise`` with ``w_{k+1} = w_k + diffusion · N(0, I)``: a Wiener process of
    known diffusion (in units of the unit prior's scale, one time constant a step)."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(2, generator=generator)
    data = []
    for _ in range(steps):
        x = torch.randn(per_step, 2, generator=generator)
        data.append((x, x @ weight + 0.5 * torch.randn(per_step, generator=generator)))
        weight = weight + diffusion * torch.randn(2, generator=generator)
    return data


def regression_learner(transition):
    return ContinualLearner(
        BayesianLinear(2, 1, bias=False),
        fitter=VOGN(learning_rate=0.5, beta=0.5, num_samples=8, curvature="ggn"),
        likelihood=GaussianLikelihood(0.5),
        transition=transition,
        epochs=30,
        batch_size=None,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )


@pytest.mark.parametrize("diffusion, chosen", [(0.3, {"0.3"}), (0.0, {"none", "0.03"})])
def test_the_bank_chooses_the_true_drift_rate(diffusion, chosen):
    """Evidence at the step's time (the carried posterior) picks the true diffusion; scored
    with the uncarried posterior, whose predictive ignores the drift, the widest candidate
    would win instead."""
    strengths = {"none": Identity(), "0.03": Wiener(0.03, 1.0), "0.3": Wiener(0.3, 1.0)}
    strengths["3"] = Wiener(3.0, 1.0)
    bank = LearnerBank({k: regression_learner(t) for k, t in strengths.items()})
    for time, data in enumerate(random_walk_regression(diffusion)):
        bank.observe(data, time=float(time))
    assert bank.chosen in chosen, bank.weights
    assert sum(bank.weights[k] for k in chosen) > 0.99


def test_a_failed_member_leaves_every_member_and_the_weights_as_they_were(monkeypatch):
    members = {"a": drift_learner(Wiener(0.1)), "b": drift_learner(Wiener(1.0))}
    bank = LearnerBank(members)
    data = drift_data(2)
    bank.observe(data[0], time=0.0)
    twin = run(drift_learner(Wiener(0.1)), [0.0], data[:1])
    weights = bank.log_weights.clone()

    def diverge(*args, **kwargs):
        raise RuntimeError("the fit diverged")

    monkeypatch.setattr(members["b"], "_step", diverge)
    with pytest.raises(RuntimeError, match="diverged"):
        bank.observe(data[1], time=1.0)
    assert_same_posterior(members["a"], twin)
    assert members["a"].times == [0.0] and members["b"].times == [0.0]
    assert torch.equal(bank.log_weights, weights)


def test_bad_banks_are_refused_by_name():
    with pytest.raises(ValueError, match="two or more"):
        LearnerBank({"a": drift_learner(Identity())})
    shared = drift_learner(Identity())
    with pytest.raises(ValueError, match="share a net"):
        LearnerBank({"a": shared, "b": shared})
    with pytest.raises(TypeError, match="not a learner"):
        LearnerBank({"a": drift_learner(Identity()), "b": "learner"})
    other = ContinualLearner(BayesianLinear(2, 1), likelihood=GaussianLikelihood(1.0))
    with pytest.raises(ValueError, match="different likelihoods"):
        LearnerBank({"a": drift_learner(Identity()), "b": other})
    with pytest.raises(ValueError, match="discount"):
        LearnerBank({"a": drift_learner(Identity()), "b": drift_learner(Identity())}, discount=0)


def test_prior_at_undoes_a_transition_that_changes_the_net():
    """H-IBP's growth multiplies the net's child concentrations in place when it runs: asking
    for the prior at a time must leave them as they were."""
    learner = ibp_learner(hierarchical=True, growth=3.0)
    x, y = two_class_data()
    learner.observe((x, y), task_id=0)
    masks = [m for m in learner.net.modules() if isinstance(m, IBPMask) and m.hierarchical]
    before = [m.child_concentration.clone() for m in masks]
    learner.prior_at(2.0)
    assert all(torch.equal(m.child_concentration, b) for m, b in zip(masks, before, strict=True))
