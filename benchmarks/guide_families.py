"""VCL in three guide families side by side: mean-field, low rank plus diagonal over every
weight, and a full covariance over the output layer (last-layer, as last-layer Laplace).

    OMP_NUM_THREADS=1 python benchmarks/guide_families.py --benchmark split-mnist \\
        --schedule short --seeds 0 1 2 --data-root ../shared/data

Each row and seed runs in a folder of its own under ``--output`` (default
``results/guide_families/<benchmark>-<schedule>``), skipped when its ``results.json`` exists, so
the command resumes where it stopped. It writes ``table.md``: ACC, BWT, ECE after the last task,
accuracy on each task right after learning it, and seconds a training epoch (the run's training
time over its epochs), mean ± std over seeds. The schedules are ``keeps_learning.py``'s
(``vcl_paper.py``'s short ones). Fine-tuning is the forgetting row beside them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from keeps_learning import SCHEDULES, run_once

from pyro_cl.app.result import RunResult
from pyro_cl.guides import FullCovariance, LowRank, MeanField
from pyro_cl.metrics import sample_sd

#: The output layer's sites: the heads of a multi-head net, the single head of a one-head net.
OUTPUT_LAYER = ["heads"]


def rows(rank: int) -> dict[str, dict]:
    """``{label: BenchmarkRun fields}`` of the table's rows."""
    return {
        "fine-tuning": {"methods": ["finetune"]},
        "VCL, mean-field": {"methods": ["vcl"], "guide": MeanField()},
        f"VCL, low rank {rank} + diagonal": {"methods": ["vcl"], "guide": LowRank(rank=rank)},
        "VCL, last layer full": {
            "methods": ["vcl"],
            "guide": FullCovariance(sites=OUTPUT_LAYER, per_module=True),
        },
    }


def seconds_an_epoch(run: RunResult) -> float:
    """Training seconds a task after the first (whose time includes the maximum-likelihood
    initialisation), over the task's epochs."""
    later = run.series["training_seconds"][1:]
    return float(np.mean(later)) / run.settings["epochs"]


def summary_table(results: dict[str, list[RunResult]]) -> str:
    """Mean ± std over seeds of ACC, BWT, ECE, accuracy right after each task, and seconds a
    training epoch."""
    columns = [("ACC", "acc"), ("BWT", "bwt"), ("ECE", "calibration_error")]
    header = ["row", "seeds", *[c for c, _ in columns], "just learnt", "s / epoch"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for label, runs in results.items():
        cells = [label, ",".join(str(r.seed) for r in runs)]
        for _, attribute in columns:
            cells.append(_mean_std([100 * getattr(r, attribute) for r in runs]))
        cells.append(_mean_std([100 * r.just_learnt for r in runs]))
        cells.append(_mean_std([seconds_an_epoch(r) for r in runs]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_std(values: list[float]) -> str:
    values = np.asarray([v for v in values if v is not None], dtype=float)
    if not len(values):
        return "–"
    return (
        f"{values.mean():.2f} ± {sample_sd(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="split-mnist", choices=sorted(SCHEDULES["short"]))
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rank", type=int, default=10, help="the low-rank guide's r")
    parser.add_argument("--rows", nargs="+", help="only these rows of the table (by label)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    output = Path(args.output or f"results/guide_families/{args.benchmark}-{args.schedule}")
    training = SCHEDULES[args.schedule][args.benchmark]
    base = {"benchmark": args.benchmark, "data_root": args.data_root, "training": training}
    results: dict[str, list[RunResult]] = {}
    for label, fields in rows(args.rank).items():
        if args.rows and label not in args.rows:
            continue
        for seed in args.seeds:
            folder = output / f"{label.replace(' ', '_').replace(',', '')}-seed{seed}"
            results.setdefault(label, []).extend(
                run_once(folder, dict(base, seeds=[seed], **fields))
            )
        (output / "table.md").write_text(summary_table(results) + "\n")
    print((output / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
