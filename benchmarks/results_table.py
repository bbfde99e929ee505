"""Print a Markdown table (ACC mean ± std, BWT, runs, wall time) from ``results.json`` files.

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
    print("| stream | method | ACC (mean ± std) | BWT (mean) | seeds | wall time per run |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    for (stream, method), group in runs.items():
        # a run's summary (results.json before the one result type: its top level)
        summaries = [r.get("summary", r) for r in group]
        acc = 100 * np.array([s["ACC"] for s in summaries])
        bwt = 100 * np.array([s["BWT"] for s in summaries])
        seeds = ",".join(str(r["settings"]["seed"]) for r in group)
        wall = np.mean([r["wall_time_s"] for r in group])
        print(
            f"| {stream} | {method} | {acc.mean():.1f} ± {acc.std():.1f}% | {bwt.mean():+.1f} "
            f"| {seeds} | {wall / 60:.1f} min |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
