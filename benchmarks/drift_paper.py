"""Figures 2, 5 and 6/10 of Kurle et al. 2020 (section 6.2): adaptation to drifting data.

Three parts, each writing into ``--output``:

* ``evolution`` — figure 2: a posterior N(2, 0.1²) left without data under Bayesian forgetting
  and the Ornstein-Uhlenbeck process (prior N(0, 1)) for several adaptation values
  (``transition_evolution.png``); no training.
* ``rotating`` — figure 5: logistic regression on the rotating toy (721 steps) with online VB, OU
  and Bayesian forgetting; the posterior mean ± std of both weights over time beside the truth
  (``rotating_weights.png``, ``rotating.json``, ``rotating.md``).
* ``sweep`` — figure 10 on a drift stream (``--stream weather`` by default): online VB, Wiener,
  OU and Bayesian forgetting over their adaptation values, and Bayesian forgetting with a GRS
  memory over memory sizes at ``--memory-forgetting-rate`` (0.031, the paper's value for
  weather); one-step-ahead LML (500 posterior samples) averaged over the last 50% of steps
  (``results.json``, ``table.md``, ``adaptation_sweep.png``, ``memory_sweep.png``).

``--combine DIR ...`` merges the ``results.json`` of several sweep runs (e.g. one per seed, run
side by side on one core each) into one table and figures.

Schedules: ``--schedule paper`` is table 2 (50k/10k Adam steps, K_train 100, K_term 100k: for a
GPU); ``--schedule short`` (default) is 1000 Adam steps at the first step and 100 at each later
one, K_train 10, K_term 2000.

    python benchmarks/drift_paper.py --part sweep --stream weather --seeds 0 \\
        --data-root ../shared/data --output results/drift/seed0
    python benchmarks/drift_paper.py --combine results/drift/seed0 results/drift/seed1 \\
        --output results/drift
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from pyro.distributions import Normal

from pyro_cl.app.cli import command_line_errors
from pyro_cl.app.continual_run import Metric
from pyro_cl.app.plotting import (
    plot_adaptation_sweep,
    plot_memory_sweep,
    plot_online_lml,
    plot_transition_evolution,
    plot_weight_tracks,
)
from pyro_cl.app.result import RunResult, last_fraction_mean
from pyro_cl.app.stream_benchmark import StreamRun, run_stream_benchmark, stream_table
from pyro_cl.app.stream_presets import STREAM_PRESETS
from pyro_cl.data.streams import rotating_weights
from pyro_cl.transitions.base import Identity, Transition, TransitionContext
from pyro_cl.transitions.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.forgetting import BayesianForgetting

SCHEDULES = {
    "short": {
        "iterations": 200,
        "first_iterations": 2000,
        "train_samples": 20,
        "term_samples": 2000,
    },
    "paper": {},
}
#: The adaptation values swept (the paper's figure 10 uses ~10 per method; its axes are not
#: given in the text, so these span a decade around its weather forgetting rate 0.031).
SWEEPS = {
    "wiener": (Wiener, "diffusion c", (0.03, 0.1, 0.3)),
    "ou": (OrnsteinUhlenbeck, "OU stiffness a", (0.03, 0.1, 0.3)),
    "forgetting": (BayesianForgetting, "forgetting rate ε", (0.031, 0.1, 0.3)),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("evolution", "rotating", "sweep"), default="sweep")
    parser.add_argument("--stream", default="weather", choices=sorted(STREAM_PRESETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    parser.add_argument("--methods", nargs="+", choices=[*SWEEPS, "memory"], help="default: all")
    parser.add_argument("--values", type=float, nargs="+", help="adaptation values to sweep")
    parser.add_argument("--memory-sizes", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--memory-forgetting-rate", type=float, default=0.031)
    parser.add_argument("--num-steps", type=int, help="observe only the first steps")
    parser.add_argument("--iterations", type=int, help="override the schedule's later steps")
    parser.add_argument("--first-iterations", type=int, help="override the first step's")
    parser.add_argument(
        "--particles", dest="train_samples", type=int, help="override K_train (samples per step)"
    )
    parser.add_argument("--predictive-samples", type=int, default=500)
    parser.add_argument("--learning-rate", type=float, help="Adam's (default: the stream's)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", type=Path, default=Path("results/drift"))
    parser.add_argument("--combine", type=Path, nargs="+", help="merge these sweep folders")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--debug", action="store_true")
    return parser


# ---------------------------------------------------------------- figure 2


def transition_evolution(output: Path) -> Path:
    """Figure 2: a posterior N(2, 0.1²) with prior N(0, 1), no data, over 5 time constants."""
    initial = {"w": Normal(torch.zeros(1), torch.ones(1))}
    start = {"w": Normal(torch.full((1,), 2.0), torch.full((1,), 0.1))}
    times = np.linspace(0.0, 5.0, 101)
    rows = {}
    for name, make, values in (
        ("Bayesian forgetting", BayesianForgetting, (0.05, 0.2, 0.5, 0.9)),
        ("Ornstein-Uhlenbeck", OrnsteinUhlenbeck, (0.1, 0.5, 1.0, 2.0)),
    ):
        curves = {}
        for value in values:
            transition = make(value, time_constant=1.0)
            states = [start]
            for elapsed in np.diff(times):
                context = TransitionContext(float(elapsed), 0.0, initial, torch.nn.Identity())
                states.append(transition(states[-1], context))
            means = np.array([float(s["w"].loc) for s in states])
            stds = np.array([float(s["w"].scale) for s in states])
            curves[value] = (times, means, stds)
        rows[name] = curves
    return plot_transition_evolution(rows, output / "transition_evolution.png")


# ---------------------------------------------------------------- figure 5


def rotating(args, schedule: dict) -> str:
    """Figure 5: the weights' posterior over time under online VB, OU and forgetting."""
    runs = {
        "online VB": Identity(),
        "Ornstein-Uhlenbeck (a=0.5)": OrnsteinUhlenbeck(0.5),
        "Bayesian forgetting (ε=0.3)": BayesianForgetting(0.3),
    }
    tracks, summaries = {}, {}
    for label, transition in runs.items():
        means, stds = [], []

        class Track(Metric):
            def after_step(self, learner, step, seconds, means=means, stds=stds) -> None:
                q = learner.current_prior()["heads.0.weight"].base_dist
                means.append(q.loc.reshape(-1).numpy().copy())
                stds.append(q.scale.reshape(-1).numpy().copy())

        run = _stream_run(args, "rotating", ("none",), transition, schedule, args.seeds[:1])
        start = time.perf_counter()
        [result] = run_stream_benchmark(run, metrics=[Track()])
        truth = rotating_weights(result.series["times"])
        half = len(result.series["times"]) // 2
        tracks[label] = (np.array(means), np.array(stds))
        summaries[label] = {
            "one_step_ahead_lml": result.summary()["one_step_ahead_lml"],
            "one_step_ahead_accuracy": result.summary()["one_step_ahead_accuracy"],
            "weight_error": float(np.abs(tracks[label][0][half:] - truth[half:]).mean()),
            "seconds": time.perf_counter() - start,
        }
    times = np.array(result.series["times"])
    plot_weight_tracks(tracks, times, rotating_weights(times), args.output / "rotating_weights.png")
    (args.output / "rotating.json").write_text(json.dumps(summaries, indent=1))
    lines = [
        "| method | one-step-ahead LML (last 50%) | accuracy | mean abs. weight error "
        "(last 50%) | wall s |",
        "| --- | --- | --- | --- | ---: |",
    ]
    for label, s in summaries.items():
        lines.append(
            f"| {label} | {s['one_step_ahead_lml']:.3f} | {s['one_step_ahead_accuracy']:.3f} | "
            f"{s['weight_error']:.2f} | {s['seconds']:.0f} |"
        )
    table = "\n".join(lines) + "\n"
    (args.output / "rotating.md").write_text(table)
    return table


