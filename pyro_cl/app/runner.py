"""The one entry to a benchmark run: a :class:`~pyro_cl.app.benchmark_run.BenchmarkRun` goes to
the task-stream runner, or to the generative one for the continual VAE (the ``vae`` net). Both
drive :func:`~pyro_cl.app.continual_run.run_continual` and return
:class:`~pyro_cl.app.result.RunResult`\\ s, as online streams do
(:func:`~pyro_cl.app.stream_benchmark.run_stream_benchmark`)."""

from __future__ import annotations

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.generative_benchmark import run_generative_benchmark
from pyro_cl.app.result import RunResult
from pyro_cl.app.task_benchmark import run_task_benchmark

__all__ = ["run_benchmark"]


def run_benchmark(run: BenchmarkRun) -> list[RunResult]:
    """Run every method of ``run`` on every seed (see
    :func:`~pyro_cl.app.task_benchmark.run_task_benchmark` and
    :func:`~pyro_cl.app.generative_benchmark.run_generative_benchmark`).

    :raises ValueError: when a method cannot be built with the run's options (the message names
        the method).
    """
    if run.architecture == "vae":
        return run_generative_benchmark(run)
    return run_task_benchmark(run)
