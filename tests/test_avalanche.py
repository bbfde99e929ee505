"""Avalanche streams in, pyro_cl out: the adapter reads Avalanche's experience protocol, runs a
learner and names the metrics as Avalanche does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.app.avalanche_run import run_avalanche
from pyro_cl.data.avalanche import avalanche_task_stream
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data

SMALL = {"epochs": 3, "ml_init_epochs": 0, "num_particles": 1, "num_predictive_samples": 2}


def _experience(index: int, x: torch.Tensor, y: torch.Tensor, task: int):
    """An experience as Avalanche's protocol has it: a dataset of (x, y, task label) items."""
    items = [(x[i], int(y[i]), task) for i in range(len(y))]
    return SimpleNamespace(current_experience=index, task_label=task, dataset=items)


def _benchmark(task_labels: list[int]):
    train, test = [], []
    for i, task in enumerate(task_labels):
        (x, y), (x_test, y_test) = two_class_data(40, 4, i, i), two_class_data(20, 4, i, 10 + i)
        train.append(_experience(i, x, y, task))
        test.append(_experience(i, x_test, y_test, task))
    return SimpleNamespace(train_stream=train, test_stream=test)


def test_task_labels_make_a_multi_head_stream_and_none_a_single_head_one():
    multi = avalanche_task_stream(_benchmark([0, 1, 2]))
    assert multi.multi_head and [t.id for t in multi] == [0, 1, 2] and multi.num_classes == 2
    assert multi[1].x_train.shape == (40, 4) and multi[1].y_test.shape == (20,)
    single = avalanche_task_stream(_benchmark([0, 0, 0]))
    assert not single.multi_head and [t.id for t in single] == [0, 1, 2]


def test_a_learner_runs_on_the_stream_and_reports_avalanches_metric_names():
    benchmark = _benchmark([0, 1, 2])
    learner = VCL(BayesianMLP(4, [8], 2, heads=3), seed=0, **SMALL)
    result, metrics = run_avalanche(learner, benchmark, "vcl")
    last = result.accuracy[-1]
    assert metrics["Top1_Acc_Exp/eval_phase/test_stream/Task001/Exp001"] == pytest.approx(last[1])
    # equal test sizes: the stream accuracy of a task label is its experience's accuracy
    assert metrics["Top1_Acc_Stream/eval_phase/test_stream/Task002"] == pytest.approx(last[2])
    forgetting = result.accuracy[0, 0] - last[0]
    key = "ExperienceForgetting/eval_phase/test_stream/Task000/Exp000"
    assert metrics[key] == pytest.approx(forgetting)
    assert metrics["StreamForgetting/eval_phase/test_stream"] == pytest.approx(
        (forgetting + result.accuracy[1, 1] - last[1]) / 2
    )


def test_mismatched_or_malformed_streams_are_refused_in_avalanches_terms():
    benchmark = _benchmark([0, 1])
    benchmark.test_stream = benchmark.test_stream[:1]
    with pytest.raises(ValueError, match="complete_test_set_only=False"):
        avalanche_task_stream(benchmark)
    broken = _benchmark([0])
    broken.train_stream[0].dataset = [(torch.zeros(4), 1)]
    with pytest.raises(ValueError, match=r"\(x, y, task_label\)"):
        avalanche_task_stream(broken)


def test_a_real_avalanche_benchmark_when_avalanche_is_installed():
    benchmarks = pytest.importorskip("avalanche.benchmarks")
    data = [two_class_data(30, 4, i, i) for i in range(2)]
    tests = [two_class_data(10, 4, i, 5 + i) for i in range(2)]
    benchmark = benchmarks.tensors_benchmark(
        train_tensors=data, test_tensors=tests, task_labels=[0, 1]
    )
    learner = VCL(BayesianMLP(4, [8], 2, heads=2), seed=0, **SMALL)
    _, metrics = run_avalanche(learner, benchmark)
    assert 0 <= metrics["Top1_Acc_Stream/eval_phase/test_stream/Task001"] <= 1
