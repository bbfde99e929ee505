"""Permuted MNIST through the results protocol: function-space VI's set-up chosen on validation,
every context source beside a coreset of the same bytes, the run kept as a record
(``benchmarks/records/permuted-mnist-protocol.json``).

    OMP_NUM_THREADS=1 python benchmarks/permuted_protocol.py --data-root ../shared/data
    python benchmarks/permuted_protocol.py --tiny --data-root ../shared/data   # minutes, a check

Ten permutations of MNIST, one head of 100-100 units, the VCL paper's net at a schedule that fits
a 2-core CPU (keeps_learning.py's ``short``: 5 of the paper's 100 epochs, the coreset refit 100;
S-FSVI's own schedule is ``--schedule sfsvi`` there, about three times longer). Rows:

* fine-tuning (how much the schedule forgets), VCL and VCL with a random coreset of 200 points a
  task, at the paper's settings (nothing chosen);
* function-space VI at 200 kept points a task, its set-up chosen on validation (held-out tenths
  of seed 0's training data) from a grid of the KL's weighing (eq. 9's sum, or S-FSVI's per
  context point) and the function moments (Monte Carlo or linearised), 40 of each task's points
  drawn afresh at every step (S-FSVI's ``coreset.draw``);
* at that set-up, each task's inputs kept as a Gaussian instead of points — a low-rank
  covariance (probabilistic PCA) of the coreset's bytes, a full covariance, a diagonal one — each
  beside a coreset of the same bytes (measured on the learner at the end of the stream and kept
  in the record), 40 inputs drawn for each earlier task at every step.

Every run keeps its numbers (and a checkpoint after every task while it runs) under ``--folder``,
so the command resumes where it stopped; ``--rows`` runs some rows (two processes on two cores
run different rows into one folder). The record is written once every row has run, or of the
rows named with ``--rows ... --record --name NAME`` (the comparison so far, while the rest run).
"""

from __future__ import annotations

import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.selection import (
    parse_protocol,
    protocol_parser,
    record_rows,
    rows_named,
    select_then_test,
)
from pyro_cl.fitters.context_points import GaussianInputs

#: keeps_learning.py's short schedule for permuted MNIST.
SHORT = {"epochs": 5, "refit_epochs": 100}
#: Kept points of each earlier task drawn at every step, and inputs drawn from each Gaussian.
DRAWS = 40
#: The coreset size of the VCL paper (points a task).
CORESET = 200
#: The grid of function-space VI's set-up: the KL's weighing and the function moments.
SETUPS = {
    f"KL {scale}, {moments} moments": {"function_kl_scale": scale, "moments": moments}
    for scale in ("per_point", "sum")
    for moments in ("monte_carlo", "linearised")
}
FSVI = "function-space VI, 200 kept points a task"


def _fsvi_at(setup: dict, kept: int, training: dict) -> dict:
    return {
        "methods": ["fsvi"],
        "coreset_size": kept,
        "training": training,
        "fitter_options": {**setup, "context_draws": DRAWS},
    }


def _fsvi_gaussian(setup: dict, training: dict, **covariance) -> dict:
    context = GaussianInputs(DRAWS, **covariance)
    return {
        "methods": ["fsvi-gaussian"],
        "training": training,
        "fitter_options": {**setup, "context": context},
    }


def equal_bytes(features: int) -> dict[str, int]:
    """Coreset sizes and the low rank whose bytes match each Gaussian's (float32 inputs; a kept
    point holds its inputs, an int64 label, task id and time)."""
    point = 4 * features + 24
    coreset_bytes = CORESET * point
    return {
        "rank": coreset_bytes // (4 * features) - 2,  # W, the mean and a few scalars
        "full": -(-4 * (features + features**2) // point),  # the mean and the scatter matrix
        "diagonal": -(-4 * 2 * features // point),  # the mean and the variances
    }


def rows(training: dict, setup: dict, features: int) -> dict[str, dict[str, dict]]:
    """The rows after the set-up's choice, each a grid of one setting."""
    sizes = equal_bytes(features)
    one = {
        "fine-tuning": {"methods": ["finetune"], "training": training},
        "VCL": {"methods": ["vcl"], "training": training},
        "VCL + random coreset, 200 a task": {
            "methods": ["vcl-random"],
            "coreset_size": CORESET,
            "training": training,
        },
        FSVI: _fsvi_at(setup, CORESET, training),
        f"function-space VI, a rank-{sizes['rank']} input Gaussian a task (the bytes of 200 "
        "points)": _fsvi_gaussian(setup, training, covariance="low_rank", rank=sizes["rank"]),
        "function-space VI, a full input Gaussian a task": _fsvi_gaussian(setup, training),
        f"function-space VI, {sizes['full']} kept points a task (a full Gaussian's bytes)": (
            _fsvi_at(setup, sizes["full"], training)
        ),
        "function-space VI, a diagonal input Gaussian a task": _fsvi_gaussian(
            setup, training, covariance="diagonal"
        ),
        f"function-space VI, {sizes['diagonal']} kept points a task (a diagonal Gaussian's "
        "bytes)": _fsvi_at(setup, sizes["diagonal"], training),
    }
    return {label: {"as chosen": fields} for label, fields in one.items()}


def main(argv: list[str] | None = None) -> None:
    parser = protocol_parser(
        __doc__.split("\n\n")[0], "results/permuted_protocol", "permuted-mnist-protocol"
    )
    args = parse_protocol(parser, argv)
    training = {"epochs": 1, "refit_epochs": 1, "num_particles": 1} if args.tiny else SHORT
    base = BenchmarkRun(
        "permuted-mnist", data_root=args.data_root, num_tasks=2 if args.tiny else None,
        progress=False,
    )  # fmt: skip
    features = base.task_stream(args.seeds[0]).in_features
    rows_named(rows(training, {}, features), args.rows, parser)  # before any run
    grid = {FSVI: {name: _fsvi_at(setup, CORESET, training) for name, setup in SETUPS.items()}}
    # the set-up, chosen on seed 0's validation share first: every function-space row takes it
    _, chosen = select_then_test(
        base, grid, args.seeds[:1], folder=args.folder, selection_seeds=args.seeds[:1],
        test=not args.validation_only,
    )  # fmt: skip
    setup = SETUPS[chosen[FSVI]["chosen"]]
    print(f"function-space VI's set-up, chosen on validation: {chosen[FSVI]['chosen']}")
    table = rows(training, setup, features)
    table[FSVI] = grid[FSVI]  # the row keeps its grid and validation scores in the record
    notes = (
        f"Function-space VI draws {DRAWS} context inputs of each earlier task at every step. The "
        "set-up was chosen on seed 0's validation share only (a run is about 15 minutes here)."
    )
    argv = sys.argv[1:] if argv is None else argv
    record_rows(args, "permuted_protocol.py", argv, base, table, training, notes, args.seeds[:1])


if __name__ == "__main__":
    main()
