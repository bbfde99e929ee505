"""Print a Markdown table of online streams' results (``pyro-cl stream`` folders): test LML over
the last 10% of the steps and one-step-ahead LML, mean ± std over seeds, and each method paired by
seed with a baseline method (mean difference, its t statistic, seeds ahead).

    python benchmarks/stream_table.py results/spam/seed* --baseline random

Runs of the same stream, method, memory size and precision floor (as given on the command line;
"unset" where it was not) in several folders (seeds run separately) are pooled; a seed run twice
is counted once (the first folder given wins).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

Key = tuple[str, str, int, object]  # stream, method, memory size, precision floor


def pooled_runs(folders: list[str]) -> dict[Key, dict[int, dict]]:
    """Every run in the folders' ``results.json``, by key and then by seed."""
    pools: dict[Key, dict[int, dict]] = {}
    for folder in folders:
        report = json.loads((Path(folder) / "results.json").read_text())
        floor = report["run"].get("precision_floor")
        for result in report["results"]:
            key = (result["stream"], result["label"], result["details"]["memory_size"], floor)
            pools.setdefault(key, {}).setdefault(result["seed"], result["summary"])
    return pools


def baseline_pool(pools: dict[Key, dict[int, dict]], stream: str, size: int, method: str):
    """The baseline's test LML by seed on ``stream``: at memory size ``size`` if it ran there,
    else at its one size (a method without a memory, such as "none", has size 0)."""
    candidates = {k[2]: pool for k, pool in pools.items() if k[:2] == (stream, method)}
    pool = candidates.get(size, next(iter(candidates.values())) if len(candidates) == 1 else {})
    return {seed: summary["test_lml"] for seed, summary in pool.items()}


def mean_and_spread(values: np.ndarray) -> str:
    """``mean ± std`` over seeds (std 0 for one seed)."""
    spread = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} ± {spread:.3f}"


def paired(values: dict[int, float], baseline: dict[int, float]) -> str:
    """Mean difference to the baseline over the seeds both ran, its t statistic, seeds ahead."""
    seeds = sorted(set(values) & set(baseline))
    if len(seeds) < 2:
        return "–"
    differences = np.array([values[s] - baseline[s] for s in seeds])
    spread = differences.std(ddof=1)
    t = differences.mean() / (spread / math.sqrt(len(seeds))) if spread > 0 else math.nan
    ahead = int((differences > 0).sum())
    return f"{differences.mean():+.3f} (t = {t:.1f}, ahead in {ahead} of {len(seeds)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="folders holding a stream's results.json")
    parser.add_argument("--baseline", default="random", help="the method others are paired with")
    args = parser.parse_args(argv)
    missing = [f for f in args.folders if not (Path(f) / "results.json").is_file()]
    if missing:
        parser.error(f"no results.json in {', '.join(missing)}")
    pools = pooled_runs(args.folders)
    print(
        "| stream | method | M | floor | test LML, last 10% | one-step-ahead LML | seeds "
        f"| test LML against {args.baseline}, paired |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for key, by_seed in sorted(pools.items(), key=lambda item: tuple(map(str, item[0]))):
        stream, method, size, floor = key
        test = {seed: s["test_lml"] for seed, s in by_seed.items()}
        ahead = np.array([s["one_step_ahead_lml"] for s in by_seed.values()])
        baseline = baseline_pool(pools, stream, size, args.baseline)
        values = np.array(list(test.values()))
        print(
            f"| {stream} | {method} | {size} | {'unset' if floor is None else floor} "
            f"| {mean_and_spread(values)} | {mean_and_spread(ahead)} "
            f"| {len(values)} | {'–' if method == args.baseline else paired(test, baseline)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
