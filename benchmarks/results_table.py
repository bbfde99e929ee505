"""Print a Markdown table (ACC mean ± std, BWT, each task's accuracy right after it was learnt,
the scratch accuracies' mean where the run measured FWT, runs, wall time) from ``results.json``
files.

    python benchmarks/results_table.py results/vcl_paper/split-notmnist-paper results/...

Runs of the same method in several folders (e.g. seeds run separately) are pooled.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(folders: list[str]) -> None:
    runs: dict[tuple[str, str], list[dict]] = {}
    for folder in folders:
        report = json.loads((Path(folder) / "results.json").read_text())
        for run in report["runs"]:
            runs.setdefault((run["stream"], run["method"]), []).append(run)
    print(
        "| stream | method | ACC (mean ± std) | BWT (mean) | just learnt (mean) "
        "| from scratch (mean) | seeds | wall time per run |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for (stream, method), group in runs.items():
        # a run's summary (results.json before the one result type: its top level)
        summaries = [r.get("summary", r) for r in group]
        acc = 100 * np.array([s["ACC"] for s in summaries])
        bwt = 100 * np.array([s["BWT"] for s in summaries])
        seeds = ",".join(str(r["settings"]["seed"]) for r in group)
        wall = np.mean([r["wall_time_s"] for r in group])
        learnt = _mean([np.mean(np.diag(r["matrices"]["accuracy"])) for r in group if _square(r)])
        scratch = _mean([np.mean(r["details"]["scratch_accuracy"]) for r in group
                         if "scratch_accuracy" in r.get("details", {})])  # fmt: skip
        print(
            f"| {stream} | {method} | {acc.mean():.1f} ± {acc.std():.1f}% | {bwt.mean():+.1f} "
            f"| {learnt} | {scratch} | {seeds} | {wall / 60:.1f} min |"
        )


def _square(run: dict) -> bool:
    matrix = run.get("matrices", {}).get("accuracy")
    return bool(matrix) and len(matrix) == len(matrix[0])


def _mean(values: list[float]) -> str:
    """A percentage, or a dash where no run has the value."""
    return f"{100 * np.mean(values):.1f}%" if values else "–"


if __name__ == "__main__":
    main(sys.argv[1:])
