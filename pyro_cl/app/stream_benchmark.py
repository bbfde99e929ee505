"""One command for the stream experiments of Kurle et al. 2020 (sections 6.1 and 6.2): every
method and seed on a stream, optionally over several memory sizes and with a transition between
steps (drifting data), with results.json, a markdown table and the papers' figures (test or
one-step-ahead LML over time, against memory size, and for the two-moons toy the memory in the
plane)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from pyro_cl.app.benchmark_run import check_device, check_positive, check_seeds, check_writable
from pyro_cl.app.continual_run import Metric, Step, run_loggers
from pyro_cl.app.environment import environment
from pyro_cl.app.methods import METHODS, method_names
from pyro_cl.app.online_metrics import run_online
from pyro_cl.app.part_options import accepted
from pyro_cl.app.plotting import plot_memory_snapshots, plot_memory_sweep, plot_online_lml
from pyro_cl.app.result import RunResult
from pyro_cl.app.stream_presets import STREAM_PRESETS, make_online_learner
from pyro_cl.app.task_benchmark import kept_bytes
from pyro_cl.data.streams import OnlineStream
from pyro_cl.metrics import sample_sd
from pyro_cl.transitions.base import Transition

__all__ = ["StreamRun", "run_stream_benchmark", "stream_table"]


@dataclass(frozen=True)
class StreamRun:
    """Everything one online-stream benchmark run needs; unset (``None``) values come from the
    stream's row of table 2 (:data:`~pyro_cl.app.stream_presets.STREAM_PRESETS`).

    :ivar iterations: Adam steps per later time step (``I_{t_1:K}``); ``first_iterations`` those
        of the first (``I_{t_0}``).
    :ivar train_samples: ``K_train``; ``term_samples``: ``K_term``.
    :ivar num_steps: observe only the first ``num_steps`` steps (default: the whole stream).
    :ivar transition: between steps (default: online VB's identity), e.g.
        :class:`~pyro_cl.transitions.diffusion.OrnsteinUhlenbeck` for a drift stream.
    :ivar precision_floor: GRS's floor on the updated precisions, as a fraction of the step's
        prior precision (default: the memory's, 1).
    :ivar local_reparameterization: the paper's estimator (pre-activations); ``False`` draws the
        weights once per Monte Carlo sample (faster here, noisier).
    :ivar log_dir: a CSV log of losses, timings and metrics per run, and with ``tensorboard``
        TensorBoard event files beside it.
    """

    stream: str
    methods: tuple[str, ...] = ("grs", "kcenter", "random")
    seeds: tuple[int, ...] = (0,)
    memory_sizes: tuple[int, ...] | None = None
    data_root: str = "data"
    download: bool = False
    device: str = "cpu"
    output: Path | None = None
    iterations: int | None = None
    first_iterations: int | None = None
    train_samples: int | None = None
    term_samples: int | None = None
    num_steps: int | None = None
    learning_rate: float | None = None
    predictive_samples: int = 100
    progress: bool = True
    transition: Transition | None = None
    log_dir: Path | None = None
    tensorboard: bool = False
    precision_floor: float | None = None
    local_reparameterization: bool = True

    def __post_init__(self) -> None:
        if self.stream not in STREAM_PRESETS:
            raise ValueError(
                f"unknown stream {self.stream!r}; choose from {sorted(STREAM_PRESETS)}"
            )
        online = method_names("online")
        unknown = [m for m in self.methods if m not in online]
        if unknown or not self.methods:
            raise ValueError(f"unknown online methods {unknown}; choose from {online}")
        if not self.seeds:
            raise ValueError("give at least one seed")
        check_seeds(self.seeds)
        for size in self.memory_sizes or ():
            check_positive(size, "memory size")
        for name in (
            "iterations",
            "first_iterations",
            "train_samples",
            "term_samples",
            "num_steps",
            "predictive_samples",
        ):
            check_positive(getattr(self, name), name.replace("_", " "))
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning rate must be positive, got {self.learning_rate}")
        check_device(self.device)
        if self.tensorboard and self.log_dir is None:
            raise ValueError("tensorboard needs a log_dir to write to (--log-dir)")
        if self.precision_floor is not None and not any(
            _takes_precision_floor(m) for m in self.methods
        ):
            raise ValueError("--precision-floor is GRS's: none of the chosen methods uses it")
        if self.transition is not None and not isinstance(self.transition, Transition):
            raise TypeError(f"transition must be a Transition, got {self.transition!r}")

    def settings(self) -> dict:
        """The schedule actually used, preset values filled in."""
        preset = STREAM_PRESETS[self.stream]
        return {
            "memory_sizes": list(self.memory_sizes or (preset.memory_size,)),
            "iterations": self.iterations or preset.iterations,
            "first_iterations": self.first_iterations or preset.first_iterations,
            "train_samples": self.train_samples or preset.train_samples,
            "term_samples": self.term_samples or preset.term_samples,
            "hidden_sizes": list(preset.hidden_sizes),
            "first_size": preset.first_size,
            "step_size": preset.step_size,
            "training": {
                **dict(preset.settings),
                "learning_rate": self.learning_rate
                or dict(preset.settings).get("learning_rate", 1e-3),
            },
        }


def run_stream_benchmark(run: StreamRun, metrics: Sequence[Metric] = ()) -> list[RunResult]:
    """Run every memory size × method × seed of ``run``; write results.json, table.md and the
    figures into ``run.output`` (when set). Returns the results.

    :param metrics: measured in every run besides the LMLs (e.g. tracks of the weights).
    """
    output = run.output
    if output is not None:
        check_writable(output)
    preset = STREAM_PRESETS[run.stream]
    settings = run.settings()
    results, snapshots = [], []
    for seed in run.seeds:
        stream = preset.stream(run.data_root, seed, run.download, run.num_steps)
        for memory_size in settings["memory_sizes"]:
            for method in run.methods:
                learner = make_online_learner(
                    method,
                    stream,
                    preset.hidden_sizes,
                    memory_size,
                    settings["term_samples"],
                    seed=seed,
                    device=run.device,
                    transition=copy.deepcopy(run.transition),
                    prior_scale=preset.prior_scale,
                    epochs=settings["iterations"],
                    first_epochs=settings["first_iterations"],
                    num_particles=settings["train_samples"],
                    num_predictive_samples=run.predictive_samples,
                    memory_options=_memory_options(run, method),
                    local_reparameterization=run.local_reparameterization,
                    **settings["training"],
                )
                extra = list(metrics)
                if stream.in_features == 2 and method == "grs" and seed == run.seeds[0]:
                    extra.insert(0, MemorySnapshots(stream, snapshots))
                name = f"{method}_M{memory_size}_seed{seed}"
                result = run_online(
                    learner,
                    stream,
                    method,
                    seed,
                    progress=run.progress,
                    metrics=extra,
                    loggers=run_loggers(run.log_dir, name, run.tensorboard),
                )
                result.details["kept_bytes"] = kept_bytes(learner)  # the memory's, at the end
                results.append(result)
    if output is not None:
        _write(run, settings, results, snapshots, output)
    return results


def _takes_precision_floor(method: str) -> bool:
    memory = METHODS[method].memory
    return memory is not None and "precision_floor" in accepted(memory)


def _memory_options(run: StreamRun, method: str) -> dict:
    """The run's memory settings that ``method``'s memory takes."""
    if run.precision_floor is None or not _takes_precision_floor(method):
        return {}
    return {"precision_floor": run.precision_floor}


class MemorySnapshots(Metric):
    """Keeps the memory, its scores and the predictive on a grid at the first, middle and
    last steps of a two-dimensional stream (Kurle et al. 2020, figure 3) in ``snapshots``."""

    def __init__(self, stream: OnlineStream, snapshots: list) -> None:
        self.stream = stream
        self.snapshots = snapshots
        self.chosen = {0, len(stream) // 2, len(stream) - 1}

    def after_step(self, learner, step: Step, seconds: float) -> None:
        if step.index not in self.chosen:
            return
        stream = self.stream
        data = torch.cat([s.x for s in stream.steps[: step.index + 1]])
        low, high = data.min(0).values - 0.5, data.max(0).values + 0.5
        axes = [torch.linspace(low[i].item(), high[i].item(), 80) for i in range(2)]
        grid = torch.stack(torch.meshgrid(*axes, indexing="xy"), -1).reshape(-1, 2)
        probability = learner.predict(grid)[:, 1].reshape(80, 80)
        self.snapshots.append(
            {
                "step": step.index,
                "axes": [a.tolist() for a in axes],
                "probability": probability.tolist(),
                "seen": data.tolist(),
                "current": step.source.x.tolist(),
                "memory": learner.memory_points.x.tolist(),
                "memory_labels": learner.memory_points.y.tolist(),
                "scores": learner.memory.scores.tolist(),
            }
        )


def stream_table(results: list[RunResult]) -> str:
    """Markdown: mean ± std over seeds of the test LML averaged over the last 10% of steps, and
    the one-step-ahead LML and seconds per step, per memory size and method."""
    rows = {}
    for result in results:
        rows.setdefault((result.details["memory_size"], result.label), []).append(result.summary())
    window = "last 10%" if any(result.series.get("test_lml") for result in results) else "last 50%"
    lines = [
        f"| memory | method | test LML ({window}) | one-step-ahead LML | one-step-ahead acc. "
        "| s/step | seeds |",
        "| ---: | --- | --- | --- | --- | ---: | ---: |",
    ]
    for (size, label), summaries in rows.items():
        cells = [
            _mean_std([s[key] for s in summaries])
            for key in ("test_lml", "one_step_ahead_lml", "one_step_ahead_accuracy")
        ]
        seconds = np.mean([s["seconds_per_step"] for s in summaries])
        lines.append(
            f"| {size} | {label} | {' | '.join(cells)} | {seconds:.2f} | {len(summaries)} |"
        )
    return "\n".join(lines) + "\n"


def _mean_std(values: list[float]) -> str:
    """``mean ± std``, or ``-`` where nothing was measured (NaN)."""
    array = np.array(values, dtype=float)
    if np.isnan(array).all():
        return "-"
    return f"{array.mean():.3f} ± {sample_sd(array):.3f}"


def _write(run: StreamRun, settings: dict, results, snapshots, output: Path) -> None:
    description = {
        **{k: v for k, v in asdict(run).items() if k not in ("output", "transition")},
        "transition": None if run.transition is None else run.transition.spec(),
        "settings": settings,
    }
    payload = {
        "environment": environment(),
        "run": description,
        "results": [r.to_json() for r in results],
    }
    (output / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    (output / "table.md").write_text(stream_table(results))
    plot_online_lml(results, output / "test_lml_over_time.png")
    if len(settings["memory_sizes"]) > 1:
        plot_memory_sweep(results, output / "test_lml_vs_memory_size.png")
    if snapshots:
        plot_memory_snapshots(snapshots, output / f"memory_{run.stream}.png")
