"""Class-incremental split digits through the results protocol: one head over the ten digits, no
task label at test time, every row's learning rate chosen on validation, the test sets read once,
the run kept as a record (``benchmarks/records/class-incremental-digits.json``).

    OMP_NUM_THREADS=1 python benchmarks/class_incremental.py --seeds 0 1 2
    python benchmarks/class_incremental.py --seeds 0 --tiny     # seconds, a smoke test

Rows at the same 40 points a task (where a row keeps points): fine-tuning (how much the
setting forgets: in class-incremental learning a net that sees two classes at a time predicts
only the last two), experience replay (``finetune-er``, what practitioners reach for first), VCL,
VCL with the replay buffer in every fit's likelihood (``vcl-er``), VCL with a random coreset
refit at test time (``vcl-random``, Algorithm 1) and function-space VI at the kept points
(``fsvi``). The split MNIST version is the preset ``split-mnist-class-incremental``
(``--benchmark split-mnist-class-incremental --data-root DATA``).
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.records import write_record
from pyro_cl.app.selection import learning_rate_grid, protocol_record

#: Adam's learning rates every row is scored at.
RATES = (1e-3, 3e-3)
ROWS = {
    "fine-tuning": "finetune",
    "experience replay": "finetune-er",
    "VCL": "vcl",
    "VCL + replay in the likelihood": "vcl-er",
    "VCL + random coreset": "vcl-random",
    "function-space VI at the kept points": "fsvi",
}


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
    args = parser.parse_args(argv)
    training = {"epochs": 2, "num_predictive_samples": 4} if args.tiny else {}
    base = BenchmarkRun(args.benchmark, data_root=args.data_root, progress=False)
    rows = {
        label: learning_rate_grid(method, RATES, training)
        for label, method in ROWS.items()
        if args.methods is None or method in args.methods
    }
    record = protocol_record(
        args.name,
        "python benchmarks/class_incremental.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        base,
        rows,
        args.seeds,
        training,
        notes="No task label at test time.",
    )
    print(f"wrote {write_record(record)}")


if __name__ == "__main__":
    main()
