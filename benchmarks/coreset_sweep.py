"""VCL paper figure 3: VCL with random coresets of several sizes on permuted MNIST.

    python benchmarks/coreset_sweep.py --sizes 200 1000 5000 --seeds 0

One ``pyro-cl run`` per size (methods ``vcl-random`` and ``coreset-only``), written to
``--output/size-<K>``; then ``sweep.json`` and ``sweep.png`` (ACC after 10 tasks against the
coreset size for each method). Extra arguments go to
``pyro-cl run`` unchanged (e.g. ``--epochs 5 --refit-epochs 5`` for the short schedule).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pyro_cl.cli import run_benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 5000])
    parser.add_argument("--seeds", nargs="+", default=["0"])
    parser.add_argument("--methods", default="vcl-random,coreset-only")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output", type=Path, default=Path("results/coreset_sweep"))
    args, extra = parser.parse_known_args(argv)
    sweep = {}
    for size in args.sizes:
        folder = args.output / f"size-{size}"
        run_benchmark(
            "permuted-mnist",
            args.methods,
            args.data_root,
            args.seeds,
            folder,
            "--coreset-size",
            str(size),
            *extra,
        )
        sweep[size] = json.loads((folder / "results.json").read_text())["summary"]
    (args.output / "sweep.json").write_text(json.dumps(sweep, indent=2))
    _plot(sweep, args.output / "sweep.png")
    print(f"wrote {args.output / 'sweep.json'} and {args.output / 'sweep.png'}")
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
