"""The pictures of VCL section 6.2: the sample grid of figure 6 and the metrics of figure 7."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pyro_cl.app.plotting import _pyplot, _save
from pyro_cl.app.result import RunResult

__all__ = ["plot_generative_metrics", "plot_sample_grid"]


def plot_sample_grid(result: RunResult, image_shape: tuple[int, int], path: str | Path) -> Path:
    """Figure 6: row ``i`` holds, after task ``i``, one sample from every head learnt so far
    (columns), so forgetting shows as columns that decay down the rows."""
    plt = _pyplot()
    k = len(result.step_names)
    grid = result.samples.shape[2]
    height, width = image_shape
    canvas = np.ones((k * (height + 1), k * grid * (width + 1)))
    for i in range(k):
        for j in range(i + 1):
            for s in range(grid):
                image = result.samples[i, j, s].reshape(height, width)
                top, left = i * (height + 1), (j * grid + s) * (width + 1)
                canvas[top : top + height, left : left + width] = 1.0 - image
    fig, ax = plt.subplots(figsize=(0.6 * k * grid + 1, 0.6 * k + 0.6))
    ax.imshow(canvas, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks([(j * grid + grid / 2) * (width + 1) for j in range(k)], result.step_names)
    ax.set_yticks([(i + 0.5) * (height + 1) for i in range(k)], result.step_names)
    ax.set_xlabel("head (task)", fontsize=8)
    ax.set_ylabel("after task", fontsize=8)
    ax.tick_params(length=0, labelsize=7)
    ax.set_title(f"{result.method}: {result.stream}", fontsize=9)
    return _save(fig, path)


def plot_generative_metrics(results: Sequence[RunResult], path: str | Path) -> Path:
    """Figure 7: per task (columns) the test log-likelihood (top row) and the classifier
    uncertainty (bottom row) of its head after each later task, one line per method."""
    plt = _pyplot()
    names = results[0].step_names
    k = len(names)
    fig, axes = plt.subplots(2, k, figsize=(1.9 * k, 4.4), squeeze=False)
    steps = np.arange(1, k + 1)
    for result in results:
        for j in range(k):
            axes[0][j].plot(
                steps[j:], result.matrices["test_ll"][j:, j], marker="o", ms=2, label=result.method
            )
            axes[1][j].plot(steps[j:], result.matrices["uncertainty"][j:, j], marker="o", ms=2)
    for j, name in enumerate(names):
        axes[0][j].set_title(f"task {name}", fontsize=9)
        for row in axes:
            row[j].set_xticks(steps[::3])
            row[j].tick_params(labelsize=6)
            row[j].grid(alpha=0.3)
        axes[1][j].set_xlabel("tasks trained", fontsize=7)
    axes[0][0].set_ylabel("test log-likelihood", fontsize=8)
    axes[1][0].set_ylabel("classifier uncertainty", fontsize=8)
    axes[0][k - 1].legend(fontsize=6, loc="lower left")
    fig.suptitle(results[0].stream, fontsize=10)
    return _save(fig, path)