# ---------------------------------------------------------------- figure 10


def _stream_run(args, stream, methods, transition, schedule, seeds, memory_sizes=None):
    return StreamRun(
        stream,
        methods=methods,
        seeds=tuple(seeds),
        memory_sizes=memory_sizes,
        data_root=args.data_root,
        device=args.device,
        num_steps=args.num_steps,
        predictive_samples=args.predictive_samples,
        progress=not args.no_progress,
        transition=transition,
        learning_rate=args.learning_rate,
        **schedule,
    )


def sweep(args, schedule: dict) -> list[RunResult]:
    methods = args.methods or [*SWEEPS, "memory"]
    configurations: list[tuple[tuple[str, ...], Transition, tuple[int, ...] | None]] = [
        (("none",), Identity(), None)
    ]
    for name in methods:
        if name == "memory":
            forgetting = BayesianForgetting(args.memory_forgetting_rate)
            configurations.append((("grs",), forgetting, tuple(args.memory_sizes)))
        else:
            make, _, values = SWEEPS[name]
            values = args.values or values
            configurations += [(("none",), make(value), None) for value in values]
    results = []
    for methods_, transition, sizes in configurations:
        run = _stream_run(args, args.stream, methods_, transition, schedule, args.seeds, sizes)
        results += run_stream_benchmark(run)
    return results


