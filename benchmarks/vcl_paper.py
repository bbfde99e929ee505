"""VCL paper (Nguyen et al., 2018) section 6.1: VCL with and without coresets, and the coreset-only
baseline, on permuted MNIST, split MNIST and split notMNIST.

    python benchmarks/vcl_paper.py --benchmark split-notmnist --seeds 0 1 2
    python benchmarks/vcl_paper.py --benchmark permuted-mnist --schedule short

The default ``--schedule paper`` uses the paper's settings (appendices A-C); ``short`` is the
shortened schedule that fits a 2-core CPU, reported as such in docs/lab/vcl_coresets.md. Each run
writes ``results.json`` (accuracy matrices per seed, ACC/BWT, settings, wall times, and the mean
± std summary) and ``accuracy.png`` (accuracy per task after each step, as the paper's figures
2 and 4) to ``--output`` (default ``results/vcl_paper/<benchmark>-<schedule>``). Every
``pyro-cl run`` option is accepted too, and wins over the schedule's.
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.runner import run_benchmark

METHODS = ["vcl", "vcl-random", "vcl-kcenter", "coreset-only"]

#: Changes to the paper's settings (kept by the presets) that make a run fit a 2-core CPU.
SHORT_SCHEDULES = {
    # 5 of 100 epochs per task; the coreset refit keeps the paper's 100 epochs (it is cheap).
    "permuted-mnist": {"epochs": 5, "refit_epochs": 100},
    # The paper's 120 whole-task steps, but 1 Monte Carlo sample per step instead of 10.
    "split-mnist": {"num_particles": 1},
    # Small enough to run at the paper's settings.
    "split-notmnist": {},
}


def build_run(argv: list[str] | None = None) -> BenchmarkRun:
    """The run that the command line ``argv`` describes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=["paper", "short"], default="paper")
    args = parse_script_arguments(parser, argv, sorted(SHORT_SCHEDULES))
    return benchmark_run_from_args(
        args,
        methods=METHODS,
        seeds=[0, 1, 2],
        output=f"results/vcl_paper/{args.benchmark}-{args.schedule}",
        training=SHORT_SCHEDULES[args.benchmark] if args.schedule == "short" else {},
    )


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        run_benchmark(build_run(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
