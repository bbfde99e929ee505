"""Function space against replay, timed (issue 71's goal: within 1.5x Avalanche Replay's time).

    OMP_NUM_THREADS=1 python benchmarks/fsvi_vs_replay_speed.py      # pause other benchmarks

On one seed's validation split of a class-incremental preset (timing only: nothing is chosen
from it), one process, after a warm-up row (a process's first Adam imports ``torch._dynamo``):
Avalanche's Replay and DER++ (``benchmarks/peers.py``'s rows, the first setting of each grid
but Replay's learning rate 0.003), our replay (``finetune-er``) and function space at the
coreset's points, at 8 and 4 draws of the context's moments. Prints ACC, ECE and seconds a row.
"""

from __future__ import annotations

import argparse

import peers

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.selection import run_setting


def ours(fields: dict):
    return lambda base, seed: run_setting(base, fields, seed, validation=0.1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="split-digits-class-incremental")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    base = BenchmarkRun(args.benchmark, data_root=args.data_root, progress=False)
    stream = base.task_stream(args.seed)
    grids = peers.peers(base.resolved_coreset_size * len(stream), len(stream), True)

    def theirs(prefix: str, setting: str | None = None):
        grid = next(g for label, g in grids.items() if label.startswith(prefix))
        options = grid[setting or next(iter(grid))]
        return lambda base, seed: peers.run_peer(options, base, {}, seed, 0.1)

    fsvi = {"methods": ["fsvi"], "training": {"learning_rate": 0.003}}
    rows = {
        "warm-up (our replay)": ours({"methods": ["finetune-er"]}),
        "Avalanche Replay": theirs("Avalanche Replay", "lr 0.003"),
        "Avalanche DER++": theirs("Avalanche DER"),
        "ours, replay (finetune-er)": ours({**fsvi, "methods": ["finetune-er"]}),
        "ours, function space, 8 draws of the moments": ours(fsvi),
        "ours, function space, 4 draws": ours({**fsvi, "fitter_options": {"context_samples": 4}}),
    }
    for label, run in rows.items():
        numbers = run(base, args.seed)
        print(f"{label}: ACC {numbers['ACC']:.2f}, ECE {numbers['ECE']:.2f}, "
              f"{numbers['seconds']:.1f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