def write_sweep(results: list[RunResult], output: Path) -> str:
    output.mkdir(parents=True, exist_ok=True)
    payload = {"results": [r.to_json() for r in results]}
    (output / "results.json").write_text(json.dumps(payload, indent=1))
    table = stream_table(results)
    (output / "table.md").write_text(table)
    online_vb = [_lml(r) for r in results if r.method == "none" and r.label == "none"]
    panels = {}
    for make, axis, _ in SWEEPS.values():
        points = {0.0: online_vb} if online_vb else {}
        for r in results:
            if r.method == "none" and r.details["transition"].get("name") == make.name:
                value = next(
                    v for k, v in r.details["transition"].items() if k not in _NOT_ADAPTATION
                )
                points.setdefault(value, []).append(_lml(r))
        if len(points) > 1:
            panels[axis] = points
    if panels:
        plot_adaptation_sweep(panels, output / "adaptation_sweep.png", results[0].stream)
    memory = [r for r in results if r.method == "grs"]
    if memory:
        plot_memory_sweep(memory, output / "memory_sweep.png")
    plot_online_lml([r for r in results if r.method == "none"], output / "lml_over_time.png")
    return table


_NOT_ADAPTATION = ("kind", "name", "time_constant")


def _lml(result: RunResult) -> float:
    return last_fraction_mean(result.series["one_step_ahead"], 0.5)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with command_line_errors("drift_paper.py", "--debug" in argv):
        args = build_parser().parse_args(argv)
        args.output.mkdir(parents=True, exist_ok=True)
        schedule = dict(SCHEDULES[args.schedule])
        for key in ("iterations", "first_iterations", "train_samples"):
            if getattr(args, key) is not None:
                schedule[key] = getattr(args, key)
        if args.combine:
            results = []
            for folder in args.combine:
                payload = json.loads((folder / "results.json").read_text())
                results += [RunResult.from_json(r) for r in payload["results"]]
            print(write_sweep(results, args.output))
        elif args.part == "evolution":
            print(transition_evolution(args.output))
        elif args.part == "rotating":
            given = {k: getattr(args, k) for k in ("iterations", "first_iterations")}
            print(rotating(args, {k: v for k, v in given.items() if v is not None}))
        else:
            (args.output / "schedule.json").write_text(json.dumps(schedule))
            print(write_sweep(sweep(args, schedule), args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
