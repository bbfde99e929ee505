"""Plots of continual-learning results (matplotlib, written to files)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pyro_cl.app.result import RunResult
from pyro_cl.extras import require
from pyro_cl.inspection import shared_sites
from pyro_cl.metrics import average_accuracy_curve

__all__ = [
    "plot_accuracy",
    "plot_active_units",
    "plot_final_accuracies",
    "plot_memory_snapshots",
    "plot_memory_sweep",
    "plot_online_lml",
    "plot_pruning",
    "plot_adaptation_sweep",
    "plot_transition_evolution",
    "plot_weight_tracks",
    "plot_strength_sweep",
]


def plot_accuracy(results: Sequence[RunResult], path: str | Path) -> Path:
    """Per-task test accuracy after each training step, one panel per task plus the average
    (the layout of the VCL paper's figures 4 and 5). Returns the written path."""
    plt = _pyplot()
    names = results[0].step_names
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
    axes[k].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(results[0].stream, fontsize=10)
    return _save(fig, path)


def plot_final_accuracies(results: Sequence[RunResult], path: str | Path) -> Path:
    """Each task's test accuracy after the last task, one bar per method, mean ± std over the
    runs of a method (e.g. its seeds), with the average over tasks (ACC) as the last group: the
    layout of the VOGN thesis's figure 5. Runs that measured FWT add a "from scratch" bar (each
    task learnt alone, ``details["scratch_accuracy"]``). Returns the written path.

    :raises ValueError: if the runs do not share their steps.
    """
    names = results[0].step_names
    if any(r.step_names != names for r in results):
        raise ValueError("every run must have the same steps to be drawn side by side")
    finals: dict[str, list[np.ndarray]] = {}
    for result in results:
        final = np.asarray(result.accuracy[-1], dtype=float)
        finals.setdefault(result.method, []).append(np.append(final, final.mean()))
        scratch = result.details.get("scratch_accuracy")
        if scratch is not None:
            scratch = np.asarray(scratch, dtype=float)
            finals.setdefault("from scratch", []).append(np.append(scratch, scratch.mean()))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.1 * (len(names) + 1) + 2.5, 3.2))
    groups = np.arange(len(names) + 1)
    width = 0.8 / len(finals)
    for i, (method, rows) in enumerate(finals.items()):
        rows = np.stack(rows)
        label = method if len(rows) == 1 else f"{method} ({len(rows)} runs)"
        ax.bar(groups + (i - (len(finals) - 1) / 2) * width, rows.mean(0), width,
               yerr=rows.std(0) if len(rows) > 1 else None, capsize=2, label=label)  # fmt: skip
    ax.set_xticks(groups, [f"task {name}" for name in names] + ["average (ACC)"], fontsize=8)
    ax.set_ylabel("test accuracy after the last task")
    ax.set_ylim(max(0.0, float(np.min([np.min(r) for r in finals.values()])) - 0.1), 1.0)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(results[0].stream, fontsize=10)
    return _save(fig, path)


