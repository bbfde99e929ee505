"""Plots of continual-learning results (matplotlib, written to files)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pyro_cl.experiment import ContinualResult
from pyro_cl.metrics import average_accuracy_curve

__all__ = ["plot_accuracy", "plot_active_units"]


def plot_accuracy(results: Sequence[ContinualResult], path: str | Path) -> Path:
    """Per-task test accuracy after each training step, one panel per task plus the average
    (the layout of the VCL paper's figures 4 and 5). Returns the written path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = results[0].task_names
    k = len(names)
    fig, axes = plt.subplots(1, k + 1, figsize=(2.2 * (k + 1), 2.6), sharey=True)
    steps = np.arange(1, k + 1)
    for result in results:
        for j in range(k):
            axes[j].plot(steps[j:], result.accuracy[j:, j], marker="o", ms=3, label=result.method)
        axes[k].plot(
            steps, average_accuracy_curve(result.accuracy), marker="o", ms=3, label=result.method
        )
    for j, name in enumerate(names):
        axes[j].set_title(f"task {name}", fontsize=9)
    axes[k].set_title("average", fontsize=9)
    for ax in axes:
        ax.set_xticks(steps)
        ax.set_xlabel("tasks trained", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[k].legend(fontsize=7, loc="lower left")
    fig.suptitle(results[0].stream, fontsize=10)
    return _save(fig, path)


def plot_active_units(result: ContinualResult, path: str | Path) -> Path:
    """Active IBP units per task (the H-IBP supplement's figure 7): for each masked layer, the
    median number of active units over a task's test points after learning that task, with the
    quartiles as a box and the extremes as whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not result.active_units:
        raise ValueError(f"{result.method} recorded no active units (not an IBP net?)")
    layers = len(result.active_units[0])
    fig, axes = plt.subplots(1, layers, figsize=(3.2 * layers, 2.8), squeeze=False)
    tasks = np.arange(1, len(result.active_units) + 1)
    for layer, ax in enumerate(axes[0]):
        stats = np.array([task[layer] for task in result.active_units])  # (tasks, 5)
        low, q1, median, q3, high = stats.T
        ax.vlines(tasks, low, high, color="grey", lw=1)
        ax.bar(tasks, q3 - q1, bottom=q1, width=0.5, color="tab:blue", alpha=0.4)
        ax.plot(tasks, median, "o-", color="tab:blue", ms=4, label="median")
        ax.set_xticks(tasks, result.task_names[: len(tasks)], fontsize=7)
        ax.set_xlabel("task (after learning it)", fontsize=8)
        ax.set_title(f"hidden layer {layer + 1}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("active units (z > 0.1)")
    fig.suptitle(f"{result.method}: {result.stream}", fontsize=10)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (creating folders) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
