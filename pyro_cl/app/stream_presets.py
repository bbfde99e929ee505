"""The online and drift streams of Kurle et al. 2020 (sections 6.1 and 6.2, appendix B table 2)
: their data, sizes and training settings in one table, and the learner an online method
(:mod:`pyro_cl.app.methods`) builds on them (with any transition, for drifting data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyro_cl.app.methods import METHODS, method_names
from pyro_cl.app.part_options import accepted
from pyro_cl.data.drift_data import load_covertype, load_elec2, load_gas_sensor, load_weather
from pyro_cl.data.mnist import load_idx_dataset
from pyro_cl.data.streams import (
    OnlineStream,
    drift_stream,
    online_stream,
    rotating_logistic_stream,
    two_moons_stream,
)
from pyro_cl.data.uci import load_spambase, load_uci, load_wine
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    HeteroscedasticGaussianLikelihood,
)
from pyro_cl.nn import BayesianMLP
from pyro_cl.transitions.base import Transition

__all__ = ["STREAM_PRESETS", "StreamPreset", "make_online_learner"]


def _mnist(root: str | Path, download: bool) -> tuple[np.ndarray, np.ndarray]:
    (x_train, y_train), (x_test, y_test) = load_idx_dataset(root, "MNIST", download)
    return np.concatenate([x_train, x_test]), np.concatenate([y_train, y_test])


def _sizes(low: int, high: int, count: int = 10) -> tuple[int, ...]:
    """``count`` memory sizes equally spaced in ``[low, high]`` (table 2's ranges)."""
    return tuple(int(round(v)) for v in np.linspace(low, high, count))


@dataclass(frozen=True)
class StreamPreset:
    """One row of table 2: ``N_{t_0}``, ``N_{t_1:K}``, memory sizes, ``K_train``, ``K_term``,
    iterations and architecture, and where the data comes from.

    :ivar memory_size: table 1's memory size; ``memory_sizes`` figure 4's (figure 10's) sweep.
    :ivar load: reads ``(x, y)`` (an online stream) or a
        :class:`~pyro_cl.data.drift_data.DriftTable` (``drift``) from a root folder.
    :ivar build: makes a synthetic stream from ``(seed, num_steps)`` instead (no data files).
    :ivar drift: the rows keep their time order (:func:`~pyro_cl.data.streams.drift_stream`).
    :ivar prior_scale: the net's prior scale (eq. 17's moment matching by default).
    :ivar settings: training settings of this stream that differ from
        :func:`make_online_learner`'s defaults (e.g. a learning rate).
    """

    name: str
    load: Callable[[str | Path, bool], tuple[np.ndarray, np.ndarray]] | None
    first_size: int
    step_size: int
    memory_size: int
    memory_sizes: tuple[int, ...]
    train_samples: int
    hidden_sizes: tuple[int, ...]
    regression: bool
    term_samples: int = 50_000
    first_iterations: int = 50_000
    iterations: int = 10_000
    build: Callable[[int, int | None], OnlineStream] | None = None
    drift: bool = False
    prior_scale: float | str = "moment_matched"
    settings: tuple[tuple[str, object], ...] = ()

    def describe(self) -> str:
        """One line: the kind of stream and table 2's sizes."""
        kind = "drift" if self.drift else ("regression" if self.regression else "classification")
        hidden = "-".join(map(str, self.hidden_sizes)) or "none"
        return (
            f"{kind}: {self.first_size} points, then {self.step_size} per step; memory "
            f"{self.memory_size}; hidden {hidden}"
        )

    def stream(
        self,
        root: str | Path | None = None,
        seed: int = 0,
        download: bool = False,
        num_steps: int | None = None,
    ) -> OnlineStream:
        """The stream of split ``seed`` (the data read from ``root``)."""
        if self.build is not None:
            return self.build(seed, num_steps)
        if root is None:
            raise ValueError(f"the {self.name} stream reads data: give its root folder")
        if self.drift:
            table = self.load(root, download)
            return drift_stream(
                table.x, table.y, table.times, self.first_size, self.step_size, num_steps, self.name
            )
        x, y = self.load(root, download)
        return online_stream(
            x,
            y,
            self.first_size,
            self.step_size,
            seed=seed,
            regression=self.regression,
            num_steps=num_steps,
            name=self.name,
        )


def _regression(name: str) -> StreamPreset:
    return StreamPreset(
        name,
        lambda root, download: load_uci(root, name, download),
        100,
        10,
        15,
        (5, 10, 15, 20, 25),
        1000,
        (16, 16),
        True,
    )


def _drift(name, load, first_size, step_size, memory, sizes, train_samples, hidden) -> StreamPreset:
    """A drift row of table 2: ``sizes`` is the memory-size range, swept in 10 steps."""
    return StreamPreset(
        name,
        load,
        first_size,
        step_size,
        memory,
        _sizes(*sizes),
        train_samples,
        hidden,
        False,
        term_samples=100_000,
        drift=True,
    )


#: Table 2's streams (the two-moons toy of figure 3 with section 6.1's sizes).
STREAM_PRESETS: dict[str, StreamPreset] = {
    **{name: _regression(name) for name in ("concrete", "boston", "energy", "yacht")},
    "spam": StreamPreset(
        "spam", load_spambase, 250, 25, 25, (10, 20, 30, 40, 50), 400, (32, 32), False
    ),
    "wine": StreamPreset(
        "wine", load_wine, 250, 25, 25, (10, 20, 30, 40, 50), 400, (32, 32), False
    ),
    "mnist": StreamPreset(
        "mnist", _mnist, 2500, 250, 150, (50, 100, 150, 200, 250), 40, (64, 64), False
    ),
    "two_moons": StreamPreset(
        "two_moons",
        None,
        150,
        15,
        30,
        (10, 20, 30),
        100,
        (16, 16),
        False,
        build=lambda seed, steps: two_moons_stream(150, 15, steps or 51, seed=seed),
    ),
    # Section 6.2's drift streams (table 2; elec2 is ours, sized like weather).
    "weather": _drift("weather", load_weather, 1000, 100, 25, (5, 50), 100, (16, 16)),
    "gas_sensor": _drift(
        "gas_sensor",
        # fixed-size steps of rows in batch order (batched_stream makes one step a batch)
        lambda root, download: load_gas_sensor(root)._replace(times=None),
        500,
        50,
        25,
        (5, 50),
        200,
        (8, 8),
    ),  # fmt: skip
    "covertype": _drift("covertype", load_covertype, 1000, 1000, 100, (10, 200), 400, (32, 32)),
    "elec2": _drift("elec2", load_elec2, 1000, 100, 25, (5, 50), 100, (16, 16)),
    # Figure 5's toy: logistic regression (no hidden layer), a prior as wide as the true weights.
    "rotating": StreamPreset(
        "rotating",
        None,
        100,
        100,
        10,
        (5, 10, 20),
        8,
        (),
        False,
        first_iterations=200,
        iterations=100,
        drift=True,
        prior_scale=10.0,
        settings=(("learning_rate", 0.05), ("init_means", "prior")),
        build=lambda seed, steps: rotating_logistic_stream(steps or 721, 100, seed=seed),
    ),
}


def make_online_learner(
    method: str,
    stream: OnlineStream,
    hidden_sizes: tuple[int, ...],
    memory_size: int,
    term_samples: int,
    seed: int = 0,
    device: str = "cpu",
    transition: Transition | None = None,
    prior_scale: float | str = "moment_matched",
    memory_options: dict | None = None,
    local_reparameterization: bool = True,
    **settings,
) -> ContinualLearner:
    """A learner for online method ``method`` (:func:`~pyro_cl.app.methods.method_names`
    ``("online")``) on ``stream``: a tanh :class:`~pyro_cl.nn.BayesianMLP` with eq. 17's prior and
    appendix I's initial posterior, a heteroscedastic Gaussian (regression), Bernoulli (one
    output) or categorical likelihood, full-batch Adam, and ``transition`` between steps (online
    VB's identity by default).

    :param term_samples: ``K_term``, for the methods whose memory takes it.
    :param memory_options: further arguments of the method's memory (e.g. ``precision_floor``).
    :param local_reparameterization: sample pre-activations (the paper's estimator, section 4)
        rather than one weight draw per Monte Carlo sample, which is 1.4-2x faster on these
        small nets with many samples (benchmarks/small_net_speed.py) but noisier.
    :param settings: :class:`~pyro_cl.infer.config.TrainingConfig` fields (``epochs`` are
        iterations here, ``first_epochs`` those of the first step, ``num_particles`` ``K_train``).
    """
    if method not in method_names("online"):
        raise ValueError(f"unknown online method {method!r}; choose from {method_names('online')}")
    outputs = 2 if stream.regression else stream.num_outputs
    net = BayesianMLP(
        stream.in_features,
        list(hidden_sizes),
        outputs,
        activation="tanh",
        prior_scale=prior_scale,
        local_reparameterization=local_reparameterization,
    )
    if stream.regression:
        likelihood = HeteroscedasticGaussianLikelihood()
    else:
        likelihood = BernoulliLikelihood() if outputs == 1 else CategoricalLikelihood()
    memory = METHODS[method].memory
    takes_term_samples = memory is not None and "num_term_samples" in accepted(memory)
    options = {"num_term_samples": term_samples} if takes_term_samples else {}
    options.update(memory_options or {})
    return METHODS[method].build(
        net,
        memory_size,
        device=device,
        seed=seed,
        transition=transition,
        memory_options=options or None,
        likelihood=likelihood,
        **settings,
    )
