"""Does the weather ordering move as each time step's fit gets longer?

Reads sweep folders of ``drift_paper.py --part sweep`` run at several ``--iterations`` (Adam
steps per later time step) and draws the one-step-ahead LML (last 50% of the steps) against the
steps per time step, one line per method, with the table beside it::

    for it in 100 300 1000; do
        OMP_NUM_THREADS=1 python benchmarks/drift_paper.py --part sweep --stream weather \\
            --seeds 0 --methods wiener ou forgetting --values 0.01 --iterations $it \\
            --data-root ../shared/data --output results/drift/steps/it$it --no-progress
    done
    # docs/lab/drift.md's 3000-step column: the same with --methods ou --iterations 3000 (online VB and OU)
    python benchmarks/drift_schedule.py results/drift/steps/it100 results/drift/steps/it300 \\
        results/drift/steps/it1000 results/drift/steps/it3000 --output results/drift/steps
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pyro_cl.app.result import RunResult, last_fraction_mean  # noqa: E402


def _label(result: RunResult) -> str:
    transition = result.details["transition"]
    if transition.get("name") in (None, "identity"):
        return "online VB"
    value = next(v for k, v in transition.items() if k not in ("kind", "name", "time_constant"))
    return f"{transition['name']} {value:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="sweep folders, one per schedule")
    parser.add_argument("--output", type=Path, default=Path("results/drift/steps"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    lines: dict[str, dict[int, float]] = {}
    for folder in args.folders:
        payload = json.loads((folder / "results.json").read_text())
        steps = int(json.loads((folder / "schedule.json").read_text())["iterations"])
        for raw in payload["results"]:
            result = RunResult.from_json(raw)
            lml = last_fraction_mean(result.series["one_step_ahead"], 0.5)
            lines.setdefault(_label(result), {})[steps] = lml
    args.output.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    for label, points in lines.items():
        xs = sorted(points)
        axis.plot(xs, [points[x] for x in xs], marker="o", label=label)
    axis.set_xscale("log")
    axis.set_xlabel("Adam steps per time step")
    axis.set_ylabel("one-step-ahead LML (last 50%)")
    axis.set_title("weather: does a longer fit help adaptation?")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output / "lml_vs_steps.png", dpi=150)
    schedules = sorted({s for points in lines.values() for s in points})
    table = ["| method | " + " | ".join(f"{s} steps" for s in schedules) + " |"]
    table.append("| --- |" + " ---: |" * len(schedules))
    for label, points in lines.items():
        cells = " | ".join(f"{points[s]:.4f}" if s in points else "-" for s in schedules)
        table.append(f"| {label} | {cells} |")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
