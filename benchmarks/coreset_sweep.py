"""VCL paper figure 3: VCL with random coresets of several sizes on permuted MNIST.

    python benchmarks/coreset_sweep.py --sizes 200 1000 5000 --seeds 0

One run per size (methods ``vcl-random`` and ``coreset-only``), written to
``--output/size-<K>``; then ``sweep.json`` and ``sweep.png`` (ACC after 10 tasks against the
coreset size for each method). Every ``pyro-cl run`` option is accepted too (e.g.
``--epochs 5 --refit-epochs 5`` for the short schedule).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import benchmark_run_from_args, command_line_errors, parse_script_arguments
from pyro_cl.app.runner import run_benchmark


def build_runs(argv: list[str] | None = None) -> dict[int, BenchmarkRun]:
    """One run per coreset size in ``--sizes``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 5000])
    args = parse_script_arguments(parser, argv, ["permuted-mnist"], "permuted-mnist")
    run = benchmark_run_from_args(
        args, methods=["vcl-random", "coreset-only"], seeds=[0], output="results/coreset_sweep"
    )
    return {
        size: dataclasses.replace(run, coreset_size=size, output=Path(run.output) / f"size-{size}")
        for size in args.sizes
    }


def main(argv: list[str] | None = None) -> int:
    with command_line_errors(sys.argv[0], "--debug" in (sys.argv if argv is None else argv)):
        return run_all(build_runs(argv))


def run_all(runs: dict) -> int:
    """Run every size's run; write the sweep's files."""
    output = Path(next(iter(runs.values())).output).parent
    sweep = {}
    for size, run in runs.items():
        run_benchmark(run)
        sweep[size] = json.loads((Path(run.output) / "results.json").read_text())["summary"]
    (output / "sweep.json").write_text(json.dumps(sweep, indent=2))
    _plot(sweep, output / "sweep.png")
    print(f"wrote {output / 'sweep.json'} and {output / 'sweep.png'}")
    return 0


def _plot(sweep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(sweep)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for method in next(iter(sweep.values())):
        means = [100 * sweep[s][method]["ACC_mean"] for s in sizes]
        stds = [100 * sweep[s][method]["ACC_std"] for s in sizes]
        ax.errorbar(sizes, means, yerr=stds, marker="o", capsize=3, label=method)
    ax.set_xscale("log")
    ax.set_xlabel("coreset points per task")
    ax.set_ylabel("average accuracy after all tasks (%)")
    ax.set_title("permuted MNIST: coreset size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
