"""The demo's stream through the results protocol: every row's setting chosen on validation, the
test sets read once, the run kept as a record (``benchmarks/records/demo-protocol.json``).

    OMP_NUM_THREADS=1 python benchmarks/demo_protocol.py --seeds 0 1 2 [--folder RUNS]
    python benchmarks/demo_protocol.py --seeds 0 --tiny        # seconds, for a smoke test

The stream is ``pyro-cl run``'s default: five permutations of scikit-learn's 8x8 digits, one head,
the preset's schedule. Rows: fine-tuning (how much the schedule forgets), VCL, VCL with a random
coreset of 200 points a task, and function-space VI at the same 200 points a task (the library's
recommendation for one shared head). Each row's grid is declared below; a setting is scored on a
tenth of each task's training data held out (:mod:`pyro_cl.app.selection`), the best mean over the
seeds is chosen, then each seed runs once on the test sets. ``make results`` renders the table
from the record into RESULTS.md, which_method.md and the README.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.records import write_record
from pyro_cl.app.selection import (
    fitter_option_grid,
    learning_rate_grid,
    protocol_record,
    with_learning_rate,
)

#: Learning rates every row is scored at (Adam's; the preset's is 1e-3).
LEARNING_RATES = (1e-3, 3e-3)

#: What the record's notes say of function space's second rate.
FASTER_FUNCTION_SPACE = (
    "Function space also scored at Adam's 3e-3, as every other row, a setting added on "
    "2026-11-30 after benchmarks/peers.py's first test readings."
)


def rows(training: dict) -> dict[str, dict[str, dict]]:
    """Each row's grid: a setting's label → fields of :class:`BenchmarkRun`."""
    rates = LEARNING_RATES
    return {
        "fine-tuning": learning_rate_grid("finetune", rates, training),
        "VCL": learning_rate_grid("vcl", rates, training),
        "VCL + random coreset (200 a task)": learning_rate_grid("vcl-random", rates, training),
        # its KL's weighing, at both rates too (3e-3 added after benchmarks/peers.py's first
        # test readings, as every other row is scored at both)
        "function-space VI, 200 context points a task": with_learning_rate(
            fitter_option_grid("fsvi", "function_kl_scale", ("sum", "per_point"), "KL", training),
            rates[1],
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tiny", action="store_true", help="1 epoch, 2 tasks: a smoke test")
    parser.add_argument("--name", default="demo-protocol", help="the record's name")
    parser.add_argument("--folder", help="keep every run's numbers here, to resume")
    parser.add_argument("--notes", default="", help="what else the record should say of its runs")
    args = parser.parse_args(argv)
    training = {"epochs": 1, "num_predictive_samples": 4} if args.tiny else {}
    base = BenchmarkRun(num_tasks=2 if args.tiny else None, progress=False)
    record = protocol_record(
        args.name,
        "python benchmarks/demo_protocol.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        base,
        rows(training),
        args.seeds,
        training,
        notes=FASTER_FUNCTION_SPACE + (" " + args.notes if args.notes else ""),
        folder=args.folder,
    )
    print(f"wrote {write_record(record)}")


if __name__ == "__main__":
    main()
