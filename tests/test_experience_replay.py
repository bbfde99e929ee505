"""Experience replay at a fixed budget (issue 71): kept points in every step's fit, for a point
estimate and for a posterior (then the Gaussian handed on holds only the points that left)."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import VCL, FineTuning
from pyro_cl.memory import ExperienceReplay
from pyro_cl.nn import BayesianMLP
from pyro_cl.points import Points
from tests.helpers import two_class_data

SMALL = dict(epochs=1, batch_size=32, num_particles=1, num_predictive_samples=4, progress=False)


def fitted_sizes(learner) -> list[int]:
    """The number of points of every fit of the learner, in order."""
    sizes = []
    fit = learner.fitter.fit

    def recording(context, guide, problem):
        sizes.append(len(problem.data))
        return fit(context, guide, problem)

    learner.fitter.fit = recording
    return sizes


def tasks(n: int = 3, size: int = 60):
    return [two_class_data(size, column=k % 4) for k in range(n)]


def test_a_point_estimate_replays_the_buffer_in_each_fit_and_fits_nothing_more():
    learner = FineTuning(
        BayesianMLP(4, [8], 2), memory=ExperienceReplay(10, budget="task"), **SMALL
    )
    sizes = fitted_sizes(learner)
    for task, data in enumerate(tasks()):
        learner.observe(data, time=float(task))
    assert sizes == [60, 70, 80]  # D_k ∪ M_{k-1}, one fit a step
    assert len(learner.memory_points) == 30


def test_a_balanced_buffer_weighs_as_much_as_the_new_data_in_a_point_estimates_fit():
    """Each kept point's likelihood counts |D_k| / |M_{k-1}| times a new one's (Avalanche's
    equal weighing of the two minibatches, in expectation); the fitter's loss reads them."""
    learner = FineTuning(
        BayesianMLP(4, [8], 2), memory=ExperienceReplay(10, budget="task"), **SMALL
    )
    seen = []
    fit = learner.fitter.fit

    def recording(context, guide, problem):
        weights = problem.data.weights
        seen.append(None if weights is None else weights.clone())
        return fit(context, guide, problem)

    learner.fitter.fit = recording
    for task, data in enumerate(tasks(3)):
        learner.observe(data, time=float(task))
    assert seen[0] is None
    torch.testing.assert_close(seen[1], torch.cat([torch.full((10,), 6.0), torch.ones(60)]))
    torch.testing.assert_close(seen[2], torch.cat([torch.full((20,), 3.0), torch.ones(60)]))
    with pytest.raises(ValueError, match="balanced=False"):
        VCL(BayesianMLP(4, [8], 2), memory=ExperienceReplay(10, balanced=True), **SMALL)


def test_a_repeated_buffer_weighs_as_much_in_as_many_rows_as_the_new_data():
    """``balanced="repeat"``: each kept point about |D_k| / |M| times, the copies' weights
    summing to what ``balanced=True`` gives it, so the objective is the same."""
    learner = FineTuning(
        BayesianMLP(4, [8], 2), memory=ExperienceReplay(8, budget="task", balanced="repeat"),
        **SMALL,
    )  # fmt: skip
    seen = []
    fit = learner.fitter.fit

    def recording(context, guide, problem):
        seen.append(problem.data)
        return fit(context, guide, problem)

    learner.fitter.fit = recording
    for task, data in enumerate(tasks(3)):
        learner.observe(data, time=float(task))
    assert seen[0].weights is None
    for data, kept in ((seen[1], 8), (seen[2], 16)):
        times = round(60 / kept)  # 8 and 4 copies
        copies = data.select(torch.arange(kept * times))
        torch.testing.assert_close(copies.weights, torch.full((kept * times,), 60 / (kept * times)))
        torch.testing.assert_close(copies.x, copies.x[:kept].repeat(times, 1))
        assert data.weights[kept * times :].eq(1).all() and len(data) == kept * times + 60
    with pytest.raises(TypeError, match='"repeat"'):
        ExperienceReplay(8, balanced="twice")


