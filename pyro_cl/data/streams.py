"""Streams of small data sets observed at time points ``t_k`` (Kurle et al. 2020, section 2).

An *online stream* is made from a static data set (appendix B, table 2): a random 20% is held
out as the test set, the rest is shuffled and observed as ``N_{t_0}`` points at the first step
and ``N_{t_1:K}`` at each later one, at times ``0, 1, 2, ...``. Inputs (and regression targets)
are standardised with the statistics of the training part.

A *drift stream* (section 6.2) keeps the data's own time order and has no held-out set: each step
is scored one step ahead, on the next step's data before it is observed. Its inputs are
standardised with the first step's statistics only, so no step ever sees the future.
:func:`rotating_logistic_stream` is the paper's toy with a rotating decision boundary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pyro_cl.checks import checked_count
from pyro_cl.extras import require

__all__ = [
    "CONSTANT_COLUMNS",
    "OnlineStream",
    "TimeStep",
    "batched_stream",
    "batches_by_time",
    "drift_stream",
    "online_stream",
    "rotating_logistic_stream",
    "rotating_weights",
    "two_moons_stream",
]


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
    """Time steps of training data and one held-out test set (``None`` for a drift stream,
    which is scored one step ahead).

    :ivar num_outputs: classes (classification) or 1 (regression).
    """

    name: str
    steps: tuple[TimeStep, ...]
    test: tuple[torch.Tensor, torch.Tensor] | None
    in_features: int
    num_outputs: int
    regression: bool

    def __iter__(self) -> Iterator[TimeStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int) -> TimeStep:
        return self.steps[index]


def _constant(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Where a column is constant: its standard deviation 0 or only rounding (a constant 0.415
    has one of ~10⁻¹⁷ in float64)."""
    precision = std.dtype if np.issubdtype(std.dtype, np.floating) else np.float64
    return ~(std > 64 * np.finfo(precision).eps * np.maximum(np.abs(mean), 1.0))


