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
and only then is each seed run once on the real test sets. A grid of one setting chooses nothing
and is not scored. The grid, every validation score and the choice go into the run record
(:mod:`pyro_cl.app.records`), with the bytes each row keeps at the end of the stream, measured
on its learner (:func:`~pyro_cl.app.task_benchmark.kept_bytes`).

Runs of hours go in pieces: with a ``folder``, every run keeps its numbers in
``<folder>/<row>/<setting>/<validation|test>-seed<k>.json`` with the fields it ran with, and a
checkpoint after every task while it runs; started again, a finished run is read back (refused if
its fields differ from the grid's now) and a stopped one resumes at its next task. The kept
numbers of the project's own protocols are committed under ``benchmarks/runs/<record>/`` (the
runs' own folders, with their checkpoints, are not), so a protocol of many hours goes on across
sessions and machines; a record alone also restores its runs (:func:`restore_kept_runs`,
``--resume-from``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyro_cl.app.benchmark_run import BenchmarkRun, check_seeds
from pyro_cl.app.continual_run import file_slug
from pyro_cl.app.records import current_commit, load_record, make_record, write_record
from pyro_cl.app.result import RunResult
from pyro_cl.app.runner import run_benchmark
from pyro_cl.infer.divergence import DivergenceError

__all__ = [
    "add_validation_only",
    "choose",
    "choose_and_test",
    "fitter_option_grid",
    "kept_bytes_by_row",
    "kept_numbers",
    "learning_rate_grid",
    "protocol_parser",
    "parse_protocol",
    "protocol_record",
    "record_rows",
    "restore_kept_runs",
    "run_setting",
    "rows_named",
    "select_then_test",
    "test_numbers",
    "with_adam_carried",
]


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


def with_adam_carried(grid: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``grid`` and each of its settings again with Adam's state carried across tasks
    (``carry_adam_state``, as one optimiser for the stream: Avalanche's strategies), labelled
    ``"<setting>, Adam carried"``."""
    return _with_training(grid, "Adam carried", carry_adam_state=True)


def with_learning_rate(
    grid: Mapping[str, Mapping[str, Any]], rate: float
) -> dict[str, dict[str, Any]]:
    """``grid`` and each of its settings again at Adam's learning rate ``rate``, labelled
    ``"<setting>, lr <rate>"`` (a grid over another option, scored at a second rate too)."""
    return _with_training(grid, f"lr {rate:g}", learning_rate=rate)


def _with_training(
    grid: Mapping[str, Mapping[str, Any]], label: str, **settings: Any
) -> dict[str, dict[str, Any]]:
    """``grid`` and each of its settings again with the training ``settings`` changed, labelled
    ``"<setting>, <label>"``."""
    again = {
        f"{setting}, {label}": {**fields, "training": {**fields.get("training", {}), **settings}}
        for setting, fields in grid.items()
    }
    return {**grid, **again}


def fitter_option_grid(
    method: str,
    option: str,
    values: Sequence[Any],
    label: str,
    training: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """A row's grid over one option of ``method``'s fitter: ``{"<label> <value>": {...}}``
    (floats as ``:g``), over the run's ``training`` settings."""
    return {
        f"{label} {value:g}" if isinstance(value, float) else f"{label} {value}": {
            "methods": [method],
            "training": dict(training or {}),
            "fitter_options": {option: value},
        }
        for value in values
    }


def kept_bytes_by_row(measured: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> dict[str, int]:
    """The bytes each row keeps (the largest over its seeds' test runs; 0 where none said)."""
    return {
        row: max(numbers["kept bytes"] or 0 for numbers in per_seed.values())
        for row, per_seed in measured.items()
    }


def choose(scores: Mapping[str, Mapping[int, float | None]]) -> str:
    """The setting of the best mean score over seeds (the first given on a tie); a setting that
    diverged at any seed (a score of ``None``) is not chosen.

    :raises ValueError: when every setting diverged.
    """
    means = {
        setting: statistics.mean(per_seed.values())
        for setting, per_seed in scores.items()
        if None not in per_seed.values()
    }
    if not means:
        raise ValueError(f"every setting diverged on validation: {sorted(scores)}")
    return max(means, key=lambda setting: (means[setting], -list(means).index(setting)))


def _validation_score(run: Callable[[], dict[str, Any]], what: str) -> float | None:
    """``run()``'s ``"ACC"``, or ``None`` (said in one line) when its fit diverged: a setting
    that diverges is a bad setting, not a failed protocol."""
    try:
        return run()["ACC"]
    except DivergenceError as error:
        print(f"{what} diverged on validation, so it is not chosen: {str(error).splitlines()[0]}")
        return None


def test_numbers(result: RunResult, seconds: float) -> dict[str, Any]:
    """What a record keeps of one test run: ACC, BWT, ECE, each task's final accuracy (%), the
    time and the bytes the learner keeps at the end (``None`` where the run did not say)."""
    accuracy = result.accuracy
    return {
        "ACC": 100 * result.acc,
        "BWT": None if result.bwt is None else 100 * result.bwt,
        "ECE": None if result.calibration_error is None else 100 * result.calibration_error,
        "final per task": [100 * float(a) for a in accuracy[-1]],
        "seconds": seconds,
        "kept bytes": result.details.get("kept_bytes"),
    }


test_numbers.__test__ = False  # a helper, not a pytest test


def choose_and_test(
    rows: Mapping[str, Mapping[str, Any]],
    seeds: Sequence[int],
    run_one: Callable[[str, str, Any, int, float | None], dict[str, Any]],
    fraction: float = 0.1,
    selection_seeds: Sequence[int] | None = None,
    test: bool = True,
) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[str, Any]]]:
    """The protocol over any runner: for each row, every setting of its grid scored on
    validation (``run_one(row, setting, fields, seed, fraction)``'s ``"ACC"``; not for a grid of
    one), the best mean chosen (a setting whose fit diverged at a seed is scored ``None`` there
    and not chosen), then ``run_one(row, chosen, fields, seed, None)`` on the test sets for each
    seed. :func:`select_then_test` is this over benchmark runs; a benchmark of other
    libraries' methods (benchmarks/peers.py) passes its own ``run_one``.

    :param selection_seeds: the seeds a setting is scored at (default: ``seeds``).
    :param test: ``False`` scores the grids on validation and reads no test set (a share of a
        long protocol run beside the rest: the choices and test runs come from a run with it).
    :returns: ``{row: {seed: test numbers}}`` (empty without ``test``) and ``{row: {"grid",
        "validation", "chosen", "scored at"}}``.
    :raises ValueError: for an empty grid, repeated seeds, or a row whose every setting diverged.
    """
    seeds = list(seeds)
    check_seeds(seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    scored_at = seeds if selection_seeds is None else list(selection_seeds)
    check_seeds(scored_at)
    if not scored_at:
        raise ValueError("give at least one selection seed")
    measured: dict[str, dict[int, dict[str, Any]]] = {}
    selection: dict[str, dict[str, Any]] = {}
    for label, grid in rows.items():
        if not grid:
            raise ValueError(f"row {label!r} has an empty grid")
        scores: dict[str, dict[int, float]] = {}
        if len(grid) > 1:
            for setting, fields in grid.items():
                scores[setting] = {
                    seed: _validation_score(
                        functools.partial(run_one, label, setting, fields, seed, fraction),
                        f"{label}, {setting}, seed {seed},",
                    )
                    for seed in scored_at
                }
        chosen = choose(scores) if scores else next(iter(grid))
        selection[label] = {
            "grid": {setting: _plain(fields) for setting, fields in grid.items()},
            "validation": {s: {str(k): v for k, v in per.items()} for s, per in scores.items()},
            "chosen": chosen,
            "scored at": scored_at if scores else [],
        }
        if test:  # the test sets, read once, for the chosen setting
            measured[label] = {
                seed: run_one(label, chosen, grid[chosen], seed, None) for seed in seeds
            }
    return measured, selection


def select_then_test(
    base: BenchmarkRun,
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]],
    seeds: Sequence[int],
    fraction: float = 0.1,
    folder: str | Path | None = None,
    selection_seeds: Sequence[int] | None = None,
    test: bool = True,
) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[str, Any]]]:
    """Choose each row's setting on validation, then run it once per seed on the test sets
    (module docstring; :func:`choose_and_test` over benchmark runs, ``test`` as there).

    :param folder: where each run keeps its numbers and checkpoints, to resume (module
        docstring); ``None`` keeps nothing.
    :param selection_seeds: the seeds a setting is scored at on validation (default: ``seeds``);
        the record names them.
    :raises ValueError: for an empty grid, repeated seeds, a setting that runs other than one
        method, or a kept run whose fields differ from its setting's now.
    """

    def run_one(row: str, setting: str, fields: Mapping, seed: int, validation: float | None):
        return _kept_run(base, fields, seed, validation, folder, row, setting)

    return choose_and_test(rows, seeds, run_one, fraction, selection_seeds, test)


