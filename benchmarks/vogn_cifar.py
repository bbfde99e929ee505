"""VOGN thesis section 4.5: split CIFAR-10/100 with the conv net of Zenke et al. (2017).

    python benchmarks/vogn_cifar.py --data-root data --seeds 0 1 2          # on a CUDA machine
    python benchmarks/vogn_cifar.py --benchmark split-cifar10 --data-root data   # CIFAR-10 only

Thesis settings: multi-head, batch 256, 60 epochs on task 1 (CIFAR-10) and 600 on each CIFAR-100
task, α = 0.001, β = 1e-4, momentum 0.9, prior N(0, 1/120), initial precision 4e3 on the first
task and 4e4 on later ones with the means kept between tasks, 10 Monte Carlo samples for
training and 100 for testing. Runs on CUDA when a GPU is present (``--device`` overrides). The
data folder needs ``cifar-10-batches-bin`` and ``cifar-100-binary`` (or the npz files, see
:mod:`pyro_cl.data.cifar`); ``--download`` fetches them. ``split-cifar10`` (5 x 2 CIFAR-10
classes, 60 epochs per task) runs where CIFAR-100 is missing. Extra arguments go to
``pyro-cl run`` unchanged (e.g. ``--epochs 60 --first-epochs 6`` for a shorter schedule).
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.cli import run_benchmark

THESIS_SETTINGS = [
    "--update-lr", "1e-3",
    "--update-beta", "1e-4",
    "--update-momentum", "0.9",
    "--update-samples", "10",
    "--predictive-samples", "100",
    "--init-precision", "4e3",
    "--later-init-precision", "4e4",
    "--init-means", "fresh",
    "--between-tasks", "reset_variance",
    "--ml-init-epochs", "0",
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--benchmark", choices=["split-cifar", "split-cifar10"], default="split-cifar"
    )
    parser.add_argument("--seeds", nargs="+", default=["0"])
    parser.add_argument("--methods", default="vogn")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args, extra = parser.parse_known_args(argv)
    output = args.output or f"results/vogn_cifar/{args.benchmark}"
    return run_benchmark(
        args.benchmark, args.methods, args.data_root, args.seeds, output, *THESIS_SETTINGS, *extra
    )


if __name__ == "__main__":
    sys.exit(main())
