"""H-IBP supplement (sections 5-6): an IBNN on split and permuted MNIST beside VCL nets of widths
10, 50, 100 and 400 (figures 5, 7 and 8; table 1).

    python benchmarks/ibp_paper.py --benchmark split-mnist-ibp --schedule paper
    python benchmarks/ibp_paper.py --benchmark permuted-mnist-ibp --schedule short --widths 10 100

Every run uses the benchmark's preset (``pyro-cl run --benchmark ...``): one hidden layer,
K = 100, sticks Beta(5, 1), λ1 = λ2 (0.7 on split, 1 on permuted MNIST), ML initialisation for
100 epochs with log σ² = -6, Adam 1e-3 decayed by 0.87 every 1000 steps, 10 Monte Carlo samples
per step; split MNIST has the N(0, 0.7) weight prior and 600 epochs (720 on task 1) with
whole-task batches, permuted MNIST 200 epochs with batches of 256. The VCL baselines are plain
Bayesian MLPs with the same schedule and weight prior (``--net mlp --hidden W``).
``--schedule short`` shortens only the epochs (split: 120/144, permuted: 20), which fits a
2-core CPU. Writes ``results.json``/``accuracy.png`` per model, ``accuracy_all.png`` (all models,
figures 5/8) and ``active_units.png`` (figure 7) to ``--output``. Every ``pyro-cl run``
option is accepted too (it applies to every model).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.plotting import plot_accuracy, plot_active_units
from pyro_cl.app.runner import run_benchmark

#: Epochs of the short schedules (the paper's are the presets').
SHORT = {
    "split-mnist-ibp": {"epochs": 120, "first_epochs": 144},
    "permuted-mnist-ibp": {"epochs": 20},
}


def build_runs(argv: list[str] | None = None) -> dict[str, BenchmarkRun]:
    """One run per model, by name: the IBP net (``--net ibnn`` or ``hibnn``) and a VCL MLP per
    width in ``--widths``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=["paper", "short"], default="paper")
    parser.add_argument("--widths", type=int, nargs="*", default=[10, 50, 100, 400])
    args = parse_script_arguments(parser, argv, sorted(SHORT))
    if args.net not in (None, "ibnn", "hibnn"):
        parser.error("--net: choose ibnn or hibnn (the VCL baselines are --widths)")
    output = Path(args.output or f"results/ibp_paper/{args.benchmark}-{args.schedule}")
    run = benchmark_run_from_args(
        args,
        methods=["vcl"],
        seeds=[0],
        net="ibnn",
        training=SHORT[args.benchmark] if args.schedule == "short" else {},
    )
    runs = {run.net: dataclasses.replace(run, output=output / run.net)}
    for width in args.widths:
        name = f"vcl-h{width}"
        runs[name] = dataclasses.replace(run, net="mlp", hidden_sizes=[width], output=output / name)
    return runs


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        return run_all(build_runs(argv))


def run_all(runs: dict) -> int:
    """Run every model's (or size's) run; write the combined files."""
    output = Path(next(iter(runs.values())).output).parent
    results = []
    for name, run in runs.items():
        for result in run_benchmark(run):
            if name.startswith("vcl-h"):
                result.method = name
            results.append(result)
        plot_accuracy(results, output / "accuracy_all.png")
    ibp_runs = [r for r in results if r.details.get("active_units")]
    if ibp_runs:
        plot_active_units(ibp_runs[0], output / "active_units.png")
    print(f"wrote {output / 'accuracy_all.png'} and {output / 'active_units.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
