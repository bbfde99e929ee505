"""The one result type of every run: task streams, online and drift streams, generative streams.

A run observes a sequence of steps (a task, a time step of an online stream, a one-class task
of a continual VAE); its metrics (:mod:`pyro_cl.app.continual_run`) write what they measured
into one :class:`RunResult`:

* ``matrices[name][i, j]`` — a score of task ``j`` after step ``i`` (NaN for ``j > i``):
  ``accuracy`` and ``log_likelihood`` of a task stream, ``test_ll`` and ``uncertainty`` of a
  generative one;
* ``series[name][i]`` — one value per step: ``test_lml``, ``one_step_ahead`` (the LML of step
  ``i + 1`` under the posterior after step ``i``), ``step_seconds``, ``memory_sizes``, ...;
  every run has ``training_seconds`` (in ``observe``) and ``evaluation_seconds`` (in the
  metrics), so a run's cost splits into fitting and measuring;
* ``details`` — what a metric records once (FWT's scratch accuracies and their training time
  ``scratch_wall_time_s``, IBP active units, the judging classifier's accuracy, the memory size
  and transition of an online run).

:meth:`RunResult.summary` reads whichever of them the run has: ACC/BWT/FWT from an accuracy
matrix (the VOGN thesis's eq. 64-66), the generative test-LL and uncertainty after the last task
(VCL section 6.2), the online LMLs averaged over the last steps (Kurle et al. 2020, table 1).
The tables, plots, ``reproduce.py`` and ``results.json`` all read this one type.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyro_cl.inspection import shared_sites
from pyro_cl.metrics import (
    average_accuracy,
    average_accuracy_curve,
    backward_transfer,
    forward_transfer,
    intransigence,
    sample_sd,
)

__all__ = ["RunResult", "last_fraction_mean", "mean_result", "method_means", "summarise"]


def last_fraction_mean(values: list[float], fraction: float = 0.1) -> float:
    """The mean of the last ``ceil(fraction · len)`` values (at least one)."""
    if not values:
        return math.nan
    count = max(1, math.ceil(fraction * len(values)))
    return float(np.mean(values[-count:]))


def _matrix_to_json(matrix: np.ndarray) -> list:
    return np.where(np.isnan(matrix), None, matrix).tolist()


def _matrix_from_json(rows: list) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


@dataclass
class RunResult:
    """What one run of one method over one stream measured (module docstring).

    :ivar step_names: one name per observed step (a task's name, a time step's index; a
        task-free run's tasks, its batches counted in ``details["task_free_batches"]``).
    :ivar samples: a generative run's grid of samples, ``[after i, head j, image, pixel]``
        (kept in memory for the figures, not written to JSON).
    """

    method: str
    stream: str
    step_names: list[str]
    seed: int | None = None
    wall_time_s: float = 0.0
    settings: dict = field(default_factory=dict)
    matrices: dict[str, np.ndarray] = field(default_factory=dict)
    series: dict[str, list] = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    samples: np.ndarray | None = None

    # -- task streams -------------------------------------------------------------------------

    @property
    def accuracy(self) -> np.ndarray:
        """The accuracy matrix: ``accuracy[i, j]`` on task ``j`` after step ``i``."""
        return self.matrices["accuracy"]

    @property
    def acc(self) -> float:
        """ACC: the mean accuracy over all tasks after the last one (thesis eq. 64)."""
        return average_accuracy(self.accuracy)

    @property
    def bwt(self) -> float | None:
        """BWT (thesis eq. 65), ``None`` for a one-task stream."""
        return backward_transfer(self.accuracy) if len(self.step_names) > 1 else None

    @property
    def fwt(self) -> float | None:
        """FWT (thesis eq. 66), with the scratch accuracies ``details["scratch_accuracy"]``."""
        scratch = self.details.get("scratch_accuracy")
        if scratch is None or len(self.step_names) < 2:
            return None
        return forward_transfer(self.accuracy, scratch)

    @property
    def calibration_error(self) -> float | None:
        """The mean expected calibration error over all tasks after the last one (``None`` for
        runs recorded without it)."""
        matrix = self.matrices.get("calibration_error")
        return None if matrix is None else float(np.nanmean(matrix[-1]))

    @property
    def just_learnt(self) -> float:
        """The mean accuracy on each task right after learning it (the matrix's diagonal)."""
        return float(np.mean(np.diagonal(self.accuracy)))

    @property
    def intransigence(self) -> float | None:
        """Intransigence against a fresh fit of each task alone (:func:`~pyro_cl.metrics.
        intransigence`), with ``details["scratch_accuracy"]``; ``None`` without them."""
        scratch = self.details.get("scratch_accuracy")
        return None if scratch is None else intransigence(self.accuracy, scratch)

    def pruning_after_last_step(self) -> dict | None:
        """``{"share_at_prior", "units_in_use"}`` after the last step, averaged (shares) and
        summed (units) over the shared hidden layers (heads and FiLM layers left out), from the
        pruning metric's ``details``; ``None`` where it did not run or the net has no shared
        hidden layer."""
        shares, units = self.details.get("share_at_prior"), self.details.get("units_in_use")
        if not shares:
            return None
        hidden = shared_sites(units[-1])
        if not hidden:
            return None
        return {
            "share_at_prior": float(np.mean([shares[-1][name] for name in hidden])),
            "units_in_use": int(sum(units[-1][name] for name in hidden)),
        }

    # -- online streams -----------------------------------------------------------------------

    @property
    def label(self) -> str:
        """``method`` and an online run's transition with its arguments, e.g.
        ``none + wiener(diffusion=0.1)``."""
        transition = self.details.get("transition") or {}
        if not transition or transition.get("name") == "identity":
            return self.method
        arguments = ", ".join(
            f"{k}={v}" for k, v in transition.items() if k not in ("kind", "name") and v is not None
        )
        return f"{self.method} + {transition['name']}({arguments})"

    # -- every run ----------------------------------------------------------------------------

    def summary(self, fraction: float | None = None) -> dict:
        """The run's headline numbers, from whichever metrics it has.

        :param fraction: online runs: average the per-step LMLs over the last ``fraction`` of
            the steps (default: 10% with a test set, 50% without: table 1 and section 6.2).
        """
        summary: dict = {"wall_time_s": self.wall_time_s}
        if "accuracy" in self.matrices:
            summary.update(
                ACC=self.acc,
                BWT=self.bwt,
                FWT=self.fwt,
                ECE=self.calibration_error,
                just_learnt=self.just_learnt,
                intransigence=self.intransigence,
                **(self.pruning_after_last_step() or {}),
                average_accuracy_after_each_task=average_accuracy_curve(self.accuracy).tolist(),
            )
        if "test_ll" in self.matrices:
            summary["test_ll"] = float(np.mean(self.matrices["test_ll"][-1]))
            summary["uncertainty"] = float(np.mean(self.matrices["uncertainty"][-1]))
        if "one_step_ahead" in self.series:
            test_lml = self.series.get("test_lml", [])
            if fraction is None:
                fraction = 0.1 if test_lml else 0.5
            seconds = self.series.get("step_seconds", [])
            summary.update(
                test_lml=last_fraction_mean(test_lml, fraction),
                one_step_ahead_lml=last_fraction_mean(self.series["one_step_ahead"], fraction),
                one_step_ahead_accuracy=last_fraction_mean(
                    self.series.get("one_step_ahead_accuracy", []), fraction
                ),
                seconds_per_step=float(np.mean(seconds)) if seconds else 0.0,
            )
        return summary

    def to_json(self) -> dict:
        """A JSON-ready dict (without ``samples``); :meth:`from_json` reads it back."""
        return {
            "method": self.method,
            "label": self.label,
            "stream": self.stream,
            "seed": self.seed,
            "step_names": self.step_names,
            "wall_time_s": self.wall_time_s,
            "summary": self.summary(),
            "matrices": {k: _matrix_to_json(v) for k, v in self.matrices.items()},
            "series": self.series,
            "details": self.details,
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, payload: dict, samples: np.ndarray | None = None) -> RunResult:
        """The result :meth:`to_json` wrote (its summary is recomputed)."""
        return cls(
            method=payload["method"],
            stream=payload["stream"],
            step_names=list(payload["step_names"]),
            seed=payload.get("seed"),
            wall_time_s=float(payload.get("wall_time_s", 0.0)),
            settings=dict(payload.get("settings", {})),
            matrices={k: _matrix_from_json(v) for k, v in payload.get("matrices", {}).items()},
            series={k: list(v) for k, v in payload.get("series", {}).items()},
            details=dict(payload.get("details", {})),
            samples=samples,
        )

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    def format_matrix(self, name: str = "accuracy") -> str:
        """Matrix ``name`` as text, one row per step (percentages for the accuracy)."""
        matrix = self.matrices[name]
        width = max(7, *(len(step) for step in self.step_names))
        header = f"{'after':>{width}} | " + " ".join(f"{n:>{width}}" for n in self.step_names)
        lines = [header, "-" * len(header)]
        for i, row in enumerate(matrix):
            cells = " ".join(
                " " * width
                if np.isnan(v)
                else (f"{100 * v:{width - 1}.2f}%" if name == "accuracy" else f"{v:{width}.3f}")
                for v in row
            )
            lines.append(f"{self.step_names[i]:>{width}} | {cells}")
        return "\n".join(lines)


def mean_result(results: list[RunResult]) -> RunResult:
    """The element-wise mean of several runs of one method on one stream (e.g. over seeds):
    every matrix and every series of equal length averaged; the first run's details and
    samples."""
    if not results:
        raise ValueError("no results to average")
    first = results[0]
    if any(r.method != first.method or r.step_names != first.step_names for r in results):
        raise ValueError("can only average runs of the same method on the same steps")
    series = {}
    for name, values in first.series.items():
        if all(len(r.series.get(name, ())) == len(values) for r in results):
            series[name] = np.mean([r.series[name] for r in results], axis=0).tolist()
    label = first.method if len(results) == 1 else f"{first.method} (mean of {len(results)})"
    return RunResult(
        method=label,
        stream=first.stream,
        step_names=first.step_names,
        wall_time_s=float(np.mean([r.wall_time_s for r in results])),
        settings=first.settings,
        matrices={k: np.mean([r.matrices[k] for r in results], axis=0) for k in first.matrices},
        series=series,
        details={k: v for k, v in first.details.items() if not k.startswith("scratch_")},
        samples=first.samples,
    )


def method_means(results: list[RunResult]) -> list[RunResult]:
    """One :func:`mean_result` per method of ``results``, in order of first appearance."""
    methods = dict.fromkeys(r.method for r in results)
    return [mean_result([r for r in results if r.method == m]) for m in methods]


def summarise(results: list[RunResult]) -> dict[str, dict]:
    """Per method of task-stream runs: mean and standard deviation (ddof 0) over runs of ACC
    and BWT, and the runs' count and mean wall time."""
    summary = {}
    for method in dict.fromkeys(r.method for r in results):
        runs = [r for r in results if r.method == method]
        acc = np.array([r.acc for r in runs])
        bwt = np.array([np.nan if r.bwt is None else r.bwt for r in runs])
        summary[method] = {
            "runs": len(runs),
            "ACC_mean": float(acc.mean()),
            "ACC_std": sample_sd(acc),
            "BWT_mean": float(bwt.mean()),
            "BWT_std": sample_sd(bwt),
            "ACC_per_run": acc.tolist(),
            "wall_time_s_mean": float(np.mean([r.wall_time_s for r in runs])),
        }
    return summary
