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
benchmarks/vcl_paper.py: ``results.json`` and ``accuracy.png`` in ``--output``. Extra arguments
go to ``pyro-cl run`` unchanged.
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.cli import run_benchmark

#: ``pyro-cl run`` arguments that give the thesis's settings for each benchmark.
THESIS_SETTINGS = {
    "permuted-mnist": ["--hidden", "100", "100", "--epochs", "100", "--batch-size", "256"],
    "split-mnist": ["--hidden", "200", "--epochs", "100", "--batch-size", "256"],
}
COMMON = [
    "--update-lr", "1e-3",
    "--update-beta", "1e-3",
    "--predictive-samples", "100",
]  # fmt: skip
SAMPLES = {"paper": ["--update-samples", "10"], "short": ["--update-samples", "1"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=sorted(THESIS_SETTINGS), required=True)
    parser.add_argument("--schedule", choices=sorted(SAMPLES), default="paper")
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    parser.add_argument("--methods", default="vogn")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args, extra = parser.parse_known_args(argv)
    output = args.output or f"results/vogn_paper/{args.benchmark}-{args.schedule}"
    settings = [*THESIS_SETTINGS[args.benchmark], *COMMON, *SAMPLES[args.schedule]]
    return run_benchmark(
        args.benchmark, args.methods, args.data_root, args.seeds, output, *settings, *extra
    )


if __name__ == "__main__":
    sys.exit(main())