def kept_numbers(
    folder: str | Path | None,
    row: str,
    setting: str,
    fields: Mapping[str, Any],
    seed: int,
    validation: float | None,
    run: Callable[[Path | None], dict[str, Any]],
) -> dict[str, Any]:
    """One run's numbers, read from ``folder`` when that run finished there before, else
    ``run(place)`` (``place``: a folder of the run's own for a checkpoint, ``None`` without
    ``folder``) with the commit that ran it (``"commit"``), kept as
    ``<folder>/<row>/<setting>/<validation|test>-seed<k>.json``.

    :raises ValueError: for a kept run whose fields or validation share differ from these.
    """
    kept = None if folder is None else _kept_path(folder, row, setting, seed, validation)
    if kept is not None and kept.exists():
        saved = json.loads(kept.read_text())
        if saved["fields"] != _plain(fields) or saved["validation"] != validation:
            raise ValueError(
                f"{kept} was run with {saved['fields']} (validation {saved['validation']}), "
                f"not {_plain(fields)} (validation {validation}): remove it to run again"
            )
        return saved["numbers"]
    commit = current_commit()  # the code that ran, kept with its numbers (and in the record)
    numbers = {**run(None if kept is None else kept.with_suffix("")), "commit": commit}
    if kept is not None:
        _keep(kept, _plain(fields), validation, numbers)
    return numbers


