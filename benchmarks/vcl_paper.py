"""VCL paper (Nguyen et al., 2018) section 6.1: VCL with and without coresets, and the coreset-only
baseline, on permuted MNIST, split MNIST and split notMNIST.

    python benchmarks/vcl_paper.py --benchmark split-notmnist --seeds 0 1 2
    python benchmarks/vcl_paper.py --benchmark permuted-mnist --schedule short

The default ``--schedule paper`` uses the paper's settings (appendices A-C); ``short`` is the
shortened schedule that fits a 2-core CPU, reported as such in benchmarks/RESULTS.md. Each run
writes ``results.json`` (accuracy matrices per seed, ACC/BWT, settings, wall times, and the mean
± std summary) and ``accuracy.png`` (accuracy per task after each step, as the paper's figures
2 and 4) to ``--output`` (default ``results/vcl_paper/<benchmark>-<schedule>``). Extra
arguments go to ``pyro-cl run`` unchanged.
"""

from __future__ import annotations

import argparse
import sys

from pyro_cl.cli import run_benchmark

METHODS = "vcl,vcl-random,vcl-kcenter,coreset-only"

#: Changes to the paper's settings (kept by the presets) that make a run fit a 2-core CPU.
SHORT_SCHEDULES = {
    # 5 of 100 epochs per task; the coreset refit keeps the paper's 100 epochs (it is cheap).
    "permuted-mnist": ["--epochs", "5", "--refit-epochs", "100"],
    # The paper's 120 whole-task steps, but 1 Monte Carlo sample per step instead of 10.
    "split-mnist": ["--particles", "1"],
    # Small enough to run at the paper's settings.
    "split-notmnist": [],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=sorted(SHORT_SCHEDULES), required=True)
    parser.add_argument("--schedule", choices=["paper", "short"], default="paper")
    parser.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args, extra = parser.parse_known_args(argv)
    output = args.output or f"results/vcl_paper/{args.benchmark}-{args.schedule}"
    schedule = SHORT_SCHEDULES[args.benchmark] if args.schedule == "short" else []
    return run_benchmark(
        args.benchmark, args.methods, args.data_root, args.seeds, output, *schedule, *extra
    )


if __name__ == "__main__":
    sys.exit(main())
