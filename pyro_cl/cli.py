"""The ``pyro-cl`` command: run continual-learning benchmarks and write results and plots."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from pyro_cl.experiment import (
    ContinualResult,
    mean_result,
    run_stream,
    scratch_accuracies,
    summarise,
)
from pyro_cl.guides import REINIT_POLICIES
from pyro_cl.infer.transitions import ChildConcentrationGrowth
from pyro_cl.methods import METHODS, make_method
from pyro_cl.nn import BayesianCNN, BayesianMLP, IndianBuffetMLP
from pyro_cl.nn.concrete import MASK_PARAMETERISATIONS
from pyro_cl.plotting import plot_accuracy
from pyro_cl.presets import DEFAULT_PRESET, PRESETS
from pyro_cl.spec import REGISTRIES

__all__ = ["main", "build_parser", "run_benchmark"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-cl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a benchmark (default: embedded permuted digits)")
    run.add_argument("--benchmark", choices=sorted(PRESETS), default=DEFAULT_PRESET)
    run.add_argument("--data-root", default="data", help="folder holding MNIST/raw etc.")
    run.add_argument("--download", action="store_true", help="download missing data sets")
    run.add_argument(
        "--methods", default="vcl,finetune", help=f"comma-separated: {','.join(METHODS)}"
    )
    run.add_argument(
        "--coreset-size", type=int, help="coreset points per task (default: the benchmark's)"
    )
    run.add_argument(
        "--refit-epochs", type=int, help="epochs of the coreset refit (default: epochs)"
    )
    run.add_argument("--hidden", type=int, nargs="+", help="hidden layer widths")
    run.add_argument("--num-tasks", type=int, help="tasks of a permuted stream")
    run.add_argument("--epochs", type=int)
    run.add_argument("--first-epochs", type=int, help="epochs of the first task")
    run.add_argument("--batch-size", type=int, help="0 means the whole task")
    run.add_argument("--lr", type=float, dest="learning_rate")
    run.add_argument("--particles", type=int, dest="num_particles")
    run.add_argument("--predictive-samples", type=int, dest="num_predictive_samples")
    run.add_argument("--ml-init-epochs", type=int)
    run.add_argument("--init-log-variance", type=float)
    run.add_argument("--between-tasks", choices=list(REINIT_POLICIES))
    run.add_argument("--init-means", choices=["prior", "fresh"])
    run.add_argument(
        "--init-precision",
        type=float,
        help="initial guide precision 1/σ² (sets --init-log-variance; VOGN thesis: 1e6)",
    )
    run.add_argument(
        "--later-init-precision",
        type=float,
        help="precision that re-initialisation resets to after the first task",
    )
    run.add_argument("--no-local-reparameterization", action="store_true")
    run.add_argument("--prior-scale", type=float, help="prior standard deviation of the weights")
    run.add_argument(
        "--lr-decay",
        type=float,
        nargs=2,
        metavar=("RATE", "STEPS"),
        help="multiply the learning rate by RATE every STEPS steps (H-IBP: 0.87 1000)",
    )
    ibp = run.add_argument_group("Indian Buffet nets (--net ibnn or hibnn)")
    ibp.add_argument(
        "--net",
        choices=["mlp", "ibnn", "hibnn"],
        help="an MLP, or one with IBP masks per layer (ibnn) or H-IBP masks (hibnn); "
        "default: the benchmark's",
    )
    ibp.add_argument("--ibp-alpha", type=float, help="the sticks' Beta(α, β) prior: α")
    ibp.add_argument("--ibp-beta", type=float, help="the sticks' Beta(α, β) prior: β")
    ibp.add_argument(
        "--temperatures", type=float, nargs=2, metavar=("POSTERIOR", "PRIOR"), help="λ1 λ2"
    )
    ibp.add_argument("--child-concentration", type=float, help="H-IBP: α_j of every layer")
    ibp.add_argument("--child-growth", type=float, help="H-IBP: α_j's factor after each task")
    ibp.add_argument("--mask-parameterisation", choices=list(MASK_PARAMETERISATIONS))
    update = run.add_argument_group("natural-gradient updates (methods vogn*, ivon)")
    update.add_argument("--update-lr", type=float, dest="update_learning_rate", help="α")
    update.add_argument("--update-beta", type=float, help="VOGN's β")
    update.add_argument("--update-samples", type=int, help="Monte Carlo samples per step")
    update.add_argument("--update-momentum", type=float, help="VOGN's momentum")
    update.add_argument("--update-data-scale", type=float, help="ρ (data augmentation)")
    run.add_argument(
        "--forward-transfer",
        action="store_true",
        help="also train each task from scratch to report FWT (doubles the run time)",
    )
    run.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed")
    run.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    run.add_argument("--output", type=Path, help="folder for results.json and accuracy.png")
    run.add_argument("--no-progress", action="store_true")
    commands.add_parser("list", help="list benchmarks, methods and the registered parts")
    return parser


def list_everything() -> str:
    """Benchmarks, methods, and every registered part with its constructor options."""
    lines = ["benchmarks:"]
    lines += [f"  {name:22} {preset.description}" for name, preset in sorted(PRESETS.items())]
    lines.append("methods:")
    lines += [f"  {name:22} {method.description}" for name, method in METHODS.items()]
    for kind, classes in sorted(REGISTRIES.items()):
        lines.append(f"parts of kind {kind!r}:" + ("" if classes else " none registered"))
        for name, cls in sorted(classes.items()):
            options = ", ".join(
                str(p).replace(" ", "")
                for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            )
            lines.append(f"  {name:22} {cls.__module__}.{cls.__qualname__}({options})")
    return "\n".join(lines)


def _training_settings(args: argparse.Namespace, defaults: dict) -> dict:
    settings = dict(defaults)
    for key in (
        "epochs",
        "first_epochs",
        "learning_rate",
        "num_particles",
        "num_predictive_samples",
        "ml_init_epochs",
        "init_log_variance",
        "between_tasks",
        "init_means",
        "refit_epochs",
    ):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if args.batch_size is not None:
        settings["batch_size"] = args.batch_size or None
    if args.init_precision is not None:
        settings["init_log_variance"] = -math.log(args.init_precision)
    if args.later_init_precision is not None:
        settings["later_init_log_variance"] = -math.log(args.later_init_precision)
    if args.lr_decay is not None:
        settings["learning_rate_decay"] = args.lr_decay[0]
        settings["learning_rate_decay_steps"] = int(args.lr_decay[1])
    settings["progress"] = not args.no_progress
    return settings


def _fitter_options(args: argparse.Namespace, method: str) -> dict | None:
    """Natural-gradient hyperparameters given on the command line that the method's fitter
    takes (IVON, for example, has no ``beta``); ``None`` for methods without a fitter class."""
    if METHODS[method].fitter is None:
        return None
    accepted = METHODS[method].fitter_parameters()
    names = {
        "update_learning_rate": "learning_rate",
        "update_beta": "beta",
        "update_samples": "num_samples",
        "update_momentum": "momentum",
        "update_data_scale": "data_scale",
    }
    return {
        key: getattr(args, arg)
        for arg, key in names.items()
        if key in accepted and getattr(args, arg) is not None
    }


def _architecture(args: argparse.Namespace, preset) -> str:
    if args.net is None:
        return preset.architecture
    if preset.architecture == "cnn":
        raise SystemExit(f"--net {args.net} needs an MLP benchmark; {args.benchmark} is a conv net")
    return args.net


def _net_options(args: argparse.Namespace, preset, architecture: str) -> dict:
    """The preset's net options, those given on the command line, and only what the net takes."""
    options = dict(preset.net_options)
    if args.prior_scale is not None:
        options["prior_scale"] = args.prior_scale
    ibp = {
        "alpha": args.ibp_alpha,
        "beta": args.ibp_beta,
        "child_concentration": args.child_concentration,
        "mask_parameterisation": args.mask_parameterisation,
    }
    if args.temperatures is not None:
        ibp["posterior_temperature"], ibp["prior_temperature"] = args.temperatures
    options.update({key: value for key, value in ibp.items() if value is not None})
    if architecture in ("ibnn", "hibnn"):
        options["hierarchical"] = architecture == "hibnn"
    else:
        options = {key: value for key, value in options.items() if key not in IBP_OPTIONS}
    return options