def _kept_path(
    folder: str | Path, row: str, setting: str, seed: int, validation: float | None
) -> Path:
    split = "test" if validation is None else "validation"
    return Path(folder) / file_slug(row) / file_slug(setting) / f"{split}-seed{seed}.json"


def _keep(kept: Path, fields: Any, validation: float | None, numbers: Mapping[str, Any]) -> None:
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"fields": fields, "validation": validation, "numbers": numbers}))


def restore_kept_runs(record: Mapping[str, Any], folder: str | Path, fraction: float = 0.1) -> int:
    """Keep in ``folder`` every run a protocol record (:func:`protocol_record`) holds, as
    :func:`kept_numbers` keeps them: each setting's validation score at each seed it was scored
    at, and each seed's test numbers for the chosen setting. A protocol then resumes from its
    committed record — on another machine, or with rows added after the record was written —
    without running those again; a setting whose fields have changed since is refused there as
    any kept run is. A kept file already in ``folder`` is left as it is.

    :param fraction: the validation share the record's settings were scored on.
    :returns: the number of runs written.
    :raises ValueError: for a record whose rows were not chosen through this protocol (a drift
        record's selection, say), before anything is written.
    """
    for row, chosen in record.get("selection", {}).items():
        grid = chosen.get("grid")
        if (
            not isinstance(grid, dict)
            or chosen.get("chosen") not in grid
            or row not in record["rows"]
        ):
            raise ValueError(
                f"record {record.get('name')!r} was not written by the selection protocol (row "
                f"{row!r} has no grid of settings with its choice): it has no runs to resume"
            )
    written = 0
    for row, chosen in record["selection"].items():
        # the record's commits and bytes kept, where its runs did not keep their own
        missing = {
            "commit": record["commit"],
            "kept bytes": record.get("storage_bytes", {}).get(row),
        }
        runs = [
            (setting, int(seed), fraction, {"ACC": score})
            for setting, per_seed in chosen["validation"].items()
            for seed, score in per_seed.items()
        ]
        runs += [
            (chosen["chosen"], int(seed), None, numbers)
            for seed, numbers in record["rows"][row].items()
        ]
        for setting, seed, validation, numbers in runs:
            kept = _kept_path(folder, row, setting, seed, validation)
            if not kept.exists():
                _keep(kept, chosen["grid"][setting], validation, {**missing, **numbers})
                written += 1
    return written