def plot_active_units(result: RunResult, path: str | Path) -> Path:
    """Active IBP units per task (the H-IBP supplement's figure 7): for each masked layer, the
    median number of active units over a task's test points after learning that task, with the
    quartiles as a box and the extremes as whiskers."""
    plt = _pyplot()
    units = result.details.get("active_units")
    if not units:
        raise ValueError(f"{result.method} recorded no active units (not an IBP net?)")
    layers = len(units[0])
    fig, axes = plt.subplots(1, layers, figsize=(3.2 * layers, 2.8), squeeze=False)
    tasks = np.arange(1, len(units) + 1)
    for layer, ax in enumerate(axes[0]):
        stats = np.array([task[layer] for task in units])  # (tasks, 5)
        low, q1, median, q3, high = stats.T
        ax.vlines(tasks, low, high, color="grey", lw=1)
        ax.bar(tasks, q3 - q1, bottom=q1, width=0.5, color="tab:blue", alpha=0.4)
        ax.plot(tasks, median, "o-", color="tab:blue", ms=4, label="median")
        ax.set_xticks(tasks, result.step_names[: len(tasks)], fontsize=7)
        ax.set_xlabel("task (after learning it)", fontsize=8)
        ax.set_title(f"hidden layer {layer + 1}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("active units (z > 0.1)")
    fig.suptitle(f"{result.method}: {result.stream}", fontsize=10)
    return _save(fig, path)


def plot_pruning(results: Sequence[RunResult], path: str | Path) -> Path:
    """VI's over-pruning along a stream (Trippe & Turner 2018; GVCL, section 4): for each shared
    hidden layer, the units in use (top) and the share of its weights still at the prior (bottom)
    after each task, one line per run, from the pruning metric's ``details``. Runs without it
    (point estimates) are left out."""
    plt = _pyplot()
    pruned = [r for r in results if r.details.get("units_in_use")]
    if not pruned:
        raise ValueError("no run recorded its pruning (the metric runs on mean-field posteriors)")
    layers = shared_sites(pruned[0].details["units_in_use"][0])
    fig, axes = plt.subplots(
        2, len(layers), figsize=(2.6 * len(layers), 4.6), squeeze=False, sharex=True
    )
    for result in pruned:
        units, shares = result.details["units_in_use"], result.details["share_at_prior"]
        steps = np.arange(1, len(units) + 1)
        for column, layer in enumerate(layers):
            axes[0][column].plot(steps, [u[layer] for u in units], "o-", ms=3, label=result.method)
            axes[1][column].plot(steps, [s[layer] for s in shares], "o-", ms=3)
    ticks = np.arange(1, max(len(r.details["units_in_use"]) for r in pruned) + 1)
    for column, layer in enumerate(layers):
        axes[0][column].set_title(layer.removesuffix(".weight"), fontsize=9)
        axes[1][column].set_xlabel("tasks trained", fontsize=8)
        axes[0][column].set_ylim(bottom=0)
        axes[1][column].set_ylim(0.0, 1.0)
        for ax in axes[:, column]:
            ax.grid(alpha=0.3)
            ax.set_xticks(ticks)
    axes[0][0].set_ylabel("units in use")
    axes[1][0].set_ylabel("share of weights at the prior")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(pruned[0].stream, fontsize=10)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    """Lay out ``fig`` and write it to ``path`` (creating folders)."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


class _Figures:
    """``subplots`` as pyplot's, on a bare ``matplotlib.figure.Figure``: no backend is chosen or
    switched (a notebook's inline display stays as it was) and nothing needs closing."""

    @staticmethod
    def subplots(nrows: int = 1, ncols: int = 1, figsize=None, **kwargs):
        figure = require("matplotlib.figure", "plotting").Figure(figsize=figsize)
        return figure, figure.subplots(nrows, ncols, **kwargs)


def _pyplot() -> type[_Figures]:
    """What the plots draw with: figures written to files, never shown."""
    return _Figures


def _finish(fig, ax, xlabel: str, ylabel: str, title: str, path: str | Path) -> Path:
    """Label, grid and legend one panel, then :func:`_save` the figure."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if xlabel in ("time step", "memory size M"):  # counts: no fractional ticks
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _save(fig, path)


def _lml_key(results: Sequence[RunResult]) -> tuple[str, str, str]:
    """Which LML a stream is judged by: the test LML (online streams, last 10%) or the
    one-step-ahead LML (drift streams without a test set, last 50%)."""
    if all(result.series.get("test_lml") for result in results):
        return "test_lml", "test_lml", "test LML"
    return "one_step_ahead", "one_step_ahead_lml", "one-step-ahead LML"


def plot_online_lml(results: Sequence[RunResult], path: str | Path) -> Path:
    """Average test (or, for drift streams, one-step-ahead) log marginal likelihood after every
    time step, mean ± std over seeds, one line per method and memory size (Kurle et al. 2020,
    figure 4 bottom)."""
    plt = _pyplot()
    field, _, name = _lml_key(results)
    groups: dict = {}
    for result in results:
        groups.setdefault((result.label, result.details["memory_size"]), []).append(
            result.series[field]
        )
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for (label, size), curves in groups.items():
        length = min(len(c) for c in curves)
        values = np.array([c[:length] for c in curves])
        mean, std = values.mean(0), values.std(0)
        steps = np.arange(length) + (0 if field == "test_lml" else 1)
        ax.plot(steps, mean, label=f"{label} (M={size})")
        ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    return _finish(fig, ax, "time step", name, results[0].stream, path)


def plot_memory_sweep(results: Sequence[RunResult], path: str | Path) -> Path:
    """Test (drift streams: one-step-ahead) LML averaged over the last 10% (50%) of steps
    against the memory size, mean ± std over seeds, one line per method (Kurle et al. 2020,
    figure 4 top, figure 6/10 right)."""
    plt = _pyplot()
    _, key, name = _lml_key(results)
    groups: dict = {}
    for result in results:
        groups.setdefault(result.label, {}).setdefault(result.details["memory_size"], []).append(
            result.summary()[key]
        )
    fig, ax = plt.subplots(figsize=(4, 3.2))
    for label, by_size in groups.items():
        sizes = sorted(by_size)
        mean = np.array([np.mean(by_size[s]) for s in sizes])
        std = np.array([np.std(by_size[s]) for s in sizes])
        ax.errorbar(sizes, mean, yerr=std, marker="o", ms=3, capsize=2, label=label)
    window = "10%" if key == "test_lml" else "50%"
    return _finish(
        fig, ax, "memory size M", f"{name} (last {window} of steps)", results[0].stream, path
    )


def plot_adaptation_sweep(
    panels: dict[str, dict[float, list[float]]], path: str | Path, title: str = ""
) -> Path:
    """Kurle et al. 2020, figures 6 and 10: one panel per adaptation method, the one-step-ahead
    LML (last 50% of steps) against its adaptation parameter, mean ± std over seeds.

    :param panels: ``{panel title (e.g. "OU: a"): {parameter value: [LML per seed]}}``; the
        value 0 is online VB.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (name, points) in zip(axes, panels.items(), strict=True):
        values = sorted(points)
        mean = np.array([np.mean(points[v]) for v in values])
        std = np.array([np.std(points[v]) for v in values])
        ax.errorbar(values, mean, yerr=std, marker="o", ms=3, capsize=2)
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > 10:  # decades apart, 0 = online VB
            ax.set_xscale("symlog", linthresh=min(positive))
        ax.set_xlabel(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("one-step-ahead LML (last 50%)")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_transition_evolution(
    rows: dict[str, dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]], path: str | Path
) -> Path:
    """Kurle et al. 2020, figure 2: how a transition moves a posterior's mean and standard
    deviation back towards the prior as time passes with no data, for several adaptation values.

    :param rows: ``{transition name: {adaptation value: (times, means, stds)}}``.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), 2, figsize=(7, 2.6 * len(rows)), squeeze=False)
    for row, (name, curves) in zip(axes, rows.items(), strict=True):
        for value, (times, means, stds) in curves.items():
            row[0].plot(times, means, label=f"{value:g}")
            row[1].plot(times, stds, label=f"{value:g}")
        row[0].set_ylabel(f"{name}\nmean", fontsize=9)
        row[1].set_ylabel("standard deviation", fontsize=9)
        row[1].legend(fontsize=7, title="adaptation", title_fontsize=7)
        for ax in row:
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("time since the last data (units of τ)")
    return _save(fig, path)


def plot_weight_tracks(
    tracks: dict[str, tuple[np.ndarray, np.ndarray]],
    times: np.ndarray,
    truth: np.ndarray,
    path: str | Path,
) -> Path:
    """Kurle et al. 2020, figure 5: posterior mean ± std of each weight over time, one panel per
    method, with the true weights dashed.

    :param tracks: ``{method: (means (T, D), stds (T, D))}``; ``truth``: ``(T, D)``.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(tracks), figsize=(4 * len(tracks), 3), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (method, (means, stds)) in zip(axes, tracks.items(), strict=True):
        for d in range(means.shape[1]):
            line = ax.plot(times, means[:, d], lw=1, label=f"w{d}")[0]
            ax.fill_between(times, means[:, d] - stds[:, d], means[:, d] + stds[:, d], alpha=0.3)
            ax.plot(times, truth[:, d], ls="--", lw=0.8, color=line.get_color())
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("time step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("weight")
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def plot_memory_snapshots(snapshots: Sequence[dict], path: str | Path) -> Path:
    """The two-moons picture of Kurle et al. 2020, figure 3: the predictive probability in the
    plane (grey), the data seen before (small dots) and at the step (circles), and the memory
    (squares, size proportional to the score), at three time steps."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(snapshots), figsize=(3.3 * len(snapshots), 3.2))
    axes = np.atleast_1d(axes)
    for ax, shot in zip(axes, snapshots, strict=True):
        a0, a1 = (np.array(a) for a in shot["axes"])
        ax.contourf(a0, a1, np.array(shot["probability"]), levels=20, cmap="Greys", alpha=0.8)
        seen = np.array(shot["seen"])
        current = np.array(shot["current"])
        ax.scatter(seen[:, 0], seen[:, 1], s=2, c="tab:blue", alpha=0.4, label="seen before")
        ax.scatter(
            current[:, 0],
            current[:, 1],
            s=18,
            facecolors="none",
            edgecolors="tab:blue",
            label="this step",
        )
        memory = np.array(shot["memory"])
        scores = np.array(shot["scores"])
        sizes = 20 + 80 * (scores - scores.min()) / max(np.ptp(scores), 1e-12)
        labels = np.array(shot["memory_labels"])
        for label, colour in ((0, "tab:green"), (1, "tab:red")):
            chosen = labels == label
            ax.scatter(
                memory[chosen, 0],
                memory[chosen, 1],
                s=sizes[chosen],
                marker="s",
                c=colour,
                edgecolors="k",
                label=f"memory, class {label} (size: score)",
            )
        ax.set_title(f"time step {shot['step']}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[-1].legend(fontsize=6, loc="lower right")
    return _save(fig, path)


def plot_strength_sweep(
    rows: dict[str, list[tuple[float, float, float]]],
    paper: dict[str, float],
    path: str | Path,
    title: str = "",
) -> Path:
    """The VCL paper's appendix figures 8-14: ACC after the last task against a baseline's
    strength λ (log scale), mean ± std over seeds, one line per method, the paper's ACC dashed.

    :param rows: ``{method: [(λ, mean ACC %, std)]}``; ``paper``: ``{method: ACC %}``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for method, points in rows.items():
        strengths, means, stds = (np.array(column) for column in zip(*points, strict=True))
        line = ax.errorbar(strengths, means, yerr=stds, marker="o", ms=3, capsize=2, label=method)
        if method in paper:
            ax.axhline(paper[method], ls="--", lw=0.8, color=line[0].get_color())
    ax.set_xscale("log")
    return _finish(fig, ax, "λ", "ACC after the last task (%)", f"{title} (dashed: paper)", path)
