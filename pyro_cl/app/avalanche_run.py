"""A pyro_cl learner on an Avalanche benchmark, reported in Avalanche's metric names.

    benchmark = avalanche.benchmarks.classic.SplitMNIST(5, return_task_id=True)
    result, metrics = run_avalanche(pyro_cl.VCL(net), benchmark)
    metrics["Top1_Acc_Stream/eval_phase/test_stream/Task000"]

The benchmark becomes a task stream (:func:`pyro_cl.data.avalanche.avalanche_task_stream`), the
one runner observes it with the accuracy matrix as its metric, and :func:`avalanche_metrics`
names the numbers as Avalanche's evaluation plugin does after the last experience:

* ``Top1_Acc_Exp/eval_phase/test_stream/Task{t}/Exp{e}`` — accuracy on experience ``e``;
* ``Top1_Acc_Stream/eval_phase/test_stream/Task{t}`` — accuracy over the test stream's points of
  task label ``t`` (each experience weighted by its size);
* ``ExperienceForgetting/eval_phase/test_stream/Task{t}/Exp{e}`` — accuracy on ``e`` right after
  learning it minus at the end, and ``StreamForgetting/eval_phase/test_stream``, its mean over
  every experience but the last.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyro_cl.app.result import RunResult
from pyro_cl.app.task_metrics import run_stream
from pyro_cl.data.avalanche import avalanche_task_stream
from pyro_cl.data.tasks import TaskStream
from pyro_cl.learner.learner import ContinualLearner

__all__ = ["avalanche_metrics", "run_avalanche"]


def run_avalanche(
    learner: ContinualLearner, benchmark: Any, method: str | None = None, verbose: bool = False
) -> tuple[RunResult, dict[str, float]]:
    """Observe every training experience of ``benchmark`` with ``learner``; the run's result
    and :func:`avalanche_metrics` after the last experience."""
    stream = avalanche_task_stream(benchmark)
    result = run_stream(learner, stream, method, verbose=verbose)
    return result, avalanche_metrics(result, stream)


def avalanche_metrics(result: RunResult, stream: TaskStream) -> dict[str, float]:
    """The final evaluation of ``result`` (a run over ``stream``) in Avalanche's names (module
    docstring)."""
    accuracy = result.accuracy
    last = accuracy[-1]
    labels = [task.id if stream.multi_head else 0 for task in stream]
    sizes = np.array([len(task.y_test) for task in stream])
    metrics: dict[str, float] = {}
    for e, label in enumerate(labels):
        metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{label:03d}/Exp{e:03d}"] = float(last[e])
    for label in sorted(set(labels)):
        chosen = np.array(labels) == label
        correct = (last[chosen] * sizes[chosen]).sum() / sizes[chosen].sum()
        metrics[f"Top1_Acc_Stream/eval_phase/test_stream/Task{label:03d}"] = float(correct)
    forgetting = [float(accuracy[e, e] - last[e]) for e in range(len(labels) - 1)]
    for e, value in enumerate(forgetting):
        key = f"ExperienceForgetting/eval_phase/test_stream/Task{labels[e]:03d}/Exp{e:03d}"
        metrics[key] = value
    metrics["StreamForgetting/eval_phase/test_stream"] = (
        float(np.mean(forgetting)) if forgetting else 0.0
    )
    return metrics