def run_setting(
    base: BenchmarkRun,
    fields: Mapping[str, Any],
    seed: int,
    validation: float | None = None,
    output: Path | None = None,
) -> dict[str, Any]:
    """One run of ``base`` with a grid setting's ``fields`` at ``seed``, timed: its
    :func:`test_numbers` on the held-out ``validation`` share of the training data, or on the
    test sets for ``None``. Nothing is kept (:func:`select_then_test` keeps its runs); a timing
    of one setting, say, runs it on a validation share so that no test set is read.

    :param output: the run's folder, resumable there; ``None`` writes nothing.
    """
    benchmark = dataclasses.replace(
        base, **fields, seeds=[seed], validation=validation, output=output,
        resumable=output is not None,
    )  # fmt: skip
    start = time.perf_counter()
    result = _one_result(benchmark)
    seconds = time.perf_counter() - start + result.details.get("seconds_before_resume", 0.0)
    return test_numbers(result, seconds)


def _kept_run(
    base: BenchmarkRun,
    fields: Mapping[str, Any],
    seed: int,
    validation: float | None,
    folder: str | Path | None,
    row: str,
    setting: str,
) -> dict[str, Any]:
    """:func:`run_setting`'s numbers, kept in ``folder`` (:func:`kept_numbers`), resumable there
    while it runs."""

    def run(place: Path | None) -> dict[str, Any]:
        return run_setting(base, fields, seed, validation, place)

    return kept_numbers(folder, row, setting, fields, seed, validation, run)


