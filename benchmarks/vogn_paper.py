"""VOGN thesis (section 4.3-4.4): VOGN for continual learning on permuted and split MNIST, beside
IVON and SVI-VCL on the same stream.

    python benchmarks/vogn_paper.py --benchmark permuted-mnist --seeds 0 1 2
    python benchmarks/vogn_paper.py --benchmark split-mnist --schedule short --methods vogn,ivon

Thesis settings (``--schedule paper``): α = β = 0.001, batch 256, 100 epochs per task, 10 Monte
Carlo samples for training and 100 for testing, standard normal prior, initial precision 1e6,
means and precisions re-initialised (PyTorch's initialisation) before every task; single-head
2x100 on permuted MNIST, multi-head 1x200 on split MNIST. ``--schedule short`` keeps every
setting but uses 1 Monte Carlo sample per training step (the number of steps, and so the
precision's moving average, is unchanged), which fits a 2-core CPU. Output as
benchmarks/vcl_paper.py: ``results.json`` and ``accuracy.png`` in ``--output``. Every ``pyro-cl
run`` option is accepted too, and wins over the thesis's settings.
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.runner import run_benchmark

#: The thesis's net and schedule for each benchmark.
THESIS_SETTINGS = {
    "permuted-mnist": {"hidden_sizes": [100, 100], "training": {"epochs": 100, "batch_size": 256}},
    "split-mnist": {"hidden_sizes": [200], "training": {"epochs": 100, "batch_size": 256}},
}
#: Monte Carlo samples per training step of each schedule.
SAMPLES = {"paper": 10, "short": 1}


def build_run(argv: list[str] | None = None) -> BenchmarkRun:
    """The run that the command line ``argv`` describes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=sorted(SAMPLES), default="paper")
    args = parse_script_arguments(parser, argv, sorted(THESIS_SETTINGS))
    settings = THESIS_SETTINGS[args.benchmark]
    return benchmark_run_from_args(
        args,
        methods=["vogn"],
        seeds=[0, 1, 2],
        output=f"results/vogn_paper/{args.benchmark}-{args.schedule}",
        hidden_sizes=settings["hidden_sizes"],
        training={**settings["training"], "num_predictive_samples": 100},
        fitter_options={"learning_rate": 1e-3, "beta": 1e-3, "num_samples": SAMPLES[args.schedule]},
    )


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        run_benchmark(build_run(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
