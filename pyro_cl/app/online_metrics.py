"""Running a learner along an online stream and measuring it (Kurle et al. 2020, section 6).

After every step ``t_k`` the learner's predictive (``q̃_{t_k}``) is scored by

* the average **test log marginal likelihood** ``1/N Σ_n log E_q̃[p(d_n | w)]`` on the held-out
  set, a log-mean-exp over posterior samples; and, before step ``t_{k+1}`` is observed,
* the average **one-step-ahead log marginal likelihood** on ``D_{t_{k+1}}`` (and accuracy, for
  classification).

:meth:`StreamResult.summary` averages them over the last 10% of the steps (table 1); drift
streams (no test set) are summarised over the last 50% (section 6.2).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from pyro_cl.data.streams import OnlineStream
from pyro_cl.infer.learner import ContinualLearner

__all__ = ["StreamResult", "run_online", "last_fraction_mean"]


def last_fraction_mean(values: list[float], fraction: float = 0.1) -> float:
    """The mean of the last ``ceil(fraction · len)`` values (at least one)."""
    if not values:
        return math.nan
    count = max(1, math.ceil(fraction * len(values)))
    return float(np.mean(values[-count:]))


@dataclass
class StreamResult:
    """Per-step measurements of one run (JSON-ready).

    ``one_step_ahead[k]`` is the LML of step ``k + 1``'s data under the posterior after step
    ``k``; ``memory_seconds`` the part of ``step_seconds`` spent on the memory update (factors,
    scores and Gaussian update) where the memory reports it.
    """

    stream: str
    method: str
    seed: int
    memory_size: int
    #: The transition's spec (``{"kind", "name", **arguments}``); empty for online VB's identity.
    transition: dict = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    test_lml: list[float] = field(default_factory=list)
    one_step_ahead: list[float] = field(default_factory=list)
    one_step_ahead_accuracy: list[float] = field(default_factory=list)
    memory_sizes: list[int] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    memory_seconds: list[float] = field(default_factory=list)
    clipped: list[int] = field(default_factory=list)

    def summary(self, fraction: float | None = None) -> dict[str, float]:
        """Test and one-step-ahead LML (and accuracy) averaged over the last ``fraction`` of the
        steps (default: 10% with a test set, 50% without), and the mean seconds per step."""
        if fraction is None:
            fraction = 0.1 if self.test_lml else 0.5
        return {
            "test_lml": last_fraction_mean(self.test_lml, fraction),
            "one_step_ahead_lml": last_fraction_mean(self.one_step_ahead, fraction),
            "one_step_ahead_accuracy": last_fraction_mean(self.one_step_ahead_accuracy, fraction),
            "seconds_per_step": float(np.mean(self.step_seconds)) if self.step_seconds else 0.0,
        }

    @property
    def label(self) -> str:
        """``method`` and the transition with its arguments, e.g. ``none + wiener(diffusion=0.1)``."""
        if not self.transition or self.transition.get("name") == "identity":
            return self.method
        arguments = ", ".join(
            f"{k}={v}"
            for k, v in self.transition.items()
            if k not in ("kind", "name") and v is not None
        )
        return f"{self.method} + {self.transition['name']}({arguments})"

    def to_json(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    @classmethod
    def from_json(cls, payload: dict) -> StreamResult:
        """The result :meth:`to_json` wrote (its summary is recomputed)."""
        return cls(**{k: v for k, v in payload.items() if k != "summary"})

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))


def run_online(
    learner: ContinualLearner,
    stream: OnlineStream,
    method: str = "",
    seed: int = 0,
    num_samples: int | None = None,
    progress: bool = True,
    on_step=None,
) -> StreamResult:
    """Observe ``stream`` step by step with ``learner`` and measure it after every step (on the
    test set, when the stream has one).

    :param num_samples: posterior samples for the marginal likelihoods (the learner's
        ``num_predictive_samples`` by default; the paper's drift experiments use 500).
    :param on_step: called as ``on_step(learner, step)`` after each step (e.g. to draw figure 3).
    """
    memory = learner.memory
    result = StreamResult(
        stream.name,
        method,
        seed,
        0 if memory is None else memory.size,
        transition=learner.transition.spec(),
    )
    steps = tqdm(
        stream.steps, desc=f"{stream.name} {method}", disable=None if progress else True
    )  # only on a terminal
    for step in steps:
        if step.index > 0:
            ahead = learner.evaluate(step.data, num_samples=num_samples)
            result.one_step_ahead.append(ahead["log_likelihood"])
            if "accuracy" in ahead:
                result.one_step_ahead_accuracy.append(ahead["accuracy"])
        start = time.perf_counter()
        learner.observe(step.data, time=step.time)
        result.step_seconds.append(time.perf_counter() - start)
        statistics = getattr(memory, "statistics", {})
        result.memory_seconds.append(float(statistics.get("seconds", 0.0)))
        result.clipped.append(int(statistics.get("clipped", 0)))
        result.times.append(step.time)
        result.memory_sizes.append(
            0 if learner.memory_points is None else len(learner.memory_points)
        )
        if stream.test is not None:
            lml = learner.evaluate(stream.test, num_samples=num_samples)["log_likelihood"]
            result.test_lml.append(lml)
            steps.set_postfix(test_lml=f"{lml:.3f}")
        elif result.one_step_ahead:
            steps.set_postfix(one_step_ahead=f"{result.one_step_ahead[-1]:.3f}")
        if on_step is not None:
            on_step(learner, step)
    return result
