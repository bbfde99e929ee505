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
figures 5/8) and ``active_units.png`` (figure 7) to ``--output``. Extra arguments go to every
``pyro-cl run`` unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyro_cl.cli import build_parser, run
from pyro_cl.plotting import plot_accuracy, plot_active_units

#: Epoch options of the short schedules (the paper's are the presets').
SHORT = {
    "split-mnist-ibp": ["--epochs", "120", "--first-epochs", "144"],
    "permuted-mnist-ibp": ["--epochs", "20"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=sorted(SHORT), required=True)
    parser.add_argument("--schedule", choices=["paper", "short"], default="paper")
    parser.add_argument("--widths", type=int, nargs="*", default=[10, 50, 100, 400])
    parser.add_argument("--net", choices=["ibnn", "hibnn"], default="ibnn")
    parser.add_argument("--seeds", nargs="+", default=["0"])
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args, extra = parser.parse_known_args(argv)
    output = Path(args.output or f"results/ibp_paper/{args.benchmark}-{args.schedule}")
    schedule = SHORT[args.benchmark] if args.schedule == "short" else []
    common = ["--benchmark", args.benchmark, "--methods", "vcl", "--data-root", args.data_root]
    common += ["--seeds", *args.seeds, *schedule]
    models = {args.net: ["--net", args.net]}
    for width in args.widths:
        models[f"vcl-h{width}"] = ["--net", "mlp", "--hidden", str(width)]
    results = []
    for name, options in models.items():
        command = ["run", *common, *options, "--output", str(output / name), *extra]
        print("pyro-cl " + " ".join(command), flush=True)
        for result in run(build_parser().parse_args(command)):
            if name.startswith("vcl-h"):
                result.method = name
            results.append(result)
        if results:
            plot_accuracy(results, output / "accuracy_all.png")
    ibp_runs = [r for r in results if r.active_units]
    if ibp_runs:
        plot_active_units(ibp_runs[0], output / "active_units.png")
    print(f"wrote {output / 'accuracy_all.png'} and {output / 'active_units.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
