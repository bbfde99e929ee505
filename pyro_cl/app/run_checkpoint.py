"""A run that resumes: the learner and what the metrics measured, saved after every step.

A benchmark at a paper's schedule runs for hours on a CPU, and a session, a job's time limit or a
closed laptop ends it. With ``run_continual(checkpoint=folder)`` the runner writes, after every
step, one file ``folder/run.pt``: the steps done, the learner's whole state (its posterior, its
parts' states and its random streams: :func:`~pyro_cl.learner.checkpoint.learner_state`), each
metric's :meth:`Resumable.measured` and the seconds so far. Started
again with the same folder, a learner built the same way and the same metrics, the run puts the
saved state into them and goes on after the last saved step, drawing from the learner's saved
random streams: it ends where the uninterrupted run ends. The file is written atomically, so a
run stopped while writing resumes from the step before, and read without unpickling code
(:mod:`pyro_cl.serialization`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pyro_cl.learner.checkpoint import restore_learner
from pyro_cl.serialization import atomic_save, safe_load

if TYPE_CHECKING:
    from pyro_cl.learner.learner import ContinualLearner

__all__ = ["RUN_FORMAT", "Resumable", "RunCheckpoint"]

#: The format of a run's checkpoint file.
RUN_FORMAT = "pyro_cl.run/1"


@runtime_checkable
class Resumable(Protocol):
    """What a run's checkpoint asks of a metric: its state so far (tensors and plain
    containers), and that state put back."""

    def measured(self) -> dict[str, Any]: ...

    def load_measured(self, state: dict[str, Any]) -> None: ...


class RunCheckpoint:
    """The checkpoint of one run of the steps ``step_names`` in ``folder``."""

    def __init__(self, folder: str | Path, step_names: Sequence[str]) -> None:
        self.folder = Path(folder)
        self.step_names = list(step_names)
        self.path = self.folder / "run.pt"

    def resume(
        self, learner: ContinualLearner, metrics: Sequence[Resumable]
    ) -> tuple[int, dict[str, Any]]:
        """Put the saved run into ``learner`` and ``metrics``: the number of steps done and the
        seconds so far (``{}`` and 0 steps when nothing is saved).

        :raises TypeError: before anything runs, for a metric that cannot say what it measured
            so far (no ``measured``/``load_measured``).
        :raises ValueError: if the folder holds a run of other steps, other metrics or a learner
            built otherwise (the message names the difference), or a damaged file.
        """
        for metric in metrics:
            if not isinstance(metric, Resumable):
                raise TypeError(
                    f"{type(metric).__name__} cannot be checkpointed: give it measured() and "
                    "load_measured() (what it measured so far) to run it with a checkpoint"
                )
        if not self.path.exists():
            return 0, {}
        run = safe_load(self.path, map_location=learner.device)
        if run.get("format") != RUN_FORMAT:
            raise ValueError(f"{self.path} is not a run checkpoint of format {RUN_FORMAT}")
        if run["step_names"] != self.step_names:
            raise ValueError(
                f"{self.path} holds a run of the steps {run['step_names']}, not "
                f"{self.step_names}: use another folder, or empty this one to start again"
            )
        names = [type(metric).__name__ for metric in metrics]
        if run["metrics"] != names:
            raise ValueError(f"{self.path} holds a run measured by {run['metrics']}, not {names}")
        try:
            restore_learner(learner, run["learner"])
        except ValueError as error:
            raise ValueError(f"{self.path}: {error}") from error
        for metric, state in zip(metrics, run["metric_states"], strict=True):
            metric.load_measured(state)
        return int(run["done"]), run["times"]

    def save(
        self,
        learner: ContinualLearner,
        metrics: Sequence[Resumable],
        done: int,
        times: dict[str, Any],
    ) -> None:
        """Write the run after its first ``done`` steps (one atomic write)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        run = {
            "format": RUN_FORMAT,
            "step_names": self.step_names,
            "done": done,
            "learner": learner.state(),
            "metrics": [type(metric).__name__ for metric in metrics],
            "metric_states": [metric.measured() for metric in metrics],
            "times": times,
        }
        atomic_save(run, self.path)

    def clear(self) -> None:
        """Remove the checkpoint once its run has ended (the folder too, if left empty)."""
        self.path.unlink(missing_ok=True)
        if self.folder.exists() and not any(self.folder.iterdir()):
            self.folder.rmdir()