def _plain(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A grid entry as JSON can hold it (parts by their repr)."""
    return json.loads(json.dumps(fields, default=repr))


def protocol_record(
    name: str,
    command: str,
    base: BenchmarkRun,
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]],
    seeds: Sequence[int],
    training: Mapping[str, Any] | None = None,
    notes: str = "",
    folder: str | Path | None = None,
    selection_seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
    """:func:`select_then_test` over ``rows`` (``folder`` and ``selection_seeds`` as there), as a
    run record (:mod:`pyro_cl.app.records`): ACC, BWT, ECE (%) and seconds per seed, the
    selection, and the bytes each row's learner keeps at the end of the stream (the largest over
    the seeds). The commit is taken before the runs (the code that ran, whatever changes
    meanwhile)."""
    commit = current_commit()
    measured, selection = select_then_test(
        base, rows, seeds, folder=folder, selection_seeds=selection_seeds
    )
    stream = base.task_stream(seeds[0])
    return make_record(
        name,
        command=command,
        seeds=seeds,
        schedule={"preset": base.benchmark, "tasks": len(stream), **(training or {})},
        data=stream.name,
        rows=measured,
        metrics=["ACC", "BWT", "ECE", "seconds"],
        selection=selection,
        storage_bytes=kept_bytes_by_row(measured),
        commit=commit,
        notes="ACC, BWT and ECE in %; seconds per run of the chosen setting on the test sets; "
        "bytes the learner keeps at the end of the stream beside its posterior (kept points' "
        "inputs and labels, a context source's state), measured. " + notes,
    )


def protocol_parser(
    description: str, folder: str, name: str | None = None, from_record: bool = True
) -> argparse.ArgumentParser:
    """The options of a benchmark run through the protocol: ``--seeds``, ``--data-root``,
    ``--folder`` (the kept runs, to resume), ``--rows`` (some rows, by index: two processes on
    two cores run different rows into one folder), ``--record`` (with ``--rows``, a record of
    those alone), ``--tiny`` (a check), ``--validation-only`` (a second process's share of one
    row's validation runs, e.g. at other ``--selection-seeds``), ``--resume-from`` (a committed
    record's runs first; not with ``from_record=False``, for a protocol whose kept runs hold
    more than its record's grids) and, with a default ``name``, ``--name`` (the record's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--folder", default=folder, help="keep every run's numbers here")
    parser.add_argument("--rows", nargs="+", type=int, help="only these rows (0-based)")
    parser.add_argument(
        "--record", action="store_true", help="with --rows, write a record of those rows alone"
    )
    parser.add_argument("--tiny", action="store_true", help="a few minutes: a check")
    add_validation_only(parser)
    if from_record:  # a protocol whose kept runs' fields its record's grids hold
        parser.add_argument(
            "--resume-from",
            metavar="RECORD",
            help="first keep in --folder the runs of this committed record (benchmarks/records)",
        )
    if name is not None:
        parser.add_argument("--name", default=name, help="the record's name")
    return parser


def add_validation_only(parser: argparse.ArgumentParser) -> None:
    """``--validation-only``: a second process's share of a long row's validation runs, into
    the same ``--folder``, reading no test set (:func:`select_then_test` with ``test=False``)."""
    parser.add_argument(
        "--validation-only",
        action="store_true",
        help="score the grids on validation and read no test set (a second process's share of "
        "the validation runs, in the same --folder)",
    )


def parse_protocol(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser``'s arguments (:func:`protocol_parser`), with ``--resume-from``'s record's runs
    kept in ``--folder`` (:func:`restore_kept_runs`) before any run; a missing record is the
    command line's one-line error."""
    args = parser.parse_args(argv)
    if getattr(args, "resume_from", None) is None:
        return args
    if args.folder is None:
        parser.error("--resume-from keeps a record's runs in --folder: give --folder")
    try:
        written = restore_kept_runs(load_record(args.resume_from), args.folder)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    print(f"kept {written} runs of record {args.resume_from!r} in {args.folder}")
    return args


def rows_named(
    table: Mapping[str, Any],
    indices: Sequence[int] | None,
    parser: argparse.ArgumentParser | None = None,
) -> dict[str, Any]:
    """The rows of ``table`` at ``indices`` (0-based, in that order; every row for ``None``).

    :param parser: the command line's, to stop with its one-line error for a wrong index.
    :raises ValueError: for an index that names no row (without ``parser``).
    """
    labels = list(table)
    if indices is None:
        return dict(table)
    wrong = [i for i in indices if not 0 <= i < len(labels)]
    if wrong:
        message = f"no row {wrong[0]}: the rows are 0-{len(labels) - 1}"
        if parser is not None:
            parser.error(message)
        raise ValueError(message)
    return {labels[i]: table[labels[i]] for i in indices}


def record_rows(
    args: argparse.Namespace,
    script: str,
    argv: Sequence[str],
    base: BenchmarkRun,
    table: Mapping[str, Mapping[str, Mapping[str, Any]]],
    training: Mapping[str, Any],
    notes: str,
    selection_seeds: Sequence[int],
) -> Path | None:
    """Run the rows of ``table`` that ``args.rows`` names (:func:`protocol_parser`) through the
    protocol and write their record (:func:`protocol_record`, named ``args.name``), or, for
    some rows without ``args.record``, only run them (the record is a run of every row's), or
    with ``args.validation_only`` only score their grids on validation.

    :returns: the record's path (``None`` when only run).
    """
    table = rows_named(table, args.rows)
    if args.validation_only or (args.rows is not None and not args.record):
        select_then_test(
            base, table, args.seeds, folder=args.folder, selection_seeds=selection_seeds,
            test=not args.validation_only,
        )  # fmt: skip
        print(f"ran {list(table)}; the record is written by a run of every row")
        return None
    record = protocol_record(
        args.name + ("-tiny" if args.tiny else ""),
        f"python benchmarks/{script} " + " ".join(argv),
        base,
        table,
        args.seeds,
        training,
        notes=notes + ("" if args.rows is None else " The rows named alone."),
        folder=args.folder,
        selection_seeds=selection_seeds,
    )
    path = write_record(record)
    print(f"wrote {path}")
    return path


def record_at_schedule(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    script: str,
    argv: Sequence[str] | None,
    benchmark: str,
    table: Mapping[str, Mapping[str, Mapping[str, Any]]],
    training: Mapping[str, Any],
    schedule: str,
) -> Path | None:
    """A protocol script's last step at a named ``schedule`` (benchmarks/cifar_protocol.py,
    split_mnist_protocol.py): ``benchmark``'s run (two tasks with ``--tiny``), the rows
    ``--rows`` names checked before any run, then :func:`record_rows` with the seeds the grids
    are scored at (``--selection-seeds``, default ``--seeds``) named in the record's notes."""
    base = BenchmarkRun(
        benchmark, data_root=args.data_root, num_tasks=2 if args.tiny else None, progress=False
    )
    selection_seeds = args.selection_seeds or args.seeds
    rows_named(table, args.rows, parser)  # before any run
    notes = f"The {schedule} schedule; settings scored on validation at seeds {selection_seeds}."
    argv = sys.argv[1:] if argv is None else argv
    return record_rows(args, script, argv, base, table, training, notes, selection_seeds)
