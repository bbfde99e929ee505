"""The VCL paper's baselines (Nguyen et al. 2018, section 5, appendix figures 8-14): EWC, SI and
diagonal Laplace propagation swept over their strength λ on permuted MNIST, split MNIST and split
notMNIST.

    python benchmarks/baselines_paper.py --benchmark split-mnist --data-root ../shared/data
    python benchmarks/baselines_paper.py --benchmark permuted-mnist --schedule short
    python benchmarks/baselines_paper.py --benchmark split-mnist --paper-lambda --seeds 0 1 2

For every method and λ it runs the benchmark (``pyro-cl run`` with ``--penalty-strength λ``, or
``--fitter-strength λ`` for LP) and writes, under ``--output`` (default
``results/baselines/<benchmark>-<schedule>``), one folder per run (results.json with the accuracy
matrices, accuracy.png), ``sweep.json`` and ``sweep.md`` (ACC after the last task per λ, the best
λ per method) and ``sweep.png`` (ACC against λ, one line per method, the paper's numbers dashed).

Schedules: ``paper`` — permuted MNIST batch 256 and 20 epochs per task (the paper's appendix),
split MNIST / notMNIST whole-task batches and 120 epochs (as VCL); ``short`` — what fits on
2 CPU cores (5 epochs per task for permuted MNIST, 20 for the split streams). Every
``pyro-cl run`` option is accepted too and wins over the schedule.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.plotting import plot_strength_sweep
from pyro_cl.app.runner import run_benchmark

#: λ values of the paper's appendix sweeps (LP's are not listed there; a decade grid around 1).
STRENGTHS = {
    "ewc": (1.0, 10.0, 100.0, 1000.0, 10000.0),
    "si": (0.01, 0.1, 0.5, 1.0, 2.0),
    "lp": (0.01, 0.1, 1.0, 10.0, 100.0),
}
#: The λ the VCL paper's appendix chose for each baseline (appendix D: permuted MNIST SI 0.5,
#: EWC 10², LP 0.1; split MNIST λ = 1 for all three, multi-head; split notMNIST EWC 10⁴, LP 1,
#: SI 0.1). Our LP's ``strength`` weighs the new curvature only; at λ = 1 that is exactly the
#: paper's LP (both are Laplace's approximation), so the split streams run the paper's LP as is.
PAPER_LAMBDA = {
    "permuted-mnist": {"ewc": 100.0, "si": 0.5, "lp": 0.1},
    "split-mnist": {"ewc": 1.0, "si": 1.0, "lp": 1.0},
    "split-notmnist": {"ewc": 10000.0, "si": 0.1, "lp": 1.0},
}
#: The paper's LP: Hessians approximated by the Fisher information of 200 points (appendix D).
PAPER_LP = {"curvature": "fisher", "hessian_samples": 200}
#: ACC after the last task in the VCL paper (figure 2/4 and text); notMNIST on the full set.
PAPER_ACC = {
    "permuted-mnist": {"ewc": 84.0, "si": 86.0, "lp": 82.0},
    "split-mnist": {"ewc": 63.1, "si": 98.9, "lp": 61.2},
    "split-notmnist": {"ewc": 71.0, "si": 94.0, "lp": 63.0},
}
SCHEDULES = {
    "paper": {
        "permuted-mnist": {"epochs": 20, "batch_size": 256, "ml_init_epochs": 0},
        "split-mnist": {"epochs": 120, "batch_size": None, "ml_init_epochs": 0},
        "split-notmnist": {"epochs": 120, "batch_size": None, "ml_init_epochs": 0},
    },
    "short": {
        "permuted-mnist": {"epochs": 5, "batch_size": 256, "ml_init_epochs": 0},
        "split-mnist": {"epochs": 20, "batch_size": None, "ml_init_epochs": 0},
        "split-notmnist": {"epochs": 20, "batch_size": None, "ml_init_epochs": 0},
    },
}


def build_runs(argv: list[str] | None = None):
    """``[(method, λ, BenchmarkRun)]`` for the sweep ``argv`` describes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="paper")
    parser.add_argument(
        "--sweep", default="ewc,si,lp", help="comma-separated methods to sweep (ewc, si, lp)"
    )
    parser.add_argument("--strengths", type=float, nargs="+", help="λ values for every method")
    parser.add_argument(
        "--paper-lambda",
        action="store_true",
        help="run each method at the λ the paper's appendix chose only (LP with its Fisher "
        "curvature of 200 points); with --seeds for several seeds",
    )
    args = parse_script_arguments(parser, argv, sorted(PAPER_ACC))
    methods = [m for m in args.sweep.split(",") if m]
    unknown = sorted(set(methods) - set(STRENGTHS))
    if unknown:
        raise ValueError(f"--sweep: unknown methods {unknown}; choose from {sorted(STRENGTHS)}")
    root = Path(args.output or f"results/baselines/{args.benchmark}-{args.schedule}")
    runs = []
    for method in methods:
        if args.paper_lambda:
            strengths = [PAPER_LAMBDA[args.benchmark][method]]
        else:
            strengths = args.strengths or STRENGTHS[method]
        for strength in strengths:
            options = {"strength": strength}
            if method == "lp" and args.paper_lambda:
                options.update(PAPER_LP)
            extra = {"fitter_options": options} if method == "lp" else {"penalty_options": options}
            run = benchmark_run_from_args(
                args,
                methods=[method],
                seeds=args.seeds or [0],
                training=SCHEDULES[args.schedule][args.benchmark],
                **extra,
            )
            runs.append(
                (method, strength, dataclasses.replace(run, output=root / f"{method}-{strength:g}"))
            )
    return args.benchmark, root, runs


def summarise(benchmark: str, root: Path, done: list[tuple[str, float, list]]) -> str:
    """sweep.json, sweep.md and sweep.png from ``[(method, λ, results)]``."""
    rows = {}
    for method, strength, results in done:
        accs = [100 * r.acc for r in results]
        rows.setdefault(method, []).append((strength, float(np.mean(accs)), float(np.std(accs))))
    (root / "sweep.json").write_text(json.dumps(rows, indent=1))
    lines = ["| method | λ | ACC (%) | best | paper ACC (%) |", "| --- | ---: | --- | --- | ---: |"]
    for method, points in rows.items():
        best = max(points, key=lambda p: p[1])
        paper = PAPER_ACC[benchmark].get(method)
        for point in points:
            strength, mean, std = point
            lines.append(
                f"| {method} | {strength:g} | {mean:.1f} ± {std:.1f} | "
                f"{'best' if point == best else ''} | {paper} |"
            )
    plot_strength_sweep(rows, PAPER_ACC[benchmark], root / "sweep.png", benchmark)
    table = "\n".join(lines) + "\n"
    (root / "sweep.md").write_text(table)
    return table


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        benchmark, root, runs = build_runs(argv)
        done = [(method, strength, run_benchmark(run)) for method, strength, run in runs]
        print(summarise(benchmark, root, done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
