"""Streams of small data sets observed at time points ``t_k`` (Kurle et al. 2020, section 2).

An *online stream* is made from a static data set (appendix B, table 2): a random 20% is held
out as the test set, the rest is shuffled and observed as ``N_{t_0}`` points at the first step
and ``N_{t_1:K}`` at each later one, at times ``0, 1, 2, ...``. Inputs (and regression targets)
are standardised with the statistics of the training part.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["OnlineStream", "TimeStep", "online_stream", "two_moons_stream"]


@dataclass(frozen=True)
class TimeStep:
    """The data set ``D_{t_k}`` observed at time ``time``."""

    index: int
    time: float
    x: torch.Tensor
    y: torch.Tensor

    @property
    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


@dataclass(frozen=True)
class OnlineStream:
    """Time steps of training data and one held-out test set.

    :ivar num_outputs: classes (classification) or 1 (regression).
    """

    name: str
    steps: tuple[TimeStep, ...]
    test: tuple[torch.Tensor, torch.Tensor]
    in_features: int
    num_outputs: int
    regression: bool

    def __iter__(self) -> Iterator[TimeStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int) -> TimeStep:
        return self.steps[index]


def _standardised(train: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(0), train.std(0)
    std = np.where(std > 0, std, 1.0)  # constant columns (e.g. MNIST's border pixels) stay 0
    return (train - mean) / std, (other - mean) / std


def online_stream(
    x: np.ndarray,
    y: np.ndarray,
    first_size: int,
    step_size: int,
    test_fraction: float = 0.2,
    seed: int = 0,
    regression: bool = False,
    num_steps: int | None = None,
    name: str = "stream",
) -> OnlineStream:
    """An online stream over ``(x, y)`` (appendix B): the split and the order are drawn from
    ``seed`` (one seed per split and run, as the paper's 16 runs are).

    :param first_size: ``N_{t_0}``, points at the first step.
    :param step_size: ``N_{t_1:K}``, points at each later step (the last partial step is dropped).
    :param num_steps: keep only the first ``num_steps`` steps (default: all).
    :param regression: float targets, standardised; otherwise integer class labels.
    """
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} inputs but {len(y)} targets")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    if first_size < 1 or step_size < 1:
        raise ValueError(f"step sizes must be positive, got {first_size}/{step_size}")
    order = np.random.default_rng(seed).permutation(len(x))
    num_test = int(round(test_fraction * len(x)))
    test, train = order[:num_test], order[num_test:]
    if first_size > len(train):
        raise ValueError(
            f"first step of {first_size} points exceeds the {len(train)} training points"
        )
    x_train, x_test = _standardised(x[train], x[test])
    if regression:
        y_train, y_test = _standardised(y[train].astype(np.float64), y[test].astype(np.float64))
        y_dtype = torch.float32
    else:
        y_train, y_test = y[train], y[test]
        y_dtype = torch.long
    num_outputs = 1 if regression else int(y.max()) + 1
    bounds = [0, first_size]
    while bounds[-1] + step_size <= len(train):
        bounds.append(bounds[-1] + step_size)
    if num_steps is not None:
        bounds = bounds[: num_steps + 1]
    steps = tuple(
        TimeStep(
            k,
            float(k),
            torch.as_tensor(x_train[start:end], dtype=torch.float32),
            torch.as_tensor(y_train[start:end], dtype=y_dtype),
        )
        for k, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
    )
    test_set = (
        torch.as_tensor(x_test, dtype=torch.float32),
        torch.as_tensor(y_test, dtype=y_dtype),
    )
    return OnlineStream(name, steps, test_set, x.shape[1], num_outputs, regression)


def two_moons_stream(
    first_size: int = 150,
    step_size: int = 15,
    num_steps: int = 51,
    noise: float = 0.1,
    seed: int = 0,
) -> OnlineStream:
    """The two-moons toy of section 6.1 (figure 3): 150 points at ``t_0`` and 15 per later step,
    drawn with :func:`sklearn.datasets.make_moons`; inputs standardised, 20% held out."""
    from sklearn.datasets import make_moons

    total = first_size + step_size * (num_steps - 1)
    x, y = make_moons(int(np.ceil(total / 0.8)) + 1, noise=noise, random_state=seed)
    return online_stream(
        x, y, first_size, step_size, seed=seed, num_steps=num_steps, name="two moons"
    )
