"""The VCL paper's generative experiments (Nguyen et al. 2018, section 6.2, figures 6 and 7):
VCL, naive online learning, and EWC, SI and LP swept over λ ∈ {1, 10, 100}, on MNIST digits or
notMNIST letters one class at a time.

    python benchmarks/generative_paper.py --benchmark generative-mnist --data-root ../shared/data
    python benchmarks/generative_paper.py --benchmark generative-notmnist --schedule short

It runs ``pyro-cl run`` once for VCL and fine-tuning (the paper's "naive" online VAE) and once
per swept method and λ, each into its own folder under ``--output`` (default
``results/generative/<benchmark>-<schedule>``); a folder whose ``results.json`` holds a run is
skipped, so an interrupted sweep resumes. Then it gathers every ``results.json`` below the output
folder and writes ``summary.md`` (after the last task: the mean test-LL and classifier
uncertainty per run, the best λ per baseline by test-LL) and ``metrics.png`` (figure 7 with VCL,
naive learning and each baseline at its best λ, as the paper reports them).

Schedules: ``paper`` — the presets (appendix E: Adam 1e-4, batch 50, 200 epochs on MNIST, 400 on
notMNIST and for SI on MNIST, 5,000 importance samples on every test image); ``short`` — what
fits on 2 CPU cores (Adam 1e-3, 5 epochs a digit on MNIST, 40 a letter on notMNIST, 200
importance samples on 100 test images a task). Every ``pyro-cl run`` option is accepted too and
wins over the schedule.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np

from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.generative_plots import plot_generative_metrics
from pyro_cl.app.result import RunResult, method_means
from pyro_cl.app.runner import run_benchmark

#: λ of the paper's generative sweeps (section 6.2).
STRENGTHS = (1.0, 10.0, 100.0)
SWEPT = ("ewc", "si", "lp")
BENCHMARKS = ("generative-digits", "generative-mnist", "generative-notmnist")
SHORT_EVALUATION = {"test_samples": 200, "test_points": 100}
SCHEDULES = {
    "paper": {
        "generative-digits": {},
        "generative-mnist": {},
        "generative-notmnist": {},
    },
    "short": {
        "generative-digits": {"epochs": 30},
        "generative-mnist": {"epochs": 5, "learning_rate": 1e-3},
        "generative-notmnist": {"epochs": 40, "learning_rate": 1e-3},
    },
}
#: Appendix E: "For SI we optimize for 400 epochs on MNIST".
SI_PAPER_EPOCHS = {"generative-mnist": 400}


def build_runs(argv: list[str] | None = None):
    """``(benchmark, root, [(folder name, BenchmarkRun)])`` for the sweep ``argv`` describes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="paper")
    parser.add_argument("--sweep", default="ewc,si,lp", help="comma-separated: ewc, si, lp")
    parser.add_argument("--strengths", type=float, nargs="+", help="λ values (default 1 10 100)")
    args = parse_script_arguments(parser, argv, list(BENCHMARKS))
    swept = [m for m in args.sweep.split(",") if m]
    unknown = sorted(set(swept) - set(SWEPT))
    if unknown:
        raise ValueError(f"--sweep: unknown methods {unknown}; choose from {list(SWEPT)}")
    root = Path(args.output or f"results/generative/{args.benchmark}-{args.schedule}")
    training = SCHEDULES[args.schedule][args.benchmark]
    evaluation = SHORT_EVALUATION if args.schedule == "short" else {}
    plain = benchmark_run_from_args(
        args, methods=["vcl", "finetune"], seeds=[0], training=training, evaluation=evaluation
    )
    runs = [("vcl-finetune", dataclasses.replace(plain, output=root / "vcl-finetune"))]
    for method in swept:
        method_training = dict(training)
        if method == "si" and args.schedule == "paper" and args.benchmark in SI_PAPER_EPOCHS:
            method_training.setdefault("epochs", SI_PAPER_EPOCHS[args.benchmark])
        for strength in args.strengths or STRENGTHS:
            options = {"strength": strength}
            extra = {"fitter_options": options} if method == "lp" else {"penalty_options": options}
            run = benchmark_run_from_args(
                args,
                methods=[method],
                seeds=[0],
                training=method_training,
                evaluation=evaluation,
                **extra,
            )
            folder = f"{method}-{strength:g}"
            runs.append((folder, dataclasses.replace(run, output=root / folder)))
    return args.benchmark, root, runs


def gather(root: Path) -> list[RunResult]:
    """Every run in the ``results.json`` of ``root``'s folders."""
    results = []
    for path in sorted(root.glob("*/results.json")):
        for run in json.loads(path.read_text())["runs"]:
            results.append(RunResult.from_json(run))
    return results


def _method_and_strength(label: str) -> tuple[str, float | None]:
    """``"ewc λ=10"`` → ``("ewc", 10.0)``; a swept method's label without λ ran strength 1."""
    match = re.fullmatch(r"(\S+) λ=(\S+)", label)
    if match:
        return match.group(1), float(match.group(2))
    return label, (1.0 if label in SWEPT else None)


def summarise(root: Path, results: list[RunResult]) -> str:
    """summary.md and metrics.png (VCL, naive, and each baseline at its best λ)."""
    rows = {}
    for result in results:
        rows.setdefault(result.method, []).append(result)
    lines = [
        "| method | λ | test-LL (nats) | classifier uncertainty | best λ | runs | time (s) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    best: dict[str, tuple[float, str]] = {}
    for label, runs in rows.items():
        method, _ = _method_and_strength(label)
        score = float(np.mean([r.summary()["test_ll"] for r in runs]))
        if method not in best or score > best[method][0]:
            best[method] = (score, label)
    for label, runs in rows.items():
        method, strength = _method_and_strength(label)
        test_ll = [r.summary()["test_ll"] for r in runs]
        uncertainty = [r.summary()["uncertainty"] for r in runs]
        is_best = method in SWEPT and best[method][1] == label
        lines.append(
            f"| {method} | {'' if strength is None else f'{strength:g}'} | "
            f"{np.mean(test_ll):.2f} | {np.mean(uncertainty):.3f} | {'best' if is_best else ''} | "
            f"{len(runs)} | {np.mean([r.wall_time_s for r in runs]):.0f} |"
        )
    chosen = [r for r in results if r.method == best[_method_and_strength(r.method)[0]][1]]
    if chosen:
        plot_generative_metrics(method_means(chosen), root / "metrics.png")
    table = "\n".join(lines) + "\n"
    (root / "summary.md").write_text(table)
    return table


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        benchmark, root, runs = build_runs(argv)
        for folder, run in runs:
            if (root / folder / "results.json").exists():
                print(f"{folder}: done, skipped")
                continue
            run_benchmark(run)
        print(summarise(root, gather(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
