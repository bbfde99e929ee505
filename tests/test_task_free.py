"""Task-free class-incremental streams (issue 71): each task's data reaches the learner in
batches, with no task label and no boundary; the harness still measures at each task's end."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import FineTuning
from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.task_metrics import run_stream, task_free_steps
from pyro_cl.data import split_digits
from pyro_cl.data.tasks import Task, TaskStream
from pyro_cl.nn import BayesianMLP

SMALL = dict(epochs=1, batch_size=16, num_particles=1, num_predictive_samples=2, progress=False)


def small_stream(sizes=(30, 25, 12)) -> TaskStream:
    """One-head tasks whose training rows are numbered (feature 0) so batches can be traced."""
    tasks, start = [], 0
    for task_id, size in enumerate(sizes):
        x = torch.zeros(size, 3)
        x[:, 0] = torch.arange(start, start + size, dtype=torch.float32)
        y = torch.full((size,), task_id % 2)
        tasks.append(Task(task_id, f"t{task_id}", x, y, x[:4], y[:4], num_classes=2))
        start += size
    return TaskStream("numbered", tasks, 3, 2, multi_head=False)


def test_each_task_arrives_once_in_shuffled_batches_without_a_label_or_boundary():
    stream = small_stream()
    steps = list(task_free_steps(stream, 10, seed=3))
    assert [len(s.data[0]) for s in steps] == [10, 10, 10, 10, 10, 5, 10, 2]
    assert [s.ends_task for s in steps] == [False, False, True, False, False, True, False, True]
    assert [s.task_id for s in steps] == list(range(8))  # each batch a step of its own
    assert [s.index for s in steps] == list(range(8))
    seen = torch.cat([s.data[0][:, 0] for s in steps])
    assert torch.equal(seen.sort().values, torch.arange(67, dtype=torch.float32))  # each once
    assert [s.source.id for s in steps] == [0, 0, 0, 1, 1, 1, 2, 2]  # tasks in order
    first = torch.cat([s.data[0][:, 0] for s in steps[:3]])
    assert not torch.equal(first, torch.arange(30, dtype=torch.float32))  # shuffled in a task
    again = [s.data[0] for s in task_free_steps(stream, 10, seed=3)]
    assert all(torch.equal(a, s.data[0]) for a, s in zip(again, steps, strict=True))


def test_a_task_free_run_observes_every_batch_and_measures_at_task_ends():
    stream = small_stream()
    learner = FineTuning(BayesianMLP(3, [4], 2), **SMALL)
    observed = []
    observe = learner.observe

    def counting(data, task_id=None, **kwargs):
        observed.append((len(data[0]), task_id))
        return observe(data, task_id=task_id, **kwargs)

    learner.observe = counting
    result = run_stream(learner, stream, verbose=False, task_free=10)
    assert observed == [(10, 0), (10, 1), (10, 2), (10, 3), (10, 4), (5, 5), (10, 6), (2, 7)]
    assert result.step_names == ["t0", "t1", "t2"] and result.details["task_free_batches"] == 8
    accuracy = result.accuracy
    assert accuracy.shape == (3, 3)
    assert not torch.isnan(torch.as_tensor(accuracy)[torch.tril_indices(3, 3).unbind()]).any()


def test_a_multi_head_stream_or_a_bad_batch_size_is_refused():
    with pytest.raises(ValueError, match="head per task"):
        next(task_free_steps(split_digits(), 10))
    with pytest.raises(ValueError, match="positive integer"):
        next(task_free_steps(small_stream(), 0))
    with pytest.raises(ValueError, match="task_free must be a positive integer"):
        BenchmarkRun("split-digits-class-incremental", task_free=0)
    with pytest.raises(ValueError, match="finetune keeps no memory"):
        BenchmarkRun("split-digits-class-incremental", methods=["finetune"],
                     memory_options={"budget": "total"})  # fmt: skip


def test_a_task_free_benchmark_keeps_its_total_budget_as_a_reservoir():
    run = BenchmarkRun(
        "split-digits-class-incremental",
        methods=["finetune-er"],
        task_free=60,
        coreset_size=25,
        memory_options={"budget": "total"},
        training={"epochs": 1, "num_predictive_samples": 2},
        hidden_sizes=[8],
        progress=False,
    )
    stream = run.task_stream(0)
    learner = run.make_learner("finetune-er", stream, 0, "cpu")
    assert learner.memory.budget == "total" and learner.memory.size == 25
    result = run_stream(learner, stream, verbose=False, task_free=run.task_free)
    kept = learner.memory_points
    assert len(kept) == 25  # the budget in all, not a task's
    assert len(set(kept.y.tolist())) > 2  # points of several tasks' classes are held
    assert result.details["task_free_batches"] > len(stream)
