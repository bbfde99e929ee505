"""The ``pyro-cl`` command: run continual-learning benchmarks and write results and plots."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import math
import os
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import torch

from pyro_cl import __version__
from pyro_cl.app.benchmark_run import ARCHITECTURES, BenchmarkRun, fill_unset
from pyro_cl.app.domain_benchmark import add_domain_arguments, run_domain_benchmark
from pyro_cl.app.methods import METHODS, method_names
from pyro_cl.app.part_options import (
    add_part_options,
    check_taken,
    command_line_parts,
    constructor_parameters,
    given_part_options,
)
from pyro_cl.app.presets import DEFAULT_PRESET, PRESETS
from pyro_cl.app.runner import run_benchmark
from pyro_cl.app.stream_benchmark import StreamRun, run_stream_benchmark, stream_table
from pyro_cl.app.stream_presets import STREAM_PRESETS
from pyro_cl.extras import MissingExtra
from pyro_cl.guides import REINIT_POLICIES, GuideFamily
from pyro_cl.infer.config import INIT_MEANS, TrainingConfig
from pyro_cl.infer.data_parallel import init_from_environment, is_writer
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.nn.concrete import MASK_PARAMETERISATIONS
from pyro_cl.spec import REGISTRIES
from pyro_cl.transitions.base import Transition

__all__ = [
    "add_run_arguments",
    "add_stream_arguments",
    "benchmark_run_from_args",
    "build_parser",
    "command_line_errors",
    "main",
    "parse_script_arguments",
    "stream_run_from_args",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-cl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pyro-cl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a benchmark (default: embedded permuted digits)")
    add_run_arguments(run)
    stream = commands.add_parser(
        "stream",
        help="run an online or drift stream with a running memory and a transition "
        "(Kurle et al. 2020)",
    )
    add_stream_arguments(stream)
    domains = commands.add_parser(
        "domains",
        help="predictive domain adaptation (rotating digits, weather by year): graph VCL, "
        "transport paths, one head or one per domain, baselines",
    )
    add_domain_arguments(domains)
    commands.add_parser("list", help="list benchmarks, methods and the registered parts")
    for command in (run, stream, domains):
        command.add_argument(
            "--threads",
            type=int,
            help="torch's CPU threads (default: the cores not busy with other work, from the "
            "load average; at least 1)",
        )
    return parser


def chosen_threads(requested: int | None) -> int:
    """``requested``, else the cores no other work is using: the cores this process may run on
    less the last minute's load average, rounded, at least 1 (two multi-threaded torch jobs on
    the same cores slow each other far more than twice)."""
    if requested is not None:
        if isinstance(requested, bool) or requested < 1:
            raise ValueError(f"--threads must be a positive integer, got {requested}")
        return requested
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        busy = 0.0
    return max(1, min(cores, round(cores - busy)))


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """``pyro-cl stream`` options: unset values come from the stream's row of table 2."""
    parser.add_argument("stream", choices=sorted(STREAM_PRESETS), help="the data stream")
    parser.add_argument(
        "--methods", type=_comma_list, help=f"comma-separated: {','.join(method_names('online'))}"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="one run (split) per seed")
    parser.add_argument(
        "--memory-sizes", type=int, nargs="+", help="memory sizes M (default: table 1's)"
    )
    # the same names as pyro-cl run: a time step's data is one full batch, so an epoch is one
    # Adam step (the paper's iterations); the old names still work
    parser.add_argument(
        "--epochs",
        "--iterations",
        type=int,
        dest="iterations",
        help="Adam steps (full-batch epochs) per later time step (default: table 2's)",
    )
    parser.add_argument(
        "--first-epochs",
        "--first-iterations",
        type=int,
        dest="first_iterations",
        help="Adam steps at the first time step (default: table 2's)",
    )
    parser.add_argument(
        "--particles",
        "--train-samples",
        type=int,
        dest="train_samples",
        help="K_train Monte Carlo samples per step (default: table 2's)",
    )
    parser.add_argument("--term-samples", type=int, help="K_term samples for the factors")
    parser.add_argument("--num-steps", type=int, help="observe only the first steps")
    parser.add_argument(
        "--no-local-reparameterization",
        action="store_true",
        help="one weight draw per Monte Carlo sample instead of the paper's pre-activation "
        "sampling: 1.4-2x faster on these small nets, noisier gradients",
    )
    parser.add_argument(
        "--precision-floor",
        type=float,
        help="GRS: floor on the updated precisions, a fraction of the step's prior precision "
        "(default: 0.01)",
    )
    parser.add_argument(
        "--lr", type=float, dest="learning_rate", help="Adam's learning rate (default: 1e-3)"
    )
    parser.add_argument(
        "--predictive-samples",
        type=int,
        default=100,
        help="posterior samples for the marginal likelihoods (default: 100)",
    )
    parser.add_argument(
        "--data-root",
        default="data",
        help="folder holding uci/, spambase/, MNIST/, weather/, elec2/, gas_sensor/, covertype/",
    )
    parser.add_argument("--download", action="store_true", help="download missing data sets")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--output", type=Path, help="folder for results.json, table.md, figures")
    _add_log_arguments(parser)
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (shown only on a terminal)"
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    _add_transition_arguments(parser, "between time steps (default: online VB's identity)")


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-dir",
        type=Path,
        help="write a CSV log of losses, timings and metrics per run into this folder",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard event files into --log-dir (needs pyro_cl[tensorboard])",
    )


