"""Table 1, figure 4 and figure 8 of Kurle et al. 2020 (online VB with a running memory).

Runs GRS against the VCL-style k-center and random memories (and the figure-8 ablations with
``--methods grs,grs-refit,kcenter-grs``) on several online streams and writes, under
``--output``, one folder per stream (results.json, table.md, figures; see ``pyro-cl stream``)
and ``table1.md`` with the paper's numbers beside ours.

Schedules: ``--schedule paper`` is table 2 (50k/10k Adam steps, K_train up to 1000, K_term 50k:
hours per stream on a GPU); ``--schedule short`` (the default) is what fits on 2 CPU cores:
2000 Adam steps at the first time step, 300 at each later one, K_train 20, K_term 2000.

    python benchmarks/online_memory.py --streams energy concrete --seeds 0 1 2 \\
        --data-root ../shared/data --output results/online
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from pyro_cl.app.cli import command_line_errors
from pyro_cl.app.methods import method_names
from pyro_cl.app.records import make_record, write_record
from pyro_cl.app.stream_benchmark import StreamRun, run_stream_benchmark, stream_table
from pyro_cl.app.stream_presets import STREAM_PRESETS
from pyro_cl.metrics import sample_sd

#: Table 1 of the paper (GRS, k-center, random; mean ± std over 16 runs).
PAPER_TABLE_1 = {
    "concrete": ((-0.779, 0.039), (-0.798, 0.039), (-0.800, 0.039)),
    "boston": ((-0.619, 0.111), (-0.638, 0.093), (-0.664, 0.156)),
    "energy": ((0.365, 0.440), (-0.119, 0.128), (-0.078, 0.087)),
    "yacht": ((1.925, 0.229), (1.658, 0.291), (1.648, 0.254)),
    "spam": ((-0.216, 0.016), (-0.219, 0.015), (-0.217, 0.016)),
    "wine": ((-1.165, 0.056), (-1.212, 0.059), (-1.194, 0.070)),
    "mnist": ((-0.148, 0.005), (-0.158, 0.005), (-0.153, 0.005)),
}
SCHEDULES = {
    "short": {
        "iterations": 300,
        "first_iterations": 2000,
        "train_samples": 20,
        "term_samples": 2000,
    },
    "paper": {},
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", nargs="+", choices=sorted(STREAM_PRESETS), required=True)
    parser.add_argument(
        "--methods", default="grs,kcenter,random", help=",".join(method_names("online"))
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    parser.add_argument("--memory-sizes", type=int, nargs="+", help="default: table 1's")
    parser.add_argument("--num-steps", type=int, help="observe only the first steps")
    parser.add_argument("--term-samples", type=int, help="override the schedule's K_term")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", type=Path, default=Path("results/online"))
    parser.add_argument(
        "--record",
        metavar="NAME",
        help="write the run record benchmarks/records/NAME.json (one stream, one memory size)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--debug", action="store_true")
    return parser


def build_runs(argv: list[str]) -> list[StreamRun]:
    """The runs the command line ``argv`` describes, one per stream."""
    parser = build_parser()
    return runs_from(parser, parser.parse_args(argv))


def runs_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[StreamRun]:
    """:func:`build_runs` of parsed arguments (``parser``'s, for its one-line errors)."""
    if args.record and (len(args.streams) > 1 or len(args.memory_sizes or [0]) > 1):
        parser.error("--record keeps one table: give one stream and at most one memory size")
    schedule = dict(SCHEDULES[args.schedule])
    if args.term_samples is not None:
        schedule["term_samples"] = args.term_samples
    return [
        StreamRun(
            stream,
            methods=tuple(m for m in args.methods.split(",") if m),
            seeds=tuple(args.seeds),
            memory_sizes=None if args.memory_sizes is None else tuple(args.memory_sizes),
            data_root=args.data_root,
            device=args.device,
            output=args.output / stream,
            num_steps=args.num_steps,
            progress=not args.no_progress,
            **schedule,
        )
        for stream in args.streams
    ]


def paper_numbers(stream: str) -> dict[str, tuple[float, float]]:
    """Table 1's ``{method: (mean, std)}`` for ``stream`` (empty where the paper has none)."""
    return dict(zip(("grs", "kcenter", "random"), PAPER_TABLE_1.get(stream, ()), strict=False))


def paper_comparison(stream: str, results) -> str:
    """Rows of table 1: ours (mean ± std over seeds) beside the paper's."""
    lines = []
    for method, paper in paper_numbers(stream).items():
        ours = np.array([r.summary()["test_lml"] for r in results if r.method == method])
        if len(ours):
            lines.append(
                f"| {stream} | {method} | {ours.mean():.3f} ± {sample_sd(ours):.3f} ({len(ours)}) | "
                f"{paper[0]:.3f} ± {paper[1]:.3f} |"
            )
    return "\n".join(lines)


#: A record's row label for each method of the online streams.
ROW_LABELS = {
    "none": "online VB, no memory",
    "random": "random memory",
    "kcenter": "k-center memory",
    "grs": "Gaussian residual scoring (GRS)",
}


def stream_record(name: str, run: StreamRun, results, command: str) -> dict:
    """A run record of one stream's methods (rows) over its seeds: the test LML over the last
    tenth of the steps, the one-step-ahead LML, seconds a step, and the memory's bytes."""
    rows: dict[str, dict[int, dict]] = {}
    kept: dict[str, int] = {}
    for result in results:
        label = ROW_LABELS.get(result.method, result.method)
        summary = result.summary()
        rows.setdefault(label, {})[result.seed] = {
            "test LML": summary["test_lml"],
            "one-step-ahead LML": summary["one_step_ahead_lml"],
            "seconds a step": summary["seconds_per_step"],
        }
        kept[label] = max(kept.get(label, 0), result.details.get("kept_bytes", 0))
    paper = paper_numbers(run.stream)
    cited = "; ".join(f"{ROW_LABELS[m]} {v[0]:.3f} ± {v[1]:.3f}" for m, v in paper.items())
    return make_record(
        name,
        command=command,
        seeds=list(run.seeds),
        schedule=run.settings() | {"precision_floor": run.precision_floor},
        data=f"{run.stream} (Kurle et al. 2020's table 2 stream)",
        rows=rows,
        metrics=["test LML", "one-step-ahead LML", "seconds a step"],
        storage_bytes=kept,
        digits=3,
        notes="The paper's methods and settings at the record's schedule (no grid, nothing "
        "chosen); test LML over the last 10% of the steps."
        + (f" Kurle et al. 2020, table 1 (16 runs, their schedule): {cited}." if cited else ""),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    with command_line_errors("online_memory.py", debug):
        parser = build_parser()
        args = parser.parse_args(argv)
        runs = runs_from(parser, args)
        record = args.record
        rows = []
        for run in runs:
            results = run_stream_benchmark(run)
            print(f"## {run.stream}\n{stream_table(results)}")
            rows.append(paper_comparison(run.stream, results))
            if record:
                command = "python benchmarks/online_memory.py " + " ".join(argv)
                print(f"wrote {write_record(stream_record(record, run, results, command))}")
        header = "| stream | method | ours: test LML (seeds) | paper |\n| --- | --- | --- | --- |\n"
        table = header + "\n".join(r for r in rows if r) + "\n"
        runs[0].output.parent.mkdir(parents=True, exist_ok=True)
        (runs[0].output.parent / "table1.md").write_text(table)
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
