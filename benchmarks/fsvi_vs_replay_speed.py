"""Function space against replay, timed (issue 71's goal: within 1.5x Avalanche Replay's time).

    OMP_NUM_THREADS=1 python benchmarks/fsvi_vs_replay_speed.py \\
        --record peers-permuted-digits --data-root ../shared/data     # pause other benchmarks

Each row of a ``benchmarks/peers.py`` record whose label starts with one of ``--rows``, at the
setting the record chose on validation, run once on one seed's validation split (timing only:
nothing is chosen from it and no test set is read), one process, every row ``--repeats`` times
in turn after a warm-up run (a process's first Adam imports ``torch._dynamo``). Prints each
run's ACC, ECE and seconds, and each row's median seconds and its ratio to the first row's.
"""

from __future__ import annotations

import argparse
import statistics

import peers

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.records import load_record
from pyro_cl.app.selection import run_setting

ROWS = ("Avalanche Replay", "Avalanche DER", "function-space VI", "experience replay")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", default="peers-permuted-digits")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help="labels' beginnings")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    try:
        record = load_record(args.record)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    schedule = dict(record["schedule"])
    benchmark, tasks = schedule.pop("preset"), schedule.pop("tasks")
    base = BenchmarkRun(benchmark, data_root=args.data_root, num_tasks=tasks, progress=False)
    training = {k: v for k, v in schedule.items() if k in ("epochs", "batch_size")}
    stream = base.task_stream(args.seed)
    class_incremental = benchmark.endswith("-class-incremental")
    memory = base.resolved_coreset_size * len(stream)
    theirs = peers.peers(memory, len(stream), class_incremental)
    grids = {**peers.ours(training, class_incremental, base, kept=memory), **theirs}

    def runner(label: str):
        options = grids[label][record["selection"][label]["chosen"]]
        if label in theirs:
            return lambda: peers.run_peer(options, base, training, args.seed, 0.1)
        return lambda: run_setting(base, options, args.seed, validation=0.1)

    labels = [
        label
        for start in args.rows
        for label in record["selection"]
        if label.startswith(start) and label in grids
    ]
    if not labels:
        parser.error(f"no row of {args.record} starts with one of {args.rows}")
    runners = {label: runner(label) for label in labels}
    runners[labels[0]]()  # the warm-up
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    for _ in range(args.repeats):
        for label, run in runners.items():
            numbers = run()
            seconds[label].append(numbers["seconds"])
            print(f"{label} ({record['selection'][label]['chosen']}): ACC {numbers['ACC']:.2f}, "
                  f"ECE {numbers['ECE']:.2f}, {numbers['seconds']:.1f} s", flush=True)  # fmt: skip
    first = statistics.median(seconds[labels[0]])
    for label, times in seconds.items():
        median = statistics.median(times)
        print(f"{label}: median {median:.1f} s, {median / first:.2f}x {labels[0]!r}")


if __name__ == "__main__":
    main()
