"""Class-incremental split digits through the results protocol: one head over the ten digits, no
task label at test time, every row's learning rate chosen on validation, the test sets read once,
the run kept as a record (``benchmarks/records/class-incremental-digits.json``).

    OMP_NUM_THREADS=1 python benchmarks/class_incremental.py --seeds 0 1 2
    python benchmarks/class_incremental.py --seeds 0 --tiny     # seconds, a smoke test

Rows at the same 40 points a task (where a row keeps points): fine-tuning (how much the
setting forgets: in class-incremental learning a net that sees two classes at a time predicts
only the last two), experience replay (``finetune-er``, what practitioners reach for first), VCL,
VCL with the replay buffer in every fit's likelihood (``vcl-er``), VCL with a random coreset
refit at test time (``vcl-random``, Algorithm 1), function-space VI at the kept points
(``fsvi``) and function-space VI beside a replay buffer (``fsvi-er``: half the points in the
buffer, in every fit's likelihood with their labels, half as context points; added after the
first test reading of the other rows, chosen on validation like them). Function space's rows are
scored at function KL weights 1 and :data:`FUNCTION_KL_WEIGHTS` too. Fine-tuning and replay are
scored with Adam's state carried from step to step too (``carry_adam_state``: one optimiser for
the stream, as Avalanche's strategies keep; added after the peers' first test reading showed
their Naive and Replay ahead, chosen on validation with the learning rate), and replay with its
buffer a reservoir of the whole budget from the first task (the points all tasks keep, as
Avalanche's Replay fills its budget at once, where ``K`` a task fills it task by task; added
after the same reading, chosen on validation likewise). The split MNIST version is
the preset ``split-mnist-class-incremental`` (``--benchmark split-mnist-class-incremental
--data-root DATA``).

``--task-free B`` runs the **task-free** variant (record ``<name>-task-free``): each task's
training data reaches the learner in shuffled batches of ``B``, one ``observe`` each (the
preset's epochs on each batch), with no task label and no task boundary
(:func:`~pyro_cl.app.task_metrics.task_free_steps`); the accuracy matrix is still measured at
each task's end. Every row that keeps points keeps the same total, the preset's points a task
times the tasks, as a reservoir sample of every point seen (:class:`~pyro_cl.memory.ExperienceReplay`
with ``budget="total"``): the buffer of replay and VCL's likelihood, and function-space VI's
context points (all of them at every step, ``DRAWS`` of each earlier step's, or ``TOTAL`` of
them all, a context of fixed size; chosen on validation with the learning rate), or half of
them each in a buffer and a context (``fsvi-er``). VCL's random coreset, chosen task by task and
refit at test time, has no task-free form and is left out.

``--folder`` keeps every run's numbers (to resume; the project's in
``benchmarks/runs/<record>``, committed); ``--resume-from RECORD`` first keeps there the runs a
committed record holds, so rows added to a record run alone; ``--validation-only`` (with
``--selection-seeds``) scores the grids into ``--folder`` and reads no test set, a second
process's share of a long row's validation runs. ``--more-function-space RATE:WEIGHT ...`` adds
settings to function space's grid at the kept points (a widening after a reading: the record's
command says so, and the page says it where the row is quoted).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.records import write_record
from pyro_cl.app.selection import (
    add_validation_only,
    learning_rate_grid,
    parse_protocol,
    protocol_record,
    select_then_test,
    with_adam_carried,
)
from pyro_cl.memory import ExperienceReplay

#: Adam's learning rates every row is scored at.
RATES = (1e-3, 3e-3)
#: Task-free function-space VI may also draw this many of each earlier step's kept points at
#: every step instead of using them all (the KL at every kept point can outweigh a small batch).
DRAWS = 2
#: ... or draw this many of all the kept points at every step, a context of fixed size whatever
#: the number of steps (added after the first test reading of the rows above; chosen on
#: validation with them).
TOTAL = 40
#: The function KL's weights function space's rows are scored at besides 1 (added after the first
#: test reading of these streams, on a probe of seed 0's validation share; chosen on validation
#: with the learning rate).
FUNCTION_KL_WEIGHTS = (0.1,)
#: The rows also scored with Adam's state carried across steps (module docstring).
ADAM_CARRIED = ("finetune", "finetune-er")
ROWS = {
    "fine-tuning": "finetune",
    "experience replay": "finetune-er",
    "VCL": "vcl",
    "VCL + replay in the likelihood": "vcl-er",
    "VCL + random coreset": "vcl-random",
    "function-space VI at the kept points": "fsvi",
    "function-space VI + replay (half the points each)": "fsvi-er",
}


def task_free_fields(method: str, kept: int) -> dict:
    """A row's fields in the task-free variant (module docstring): ``kept`` points in all."""
    if method in ("finetune-er", "vcl-er"):
        return {"memory_options": {"budget": "total"}, "coreset_size": kept}
    if method == "fsvi":
        return {"fitter_options": {"context": ExperienceReplay(kept)}}
    if method == "fsvi-er":  # a buffer and a context, half the points each
        half = {"memory_options": {"budget": "total"}, "coreset_size": kept // 2}
        return {**half, "fitter_options": {"context": ExperienceReplay(kept // 2)}}
    return {}


def weighted(
    grid: dict[str, dict], weights: tuple[float, ...] = FUNCTION_KL_WEIGHTS
) -> dict[str, dict]:
    """``grid`` and each of its settings at each of the function KL's ``weights``."""
    out = dict(grid)
    for weight in weights:
        for setting, fields in grid.items():
            options = {**fields.get("fitter_options", {}), "function_kl_weight": weight}
            out[f"{setting}, function KL × {weight:g}"] = {**fields, "fitter_options": options}
    return out


def more_settings(values: list[str]) -> tuple[tuple[float, float], ...]:
    """``RATE:WEIGHT`` pairs of the command line, checked (a bad one is the parser's error)."""
    pairs = []
    for value in values:
        try:
            rate, weight = (float(part) for part in value.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not RATE:WEIGHT, e.g. 0.001:10"
            ) from None
        if not (rate > 0 and weight > 0):
            raise argparse.ArgumentTypeError(f"{value!r}: the rate and weight must be positive")
        pairs.append((rate, weight))
    return tuple(pairs)


def add_more_function_space(parser: argparse.ArgumentParser) -> None:
    """``--more-function-space RATE:WEIGHT ...``: settings added to function space's grid."""
    parser.add_argument(
        "--more-function-space",
        nargs="+",
        default=(),
        metavar="RATE:WEIGHT",
        type=lambda value: more_settings([value])[0],
        help="(Adam's rate, function KL weight) settings added to function space's grid at the "
        "kept points (a widening: say so where the row is quoted)",
    )


def grids(
    methods: list[str],
    base: BenchmarkRun,
    training: dict,
    task_free: int | None = None,
    kept: int = 0,
    more: tuple[tuple[float, float], ...] = (),
) -> dict[str, dict[str, dict]]:
    """The grids of ``methods``' rows (labels of :data:`ROWS`): Adam's rate for every row,
    function space's KL weights and, task-free, its draws of the context (module docstring);
    ``kept``: the points a row keeps in all (task-free rows; with tasks, replay's buffer is
    also scored as a reservoir of them all from the first task, as Avalanche's buffer fills its
    whole budget at once); ``more``: (rate, KL weight) settings added to function space's grid
    at the kept points (``--more-function-space``).
    benchmarks/peers.py runs the same grids."""
    rows = {}
    for label, method in ROWS.items():
        if method not in methods or (task_free is not None and method == "vcl-random"):
            continue
        if task_free is not None:
            extra = task_free_fields(method, kept)
        elif method == "fsvi-er":  # half the points a task in the buffer, half in the context
            extra = {"coreset_size": base.resolved_coreset_size // 2}
        else:
            extra = {}
        rows[label] = learning_rate_grid(method, RATES, training, **extra)
        if method in ADAM_CARRIED:
            rows[label] = with_adam_carried(rows[label])
        if method == "finetune-er" and task_free is None and kept:  # the whole budget at once
            whole = with_adam_carried(
                learning_rate_grid(method, RATES, training, **task_free_fields(method, kept))
            )
            rows[label] |= {f"{setting}, {kept:,} in all from the start": fields
                            for setting, fields in whole.items()}  # fmt: skip
        if task_free is not None and method == "fsvi":  # or some of the points a step
            for option, value, text in (
                ("context_draws", DRAWS, "of each earlier step's kept points"),
                ("context_total", TOTAL, "of the kept points a step"),
            ):
                drawn = {**extra["fitter_options"], option: value}
                grid = learning_rate_grid(method, RATES, training, fitter_options=drawn)
                rows[label] |= {f"{setting}, {value} {text}": f for setting, f in grid.items()}
        if method.startswith("fsvi"):
            rows[label] = weighted(rows[label])
        if method == "fsvi":
            for rate, weight in more:
                grid = learning_rate_grid(method, (rate,), training, **extra)
                rows[label] |= {k: v for k, v in weighted(grid, (weight,)).items() if k not in grid}
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--benchmark", default="split-digits-class-incremental")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--tiny", action="store_true", help="2 epochs: a smoke test")
    parser.add_argument("--name", default="class-incremental-digits", help="the record's name")
    parser.add_argument(
        "--methods", nargs="+", choices=list(ROWS.values()), help="only these rows (default: all)"
    )
    parser.add_argument(
        "--task-free", type=int, metavar="B", help="the task-free variant, in batches of B"
    )
    parser.add_argument("--folder", help="keep every run's numbers here, to resume")
    parser.add_argument(
        "--resume-from", metavar="RECORD", help="first keep in --folder this record's runs"
    )
    add_validation_only(parser)
    parser.add_argument("--selection-seeds", type=int, nargs="+", help="default: --seeds")
    add_more_function_space(parser)
    args = parse_protocol(parser, argv)
    if args.validation_only and args.folder is None:
        parser.error("--validation-only keeps its runs for a later run: give --folder")
    training = {"epochs": 2, "num_predictive_samples": 4} if args.tiny else {}
    try:  # the run checks its options (the task-free batch size among them): one line each
        base = BenchmarkRun(
            args.benchmark, data_root=args.data_root, progress=False, task_free=args.task_free
        )
    except ValueError as error:
        parser.error(str(error))
    kept = base.resolved_coreset_size * len(base.task_stream(args.seeds[0]))
    methods = [m for m in ROWS.values() if args.methods is None or m in args.methods]
    rows = grids(methods, base, training, args.task_free, kept, args.more_function_space)
    if args.validation_only:
        select_then_test(
            base, rows, args.seeds, folder=args.folder, selection_seeds=args.selection_seeds,
            test=False,
        )  # fmt: skip
        print(f"scored {list(rows)} on validation; the record is written by a run with the tests")
        return
    record = protocol_record(
        args.name + ("" if args.task_free is None else "-task-free"),
        "python benchmarks/class_incremental.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        base,
        rows,
        args.seeds,
        training,
        folder=args.folder,
        selection_seeds=args.selection_seeds,
        notes="No task label at test time."
        + (
            ""
            if args.task_free is None
            else f" Task-free: batches of {args.task_free}, no task label or boundary given to "
            f"the learner; {kept} points kept in all by the rows that keep any (a reservoir)."
        ),
    )
    print(f"wrote {write_record(record)}")


if __name__ == "__main__":
    main()