#: Net options only Indian Buffet nets take.
IBP_OPTIONS = (
    "alpha",
    "beta",
    "hierarchical",
    "child_concentration",
    "posterior_temperature",
    "prior_temperature",
    "mask_parameterisation",
)


def _build_net(
    architecture: str,
    options: dict,
    stream,
    hidden: tuple[int, ...],
    local_reparameterization: bool,
):
    heads = len(stream) if stream.multi_head else 1
    if architecture == "cnn":
        return BayesianCNN(
            stream.input_shape,
            hidden_sizes=hidden,
            out_features=stream.num_classes,
            heads=heads,
            local_reparameterization=local_reparameterization,
            **options,
        )
    net_class = IndianBuffetMLP if architecture in ("ibnn", "hibnn") else BayesianMLP
    return net_class(
        stream.in_features,
        hidden,
        stream.num_classes,
        heads=heads,
        local_reparameterization=local_reparameterization,
        **options,
    )


def run(args: argparse.Namespace) -> list[ContinualResult]:
    preset = PRESETS[args.benchmark]
    architecture = _architecture(args, preset)
    net_options = _net_options(args, preset, architecture)
    hidden = tuple(args.hidden or preset.hidden_sizes)
    training = _training_settings(args, preset.training)
    coreset_size = args.coreset_size or preset.coreset_size
    transition = None
    if args.child_growth is not None:
        if architecture != "hibnn":
            raise SystemExit("--child-growth needs --net hibnn")
        transition = ChildConcentrationGrowth(args.child_growth)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {list(METHODS)}")
    results = []
    for seed in args.seeds:
        stream = preset.stream(args.data_root, seed, args.num_tasks, args.download)
        print(
            f"{stream.name}: {len(stream)} tasks, net {stream.in_features}-"
            f"{'-'.join(map(str, hidden))}-{stream.num_classes}"
            f"{' multi-head' if stream.multi_head else ''}, device {args.device}, seed {seed}"
        )
        for method in methods:

            def make_learner(method=method, stream=stream, seed=seed):
                net = _build_net(
                    architecture, net_options, stream, hidden, not args.no_local_reparameterization
                )
                return make_method(
                    method,
                    net,
                    coreset_size,
                    args.device,
                    seed,
                    fitter_options=_fitter_options(args, method),
                    transition=transition,
                    **training,
                )

            settings = {
                "benchmark": args.benchmark,
                "net": architecture,
                "net_options": net_options,
                "hidden_sizes": list(hidden),
                "seed": seed,
                "device": args.device,
                "coreset_size": coreset_size if METHODS[method].memory is not None else None,
                **training,
            }
            learner = make_learner()
            settings["fitter"] = learner.fitter.spec()
            settings["transition"] = learner.transition.spec()
            flat = learner.config.flat()
            settings.update({k: flat[k] for k in METHODS[method].defaults})
            result = run_stream(learner, stream, _label(method, architecture), settings)
            if args.forward_transfer:
                result.scratch_accuracy = scratch_accuracies(make_learner, stream)
            results.append(result)
            if args.output is not None:  # after every run, so an interrupted sweep keeps its runs
                _write_report(results, [_label(m, architecture) for m in methods], args.output)
            label = result.method
            print(f"\n{label} (seed {seed}): accuracy after each task (rows) on each task")
            print(result.format_matrix())
            bwt = "" if result.bwt is None else f", BWT {100 * result.bwt:+.2f}"
            fwt = "" if result.fwt is None else f", FWT {100 * result.fwt:+.2f}"
            print(f"{label}: ACC {100 * result.acc:.2f}%{bwt}{fwt}  ({result.wall_time_s:.1f} s)")
    summary = summarise(results)
    if len(args.seeds) > 1:
        print("\nmean ± std over seeds " + ", ".join(map(str, args.seeds)))
    for method, row in summary.items():
        print(
            f"{method}: ACC {100 * row['ACC_mean']:.2f} ± {100 * row['ACC_std']:.2f}% "
            f"over {row['runs']} run(s), {row['wall_time_s_mean']:.0f} s each"
        )
    if args.output is not None:  # written after the last run already
        print(f"\nwrote {args.output / 'results.json'} and {args.output / 'accuracy.png'}")
    return results


