"""Choices made on validation, in code: a grid scored on held-out training data, then the test
sets read once, for the chosen setting.

Every setting a comparison depends on — a learning rate, a tempering β, a penalty's λ, which
variant of a method — is chosen here the same way for every row, ours and the baselines'::

    rows = {
        "vcl": {"lr 1e-3": {"training": {"learning_rate": 1e-3}},
                "lr 3e-3": {"training": {"learning_rate": 3e-3}}},
        "ewc": {"λ 100": {"penalty_options": {"strength": 100.0}}, ...},
    }
    measured, selection = select_then_test(BenchmarkRun(...), rows, seeds=[0, 1, 2])

Each row's grid maps a setting's label to fields of :class:`BenchmarkRun` (its ``methods``
among them) over the base run. Scoring a setting runs it on
:meth:`~pyro_cl.data.tasks.TaskStream.validation`'s stream — each task's test set replaced by a
seeded share of its training data, held out from training — so the scoring never holds a test
label (the test suite hands this step a stream whose test labels raise when read). The setting
with the best mean validation score over the seeds is chosen (the first in the grid on a tie),
and only then is each seed run once on the real test sets. The grid, every validation score and
the choice go into the run record (:mod:`pyro_cl.app.records`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyro_cl.app.benchmark_run import BenchmarkRun, check_seeds
from pyro_cl.app.result import RunResult
from pyro_cl.app.runner import run_benchmark

__all__ = ["choose", "learning_rate_grid", "protocol_record", "select_then_test", "test_numbers"]


def _one_result(run: BenchmarkRun) -> RunResult:
    results = run_benchmark(run)
    if len(results) != 1:
        raise ValueError(f"a row's setting runs one method, got {len(results)} runs: {run.methods}")
    return results[0]


def learning_rate_grid(
    method: str, rates: Sequence[float], training: Mapping[str, Any] | None = None, **fields: Any
) -> dict[str, dict[str, Any]]:
    """A row's grid over Adam's learning rate: ``{"lr 0.001": {...}, ...}`` for ``method``,
    over the run's ``training`` settings and any other fields of the run."""
    return {
        f"lr {rate:g}": {
            "methods": [method],
            "training": {**(training or {}), "learning_rate": rate},
            **fields,
        }
        for rate in rates
    }


def choose(scores: Mapping[str, Mapping[int, float]]) -> str:
    """The setting of the best mean score over seeds (the first given on a tie)."""
    means = {setting: statistics.mean(per_seed.values()) for setting, per_seed in scores.items()}
    return max(means, key=lambda setting: (means[setting], -list(means).index(setting)))


def test_numbers(result: RunResult, seconds: float) -> dict[str, Any]:
    """What a record keeps of one test run: ACC, BWT, ECE, each task's final accuracy (%), the
    time."""
    accuracy = result.accuracy
    return {
        "ACC": 100 * result.acc,
        "BWT": None if result.bwt is None else 100 * result.bwt,
        "ECE": None if result.calibration_error is None else 100 * result.calibration_error,
        "final per task": [100 * float(a) for a in accuracy[-1]],
        "seconds": seconds,
    }


test_numbers.__test__ = False  # a helper, not a pytest test


def select_then_test(
    base: BenchmarkRun,
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]],
    seeds: Sequence[int],
    fraction: float = 0.1,
) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[str, Any]]]:
    """Choose each row's setting on validation, then run it once per seed on the test sets
    (module docstring).

    :returns: ``{row: {seed: test numbers}}`` and ``{row: {"grid", "validation", "chosen"}}``.
    :raises ValueError: for an empty grid, repeated seeds or a setting that runs other than one
        method.
    """
    seeds = list(seeds)
    check_seeds(seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    measured: dict[str, dict[int, dict[str, Any]]] = {}
    selection: dict[str, dict[str, Any]] = {}
    for label, grid in rows.items():
        if not grid:
            raise ValueError(f"row {label!r} has an empty grid")
        scores: dict[str, dict[int, float]] = {}
        for setting, fields in grid.items():
            scores[setting] = {}
            for seed in seeds:
                run = dataclasses.replace(
                    base, **fields, seeds=[seed], validation=fraction, output=None
                )
                scores[setting][seed] = 100 * _one_result(run).acc
        chosen = choose(scores)
        selection[label] = {
            "grid": {setting: _plain(fields) for setting, fields in grid.items()},
            "validation": {s: {str(k): v for k, v in per.items()} for s, per in scores.items()},
            "chosen": chosen,
        }
        measured[label] = {}
        for seed in seeds:  # the test sets, read once, for the chosen setting
            start = time.perf_counter()
            run = dataclasses.replace(base, **grid[chosen], seeds=[seed], output=None)
            result = _one_result(run)
            measured[label][seed] = test_numbers(result, time.perf_counter() - start)
    return measured, selection


def _plain(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A grid entry as JSON can hold it (parts by their repr)."""
    return {
        k: v if isinstance(v, str | int | float | bool | dict | list | tuple) else repr(v)
        for k, v in fields.items()
    }


def protocol_record(
    name: str,
    command: str,
    base: BenchmarkRun,
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]],
    seeds: Sequence[int],
    kept_a_task: Mapping[str, int],
    training: Mapping[str, Any] | None = None,
    notes: str = "",
) -> dict[str, Any]:
    """:func:`select_then_test` over ``rows``, as a run record (:mod:`pyro_cl.app.records`):
    ACC, BWT, ECE (%) and seconds per seed, the selection, and the bytes each row keeps at the
    end of the stream (``kept_a_task[row]`` points a task of float32 inputs and int64 labels).
    The commit is taken before the runs (the code that ran, whatever changes meanwhile)."""
    from pyro_cl.app.records import current_commit, make_record

    commit = current_commit()
    measured, selection = select_then_test(base, rows, seeds)
    stream = base.task_stream(seeds[0])
    point_bytes = stream.in_features * 4 + 8
    return make_record(
        name,
        command=command,
        seeds=seeds,
        schedule={"preset": base.benchmark, "tasks": len(stream), **(training or {})},
        data=stream.name,
        rows=measured,
        metrics=["ACC", "BWT", "ECE", "seconds"],
        selection=selection,
        storage_bytes={row: kept_a_task.get(row, 0) * len(stream) * point_bytes for row in rows},
        commit=commit,
        notes="ACC, BWT and ECE in %; seconds per run of the chosen setting on the test sets; "
        "bytes of points kept at the end of the stream (inputs and labels, not the posterior). "
        + notes,
    )
