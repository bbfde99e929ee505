"""Print a Markdown table (ACC mean ± std, BWT, each task's accuracy right after it was learnt,
the scratch accuracies' mean where the run measured FWT, runs, wall time) from ``results.json``
files.

    python benchmarks/results_table.py results/vcl_paper/split-notmnist-paper results/...
    python benchmarks/results_table.py FOLDERS... --plot final.png   # and the VOGN thesis's fig. 5

Runs of the same method in several folders (e.g. seeds run separately) are pooled; where runs of
a method differ in a setting other than the seed (EWC's λ, the epochs), each setting is a row of
its own, named by the settings that differ (``ewc (strength=100.0)``). ``--plot``
also draws each task's accuracy after the last task, a bar per method (mean ± std over its
runs) and a from-scratch bar where runs measured FWT (``plot_final_accuracies``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pyro_cl.app.plotting import plot_final_accuracies
from pyro_cl.app.result import RunResult
from pyro_cl.metrics import sample_sd


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="folders holding a results.json")
    parser.add_argument("--plot", type=Path, help="also write the final accuracies' bar chart")
    args = parser.parse_args(argv)
    every = [run for folder in args.folders
             for run in json.loads((Path(folder) / "results.json").read_text())["runs"]]  # fmt: skip
    runs: dict[tuple[str, str], list[dict]] = {}
    for run, label in zip(every, _labels(every), strict=True):
        runs.setdefault((run["stream"], label), []).append({**run, "method": label})
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
            f"| {stream} | {method} | {acc.mean():.1f} ± {sample_sd(acc):.1f}% | {bwt.mean():+.1f} "
            f"| {learnt} | {scratch} | {seeds} | {wall / 60:.1f} min |"
        )
    if args.plot is not None:
        results = [RunResult.from_json(run) for group in runs.values() for run in group]
        print(f"wrote {plot_final_accuracies(results, args.plot)}")


#: Settings that do not make two runs different rows.
_SAME_ROW = {"seed", "device", "progress"}


def _labels(runs: list[dict]) -> list[str]:
    """Each run's method, followed by the settings in which it differs from other runs of its
    method (none: the method alone)."""
    flat = [dict(_leaves(run.get("settings", {}))) for run in runs]
    labels = []
    for run, settings in zip(runs, flat, strict=True):
        peers = [f for r, f in zip(runs, flat, strict=True) if r["method"] == run["method"]]
        keys = sorted({k for f in peers for k in f} - _SAME_ROW)
        differing = [k for k in keys if len({repr(f.get(k)) for f in peers}) > 1]
        shown = ", ".join(f"{k.rsplit('.', 1)[-1]}={settings.get(k)}" for k in differing)
        labels.append(f"{run['method']} ({shown})" if shown else run["method"])
    return labels


def _leaves(settings: dict, prefix: str = ""):
    """``(dotted key, value)`` of every leaf of a nested settings dict."""
    for key, value in settings.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _square(run: dict) -> bool:
    matrix = run.get("matrices", {}).get("accuracy")
    return bool(matrix) and len(matrix) == len(matrix[0])


def _mean(values: list[float]) -> str:
    """A percentage, or a dash where no run has the value."""
    return f"{100 * np.mean(values):.1f}%" if values else "–"


if __name__ == "__main__":
    main()
