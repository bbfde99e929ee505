"""Coreset VCL (VCL Algorithm 1): what propagation sees, what the refit changes, and its scale."""

import pytest
import torch

import pyro_cl.fitters.elbo_fitter as elbo_fitter_module
from pyro_cl import VCL, GaussianLikelihood
from pyro_cl.baselines import CoresetOnly
from pyro_cl.infer.training import DivergenceError
from pyro_cl.learner.learner import ALL_TASKS
from pyro_cl.learner.memory_step import MemoryStep
from pyro_cl.memory import KCenterCoreset, RandomCoreset, farthest_first
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.posterior import read_priors
from tests.test_linear_regression_vcl import CONVERGED, NOISE, exact_diagonal_update

FAST = dict(epochs=3, batch_size=16, num_particles=2, num_predictive_samples=5, progress=False)


def labelled_rows(n, features, task, seed):
    """Inputs whose first column is a unique row label, so batches can be traced to points."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    x[:, 0] = 1000 * task + torch.arange(n)
    y = (x[:, 1] > 0).long()
    return x, y


@pytest.fixture
def recorded_objectives(monkeypatch):
    """Every call of the ELBO: (guide, input labels of the batch, task ids, dataset size)."""
    calls = []
    original = elbo_fitter_module.negative_elbo

    def recording(model, guide, batch, dataset_size, *args, **kwargs):
        calls.append((guide, set(batch.x[:, 0].tolist()), batch.task_id, dataset_size))
        return original(model, guide, batch, dataset_size, *args, **kwargs)

    monkeypatch.setattr(elbo_fitter_module, "negative_elbo", recording)
    return calls


def test_propagation_never_sees_a_coreset_point(recorded_objectives):
    learner = VCL(BayesianMLP(3, [8], 2, heads=2), memory=RandomCoreset(10), seed=0, **FAST)
    for task in range(2):
        learner.observe(labelled_rows(60, 3, task, seed=task), task_id=task)
    coreset_labels = set(learner.memory_points.x[:, 0].tolist())
    assert len(coreset_labels) == 20
    propagated = [c for c in recorded_objectives if c[0] is learner.guide]
    seen = set().union(*(labels for _, labels, _, _ in propagated))
    assert seen.isdisjoint(coreset_labels)
    assert len(seen) == 2 * 50  # every non-coreset point was used
    assert {size for *_, size in propagated} == {50}


def test_multi_head_refit_is_per_task_on_that_tasks_points_at_its_own_scale(recorded_objectives):
    learner = VCL(BayesianMLP(3, [8], 2, heads=2), memory=KCenterCoreset(6), seed=0, **FAST)
    for task in range(2):
        learner.observe(labelled_rows(40, 3, task, seed=task), task_id=task)
    refits = [c for c in recorded_objectives if c[0] is not learner.guide]
    last_two = refits[-2 * FAST["epochs"] :]  # after task 2: one refit per task, one batch/epoch
    for task in (0, 1):
        calls = [c for c in last_two if c[2] == task]
        assert calls, f"no refit for task {task}"
        expected = set(
            learner.memory_points.select(learner.memory_points.task_ids == task).x[:, 0].tolist()
        )
        assert all(labels == expected and size == 6 for _, labels, _, size in calls)
    assert sorted(learner.prediction_posteriors) == [0, 1]
    heads = {
        t: {n for n in learner.prediction_posteriors[t] if n.startswith("heads")} for t in (0, 1)
    }
    assert heads == {0: {"heads.0.weight", "heads.0.bias"}, 1: {"heads.1.weight", "heads.1.bias"}}


def test_the_refit_leaves_the_propagated_posterior_untouched(monkeypatch):
    learner = VCL(BayesianMLP(3, [8], 2), memory=RandomCoreset(10), seed=0, **FAST)
    snapshots = {}
    original = MemoryStep.refit

    def spying(self, coreset):
        net, guide = self.learner.net, self.learner.guide
        snapshots["prior"] = {n: d.base_dist.loc.clone() for n, d in read_priors(net).items()}
        snapshots["guide"] = {k: v.clone() for k, v in guide.state_dict().items() if "." in k}
        return original(self, coreset)

    monkeypatch.setattr(MemoryStep, "refit", spying)
    learner.observe(labelled_rows(60, 3, 0, seed=0), task_id=0)
    for name, dist in read_priors(learner.net).items():
        torch.testing.assert_close(dist.base_dist.loc, snapshots["prior"][name], rtol=0, atol=0)
    for key, value in learner.guide.state_dict().items():
        if "." in key:
            torch.testing.assert_close(value, snapshots["guide"][key], rtol=0, atol=0)
    # ... while the refit posterior used for prediction did move away from it.
    refit = learner.prediction_posteriors[ALL_TASKS]
    moved = [
        not torch.equal(q.base_dist.loc, read_priors(learner.net)[n].base_dist.loc)
        for n, q in refit.items()
    ]
    assert all(moved)
    assert learner.prediction_sites(learner.memory_points.x[:1], 0) is refit


def test_coreset_vcl_on_linear_regression_matches_the_exact_two_step_recursion():
    """Propagation on D_t \\ C_t, then the refit on C_t: for this conjugate model the mean-field
    optimum is exact, so q̃_t and q_t must equal the exact Gaussian updates with those data (a
    refit whose likelihood were scaled to anything but the coreset's size would miss)."""
    torch.manual_seed(1)
    dim, per_task, k = 3, 40, 10
    true_weight = torch.tensor([1.0, -2.0, 0.5])
    learner = VCL(
        BayesianLinear(dim, 1, bias=False, prior_scale=1.0),
        likelihood=GaussianLikelihood(NOISE),
        memory=KCenterCoreset(k),
        **CONVERGED,
    )
    mean, variance = torch.zeros(dim), torch.ones(dim)
    coreset_x, coreset_y = torch.empty(0, dim), torch.empty(0)
    for task in range(2):
        x = torch.randn(per_task, dim) + 0.3 * task
        y = x @ true_weight + NOISE * torch.randn(per_task)
        learner.observe((x, y), task_id=task)
        chosen = farthest_first(x, k)
        rest = torch.ones(per_task, dtype=torch.bool)
        rest[chosen] = False
        mean, variance = exact_diagonal_update(mean, variance, x[rest], y[rest])
        coreset_x, coreset_y = torch.cat([coreset_x, x[chosen]]), torch.cat([coreset_y, y[chosen]])
        refit_mean, refit_variance = exact_diagonal_update(mean, variance, coreset_x, coreset_y)
        propagated = learner.current_prior()["weight"].base_dist
        torch.testing.assert_close(propagated.loc.squeeze(0), mean, atol=0.03, rtol=0)
        torch.testing.assert_close(
            propagated.scale.squeeze(0) ** -2, variance**-1, rtol=0.1, atol=0
        )
        refit = learner.prediction_posteriors[ALL_TASKS]["weight"].base_dist
        torch.testing.assert_close(refit.loc.squeeze(0), refit_mean, atol=0.03, rtol=0)
        torch.testing.assert_close(
            refit.scale.squeeze(0) ** -2, refit_variance**-1, rtol=0.1, atol=0
        )


def test_coreset_only_never_changes_the_prior_and_predicts_from_the_coreset():
    net = BayesianMLP(3, [8], 2, heads=2)
    initial = {n: d.base_dist.loc.clone() for n, d in read_priors(net).items()}
    learner = CoresetOnly(net, memory=RandomCoreset(8), seed=0, **FAST)
    for task in range(2):
        learner.observe(labelled_rows(30, 3, task, seed=task), task_id=task)
    for name, dist in read_priors(learner.net).items():
        torch.testing.assert_close(dist.base_dist.loc, initial[name], rtol=0, atol=0)
    assert sorted(learner.prediction_posteriors) == [0, 1]
    assert learner.evaluate(labelled_rows(20, 3, 1, seed=9), task_id=1)["accuracy"] >= 0
    with pytest.raises(ValueError, match="needs a memory"):
        CoresetOnly(BayesianMLP(3, [8], 2))


def test_a_coreset_larger_than_the_task_fails_before_anything_changes():
    learner = VCL(BayesianMLP(3, [8], 2), memory=RandomCoreset(50), seed=0, **FAST)
    learner.observe(labelled_rows(60, 3, 0, seed=0), task_id=0)
    prior = {n: d.base_dist.loc.clone() for n, d in learner.current_prior().items()}
    coreset = learner.memory_points
    with pytest.raises(ValueError, match="memory size 50 is larger than task 1"):
        learner.observe(labelled_rows(20, 3, 1, seed=1), task_id=1)
    assert learner.memory_points is coreset and learner.tasks_seen == [0]
    for name, dist in learner.current_prior().items():
        torch.testing.assert_close(dist.base_dist.loc, prior[name], rtol=0, atol=0)


def test_a_failed_refit_rolls_back_prior_and_coreset(monkeypatch):
    learner = VCL(BayesianMLP(3, [8], 2), memory=RandomCoreset(5), seed=0, **FAST)
    learner.observe(labelled_rows(30, 3, 0, seed=0), task_id=0)
    prior = {n: d.base_dist.loc.clone() for n, d in learner.current_prior().items()}
    coreset, refits = learner.memory_points, learner.prediction_posteriors

    def diverging(self, coreset):
        raise DivergenceError("refit diverged")

    monkeypatch.setattr(MemoryStep, "refit", diverging)
    with pytest.raises(DivergenceError):
        learner.observe(labelled_rows(30, 3, 1, seed=1), task_id=1)
    for name, dist in learner.current_prior().items():
        torch.testing.assert_close(dist.base_dist.loc, prior[name], rtol=0, atol=0)
    assert learner.memory_points is coreset and learner.prediction_posteriors is refits


def test_save_and_load_keep_the_coreset_and_resume_identically(tmp_path):
    def make():
        return VCL(BayesianMLP(3, [8], 2, heads=3), memory=KCenterCoreset(5), seed=0, **FAST)

    tasks = [labelled_rows(30, 3, t, seed=t) for t in range(3)]
    straight = make()
    for t, data in enumerate(tasks):
        straight.observe(data, task_id=t)
    resumed = make()
    for t, data in enumerate(tasks[:2]):
        resumed.observe(data, task_id=t)
    resumed.save(tmp_path / "learner.pt")
    loaded = VCL.load(tmp_path / "learner.pt")
    assert isinstance(loaded.memory, KCenterCoreset)
    torch.testing.assert_close(loaded.memory_points.x, resumed.memory_points.x)
    assert loaded.memory_points.task_ids.tolist() == resumed.memory_points.task_ids.tolist()
    loaded.observe(tasks[2], task_id=2)
    for name, dist in straight.current_prior().items():
        torch.testing.assert_close(loaded.current_prior()[name].base_dist.loc, dist.base_dist.loc)
    for task in range(3):
        for name, q in straight.prediction_posteriors[task].items():
            torch.testing.assert_close(
                loaded.prediction_posteriors[task][name].base_dist.loc, q.base_dist.loc
            )