def _scales(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Each column's standard deviation, or 1 where the column is constant (dividing by the
    rounding of a constant would blow later values up to ~10¹⁶, as elec2's Victorian columns,
    constant for its first ~17,000 rows, did)."""
    return np.where(_constant(mean, std), 1.0, std)


#: What :func:`drift_stream` does with a column constant over the first step: centre it and
#: keep its raw units (``"centre"``, scikit-learn's ``StandardScaler`` fitted on the first step),
#: or also scale it by its standard deviation over the first step in which it varies
#: (``"first-varying-step"``).
CONSTANT_COLUMNS = ("centre", "first-varying-step")


def _check_constant_columns(constant_columns: str) -> None:
    if constant_columns not in CONSTANT_COLUMNS:
        raise ValueError(
            f"constant_columns must be one of {CONSTANT_COLUMNS}, got {constant_columns!r}"
        )


def _first_step_scales(
    x: np.ndarray,
    bounds: list[int],
    mean: np.ndarray,
    std: np.ndarray,
    constant_columns: str = "centre",
) -> np.ndarray:
    """The scales of the columns whose first-step ``mean`` and ``std`` are given: ``std``, or 1
    for a column constant over the first step. With
    ``constant_columns="first-varying-step"``, such a column is scaled by its standard deviation
    over the first later step in which it varies, read from that step's inputs alone (no label,
    no later row: what a learner has when it predicts the step); 1 if it never varies. Centred
    by the first step's constant, it is 0 until it varies and then on the scale of the other
    columns, not of its raw units (elec2's Victorian columns are constant for ~17,000 rows, then
    vary by 0.01-0.15 in raw units, where a net whose prior is scaled for standardised inputs
    makes little use of them). One step's deviation is a rough scale: a heavy-tailed column's
    later values can reach hundreds of it."""
    scales = _scales(mean, std)
    if constant_columns == "centre":
        return scales
    for column in np.flatnonzero(_constant(mean, std)):
        for start, end in zip(bounds[1:-1], bounds[2:], strict=True):
            values = x[start:end, column]
            if not _constant(values.mean(keepdims=True), values.std(keepdims=True))[0]:
                scales[column] = values.std()
                break
    return scales


def _standardised(train: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(0), train.std(0)
    std = _scales(mean, std)  # constant columns (e.g. MNIST's border pixels) stay 0
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
    order = np.random.default_rng(seed).permutation(len(x))
    num_test = int(round(test_fraction * len(x)))
    test, train = order[:num_test], order[num_test:]
    x_train, x_test = _standardised(x[train], x[test])
    if regression:
        y_train, y_test = _standardised(y[train].astype(np.float64), y[test].astype(np.float64))
        y_dtype = torch.float32
    else:
        y_train, y_test = y[train], y[test]
        y_dtype = torch.long
    num_outputs = 1 if regression else int(y.max()) + 1
    bounds = _step_bounds(len(train), first_size, step_size, num_steps)
    times = [float(k) for k in range(len(bounds) - 1)]
    steps = _time_steps(x_train, y_train, bounds, times, y_dtype)
    test_set = (
        torch.as_tensor(x_test, dtype=torch.float32),
        torch.as_tensor(y_test, dtype=y_dtype),
    )
    return OnlineStream(name, steps, test_set, x.shape[1], num_outputs, regression)


def _class_labels(y: np.ndarray) -> np.ndarray:
    """``y`` as int64 class indices, or a ``ValueError``: labels must be integers from 0, of
    at least two classes (map other labels first, as :func:`~pyro_cl.data.load_drift_table`
    does)."""
    if y.size and (
        not np.isfinite(y.astype(np.float64)).all() or (y != np.round(y)).any() or (y < 0).any()
    ):
        raise ValueError("labels must be integers from 0 (class indices)")
    y = y.astype(np.int64)
    if y.size and y.max() < 1:
        raise ValueError("the labels hold one class only: a classification stream needs two")
    return y


def _step_bounds(rows: int, first_size: int, step_size: int, num_steps: int | None) -> list[int]:
    """Row bounds of the steps: ``first_size`` rows, then ``step_size`` rows at a time (a last
    partial step is dropped), at most ``num_steps`` steps."""
    for value, what in ((first_size, "first_size"), (step_size, "step_size")):
        checked_count(value, what)
    if num_steps is not None:
        checked_count(num_steps, "num_steps")
    if first_size > rows:
        raise ValueError(f"first step of {first_size} points exceeds the {rows} rows")
    bounds = [0, first_size]
    while bounds[-1] + step_size <= rows and (num_steps is None or len(bounds) <= num_steps):
        bounds.append(bounds[-1] + step_size)
    return bounds


def _time_steps(x, y, bounds, times, y_dtype) -> tuple[TimeStep, ...]:
    return tuple(
        TimeStep(
            k,
            time,
            torch.as_tensor(x[start:end], dtype=torch.float32),
            torch.as_tensor(y[start:end], dtype=y_dtype),
        )
        for k, (start, end, time) in enumerate(zip(bounds[:-1], bounds[1:], times, strict=True))
    )


def drift_stream(
    x: np.ndarray,
    y: np.ndarray,
    times: np.ndarray | None = None,
    first_size: int = 1000,
    step_size: int = 100,
    num_steps: int | None = None,
    name: str = "drift",
    standardise: bool = True,
    regression: bool = False,
    constant_columns: str = "centre",
) -> OnlineStream:
    """A classification (or regression) stream in the rows' own (time) order (section 6.2,
    table 2): ``N_{t_0}`` rows, then ``N_{t_1:K}`` rows per step. A step's time is its last row's
    time stamp (row index when ``times`` is ``None``), so time lags follow the data. Inputs are
    standardised with the mean and standard deviation of the first step: no label and nothing
    after a step shapes its inputs.
    There is no test set (:attr:`OnlineStream.test` is ``None``): score it one step ahead.

    :param y: integer class labels from 0, or real targets with ``regression``.
    :param standardise: ``False`` keeps the inputs as given, for tables already on a common
        scale (MOA's elec2, all in [0, 1]).
    :param constant_columns: a column constant over the first step is centred and keeps its raw
        units (``"centre"``), or is scaled by its standard deviation over the first step in
        which it varies (``"first-varying-step"``: that step's inputs alone, which a learner has
        when it predicts the step); see :data:`CONSTANT_COLUMNS`. Choose on validation: on
        elec2 scaling helped the classifiers and hurt the demand regression (docs/lab/drift.md).
    :param regression: a regression stream: real targets, standardised (with ``standardise``)
        by the first step's mean and standard deviation as the inputs are.
    """
    _check_constant_columns(constant_columns)
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64 if regression else None)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} inputs but {len(y)} targets")
    if regression and not np.isfinite(y).all():
        raise ValueError("regression targets must be finite")
    y = y if regression else _class_labels(y)
    times = np.arange(len(x), dtype=np.float64) if times is None else np.asarray(times, float)
    if times.shape != (len(x),) or not np.isfinite(times).all() or (np.diff(times) < 0).any():
        raise ValueError(
            "times must be finite, one per row and non-decreasing (rows in time order)"
        )
    bounds = _step_bounds(len(x), first_size, step_size, num_steps)
    step_times = [float(times[end - 1]) for end in bounds[1:]]
    if (np.diff(step_times) <= 0).any():
        raise ValueError("two steps end at the same time: make the steps longer")
    first = x[: bounds[1]]
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = first.mean(0), first.std(0)
    bad = ~(np.isfinite(mean) & np.isfinite(std) & np.isfinite(x).all(0))
    if bad.any():
        raise ValueError(
            f"column {int(np.flatnonzero(bad)[0])}'s values are not finite or overflow its "
            "statistics (mean or standard deviation over the first step): rescale or drop it"
        )
    if standardise:
        x = (x - mean) / _first_step_scales(x, bounds, mean, std, constant_columns)
    if regression:
        if standardise:
            head = y[: bounds[1]]
            y = (y - head.mean()) / _scales(head.mean(keepdims=True), head.std(keepdims=True))
        steps = _time_steps(x, y, bounds, step_times, torch.float32)
        return OnlineStream(name, steps, None, x.shape[1], 1, True)
    steps = _time_steps(x, y, bounds, step_times, torch.long)
    return OnlineStream(name, steps, None, x.shape[1], int(y.max()) + 1, False)


def batched_stream(
    batches: Sequence[tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]],
    times: Sequence[float] | None = None,
    name: str = "batches",
    standardise: bool = True,
    constant_columns: str = "centre",
) -> OnlineStream:
    """A classification stream of the batches a user has (a batch a month, a file a day), one
    step each, at ``times`` (default 0, 1, ...); inputs standardised by the first batch's mean
    and standard deviation (``constant_columns`` as :func:`drift_stream` takes it), as
    :func:`drift_stream` does. Score it one step ahead.

    :raises ValueError: naming the batch at fault (no rows, inputs and labels of other lengths,
        another number of features, times that are not finite and increasing).
    """
    _check_constant_columns(constant_columns)
    if isinstance(batches, tuple | list) and len(batches) == 2 and torch.is_tensor(batches[0]):
        raise TypeError(
            "batches is a list of (x, y) batches; one (x, y) pair is one batch: [(x, y)]"
        )
    batches = [(np.asarray(x, dtype=np.float64), np.asarray(y)) for x, y in batches]
    if not batches:
        raise ValueError("batched_stream needs at least one batch")
    times = [float(k) for k in range(len(batches))] if times is None else [float(t) for t in times]
    if len(times) != len(batches):
        raise ValueError(f"{len(batches)} batches but {len(times)} times")
    if not np.isfinite(times).all() or (np.diff(times) <= 0).any():
        raise ValueError(f"times must be finite and increasing, got {times}")
    features = batches[0][0].reshape(len(batches[0][0]), -1).shape[1]
    for k, (x, y) in enumerate(batches):
        if not len(x) or len(x) != len(y):
            raise ValueError(f"batch {k} has {len(x)} inputs and {len(y)} labels")
        if x.reshape(len(x), -1).shape[1] != features:
            raise ValueError(
                f"batch {k} has {x.reshape(len(x), -1).shape[1]} features, not {features}"
            )
    x = np.concatenate([x.reshape(len(x), -1) for x, _ in batches])
    y = _class_labels(np.concatenate([y for _, y in batches]))
    bounds = np.cumsum([0, *(len(b[1]) for b in batches)]).tolist()
    if standardise:
        first = x[: bounds[1]]
        mean, std = first.mean(0), first.std(0)
        x = (x - mean) / _first_step_scales(x, bounds, mean, std, constant_columns)
    steps = _time_steps(x, y, bounds, times, torch.long)
    return OnlineStream(name, steps, None, features, int(y.max()) + 1, False)


def batches_by_time(
    x: np.ndarray, y: np.ndarray, times: np.ndarray
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[float]]:
    """Rows grouped by their time stamp (a table such as :func:`~pyro_cl.data.load_gas_sensor`'s,
    whose times are batches): the batches in time order and their times, for
    :func:`batched_stream`."""
    times = np.asarray(times, dtype=np.float64)
    if times.shape != (len(x),) or (np.diff(times) < 0).any():
        raise ValueError("times must be one per row and non-decreasing (rows in time order)")
    stamps = np.unique(times)
    return [(x[times == t], y[times == t]) for t in stamps], stamps.tolist()


def rotating_weights(
    times: np.ndarray, degrees_per_time: float = 5.0, amplitude: float = 10.0
) -> np.ndarray:
    """The true weights of the rotating toy at ``times``: ``(A sin(αt), A cos(αt))``, ``(T, 2)``."""
    angle = np.deg2rad(degrees_per_time * np.asarray(times, dtype=np.float64))
    return amplitude * np.stack([np.sin(angle), np.cos(angle)], axis=-1)


def rotating_logistic_stream(
    num_steps: int = 721,
    step_size: int = 100,
    degrees_per_time: float = 5.0,
    amplitude: float = 10.0,
    seed: int = 0,
) -> OnlineStream:
    """Logistic regression with a rotating boundary (section 6.2, figure 5): at ``t = 0, 1, ...,
    num_steps - 1``, ``step_size`` points ``x ~ U(-3, 3)²`` with ``y ~ Bernoulli(σ(w_tᵀx))`` and
    ``w_t = (10 sin(αt), 10 cos(αt))``, ``α = 5°`` per time unit. (The paper does not give the
    points per step; appendix A.3 uses 150 for its variant.) Labels are 0/1 for
    :class:`~pyro_cl.likelihoods.BernoulliLikelihood`; no standardisation (``x`` is already
    centred). Use :func:`rotating_weights` for the truth."""
    generator = np.random.default_rng(seed)
    times = np.arange(num_steps, dtype=np.float64)
    weights = rotating_weights(times, degrees_per_time, amplitude)
    x = generator.uniform(-3.0, 3.0, size=(num_steps, step_size, 2))
    logits = np.einsum("tnd,td->tn", x, weights)
    y = (generator.uniform(size=logits.shape) < 1 / (1 + np.exp(-logits))).astype(np.int64)
    bounds = [k * step_size for k in range(num_steps + 1)]
    steps = _time_steps(x.reshape(-1, 2), y.reshape(-1), bounds, list(times), torch.long)
    return OnlineStream("rotating", steps, None, 2, 1, False)


def two_moons_stream(
    first_size: int = 150,
    step_size: int = 15,
    num_steps: int = 51,
    noise: float = 0.1,
    seed: int = 0,
) -> OnlineStream:
    """The two-moons toy of section 6.1 (figure 3): 150 points at ``t_0`` and 15 per later step,
    drawn with :func:`sklearn.datasets.make_moons`; inputs standardised, 20% held out."""
    make_moons = require("sklearn.datasets", "the two-moons stream").make_moons

    total = first_size + step_size * (num_steps - 1)
    x, y = make_moons(int(np.ceil(total / 0.8)) + 1, noise=noise, random_state=seed)
    return online_stream(
        x, y, first_size, step_size, seed=seed, num_steps=num_steps, name="two moons"
    )
