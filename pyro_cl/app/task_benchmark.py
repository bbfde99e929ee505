"""A task benchmark run: every method of a :class:`~pyro_cl.app.benchmark_run.BenchmarkRun` on
every seed's task stream, with accuracy matrices printed and ``results.json`` and
``accuracy.png`` written as runs finish."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from pyro_cl.app.benchmark_run import BenchmarkRun, check_writable
from pyro_cl.app.continual_run import file_slug, run_loggers
from pyro_cl.app.environment import environment
from pyro_cl.app.methods import METHODS
from pyro_cl.app.plotting import plot_accuracy, plot_final_accuracies
from pyro_cl.app.result import RunResult, method_means, summarise
from pyro_cl.app.task_metrics import forget_fresh_fits, fresh_fits, run_stream
from pyro_cl.learner import ContinualLearner

__all__ = ["run_task_benchmark", "write_report"]


def run_task_benchmark(run: BenchmarkRun) -> list[RunResult]:
    """Run every method of ``run`` on every seed's stream; print each accuracy matrix and the
    summary, and (with ``run.output``) write ``results.json`` and ``accuracy.png`` after every
    run, so an interrupted sweep keeps the runs it finished.

    :raises ValueError: when a method cannot be built with the run's options (the message names
        the method).
    """
    device = run.resolved_device
    coreset_size = run.resolved_coreset_size
    hidden = run.resolved_hidden_sizes
    output = None if run.output is None else Path(run.output)
    if output is not None:
        check_writable(output)
    results = []
    for seed in run.seeds if run.seeds is not None else (0,):
        stream = run.task_stream(seed)
        if run.validation is not None:
            stream = stream.validation(run.validation, seed)
        print(
            f"{stream.name}: {len(stream)} tasks, net {stream.in_features}-"
            f"{'-'.join(map(str, hidden))}-{stream.num_classes}"
            f"{' multi-head' if stream.multi_head else ''}, device {device}, seed {seed}"
        )
        for method in run.method_names:
            spec = METHODS[method]
            make_learner = functools.partial(run.make_learner, method, stream, seed, device)
            try:
                learner = make_learner()
            except (TypeError, ValueError) as error:
                raise ValueError(f"method {method!r}: {error}") from error
            flat = learner.config.flat()
            settings = {
                "benchmark": run.benchmark,
                "net": run.architecture,
                "net_options": run.resolved_net_options(),
                "hidden_sizes": list(hidden),
                "seed": seed,
                # scored on a held-out share of the training data, not the test sets
                "validation": run.validation,
                "device": device,
                "coreset_size": coreset_size if spec.memory is not None else None,
                **flat,  # every training setting the learner runs with
                "fitter": learner.fitter.spec(),
                "transition": learner.transition.spec(),
                "guide": learner.guide_family.spec(),
            }
            loggers = run_loggers(run.log_dir, f"{run.label(method)}_seed{seed}", run.tensorboard)
            checkpoint = None
            if run.resumable:
                checkpoint = output / f"checkpoint-{file_slug(run.label(method))}-seed{seed}"
            if run.forward_transfer:  # first, each kept in the checkpoint as it ends
                scratch = fresh_fits(make_learner, stream, checkpoint, settings)
            result = run_stream(
                learner,
                stream,
                run.label(method),
                settings,
                seed=seed,
                loggers=loggers,
                checkpoint=checkpoint,
                task_free=run.task_free,
            )
            result.details["kept_bytes"] = kept_bytes(learner)
            if run.forward_transfer:
                result.details["scratch_accuracy"] = scratch.accuracy
                result.details["scratch_wall_time_s"] = scratch.seconds
                if checkpoint is not None:
                    forget_fresh_fits(checkpoint)
            results.append(result)
            if output is not None:
                write_report(results, output)
            _print_result(result, seed)
    _print_summary(results, run.seeds)
    if output is not None:
        print(f"\nwrote {output / 'results.json'} and {output / 'accuracy.png'}")
    return results


def kept_bytes(learner: ContinualLearner) -> int:
    """The bytes ``learner`` keeps between tasks beside its posterior: every tensor its memory
    keeps (:meth:`~pyro_cl.memory.Memory.kept_state`: its points, or a generated replay's
    generator) and of its fitter's context source's state (a function-space fitter's kept
    points or input moments), as held in memory."""
    kept = [] if learner.memory is None else [learner.memory.kept_state(learner.memory_points)]
    context = getattr(learner.fitter, "context", None)
    if context is not None:
        kept.append(context.state_dict())
    return sum(_tensor_bytes(state) for state in kept)


def _tensor_bytes(state: Mapping | torch.Tensor | object) -> int:
    if isinstance(state, torch.Tensor):
        return state.nelement() * state.element_size()
    if isinstance(state, Mapping):
        return sum(_tensor_bytes(value) for value in state.values())
    return 0


def _print_result(result: RunResult, seed: int) -> None:
    label = result.method
    print(f"\n{label} (seed {seed}): accuracy after each task (rows) on each task")
    print(result.format_matrix())
    bwt = "" if result.bwt is None else f", BWT {100 * result.bwt:+.2f}"
    fwt = "" if result.fwt is None else f", FWT {100 * result.fwt:+.2f}"
    print(f"{label}: ACC {100 * result.acc:.2f}%{bwt}{fwt}  ({result.wall_time_s:.1f} s)")
    fresh = (
        ""
        if result.intransigence is None
        else (f", intransigence {100 * result.intransigence:+.2f} against a fresh fit of each task")
    )
    pruning = result.pruning_after_last_step()
    pruned = (
        ""
        if pruning is None
        else (
            f"; after the last task {100 * pruning['share_at_prior']:.0f}% of the hidden weights at "
            f"the prior, {pruning['units_in_use']} hidden units in use"
        )
    )
    print(f"{label}: just learnt {100 * result.just_learnt:.2f}%{fresh}{pruned}")


def _print_summary(results: list[RunResult], seeds: Sequence[int] | None) -> None:
    if seeds is not None and len(seeds) > 1:
        print("\nmean ± std over seeds " + ", ".join(map(str, seeds)))
    for method, row in summarise(results).items():
        print(
            f"{method}: ACC {100 * row['ACC_mean']:.2f} ± {100 * row['ACC_std']:.2f}% "
            f"over {row['runs']} run(s), {row['wall_time_s_mean']:.0f} s each"
        )


def write_report(results: list[RunResult], output: Path) -> Path:
    """``results.json`` (summary and every run), ``accuracy.png`` (mean over seeds) and
    ``final_accuracy.png`` (each task after the last, mean ± std over the finished seeds)."""
    output.mkdir(parents=True, exist_ok=True)
    report = {
        "environment": environment(),
        "summary": summarise(results),
        "runs": [r.to_json() for r in results],
    }
    (output / "results.json").write_text(json.dumps(report, indent=2))
    plot_final_accuracies(results, output / "final_accuracy.png")
    return plot_accuracy(method_means(results), output / "accuracy.png")
