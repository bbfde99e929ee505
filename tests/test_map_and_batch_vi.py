"""The reference rows beside the continual methods: MAP with the last fit as prior mean (VCL
section 5), batch VI on all data so far (VCL figure 4's upper bound) and joint maximum likelihood
on all tasks so far (the VOGN thesis's table 2), against closed forms on linear regression."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import VCL, GaussianLikelihood
from pyro_cl.app.methods import make_method
from pyro_cl.baselines import FineTuning, GaussianMAP
from pyro_cl.fitters.point_estimate import PointEstimateFitter
from pyro_cl.infer.objectives import negative_log_likelihood
from pyro_cl.memory import EveryPoint, Replay
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.transitions.base import NoPropagation
from tests.helpers import two_class_data

NOISE = 0.5


def regression_tasks(tasks: int = 2, n: int = 30):
    generator = torch.Generator().manual_seed(0)
    out = []
    for t in range(tasks):
        x = torch.randn(n, 3, generator=generator) + 0.5 * t
        y = x @ torch.tensor([1.0, -2.0, 0.5]) + NOISE * torch.randn(n, generator=generator)
        out.append((x, y))
    return out


def test_map_is_ridge_regression_towards_the_last_fit_from_a_unit_gaussian_prior():
    """θ_t = argmin |y - Xθ|² / 2σ² + λ/2 |θ - θ_{t-1}|² = (XᵀX/σ² + λI)⁻¹ (Xᵀy/σ² + λ θ_{t-1}),
    θ_0 = 0."""
    strength = 3.0
    learner = FineTuning(
        BayesianLinear(3, 1, bias=False),
        GaussianLikelihood(NOISE),
        fitter=PointEstimateFitter(GaussianMAP(strength)),
        epochs=2000,
        batch_size=None,
        learning_rate=0.02,
        seed=0,
        progress=False,
    )
    previous = torch.zeros(3)
    for x, y in regression_tasks():
        learner.observe((x, y))
        system = x.T @ x / NOISE**2 + strength * torch.eye(3)
        previous = torch.linalg.solve(system, x.T @ y / NOISE**2 + strength * previous)
        fitted = learner.guide.locs()["weight"].detach().squeeze(0)
        torch.testing.assert_close(fitted, previous, atol=2e-3, rtol=0)


def test_the_map_penalty_is_half_lambda_squared_distance_and_anchors_new_sites_at_zero():
    penalty = GaussianMAP(strength=2.0)
    penalty.before_fit({"w": torch.ones(3)}, 10)
    assert torch.equal(penalty.anchor["w"], torch.zeros(3))  # the unit Gaussian prior's mean
    penalty.after_fit(None, {"w": torch.tensor([1.0, 2.0, 3.0])}, None, 0)
    penalty.before_fit({"w": torch.ones(3), "head": torch.ones(2)}, 10)
    value = penalty({"w": torch.tensor([2.0, 2.0, 2.0]), "head": torch.ones(2)})
    torch.testing.assert_close(value, torch.tensor(0.5 * 2.0 * (1 + 0 + 1 + 2)))
    restored = GaussianMAP(2.0)
    restored.load_state_dict(penalty.state_dict())
    assert restored.anchor.keys() == penalty.anchor.keys()


def test_batch_vi_is_the_mean_field_optimum_on_all_data_so_far():
    """With every point kept and nothing propagated, the posterior after task t is the optimal
    mean-field Gaussian of D_1 ∪ … ∪ D_t under the initial N(0, I) prior: the exact mean and the
    diagonal of the exact precision (VCL appendix F)."""
    learner = VCL(
        BayesianLinear(3, 1, bias=False, prior_scale=1.0),
        likelihood=GaussianLikelihood(NOISE),
        memory=EveryPoint(),
        transition=NoPropagation(),
        epochs=1500,
        batch_size=None,
        learning_rate=0.01,
        num_particles=16,
        ml_init_epochs=0,
        refit_per_task=False,  # one refit on every point, not one per task's points
        seed=0,
        progress=False,
    )
    seen_x, seen_y = [], []
    for task, (x, y) in enumerate(regression_tasks()):
        learner.observe((x, y), task_id=task)
        seen_x.append(x)
        seen_y.append(y)
        xs, ys = torch.cat(seen_x), torch.cat(seen_y)
        precision = torch.eye(3) + xs.T @ xs / NOISE**2
        mean = torch.linalg.solve(precision, xs.T @ ys / NOISE**2)
        q = learner.prediction_sites(x, task)["weight"].base_dist
        torch.testing.assert_close(q.loc.squeeze(0), mean, atol=0.03, rtol=0)
        torch.testing.assert_close(
            q.scale.squeeze(0) ** -2, torch.diagonal(precision), rtol=0.1, atol=0
        )
        assert len(learner.memory_points) == sum(len(v) for v in seen_y)


def test_the_registered_methods_build_from_their_parts():
    batch = make_method("batch-vi", BayesianMLP(4, [6], 2), 40, seed=0, progress=False)
    assert isinstance(batch.memory, EveryPoint) and isinstance(batch.transition, NoPropagation)
    assert not batch.refit_per_task
    map_learner = make_method("map", BayesianMLP(4, [6], 2), 40, seed=0, epochs=2, progress=False)
    assert isinstance(map_learner.fitter.penalty, GaussianMAP)
    map_learner.observe(two_class_data(20, 4))


def test_joint_training_is_least_squares_on_every_task_so_far():
    """With every point replayed and the prior ignored, the point estimate after task t is the
    least-squares fit of D_1 ∪ … ∪ D_t (not of D_t alone, which fine-tuning gives)."""
    learner = make_method(
        "joint",
        BayesianLinear(3, 1, bias=False),
        0,
        likelihood=GaussianLikelihood(NOISE),
        epochs=2000,
        batch_size=None,
        learning_rate=0.02,
        seed=0,
        progress=False,
    )
    assert isinstance(learner.memory, Replay)
    seen_x, seen_y = [], []
    for task, (x, y) in enumerate(regression_tasks(3)):
        learner.observe((x, y), task_id=task)
        seen_x.append(x)
        seen_y.append(y)
        xs, ys = torch.cat(seen_x), torch.cat(seen_y)
        exact = torch.linalg.lstsq(xs, ys.unsqueeze(1)).solution.squeeze(1)
        alone = torch.linalg.lstsq(x, y.unsqueeze(1)).solution.squeeze(1)
        fitted = learner.guide.locs()["weight"].detach().squeeze(0)
        torch.testing.assert_close(fitted, exact, atol=2e-3, rtol=0)
        if task:
            assert (fitted - alone).abs().max() > 0.01  # the old tasks' points count
        assert len(learner.memory_points) == len(ys)


def test_joint_training_of_a_multi_head_net_fits_each_point_through_its_own_head():
    """The joint loss of a batch mixing tasks is each task's loss through its own head,
    weighted by its points; the old task's head keeps training after its task."""
    learner = make_method(
        "joint", BayesianMLP(4, [6], 2, heads=2), 0, epochs=3, batch_size=50, seed=0,
        progress=False,
    )  # fmt: skip
    first, second = two_class_data(100, 4, column=0), two_class_data(60, 4, column=1)
    learner.observe(first, task_id=0)
    head = learner.guide.locs()["heads.0.weight"].detach().clone()
    learner.observe(second, task_id=1)
    assert not torch.equal(learner.guide.locs()["heads.0.weight"], head)
    values = {name: value.detach() for name, value in learner.guide.locs().items()}
    model = learner.model
    ids = torch.cat([torch.zeros(100, dtype=torch.long), torch.ones(60, dtype=torch.long)])
    mixed = negative_log_likelihood(
        model, values, torch.cat([first[0], second[0]]), torch.cat([first[1], second[1]]), ids
    )
    each = [
        negative_log_likelihood(model, values, *data, task)
        for task, data in enumerate((first, second))
    ]
    torch.testing.assert_close(mixed, (100 * each[0] + 60 * each[1]) / 160)


def test_replay_refuses_a_bayesian_fitter_whose_prior_holds_the_old_points_already():
    with pytest.raises(ValueError, match="count twice"):
        VCL(BayesianLinear(3, 1), GaussianLikelihood(NOISE), memory=Replay(), progress=False)
