"""``pyro-cl run --benchmark generative-mnist`` (or ``generative-notmnist``, ``generative-digits``):
every method on every seed, scored after each task, with results.json, figure 6 per run and
figure 7 for all methods."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pyro_cl.app.benchmark_run import BenchmarkRun, check_writable
from pyro_cl.app.continual_run import file_slug, run_loggers
from pyro_cl.app.environment import environment
from pyro_cl.app.generative_metrics import GenerativeEvaluation, run_generative_stream
from pyro_cl.app.generative_plots import plot_generative_metrics, plot_sample_grid
from pyro_cl.app.result import RunResult, method_means
from pyro_cl.data.tasks import TaskStream
from pyro_cl.generative.classifier import (
    classifier_accuracy,
    load_classifier,
    save_classifier,
    train_classifier,
)

__all__ = [
    "judge_classifier",
    "run_generative_benchmark",
    "run_label",
    "write_generative_report",
]


def judge_classifier(
    stream: TaskStream,
    epochs: int,
    device: str,
    path: Path | None = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[torch.nn.Module, float]:
    """The classifier that judges generated images, trained once on every task's training
    images (all classes) and its accuracy on every test image; kept at ``path`` and loaded from
    there when it is already written (a file of another stream is refused by its shape)."""
    x_test = torch.cat([task.x_test for task in stream]).to(device)
    y_test = torch.cat([task.y_test for task in stream]).to(device)
    if path is not None and path.exists():
        classifier, accuracy = load_classifier(path, device)
        if classifier[0].in_features != stream.in_features:
            raise ValueError(f"{path} judges {classifier[0].in_features}-pixel images, not these")
        return classifier, accuracy
    x = torch.cat([task.x_train for task in stream])
    y = torch.cat([task.y_train for task in stream])
    classifier = train_classifier(
        x, y, stream.num_classes, epochs=epochs, seed=seed, device=device, progress=progress
    )
    accuracy = classifier_accuracy(classifier, x_test, y_test)
    if path is not None:
        save_classifier(classifier, path, accuracy)
    return classifier, accuracy


def run_generative_benchmark(run: BenchmarkRun) -> list[RunResult]:
    """Run every method of ``run`` on every seed's one-class stream; after each run print its
    summary and (with ``run.output``) rewrite the report, so an interrupted sweep keeps the runs
    it finished."""
    device = run.resolved_device
    settings = dict(run.resolved_evaluation())
    classifier_epochs = int(settings.pop("classifier_epochs", 10))
    evaluation = GenerativeEvaluation(**settings)
    output = None if run.output is None else Path(run.output)
    if output is not None:
        check_writable(output)
    results = []
    for seed in run.seeds if run.seeds is not None else (0,):
        stream = run.task_stream(seed)
        path = None if output is None else output / f"classifier_seed{seed}.pt"
        classifier, accuracy = judge_classifier(
            stream, classifier_epochs, device, path, seed, run.progress
        )
        print(
            f"{stream.name}: {len(stream)} tasks, VAE decoder on {stream.in_features} pixels, "
            f"device {device}, seed {seed}; judging classifier test accuracy {100 * accuracy:.2f}%"
        )
        for method in run.method_names:
            try:
                learner = run.make_learner(method, stream, seed, device)
            except (TypeError, ValueError) as error:
                raise ValueError(f"method {method!r}: {error}") from error
            label = run_label(method, learner)
            result = run_generative_stream(
                learner,
                stream,
                evaluation,
                classifier,
                accuracy,
                label,
                {
                    "benchmark": run.benchmark,
                    "seed": seed,
                    "device": device,
                    "net": learner.net.config,
                    **learner.config.flat(),
                    "fitter": learner.fitter.spec(),
                    "evaluation": run.resolved_evaluation(),
                },
                verbose=True,
                seed=seed,
                loggers=run_loggers(run.log_dir, f"{label}_seed{seed}", run.tensorboard),
            )
            results.append(result)
            summary = result.summary()
            print(
                f"{label} (seed {seed}): after the last task, mean test-LL "
                f"{summary['test_ll']:.2f}, classifier uncertainty {summary['uncertainty']:.3f} "
                f"[{result.wall_time_s:.0f} s]"
            )
            if output is not None:
                image_shape = stream.input_shape or _square(stream.in_features)
                write_generative_report(results, output)
                plot_sample_grid(
                    result, image_shape, output / f"samples_{file_slug(label)}_{seed}.png"
                )
    if output is not None:
        print(f"\nwrote {output / 'results.json'}, metrics.png and the sample grids")
    return results


def run_label(method: str, learner) -> str:
    """``method``, with ``λ=<strength>`` for a method that has a strength (EWC, SI: the
    penalty's; LP: the fitter's), so that runs of a λ sweep keep apart in one report."""
    fitter = learner.fitter
    part = getattr(fitter, "penalty", None) or fitter
    strength = getattr(part, "strength", None)
    return method if strength is None else f"{method} λ={strength:g}"


def write_generative_report(results: list[RunResult], output: Path) -> Path:
    """``results.json`` (every run) and ``metrics.png`` (figure 7, each method's mean over
    seeds)."""
    output.mkdir(parents=True, exist_ok=True)
    report = {"environment": environment(), "runs": [r.to_json() for r in results]}
    (output / "results.json").write_text(json.dumps(report, indent=2))
    return plot_generative_metrics(method_means(results), output / "metrics.png")


def _square(pixels: int) -> tuple[int, int]:
    side = int(round(pixels**0.5))
    return (side, side) if side * side == pixels else (1, pixels)