def test_the_weighted_likelihood_of_a_point_estimate_is_the_weighted_mean():
    from pyro_cl.infer.objectives import negative_log_likelihood

    learner = FineTuning(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    x, y = two_class_data(20)
    learner.observe((x, y))
    values = learner.guide.locs()
    weights = torch.linspace(0.5, 2.0, 20)
    per_point = torch.stack(
        [
            negative_log_likelihood(learner.model, values, x[i : i + 1], y[i : i + 1], 0)
            for i in range(20)
        ]
    )
    weighted = negative_log_likelihood(learner.model, values, x, y, 0, weights=weights)
    torch.testing.assert_close(weighted, (per_point * weights).mean())


def test_a_posterior_hands_on_only_the_points_that_left_the_buffer():
    learner = VCL(
        BayesianMLP(4, [8], 2), memory=ExperienceReplay(10, budget="task"), ml_init_epochs=0,
        seed=0, **SMALL,
    )  # fmt: skip
    sizes = fitted_sizes(learner)
    for task, data in enumerate(tasks()):
        learner.observe(data, time=float(task))
    # each step: the fit on D_k ∪ M_{k-1} (it predicts), then the Gaussian of the 50 points of
    # D_k that the buffer did not keep, from the step's prior: no point counts twice
    assert sizes == [60, 50, 70, 50, 80, 50]
    assert learner.prediction_posteriors  # the fit with the buffer predicts


def test_a_total_budget_is_a_reservoir_every_point_seen_equally_likely():
    """Over many seeds the share of each task's points in a reservoir of 30 after three tasks
    of 60, 120 and 180 points is the task's share of what was seen (1/6, 2/6, 3/6)."""
    counts = torch.zeros(3)
    for seed in range(200):
        torch.manual_seed(seed)
        memory = ExperienceReplay(30)
        held = None
        for task, size in enumerate((60, 120, 180)):
            x, y = torch.randn(size, 2), torch.zeros(size, dtype=torch.long)
            held = memory.update(held, Points.of_task(x, y, task, float(task))).points
        assert len(held) == 30 and memory.seen == 360
        counts += torch.bincount(held.task_ids, minlength=3).float()
    shares = counts / counts.sum()
    torch.testing.assert_close(shares, torch.tensor([1 / 6, 2 / 6, 3 / 6]), atol=0.02, rtol=0)


def test_the_buffer_saves_and_loads_with_the_learner(tmp_path):
    learner = FineTuning(BayesianMLP(4, [8], 2), memory=ExperienceReplay(20), seed=0, **SMALL)
    for task, data in enumerate(tasks(2)):
        learner.observe(data, time=float(task))
    learner.save(tmp_path / "l.pt")
    loaded = FineTuning.load(tmp_path / "l.pt")
    assert loaded.memory.seen == 120 and len(loaded.memory_points) == 20
    x, _ = two_class_data(8)
    torch.testing.assert_close(loaded.predict(x), learner.predict(x))


def test_a_bad_size_or_budget_is_refused():
    with pytest.raises(ValueError, match="budget"):
        ExperienceReplay(10, budget="reservoir")
    with pytest.raises(ValueError):
        ExperienceReplay(0)


def test_a_class_incremental_split_keeps_class_numbers_in_one_head():
    from pyro_cl.data import split_digits

    split, incremental = split_digits(), split_digits(class_incremental=True)
    assert split.multi_head and not incremental.multi_head and incremental.num_classes == 10
    for task, same in zip(incremental, split, strict=True):
        classes = sorted(set(task.y_train.tolist()) | set(task.y_test.tolist()))
        assert classes == [2 * task.id, 2 * task.id + 1]  # the digits themselves, not 0/1
        assert torch.equal(task.x_train, same.x_train)  # the same images, task by task
        assert torch.equal(task.y_train, same.y_train + 2 * task.id)


def test_function_space_with_replay_keeps_each_tasks_context_points_once():
    """Function-space VI beside a replay buffer (``fsvi-er``): each fit sees the buffer's
    earlier points, but the context keeps the step's own points only, once — not the replayed
    ones again, nor the points of the step's second fit (the Gaussian of those that left the
    buffer)."""
    from pyro_cl.fitters.function_space import FunctionSpaceFitter
    from pyro_cl.memory import RandomCoreset

    fitter = FunctionSpaceFitter(RandomCoreset(5), context_samples=2, target_samples=4)
    learner = VCL(
        BayesianMLP(4, [8], 2), memory=ExperienceReplay(10, budget="task"), fitter=fitter,
        ml_init_epochs=0, seed=0, **SMALL,
    )  # fmt: skip
    sizes = fitted_sizes(learner)
    for task, data in enumerate(tasks()):
        learner.observe(data, time=float(task))
    assert sizes == [60, 50, 70, 50, 80, 50]  # the buffer is in each fit, as without the context
    kept = fitter.context.points  # each step's 5, its time on each
    assert kept.times.tolist() == [0.0] * 5 + [1.0] * 5 + [2.0] * 5
    for step, (x, _) in enumerate(tasks()):  # each step's context points are its own inputs
        own = kept.x[kept.times == step]
        assert all((x == row).all(dim=1).any() for row in own)