def _add_transition_arguments(parser: argparse.ArgumentParser, title: str) -> None:
    """``--transition NAME`` and every registered transition's ``--transition-*`` option."""
    _add_part_choice(parser, "transition", f"transition {title}")


def _add_part_choice(parser: argparse.ArgumentParser, kind: str, title: str) -> None:
    """``--<kind> NAME`` and every registered part's ``--<kind>-*`` option."""
    group = parser.add_argument_group(title)
    group.add_argument(
        f"--{kind}",
        choices=command_line_parts(kind),
        help=f"the registered {kind} to use (its options: --{kind}-*)",
    )
    add_part_options(parser, kind, f"{kind} options (for --{kind})")


def stream_run_from_args(args: argparse.Namespace) -> StreamRun:
    """The :class:`~pyro_cl.app.stream_benchmark.StreamRun` that parsed ``pyro-cl stream`` options
    describe."""
    given = {
        "methods": None if args.methods is None else tuple(args.methods),
        "seeds": None if args.seeds is None else tuple(args.seeds),
        "memory_sizes": None if args.memory_sizes is None else tuple(args.memory_sizes),
    }
    return StreamRun(
        args.stream,
        **{key: value for key, value in given.items() if value is not None},
        data_root=args.data_root,
        download=args.download,
        device=args.device,
        output=args.output,
        iterations=args.iterations,
        first_iterations=args.first_iterations,
        train_samples=args.train_samples,
        term_samples=args.term_samples,
        num_steps=args.num_steps,
        learning_rate=args.learning_rate,
        predictive_samples=args.predictive_samples,
        progress=not args.no_progress,
        transition=_transition(args),
        log_dir=args.log_dir,
        tensorboard=args.tensorboard,
        precision_floor=args.precision_floor,
        local_reparameterization=not args.no_local_reparameterization,
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``pyro-cl run`` option, each defaulting to None (unset): benchmark scripts add them
    to their own parser and fill what is unset from their schedule
    (:meth:`~pyro_cl.app.benchmark_run.BenchmarkRun.with_defaults`)."""
    parser.add_argument("--benchmark", choices=sorted(PRESETS), help=f"default: {DEFAULT_PRESET}")
    parser.add_argument("--data-root", help="folder holding MNIST/raw etc. (default: data)")
    parser.add_argument("--download", action="store_true", help="download missing data sets")
    parser.add_argument(
        "--methods",
        type=_comma_list,
        help=f"comma-separated (default: the benchmark's): {','.join(method_names('tasks'))}",
    )
    parser.add_argument(
        "--coreset-size", type=int, help="coreset points per task (default: the benchmark's)"
    )
    parser.add_argument(
        "--refit-epochs", type=int, help="epochs of the coreset refit (default: epochs)"
    )
    parser.add_argument("--hidden", type=int, nargs="+", help="hidden layer widths")
    parser.add_argument(
        "--num-tasks",
        type=int,
        help="tasks of a permuted stream, or the first tasks of a fixed one (a quick run)",
    )
    parser.add_argument("--epochs", type=int, help="epochs per task (default: the benchmark's)")
    parser.add_argument("--first-epochs", type=int, help="epochs of the first task")
    parser.add_argument("--batch-size", type=int, help="0 means the whole task")
    parser.add_argument(
        "--lr",
        type=float,
        dest="learning_rate",
        help="Adam's learning rate (default: the benchmark's, else 1e-3)",
    )
    parser.add_argument(
        "--particles",
        type=int,
        dest="num_particles",
        help="Monte Carlo samples per training step (default: the benchmark's, else 10)",
    )
    parser.add_argument(
        "--predictive-samples",
        type=int,
        dest="num_predictive_samples",
        help="posterior samples for each prediction (default: the benchmark's, else 100)",
    )
    parser.add_argument(
        "--ml-init-epochs",
        type=int,
        help="maximum-likelihood epochs before the first task (VCL's initialisation; "
        "default: the benchmark's)",
    )
    parser.add_argument(
        "--init-log-variance",
        type=float,
        help="the guide's initial log-variance (default: -6, the VCL reference code's)",
    )
    parser.add_argument(
        "--between-tasks",
        choices=list(REINIT_POLICIES),
        help="how the guide starts each later task (default: keep, i.e. from the last posterior)",
    )
    parser.add_argument(
        "--init-means",
        choices=list(INIT_MEANS),
        help="the guide's initial means (default: prior)",
    )
    parser.add_argument(
        "--init-precision",
        type=float,
        help="initial guide precision 1/σ² (sets --init-log-variance; VOGN thesis: 1e6)",
    )
    parser.add_argument(
        "--later-init-precision",
        type=float,
        help="precision that re-initialisation resets to after the first task",
    )
    parser.add_argument(
        "--no-local-reparameterization",
        action="store_true",
        help="sample weights instead of pre-activations (default: local reparameterisation)",
    )
    parser.add_argument(
        "--single-head",
        action="store_true",
        help="one head shared by every task of a split stream (the VCL paper's single-head EWC, "
        "figures 12 and 14)",
    )
    parser.add_argument(
        "--validation",
        type=float,
        metavar="FRACTION",
        help="score on this share of each task's training data, held out, instead of the test "
        "set (to choose settings such as --fitter-kl-weight)",
    )
    parser.add_argument(
        "--film",
        action="store_true",
        help="task-specific FiLM layers after every hidden layer, one set per task (GVCL's fix "
        "for over-pruning; mlp and cnn nets)",
    )
    parser.add_argument("--prior-scale", type=float, help="prior standard deviation of the weights")
    parser.add_argument(
        "--lr-decay",
        type=float,
        nargs=2,
        metavar=("RATE", "STEPS"),
        help="multiply the learning rate by RATE every STEPS steps (H-IBP: 0.87 1000)",
    )
    ibp = parser.add_argument_group("Indian Buffet nets (--net ibnn or hibnn)")
    ibp.add_argument(
        "--net",
        choices=list(ARCHITECTURES),
        help="an MLP, a conv net, or an MLP with IBP masks per layer (ibnn) or H-IBP masks "
        "(hibnn); default: the benchmark's",
    )
    ibp.add_argument("--ibp-alpha", type=float, help="the sticks' Beta(α, β) prior: α")
    ibp.add_argument("--ibp-beta", type=float, help="the sticks' Beta(α, β) prior: β")
    ibp.add_argument(
        "--temperatures", type=float, nargs=2, metavar=("POSTERIOR", "PRIOR"), help="λ1 λ2"
    )
    ibp.add_argument("--child-concentration", type=float, help="H-IBP: α_j of every layer")
    ibp.add_argument(
        "--mask-parameterisation",
        choices=list(MASK_PARAMETERISATIONS),
        help="how the Concrete masks are parameterised (default: the net's)",
    )
    add_part_options(parser, "fitter", "fitter options (the methods' fitters that take them)")
    add_part_options(
        parser, "penalty", "penalty options (EWC, online EWC, SI: λ is --penalty-strength)"
    )
    _add_transition_arguments(parser, "between tasks (default: the method's)")
    _add_part_choice(parser, "guide", "guide family (default: mean-field)")
    parser.add_argument(
        "--guide-sites",
        nargs="+",
        metavar="SITE",
        help="sites or module prefixes a full-covariance or low-rank guide joins (default: all)",
    )
    add_training_options(parser)
    generative = parser.add_argument_group("generative benchmarks (generative-*)")
    generative.add_argument(
        "--test-samples", type=int, help="importance samples per test image (paper: 5000)"
    )
    generative.add_argument("--test-points", type=int, help="test images per task (default: all)")
    generative.add_argument(
        "--generated", type=int, help="generated images per head for the classifier uncertainty"
    )
    generative.add_argument("--grid", type=int, help="samples per head in the sample grid")
    generative.add_argument(
        "--classifier-epochs", type=int, help="epochs of the classifier that judges samples"
    )
    parser.add_argument(
        "--forward-transfer",
        action="store_true",
        help="also train each task alone to report FWT and intransigence (doubles the run time)",
    )
    parser.add_argument(
        "--resumable",
        action="store_true",
        help="save each run after every task in OUTPUT/checkpoint-* and, started again, resume it",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="one run per seed (default: 0)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when there is one)")
    parser.add_argument("--output", type=Path, help="folder for results.json and accuracy.png")
    _add_log_arguments(parser)
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (shown only on a terminal)"
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")


def parse_script_arguments(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    benchmarks: list[str],
    default_benchmark: str | None = None,
) -> argparse.Namespace:
    """Parse a benchmark script's command line: its own options (already on ``parser``) and
    every ``pyro-cl run`` option; ``--benchmark`` is one of ``benchmarks`` (required unless
    there is a ``default_benchmark``)."""
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    args.benchmark = args.benchmark or default_benchmark
    if args.benchmark not in benchmarks:
        parser.error(f"--benchmark: choose from {', '.join(benchmarks)}")
    return args


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def list_everything() -> str:
    """Benchmarks, methods, and every registered part with its constructor options."""
    lines = ["benchmarks:"]
    lines += [f"  {name:22} {preset.description}" for name, preset in sorted(PRESETS.items())]
    lines.append("methods (pyro-cl run --methods):")
    lines += [f"  {name:22} {METHODS[name].description}" for name in method_names("tasks")]
    lines.append("streams (pyro-cl stream NAME):")
    lines += [f"  {name:22} {preset.describe()}" for name, preset in sorted(STREAM_PRESETS.items())]
    lines.append("online methods (pyro-cl stream --methods):")
    lines += [f"  {name:22} {METHODS[name].description}" for name in method_names("online")]
    for kind, classes in sorted(REGISTRIES.items()):
        lines.append(f"parts of kind {kind!r}:" + ("" if classes else " none registered"))
        for name, cls in sorted(classes.items()):
            options = ", ".join(str(p).replace(" ", "") for p in constructor_parameters(cls))
            lines.append(f"  {name:22} {cls.__module__}.{cls.__qualname__}({options})")
    return "\n".join(lines)


def benchmark_run_from_args(args: argparse.Namespace, **defaults) -> BenchmarkRun:
    """The :class:`BenchmarkRun` that parsed ``pyro-cl run`` options describe; ``defaults``
    (fields of :class:`BenchmarkRun`) fill what the command line left unset."""
    given = dict(
        benchmark=args.benchmark,
        methods=args.methods,
        seeds=args.seeds,
        data_root=args.data_root,
        download=args.download,
        device=args.device,
        output=args.output,
        net=args.net,
        hidden_sizes=args.hidden,
        num_tasks=args.num_tasks,
        coreset_size=args.coreset_size,
        net_options=_net_options(args),
        training=_training_settings(args),
        fitter_options=given_part_options(args, "fitter"),
        penalty_options=given_part_options(args, "penalty"),
        transition=_transition(args),
        guide=_guide(args),
        local_reparameterization=not args.no_local_reparameterization,
        single_head=args.single_head,
        film=args.film,
        validation=args.validation,
        forward_transfer=args.forward_transfer,
        resumable=args.resumable,
        progress=not args.no_progress,
        evaluation=_evaluation_settings(args),
        log_dir=args.log_dir,
        tensorboard=args.tensorboard,
    )
    fields = fill_unset(given, {"benchmark": DEFAULT_PRESET, "data_root": "data", **defaults})
    run = BenchmarkRun(**fields)
    fitters = [METHODS[m].fitter for m in run.method_names]
    check_taken(given["fitter_options"], "fitter", fitters)
    check_taken(given["penalty_options"], "penalty", [METHODS[m].penalty for m in run.method_names])
    return run


#: TrainingConfig settings with a hand-written flag above (a short name, or several settings in
#: one flag); every other setting gets ``--<setting>`` from :func:`add_training_options`.
HAND_WRITTEN_SETTINGS = frozenset(
    {
        "epochs",
        "first_epochs",
        "batch_size",
        "learning_rate",
        "learning_rate_decay",
        "learning_rate_decay_steps",
        "num_particles",
        "num_predictive_samples",
        "ml_init_epochs",
        "init_log_variance",
        "later_init_log_variance",
        "between_tasks",
        "init_means",
        "refit_epochs",
        "progress",
    }
)


def _derived_settings() -> list[tuple[str, type, object, str]]:
    """``(setting, type, default, help)`` of every TrainingConfig setting without a hand-written
    flag, read off the config's dataclasses and their ``:param`` lines."""
    derived = []
    for group in dataclasses.fields(TrainingConfig):
        cls = group.default_factory
        hints = typing.get_type_hints(cls)
        doc = " ".join((cls.__doc__ or "").split())
        for field in dataclasses.fields(cls):
            if field.name in HAND_WRITTEN_SETTINGS:
                continue
            kind = next(
                t
                for t in (bool, float, int, str)
                if t in typing.get_args(hints[field.name]) or hints[field.name] is t
            )
            described = doc.split(f":param {field.name}:")[1:]
            text = described[0].split(":param")[0].strip() if described else field.name
            derived.append((field.name, kind, field.default, text))
    return derived


def add_training_options(parser: argparse.ArgumentParser) -> None:
    """``--<setting>`` for every training setting without a hand-written flag (its type, help
    and default from :class:`~pyro_cl.infer.config.TrainingConfig`; checked there, once)."""
    group = parser.add_argument_group("more training settings (TrainingConfig)")
    for name, kind, default, text in _derived_settings():
        typed = (
            {"action": argparse.BooleanOptionalAction}  # --carry-adam-state / --no-...
            if kind is bool
            else {"type": kind, "metavar": kind.__name__.upper()}
        )
        group.add_argument(
            f"--{name.replace('_', '-')}",
            **typed,
            help=f"{text} (default: {default})".replace("%", "%%"),
        )


def _training_settings(args: argparse.Namespace) -> dict:
    """The :class:`~pyro_cl.infer.config.TrainingConfig` settings given on the command line."""
    names = (
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
    )
    names += tuple(name for name, *_ in _derived_settings())
    settings = {key: getattr(args, key) for key in names if getattr(args, key) is not None}
    if args.batch_size is not None:
        settings["batch_size"] = args.batch_size or None
    for flag in ("init_precision", "later_init_precision"):
        precision = getattr(args, flag)
        if precision is not None:
            if not (math.isfinite(precision) and precision > 0):
                raise ValueError(f"--{flag.replace('_', '-')} must be positive, got {precision}")
            settings[flag.replace("precision", "log_variance")] = -math.log(precision)
    if args.lr_decay is not None:
        settings["learning_rate_decay"] = args.lr_decay[0]
        settings["learning_rate_decay_steps"] = int(args.lr_decay[1])
    return settings


def _evaluation_settings(args: argparse.Namespace) -> dict:
    """The generative benchmarks' scoring settings given on the command line."""
    names = ("test_samples", "test_points", "generated", "grid", "classifier_epochs")
    return {key: getattr(args, key) for key in names if getattr(args, key) is not None}


def _net_options(args: argparse.Namespace) -> dict:
    """The net's constructor arguments given on the command line."""
    options = {
        "prior_scale": args.prior_scale,
        "alpha": args.ibp_alpha,
        "beta": args.ibp_beta,
        "child_concentration": args.child_concentration,
        "mask_parameterisation": args.mask_parameterisation,
    }
    if args.temperatures is not None:
        options["posterior_temperature"], options["prior_temperature"] = args.temperatures
    return {key: value for key, value in options.items() if value is not None}


def _transition(args: argparse.Namespace) -> Transition | None:
    return _chosen_part(args, "transition")


def _guide(args: argparse.Namespace) -> GuideFamily | None:
    sites = {"sites": args.guide_sites} if args.guide_sites else {}
    return _chosen_part(args, "guide", sites)


def _chosen_part(args: argparse.Namespace, kind: str, extra: dict | None = None):
    """The part ``--<kind> NAME`` chose, built from its ``--<kind>-*`` options (and ``extra``
    arguments), or ``None`` when none was chosen."""
    options = {**given_part_options(args, kind), **(extra or {})}
    chosen = getattr(args, kind)
    if chosen is None:
        if options:
            raise ValueError(f"{kind} options {sorted(options)} need --{kind}")
        return None
    cls = REGISTRIES[kind][chosen]
    check_taken(options, kind, [cls])
    required = [
        parameter.name
        for parameter in constructor_parameters(cls)
        if parameter.default is inspect.Parameter.empty and parameter.name not in options
    ]
    if required:
        flags = ", ".join(f"--{kind}-{name.replace('_', '-')}" for name in required)
        raise ValueError(f"--{kind} {chosen} needs {flags}")
    try:
        return cls(**options)
    except (TypeError, OverflowError) as error:
        raise ValueError(f"--{kind} {chosen}: {error}") from error


@contextlib.contextmanager
def command_line_errors(program: str, debug: bool = False) -> Iterator[None]:
    """Turn a user's mistake (a ValueError: bad options or data files; an OSError: missing or
    unreadable files; an optional dependency not installed) into a one-line message and exit
    status 1 instead of a traceback; with ``debug`` (``--debug``) the traceback is kept. Anything
    else is a bug and keeps its traceback."""
    try:
        yield
    except (ValueError, OSError, DivergenceError, OverflowError, MissingExtra) as error:
        if debug:
            raise
        message = " ".join(str(error).split())  # one line, whatever the error's text
        message = message.replace("download=True", "--download")  # the loaders' Python name
        if isinstance(error, DivergenceError):
            message = (
                f"training diverged ({message}), so the run stopped: lower --lr, "
                "or the transition's or penalty's parameters"
            )
        elif isinstance(error, OverflowError):
            message = f"a number overflows ({message}): use smaller option values"
        raise SystemExit(f"{program}: {message}") from None


def join_data_parallel(run: BenchmarkRun) -> tuple[BenchmarkRun, bool]:
    """Under ``torchrun --nproc-per-node N`` (``WORLD_SIZE`` > 1): join the process group (gloo
    on the CPU, NCCL on GPUs, each rank on the GPU of its ``LOCAL_RANK``) and return ``run`` on
    this rank's device; every fit is then data-parallel (:mod:`pyro_cl.infer.data_parallel`).
    Rank 0 prints and writes the results; the other ranks train alongside it silently.

    :returns: the run for this rank, and whether this rank runs silently (not rank 0).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return run, False
    device = init_from_environment(run.resolved_device)
    if is_writer():
        return dataclasses.replace(run, device=device), False
    return dataclasses.replace(run, device=device, output=None), True


@contextlib.contextmanager
def silenced(silent: bool) -> Iterator[None]:
    """Standard output discarded within, when ``silent`` (restored afterwards)."""
    if not silent:
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command != "list":
        with command_line_errors(f"pyro-cl {args.command}"):
            torch.set_num_threads(chosen_threads(args.threads))
    if args.command == "run":
        with command_line_errors("pyro-cl run", args.debug):
            run, silent = join_data_parallel(benchmark_run_from_args(args))
            with silenced(silent):
                run_benchmark(run)
    elif args.command == "stream":
        with command_line_errors("pyro-cl stream", args.debug):
            run = stream_run_from_args(args)
            results = run_stream_benchmark(run)
            print(stream_table(results), end="")
    elif args.command == "domains":
        with command_line_errors("pyro-cl domains"):
            table = run_domain_benchmark(
                args.seeds, args.output, args.stream, args.heads, args.data_root
            )
            print(table, end="")
    elif args.command == "list":
        print(list_everything())
    return 0


if __name__ == "__main__":
    sys.exit(main())
