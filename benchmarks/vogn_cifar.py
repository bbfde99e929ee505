"""VOGN thesis section 4.5: split CIFAR-10/100 with the conv net of Zenke et al. (2017).

    python benchmarks/vogn_cifar.py --data-root data --seeds 0 1 2          # on a CUDA machine
    python benchmarks/vogn_cifar.py --benchmark split-cifar10 --data-root data   # CIFAR-10 only

Thesis settings: multi-head, batch 256, 60 epochs on task 1 (CIFAR-10) and 600 on each CIFAR-100
task, α = 0.001, β = 1e-4, momentum 0.9, prior N(0, 1/120), initial precision 4e3 on the first
task and 4e4 on later ones with the means kept between tasks, 10 Monte Carlo samples for
training and 100 for testing. Runs on CUDA when a GPU is present (``--device`` overrides). The
data folder needs ``cifar-10-batches-bin`` and ``cifar-100-binary`` (or the npz files, see
:mod:`pyro_cl.data.cifar`); ``--download`` fetches them. ``split-cifar10`` (5 x 2 CIFAR-10
classes, 60 epochs per task) runs where CIFAR-100 is missing. Its tasks have 10,000 images, not
CIFAR-10's 50,000: the thesis's prior precision 120 then pulls the means towards zero five times
harder per unit of step (λ_p/N, see ``vogn_cifar_diagnosis.py``); ``--prior-scale 0.204``
(precision 24) keeps the thesis's λ_p/N. Every ``pyro-cl run``
option is accepted too and wins over the thesis's settings (e.g.
``--epochs 60 --first-epochs 6`` for a shorter schedule).
"""

from __future__ import annotations

import argparse
import math
import sys

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.runner import run_benchmark

#: The thesis's training settings (section 4.5).
THESIS_TRAINING = {
    "num_predictive_samples": 100,
    "init_log_variance": -math.log(4e3),
    "later_init_log_variance": -math.log(4e4),
    "init_means": "fresh",
    "between_tasks": "reset_variance",
    "ml_init_epochs": 0,
}
#: The thesis's VOGN hyperparameters.
THESIS_FITTER = {"learning_rate": 1e-3, "beta": 1e-4, "momentum": 0.9, "num_samples": 10}


def build_run(argv: list[str] | None = None) -> BenchmarkRun:
    """The run that the command line ``argv`` describes (default benchmark: split-cifar)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = parse_script_arguments(parser, argv, ["split-cifar", "split-cifar10"], "split-cifar")
    return benchmark_run_from_args(
        args,
        methods=["vogn"],
        seeds=[0],
        output=f"results/vogn_cifar/{args.benchmark}",
        training=THESIS_TRAINING,
        fitter_options=THESIS_FITTER,
    )


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        run_benchmark(build_run(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