def _label(method: str, architecture: str) -> str:
    """The method's name in results: ``vcl``, or ``vcl-ibnn`` for an Indian Buffet net."""
    return method if architecture in ("mlp", "cnn") else f"{method}-{architecture}"


def _write_report(results: list[ContinualResult], methods: list[str], output: Path) -> Path:
    """``results.json`` (summary and every run) and ``accuracy.png`` (mean over seeds)."""
    output.mkdir(parents=True, exist_ok=True)
    report = {"summary": summarise(results), "runs": [r.to_json() for r in results]}
    (output / "results.json").write_text(json.dumps(report, indent=2))
    done = [m for m in methods if any(r.method == m for r in results)]
    means = [mean_result([r for r in results if r.method == m]) for m in done]
    return plot_accuracy(means, output / "accuracy.png")


def run_benchmark(
    benchmark: str,
    methods: str,
    data_root: str,
    seeds: Sequence[str | int],
    output: str | Path,
    *options: str,
) -> int:
    """``pyro-cl run`` as the benchmark scripts call it, echoing the command first: the benchmark,
    methods, data folder, seeds and output folder, then ``options`` (a later option wins, as on
    the command line)."""
    command = ["run", "--benchmark", benchmark, "--methods", methods, "--data-root", data_root]
    command += ["--seeds", *map(str, seeds), "--output", str(output), *options]
    print("pyro-cl " + " ".join(command), flush=True)
    return main(command)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        run(args)
    elif args.command == "list":
        print(list_everything())
    return 0


if __name__ == "__main__":
    sys.exit(main())
