"""Drifting streams against river: pyro_cl's online learners beside river's, one protocol.

Every learner sees the same time steps (the stream presets' sizes: 1000 rows, then 100 a step)
and predicts every row of a step before any of its labels is read
(:mod:`pyro_cl.app.one_step_ahead`); river's learners then learn the step one row at a time,
ours as one step. Scored: one-step-ahead accuracy, log-likelihood (probabilities floored at
1e-6) and expected calibration error over the last half of the steps (and over all steps), and
seconds per step.

Learners:

* river (``pip install river``): logistic (two classes) or softmax regression on standardised
  inputs, Hoeffding adaptive tree, adaptive random forest (ARF, 10 trees, ADWIN), Gaussian
  naive Bayes, the majority class so far;
* the same net, not Bayesian: ``net-finetune`` (warm-started, the same Adam steps as our
  learners on each new step's rows alone: what a practitioner's fine-tuning does),
  ``net-refit-all`` (refitted on every row so far at every step: its cost grows with the
  stream) and ``net-refit-W`` (on the last W rows);
* pyro_cl, strengths learnt: ``learned-forgetting``, ``learned-wiener``, ``learned-ou``, one
  online VB learner whose transition's strength is learnt before every step from that step's
  one-step-ahead predictive (:class:`~pyro_cl.transitions.LearnedStrength`): no grid; with
  ``-per-layer`` (``learned-wiener-per-layer``), a strength per layer;
* pyro_cl, strengths weighed over the family's whole range: ``moving-forgetting``,
  ``moving-wiener``, ``moving-ou``, online VB learners at the family's strengths a decade apart
  (``--moving-ratio``), weighed by their own paths' evidence
  (:class:`~pyro_cl.learner.moving_bank.MovingBank`); with ``--moving-members M`` fewer than the
  range holds, a window of ``M`` that moves a rung toward an end member that leads: no grid
  either;
* pyro_cl: for each transition family (Bayesian forgetting, Wiener, OU) a bank of learners
  (:class:`pyro_cl.learner.bank.LearnerBank`) whose members are online VB (strength 0) and the
  family at each ``--strengths`` value. Each member is scored on its own (the fixed strengths;
  the best of them *in hindsight* is a number no online learner could have chosen) and the bank
  is scored as its evidence-weighted model average (the strength chosen online). With
  ``--memory`` (e.g. ``grs --memory-size 100``) every member keeps that memory and is scored,
  and weighed, by its refit on it, as a single learner with a memory is (a refit is not carried
  to a step's time).

Streams: ``weather`` and ``elec2`` (real, from ``--data-root``), ``sea`` (river's SEA concepts,
abrupt switches every 5000 rows, 10% label noise), ``hyperplane`` (river's rotating
hyperplane, gradual drift) and ``rbf`` (MOA's random RBF generator as river has it: 6 classes and
128 features, as the gas-sensor drift data set has, 50 centroids of which 25 drift; a multi-class
stream with many features; ``river-softmax`` is river's multi-class linear model); and a
regression stream, ``elec2-demand``: New South Wales' demand
in elec2's table from the other columns (day, half-hour, Victoria's price and demand, the
transfer), targets standardised by the first step, scored by the RMSE of the predictive mean and
its log-density (:mod:`pyro_cl.app.one_step_ahead`). On it our learners are the learned
strengths (a heteroscedastic Gaussian likelihood, as on Kurle et al.'s regression streams), the
nets minimise the same likelihood's negative log-density, and river's learners are its linear
regression (on the inputs as the stream standardised them: with river's running scaler its SGD
diverged on elec2), Hoeffding adaptive tree regressor and adaptive random forest regressor
(``river-linear``, ``river-hat``, ``river-arf``), each charged the mean squared error of its
past one-step predictions as its noise.

    OMP_NUM_THREADS=1 python benchmarks/drift_vs_river.py --stream weather --seeds 0 1 2 \\
        --data-root ../shared/data --output results/drift_vs_river
    python benchmarks/drift_vs_river.py --table results/drift_vs_river   # the tables, the figure

One folder per stream, learner and seed, each with its ``scores.json`` (skipped when present, so
a stopped run resumes). ``--table DIR --record NAME`` writes each stream's record
``NAME-<stream>``; with ``--resume-from NAME`` the rows of the committed records ``NAME-<stream>``
that ``DIR`` has no runs of are kept in it, with their validation scores, so that rows added to
a stream run alone (the choice is then made over the old rows and the new)::

    OMP_NUM_THREADS=1 python benchmarks/drift_vs_river.py --stream weather --seeds 0 1 2 \\
        --learners wiener --kl-weight 0.5 --data-root ../shared/data --output NEW
    python benchmarks/drift_vs_river.py --table NEW --record drift --resume-from drift
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pyro_cl.app.methods import method_names
from pyro_cl.app.one_step_ahead import (
    OnStream,
    RiverOnStream,
    RiverRegressorOnStream,
    StreamScores,
    one_step_ahead,
    summary,
)
from pyro_cl.app.records import load_record
from pyro_cl.app.stream_presets import STREAM_PRESETS, make_online_learner
from pyro_cl.data.streams import CONSTANT_COLUMNS, OnlineStream, drift_stream
from pyro_cl.fitters.elbo_fitter import ELBOFitter
from pyro_cl.learner.bank import LearnerBank
from pyro_cl.learner.moving_bank import MovingBank
from pyro_cl.likelihoods import HeteroscedasticGaussianLikelihood
from pyro_cl.transitions.base import Identity
from pyro_cl.transitions.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.forgetting import BayesianForgetting
from pyro_cl.transitions.learned_strength import LearnedStrength

FAMILIES = {"forgetting": BayesianForgetting, "wiener": Wiener, "ou": OrnsteinUhlenbeck}
#: Single learners whose transition's strength is learnt at every step (LearnedStrength).
LEARNED = {
    "learned-forgetting": "bayesian_forgetting",
    "learned-wiener": "wiener",
    "learned-ou": "ornstein_uhlenbeck",
}
#: The same, a strength per layer (``LearnedStrength(per="layer")``, eq. 3).
LEARNED |= {f"{name}-per-layer": family for name, family in LEARNED.items()}
#: Moving banks (MovingBank): a few online VB learners at neighbouring strengths of the family,
#: the window moved toward the strength their own paths' evidence prefers.
MOVING = {
    "moving-forgetting": "bayesian_forgetting",
    "moving-wiener": "wiener",
    "moving-ou": "ornstein_uhlenbeck",
}
#: The river learners a classification stream runs, and those a regression stream runs.
RIVER_CLASSIFIERS = (
    "river-logistic", "river-softmax", "river-hat", "river-arf", "river-naive-bayes", "majority"
)  # fmt: skip
RIVER_REGRESSORS = ("river-linear", "river-hat", "river-arf")
RIVER_LEARNERS = tuple(dict.fromkeys((*RIVER_CLASSIFIERS, *RIVER_REGRESSORS)))
#: The river classifiers the accuracy figure draws (the linear models, the tree and the forest).
FIGURE_RIVER = ("river-logistic", "river-softmax", "river-hat", "river-arf")
#: The learners named outright (beside ``net-refit-all`` and ``net-refit-W``).
NAMED_LEARNERS = (*RIVER_LEARNERS, *FAMILIES, *LEARNED, *MOVING, "net-finetune")
SYNTHETIC_ROWS = 20_000
#: The random RBF stream's classes and features (those of the gas-sensor drift data set).
RBF_CLASSES, RBF_FEATURES = 6, 128
#: Regression streams: the table they come from and the column of its inputs that is the target.
REGRESSION = {"elec2-demand": ("elec2", 2)}
#: A run's summary scores, as the tables name them (accuracy and ECE on classification streams,
#: RMSE on regression streams).
SCORES = {"accuracy": "accuracy", "rmse": "RMSE", "log_likelihood": "log-likelihood",
          "calibration_error": "ECE"}  # fmt: skip
#: Settings a learner's name says (its variant's suffix), so that rows run at other values of
#: them may join a record (:func:`kept_rows`).
NAMED_SETTINGS = {"kl_weight", "variance_learning_rate"}
#: What a tempered learner's name ends in, before its KL weight β.
TEMPERED = "-tempered-"
#: What the name of a learner with a variance step of its own ends in, before the step.
VARIANCE_STEP = "-variance-step-"
#: What the name of a bank whose evidence is discounted ends in, before γ.
DISCOUNTED = "-discount-"
#: The streams the command line runs.
#: The streams river's generators make (at the run's seed, ``SYNTHETIC_ROWS`` rows).
SYNTHETIC = ("sea", "hyperplane", "rbf")
STREAMS = ("weather", "elec2", *SYNTHETIC, *REGRESSION)
#: The commit the run's code is at, taken when the script starts.
COMMIT = None


# ---------------------------------------------------------------------------- streams
def _synthetic(name: str, seed: int, rows: int = SYNTHETIC_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The first ``rows`` rows of a generator's stream (SEA's concepts switch at quarters of
    ``SYNTHETIC_ROWS`` whatever ``rows`` is: its stream is made whole)."""
    from river.datasets import synth

    if name == "sea":  # concepts 0 → 1 → 2 → 3, switching abruptly every quarter
        quarter = SYNTHETIC_ROWS // 4
        drawn = [
            row
            for variant in range(4)
            for row in synth.SEA(variant=variant, noise=0.1, seed=seed + variant).take(quarter)
        ]
    elif name == "hyperplane":
        stream = synth.Hyperplane(
            seed=seed, n_features=10, n_drift_features=5, mag_change=0.001, sigma=0.1
        )
        drawn = list(stream.take(rows))
    else:  # many features, many classes: MOA's random RBF with drifting centroids
        stream = synth.RandomRBFDrift(
            seed_model=seed, seed_sample=seed, n_classes=RBF_CLASSES, n_features=RBF_FEATURES,
            n_centroids=50, change_speed=0.001, n_drift_centroids=25,
        )  # fmt: skip
        drawn = list(stream.take(rows))
    x = np.array([[row[k] for k in sorted(row)] for row, _ in drawn], dtype=np.float64)
    y = np.array([int(label) for _, label in drawn])
    return x, y


#: The cycles a stream's time stamps carry (in rows): a year of days for weather, a day and a
#: week of half-hours for elec2.
CYCLES = {"weather": (365.25,), "elec2": (48.0, 336.0)}

#: The categorical columns of a stream's table (their indices): elec2's day of the week and
#: half-hour of the day.
CATEGORICAL = {"elec2": (0, 1)}


def make_stream(
    name: str,
    data_root: str,
    seed: int,
    num_steps: int | None,
    cyclic: bool = False,
    standardise: bool = True,
    one_hot: bool = False,
    constant_columns: str = "centre",
) -> OnlineStream:
    """The stream ``name``: a real one from its preset's table, a synthetic one from river's
    generators at ``seed`` (with the weather preset's sizes); with ``cyclic``, a sine and cosine
    of every cycle of the time stamp are added as features (for every learner alike); with
    ``one_hot``, each categorical column is replaced by one indicator column per value it takes;
    the inputs standardised by the first step's statistics unless ``standardise`` is off."""
    table = REGRESSION.get(name, (name,))[0]
    if name in SYNTHETIC:  # as many rows as the steps take
        x, y = _synthetic(
            name, seed, SYNTHETIC_ROWS if num_steps is None else 1000 + 100 * num_steps
        )
        times = None
    else:
        x, y, times = STREAM_PRESETS[table].load(data_root, False)
    if name in REGRESSION:  # the target column out of the inputs
        column = REGRESSION[name][1]
        x, y = np.delete(x, column, axis=1), x[:, column]
    if cyclic:
        if table not in CYCLES:
            raise ValueError(f"the {name} stream has no time cycles to encode")
        stamps = np.arange(len(x), dtype=np.float64) if times is None else times
        angles = [2 * np.pi * stamps / period for period in CYCLES[table]]
        x = np.column_stack([x, *[f(a) for a in angles for f in (np.sin, np.cos)]])
    if one_hot:
        if table not in CATEGORICAL:
            raise ValueError(f"the {name} stream has no categorical columns")
        columns = CATEGORICAL[table]
        indicators = [np.unique(x[:, c], return_inverse=True)[1] for c in columns]
        x = np.column_stack(
            [np.delete(x, columns, axis=1), *[np.eye(i.max() + 1)[i] for i in indicators]]
        )
    return drift_stream(x, y, times, 1000, 100, num_steps, name=name, standardise=standardise,
                        regression=name in REGRESSION, constant_columns=constant_columns)  # fmt: skip


# ---------------------------------------------------------------------------- learners
def river_learner(name: str, seed: int, regression: bool = False, classes: int = 2):
    """River's learner ``name`` for the stream's kind; the name is checked before river is
    imported (a wrong name is the command line's error, with or without river installed)."""
    allowed = RIVER_REGRESSORS if regression else RIVER_CLASSIFIERS
    if name not in allowed:
        kind = "regression" if regression else "classification"
        raise SystemExit(
            f"drift_vs_river: {name} does not run on a {kind} stream; river's learners there: "
            + ", ".join(allowed)
        )
    if name == "river-logistic" and classes > 2:
        raise SystemExit(
            f"drift_vs_river: river-logistic takes two classes, this stream has {classes}: "
            "use river-softmax"
        )
    try:
        from river import compose, dummy, forest, linear_model, naive_bayes, preprocessing, tree
    except ImportError:
        raise SystemExit(f"drift_vs_river: {name} needs river: pip install -e '.[river]'") from None
    if regression:
        if name == "river-linear":  # on the stream's inputs, standardised by the first step:
            # river's running scaler divides elec2's Victorian columns, constant for ~17,000
            # rows, by a spread of ~0, and its SGD diverged (RMSE 2e10)
            return linear_model.LinearRegression()
        if name == "river-hat":
            return tree.HoeffdingAdaptiveTreeRegressor(seed=seed)
        return forest.ARFRegressor(seed=seed)
    if name == "river-logistic":  # two classes
        return compose.Pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression())
    if name == "river-softmax":  # any number of classes
        return compose.Pipeline(preprocessing.StandardScaler(), linear_model.SoftmaxRegression())
    if name == "river-hat":
        return tree.HoeffdingAdaptiveTreeClassifier(seed=seed)
    if name == "river-arf":
        return forest.ARFClassifier(seed=seed)
    if name == "river-naive-bayes":
        return naive_bayes.GaussianNB()
    return dummy.PriorClassifier()


def pyro_bank(family: str, stream: OnlineStream, args, seed: int) -> LearnerBank:
    """Online VB and ``family`` at each strength, one learner each, as one bank."""
    transitions = {"online VB": Identity()}
    for strength in args.strengths:
        transitions[f"{family} {strength:g}"] = FAMILIES[family](strength)
    members = {
        label: _online_learner(stream, args, seed, transition)
        for label, transition in transitions.items()
    }
    # a memory's refit is not carried to a step's time: members with one predict with it
    return LearnerBank(members, discount=args.discount, at_time=args.memory == "none")


def _online_learner(stream: OnlineStream, args, seed: int, transition):
    """Online VB with ``transition`` (and the run's memory, if any), the run's settings."""
    preset = STREAM_PRESETS.get(stream.name, STREAM_PRESETS["weather"])
    return make_online_learner(
        args.memory,  # "none": online VB without a memory, adapted by the transition
        stream,
        tuple(args.hidden),
        args.memory_size,
        args.term_samples or preset.term_samples,
        seed=seed,
        transition=transition,
        epochs=args.iterations,
        first_epochs=args.first_iterations,
        refit_epochs=args.refit_iterations,
        num_particles=args.particles,
        num_predictive_samples=args.predictive_samples,
        learning_rate=args.learning_rate,
        variance_learning_rate=args.variance_learning_rate,
        **({} if args.kl_weight == 1.0 else {"fitter": ELBOFitter(kl_weight=args.kl_weight)}),
    )


def _strength_learner(name: str, stream: OnlineStream, args, seed: int):
    """A learner whose strength is learnt (``learned-*``) or weighed over the family's range
    (``moving-*``), and what returns the strength it chose at every step."""
    if name in LEARNED:
        per = "layer" if name.endswith("-per-layer") else "net"
        learner = _online_learner(stream, args, seed, LearnedStrength(LEARNED[name], per=per))
        return learner, lambda: learner.transition.history
    bank = MovingBank(
        lambda transition: _online_learner(stream, args, seed, transition),
        MOVING[name],
        ratio=args.moving_ratio,
        members=args.moving_members,
        discount=args.discount,
        at_time=args.memory == "none",
    )
    return bank, lambda: bank.history


def _variant(args) -> str:
    """The suffix of our learners' folders in a tempered run (``--kl-weight`` below 1), in one
    with a variance step of its own (``--variance-learning-rate``) and in one whose banks
    discount their evidence (``--discount`` below 1), or none."""
    tempered = "" if args.kl_weight == 1.0 else f"{TEMPERED}{args.kl_weight:g}"
    step = args.variance_learning_rate
    discounted = "" if args.discount == 1.0 else f"{DISCOUNTED}{args.discount:g}"
    return tempered + ("" if step is None else f"{VARIANCE_STEP}{step:g}") + discounted


class RefitNet:
    """A point-estimate net of our learners' shape (tanh, ``hidden``), refitted at every step by
    Adam on the rows seen so far, or on the last ``window`` of them: with every row, what the net
    class reaches with no posterior and no transition (a stationary batch fit); with a window,
    the classic retrain-on-recent-data answer to drift. Warm-started from the previous step's
    weights; ``first_epochs`` passes over the first step, then ``epochs`` passes over the rows in
    minibatches of ``batch_size``.
    """

    def __init__(
        self,
        stream: OnlineStream,
        hidden: tuple[int, ...],
        window: int | str | None,
        epochs: int,
        first_epochs: int,
        batch_size: int = 128,
        learning_rate: float = 1e-3,
        seed: int = 0,
    ) -> None:
        generator = torch.Generator().manual_seed(seed)
        sizes = [stream.in_features, *hidden]
        layers: list[torch.nn.Module] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.Tanh()]
        #: regression: the heteroscedastic Gaussian our learners use (a mean and a scale output)
        self.likelihood = HeteroscedasticGaussianLikelihood() if stream.regression else None
        outputs = 2 if stream.regression else stream.num_outputs
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], outputs))
        with torch.no_grad():  # PyTorch's default ranges, drawn from the seed's own generator
            for layer in self.net:
                if isinstance(layer, torch.nn.Linear):
                    bound = 1.0 / np.sqrt(layer.in_features)
                    layer.weight.uniform_(-bound, bound, generator=generator)
                    layer.bias.uniform_(-bound, bound, generator=generator)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=learning_rate)
        self.generator = generator
        self.window, self.epochs, self.first_epochs = window, epochs, first_epochs
        self.batch_size = batch_size
        self.x: list[torch.Tensor] = []
        self.y: list[torch.Tensor] = []

    def predict_proba(self, x: np.ndarray, time: float) -> np.ndarray:
        with torch.no_grad():
            logits = self.net(torch.as_tensor(x, dtype=torch.float32))
        return torch.softmax(logits.double(), -1).numpy()

    def predict_normals(self, x: np.ndarray, time: float) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            normal = self.likelihood.distribution(self.net(torch.as_tensor(x, dtype=torch.float32)))
        return normal.loc.double().numpy()[None], normal.scale.double().numpy()[None]

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean negative log-likelihood of ``targets``: cross-entropy, or the
        heteroscedastic Gaussian's negative log-density."""
        if self.likelihood is None:
            return torch.nn.functional.cross_entropy(self.net(inputs), targets)
        return -self.likelihood.log_prob(self.net(inputs), targets).mean()

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None:
        self.x.append(torch.as_tensor(x, dtype=torch.float32))
        kind = torch.long if self.likelihood is None else torch.float32
        self.y.append(torch.as_tensor(y, dtype=kind))
        inputs, labels = torch.cat(self.x), torch.cat(self.y)
        if self.window == "step":  # fine-tuning: the newest step's rows alone
            inputs, labels = self.x[-1], self.y[-1]
        elif self.window is not None:
            inputs, labels = inputs[-self.window :], labels[-self.window :]
        passes = self.first_epochs if len(self.x) == 1 else self.epochs
        for _ in range(passes):
            order = torch.randperm(len(inputs), generator=self.generator)
            for batch in order.split(self.batch_size):
                loss = self.loss(inputs[batch], labels[batch])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()


class BankOnStream(OnStream):
    """The bank under the protocol, keeping every member's own predictions of each step too
    (so each fixed strength is scored from the same run): at the step's time (the members'
    posteriors carried there by their transitions, what the bank predicts with) and, for
    comparison with Kurle et al.'s metric, with the last posteriors."""

    def __init__(self, bank: LearnerBank) -> None:
        super().__init__(bank, at_time=bank.at_time)
        self.members = {label: StreamScores() for label in bank.members}
        self.members_at_posterior = {label: StreamScores() for label in bank.members}
        self.weights: list[dict[str, float]] = []

    def predict_proba(self, x: np.ndarray, time: float) -> np.ndarray:
        bank = self.learner
        inputs = torch.as_tensor(x, dtype=torch.float32)
        samples = bank.member_samples(inputs, None, self.prediction_time(time))
        at_posterior = bank.member_samples(inputs, None, None) if bank.at_time else samples
        self._own = {
            kind: [bank.likelihood.predictive_probabilities(s).double().numpy() for s in drawn]
            for kind, drawn in (("at time", samples), ("at posterior", at_posterior))
        }
        self.weights.append(bank.weights)
        return bank.mixed_probabilities(samples).numpy()

    def learn(self, x: np.ndarray, y: np.ndarray, time: float) -> None:
        if hasattr(self, "_own"):
            for kind, members in (
                ("at time", self.members),
                ("at posterior", self.members_at_posterior),
            ):
                for scores, probabilities in zip(members.values(), self._own[kind], strict=True):
                    scores.score(probabilities, np.asarray(y))
            del self._own
        super().learn(x, y, time)


# ---------------------------------------------------------------------------- runs
def _write(folder: Path, scores: StreamScores, extra: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "summary": summary(scores, 0.5),
        "summary_all_steps": summary(scores, 1.0),
        "accuracy": scores.accuracy,
        **({"rmse": scores.rmse} if scores.rmse else {}),
        "log_likelihood": scores.log_likelihood,
        "times": scores.times,
        **extra,
    }
    (folder / "scores.json").write_text(json.dumps(payload, indent=1))


def _member_scores(scores: StreamScores, bank_scores: StreamScores, members: int) -> StreamScores:
    """A member's own scores, with the bank's times and its seconds divided by the number of
    members (they run together, one after another; a member alone costs about that share)."""
    scores.predict_seconds = [s / members for s in bank_scores.predict_seconds]
    scores.learn_seconds = [s / members for s in bank_scores.learn_seconds]
    scores.times = bank_scores.times
    return scores


def run(args, stream_name: str, seed: int) -> None:
    stream = make_stream(
        stream_name,
        args.data_root,
        seed,
        args.num_steps,
        args.cyclic,
        not args.raw_inputs,
        args.one_hot,
        args.constant_columns,
    )
    base = Path(args.output) / stream_name
    context = {
        "command": shlex.join(sys.argv),
        "commit": COMMIT,
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch_threads": torch.get_num_threads(),
        "steps": len(stream.steps),
    }
    for name in args.learners:
        folder = base / f"{name}{_variant(args) if _is_ours(name) else ''}" / f"seed{seed}"
        if (folder / "scores.json").exists():
            continue
        start = time.perf_counter()
        if name in FAMILIES:
            if stream.regression:
                raise SystemExit(f"drift_vs_river: the {name} bank scores classes only")
            torch.manual_seed(seed)
            adapter = BankOnStream(pyro_bank(name, stream, args, seed))
            scores = one_step_ahead(adapter, stream, progress=_progress(name, stream))
            extra = {**context, "weights": adapter.weights, "settings": _settings(args)}
            for label, member in adapter.members.items():
                tag = "online-vb" if label == "online VB" else label.replace(" ", "-")
                member = _member_scores(member, scores, len(adapter.members))
                at_posterior = adapter.members_at_posterior[label]
                kurle = {
                    "at_posterior": summary(
                        _member_scores(at_posterior, scores, len(adapter.members)), 0.5
                    )
                }
                _write(base / f"{tag}{_variant(args)}" / f"seed{seed}", member, {**extra, **kurle})
            _write(folder, scores, {**extra, "learner": f"{name} bank"})
        elif name in LEARNED or name in MOVING:
            torch.manual_seed(seed)
            learner, strengths = _strength_learner(name, stream, args, seed)
            scores = one_step_ahead(
                OnStream(learner, at_time=args.memory == "none"),
                stream,
                progress=_progress(name, stream),
            )
            learnt = {"strengths": strengths()}
            _write(folder, scores, {**context, "settings": _settings(args), **learnt})
        elif name == "net-finetune":
            # the same net and optimiser steps as our learners: --first-iterations passes over
            # the first step, --iterations over each later step's rows alone, warm-started
            model = RefitNet(
                stream,
                tuple(args.hidden),
                "step",
                args.iterations,
                args.first_iterations,
                batch_size=1 << 30,  # the whole step a batch, as our learners fit it
                learning_rate=args.learning_rate,
                seed=seed,
            )
            scores = one_step_ahead(model, stream, progress=_progress(name, stream))
            _write(folder, scores, {**context, "settings": _settings(args)})
        elif name.startswith("net-refit"):
            model = RefitNet(
                stream,
                tuple(args.hidden),
                _refit_window(name),
                args.refit_epochs,
                args.refit_first_epochs,
                learning_rate=args.learning_rate,
                seed=seed,
            )
            scores = one_step_ahead(model, stream, progress=_progress(name, stream))
            refit = {"refit_epochs": args.refit_epochs, "first_epochs": args.refit_first_epochs}
            _write(folder, scores, {**context, "settings": {**_settings(args), **refit}})
        else:
            import river

            if stream.regression:
                model = RiverRegressorOnStream(river_learner(name, seed, regression=True))
            else:
                model = RiverOnStream(
                    river_learner(name, seed, classes=stream.num_outputs), stream.num_outputs
                )
            scores = one_step_ahead(model, stream, progress=_progress(name, stream))
            _write(folder, scores, {**context, "river": river.__version__})
        result = summary(scores)
        shown = ", ".join(
            f"{key.replace('_', '-')} {result[key]:.3f}" for key in SCORES if key in result
        )
        print(
            f"{stream_name} {name} seed {seed}: {shown} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


def _settings(args) -> dict:
    names = ("hidden", "iterations", "first_iterations", "particles", "predictive_samples")
    names += ("memory", "memory_size", "term_samples", "refit_iterations")
    names += ("learning_rate", "variance_learning_rate", "strengths", "discount", "kl_weight")
    names += ("moving_ratio", "moving_members", "constant_columns")
    return {n: getattr(args, n) for n in names}


def _progress(name: str, stream: OnlineStream):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=len(stream.steps), desc=name, leave=False)

    def update(index, scores):
        bar.update(1)
        if index == len(stream.steps) - 1:
            bar.close()

    return update


# ---------------------------------------------------------------------------- tables
def table(output: Path) -> str:
    """Markdown tables per stream (mean ± std over seeds) and the accuracy-over-time figures."""
    lines = []
    for stream_folder in sorted(p for p in output.iterdir() if p.is_dir()):
        rows = {}
        for learner in sorted(p for p in stream_folder.iterdir() if p.is_dir()):
            runs = [
                {**json.loads(f.read_text()), "seed": f.parent.name}
                for f in sorted(learner.glob("seed*/scores.json"))
            ]
            if runs:
                rows[learner.name] = runs
        if not rows:
            continue
        first = rows[next(iter(rows))][0]
        scored = [key for key in SCORES if key in first["summary"]]  # the stream's kind's
        point = scored[0]  # accuracy or RMSE
        columns = [
            *[("summary", key, SCORES[key]) for key in scored],
            ("summary_all_steps", point, f"{SCORES[point]}, all steps"),
            ("summary_all_steps", "log_likelihood", "log-lik., all steps"),
            ("summary", "seconds_per_step", "s/step"),
        ]
        lines += [
            f"\n**{stream_folder.name}** ({first['steps']} steps)\n",
            "| learner | seeds | " + " | ".join(c[2] for c in columns) + " |",
            "| --- | ---: |" + " ---: |" * len(columns),
        ]
        order = sorted(
            rows, key=lambda n: -np.mean([r["summary"]["log_likelihood"] for r in rows[n]])
        )
        for name in order:
            runs = rows[name]
            label = _row_label(name)
            cells = [label, str(len(runs))]
            for part, key, _ in columns:
                values = np.array([r[part][key] for r in runs])
                digits = 2 if key == "seconds_per_step" else 3
                spread = f" ± {values.std(ddof=1):.{digits}f}" if len(values) > 1 else ""
                cells.append(f"{values.mean():.{digits}f}{spread}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += _hindsight(rows)
        _figure(stream_folder, rows)
    return "\n".join(lines)


def write_stream_record(
    output: Path, stream: str, name: str, command: str, previous: dict | None = None
) -> Path:
    """A run record (:mod:`pyro_cl.app.records`) of one stream's finished runs: every learner
    that ran on every seed any learner ran, its last-half accuracy, log-likelihood, ECE and
    seconds a step per seed.

    :param previous: a committed record of the same stream (``--resume-from``): its rows that
        have no runs in ``output`` are kept from it, with their validation scores, so that rows
        added to a stream run alone (:func:`kept_rows`); the choice is made over both.
    """
    from pyro_cl.app.records import make_record, write_record

    folder = output / stream
    runs = {
        learner.name: {
            int(f.parent.name.removeprefix("seed")): json.loads(f.read_text())
            for f in sorted(learner.glob("seed*/scores.json"))
        }
        for learner in sorted(p for p in folder.iterdir() if p.is_dir())
    }
    seeds = sorted({seed for per in runs.values() for seed in per})
    complete = {name: per for name, per in runs.items() if sorted(per) == seeds}
    first = next(iter(next(iter(complete.values())).values()))  # a run: its kind, its settings
    metrics = {label: key for key, label in SCORES.items() if key in first["summary"]}
    metrics["s/step"] = "seconds_per_step"
    rows = {
        _row_label(learner): {
            seed: {label: per[seed]["summary"][key] for label, key in metrics.items()}
            for seed in seeds
        }
        for learner, per in complete.items()
    }
    # runs of one record may come from several commits (rows added later): name them all
    commits = {run.get("commit") or "unknown" for per in complete.values() for run in per.values()}
    ran = sorted(
        {run.get("command") or command for per in complete.values() for run in per.values()}
    )
    schedule, commands, earlier = first.get("settings", {}), ran, {}
    if previous is not None:
        old_rows, earlier = kept_rows(previous, complete, seeds, first, list(metrics))
        rows |= old_rows
        commits |= set(previous["commit"].split(", "))
        schedule = previous["schedule"]
        commands = list(dict.fromkeys([*previous["command"].split("; then "), *commands]))
    rows = dict(sorted(rows.items(), key=lambda item: -_mean(item[1], "log-likelihood")))
    selection, chosen = validation_choice(complete, earlier)
    if chosen is not None:
        label = "ours, chosen on validation"
        rows = {label: rows[_row_label(chosen)], **rows}
        selection = {label: selection}
    record = make_record(
        name,
        command="; then ".join(commands),
        seeds=seeds,
        schedule=schedule,
        data=f"{stream}, {first['steps']} steps, scored one step ahead over the last half",
        rows=rows,
        metrics=list(metrics),
        selection=selection,
        commit=", ".join(sorted(commits)),
        digits=3,
        notes="no setting of these rows was tuned on the scored steps: the strengths are learnt "
        "online (learned-*) or weighed online (banks), the rest at fixed defaults; the row "
        "'ours, chosen on validation' is the Bayesian learner with the best mean log-likelihood "
        "over the validation steps (the second quarter of the scored steps, before the scored "
        "half), scored on the last half like every row"
        + ("" if previous is None else "; rows with no runs of this command's are kept from "
           f"the record {previous['name']!r} as it was, with their validation scores"),
    )  # fmt: skip
    return write_record(record)


def _mean(per_seed: dict, metric: str) -> float:
    return float(np.mean([numbers[metric] for numbers in per_seed.values()]))


def kept_rows(
    previous: dict, runs: dict, seeds: list[int], first: dict, metrics: list[str]
) -> tuple[dict, dict[str, dict[int, float]]]:
    """The rows of a committed stream record that ``runs`` does not hold, and the validation
    scores of those of them that were candidates, for :func:`write_stream_record`.

    :raises ValueError: for a record of other seeds, steps, metrics or kind of stream, runs at
        other settings than the record's (but those :data:`NAMED_SETTINGS`), or a record without
        a validation choice to carry over.
    """
    data = f"{previous['data'].partition(',')[0]}, {first['steps']} steps"
    if not previous["data"].startswith(data):
        raise ValueError(f"record {previous['name']!r} is of {previous['data']!r}, not {data}")
    if sorted(previous["seeds"]) != seeds:
        raise ValueError(f"record {previous['name']!r} has seeds {previous['seeds']}, not {seeds}")
    if list(previous["metrics"]) != metrics:
        raise ValueError(f"record {previous['name']!r} has metrics {previous['metrics']}")
    for learner, per_seed in runs.items():  # a variant's settings show in its name
        settings = next(iter(per_seed.values())).get("settings", {})
        differ = sorted(
            key
            for key in set(settings) & set(previous["schedule"]) - NAMED_SETTINGS
            if settings[key] != previous["schedule"][key]
        )
        if differ:
            raise ValueError(
                f"{learner} ran with other {differ} than record {previous['name']!r}: its rows "
                "would not be like for like"
            )
    choice = previous.get("selection", {}).get("ours, chosen on validation")
    expected = _validation_window(first)
    if choice is None or choice.get("window") != expected:
        raise ValueError(f"record {previous['name']!r} has no validation choice over {expected}")
    rows, earlier = {}, {}
    for label, per_seed in previous["rows"].items():
        learner = label.split(": ")[0]
        if label == "ours, chosen on validation" or learner in runs:
            continue
        rows[label] = {int(seed): numbers for seed, numbers in per_seed.items()}
        if learner in choice["validation"]:
            earlier[learner] = {int(k): v for k, v in choice["validation"][learner].items()}
    return rows, earlier


def _split_variant(learner: str) -> tuple[str, str]:
    """A learner's name without its variant's suffix (tempered, a variance step), and the suffix
    (``""`` if none)."""
    base = learner.partition(TEMPERED)[0].partition(VARIANCE_STEP)[0].partition(DISCOUNTED)[0]
    return base, learner[len(base) :]


def _row_label(learner: str) -> str:
    base, _ = _split_variant(learner)
    if base in FAMILIES:
        return f"{learner}: strength chosen online (bank)"
    if base in MOVING:
        return f"{learner}: the family's range weighed online (MovingBank)"
    return learner


def _is_ours(learner: str) -> bool:
    """A pyro_cl learner: a bank, a learnt strength, online VB or a bank's fixed member, each
    tempered or not."""
    learner = _split_variant(learner)[0]
    return (
        learner in LEARNED
        or learner in MOVING
        or learner == "online-vb"
        or learner.split("-")[0] in FAMILIES
    )


def _validation_steps(scores: dict) -> slice:
    """The second quarter of a run's scored steps: before the last half that is scored."""
    steps = len(scores["log_likelihood"])
    return slice(steps // 4, steps // 2)


def _validation_window(scores: dict) -> str:
    """The validation steps of a run like ``scores``, as a record's selection names them."""
    window, steps = _validation_steps(scores), len(scores["log_likelihood"])
    return f"scored steps {window.start} to {window.stop - 1} of {steps} (log-likelihood)"


def validation_choice(
    runs: dict[str, dict[int, dict]], earlier: dict[str, dict[int, float]] | None = None
) -> tuple[dict, str | None]:
    """Of our learners in ``runs`` (``{learner: {seed: scores}}``), the one with the best mean
    log-likelihood over the validation steps: the second quarter of the scored steps, which
    precede the last half that every row is scored on (so the choice reads none of the scored
    steps). Returns the selection (grid, validation per seed, window) and the chosen name
    (``None`` without candidates).

    :param earlier: ``{learner: {seed: validation score}}`` of candidates kept from a record
        (:func:`kept_rows`), chosen among with those of ``runs``.
    """
    validation = {
        name: {
            seed: float(np.mean(scores["log_likelihood"][_validation_steps(scores)]))
            for seed, scores in per_seed.items()
        }
        for name, per_seed in runs.items()
        if _is_ours(name)
    }
    validation |= {name: dict(per) for name, per in (earlier or {}).items() if name not in runs}
    if not validation:
        return {}, None
    validation = dict(sorted(validation.items()))
    chosen = max(validation, key=lambda name: np.mean(list(validation[name].values())))
    selection = {
        "grid": list(validation),
        "validation": validation,
        "chosen": chosen,
        "window": _validation_window(next(iter(next(iter(runs.values())).values()))),
    }
    return selection, chosen


def _hindsight(rows: dict) -> list[str]:
    """Each bank's log-likelihood against its best member's, a strength no online learner could
    have chosen (last half of the steps, mean over the seeds the bank ran)."""
    lines = []
    suffixes = sorted({_split_variant(n)[1] for n in rows})
    for family, suffix in ((f, s) for f in FAMILIES for s in suffixes):
        bank = f"{family}{suffix}"
        members = [
            n
            for n in rows
            if _split_variant(n)[1] == suffix
            and n != bank
            and (_split_variant(n)[0] == "online-vb" or n.startswith(f"{family}-"))
        ]
        if bank in rows and members:
            seeds = {r["seed"] for r in rows[bank]}

            def mean(name: str, seeds=seeds) -> float:
                runs = [r for r in rows[name] if r["seed"] in seeds]
                return float(np.mean([r["summary"]["log_likelihood"] for r in runs]))

            best = max(members, key=mean)
            lines.append(
                f"\n{bank} bank {mean(bank):.4f} against the best fixed strength in "
                f"hindsight ({best}) {mean(best):.4f}: {mean(bank) - mean(best):+.4f} nats"
            )
    return lines


def _figure(folder: Path, rows: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [
        n
        for n in rows
        if n in (*FIGURE_RIVER, *RIVER_REGRESSORS, "online-vb", *FAMILIES, *LEARNED)
        or n == "net-finetune"
        or n.startswith("net-refit")
    ]
    if not shown:
        return
    figure, axis = plt.subplots(figsize=(8, 4))
    score = "rmse" if rows[shown[0]][0].get("rmse") else "accuracy"
    for name in shown:
        per_step = np.mean([r[score] for r in rows[name]], axis=0)
        window = max(1, len(per_step) // 20)
        smooth = np.convolve(per_step, np.ones(window) / window, mode="valid")
        label = f"{name} bank" if _split_variant(name)[0] in FAMILIES else name
        axis.plot(np.arange(len(smooth)) + window, smooth, label=label, lw=1.2)
    axis.axvline(len(per_step) / 2, color="grey", ls=":", lw=1)
    axis.set_xlabel("time step")
    axis.set_ylabel(f"one-step-ahead {SCORES[score]} ({window}-step mean)")
    axis.set_title(f"{folder.name}: one-step-ahead {SCORES[score]} over time")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(folder / "accuracy_over_time.png", dpi=130)
    plt.close(figure)


def _refit_window(name: str) -> int | None:
    """The rows a ``net-refit-W`` learner refits on: ``W``, or ``None`` (every row) for
    ``net-refit-all``."""
    window = name.removeprefix("net-refit-")
    return None if window == "all" else int(window)


def _learner_name(name: str) -> str:
    window = name.removeprefix("net-refit-")
    if name in NAMED_LEARNERS or window == "all" or (window.isdigit() and int(window) > 0):
        return name
    raise argparse.ArgumentTypeError(
        f"unknown learner {name!r}: choose from {', '.join(NAMED_LEARNERS)}, "
        "net-refit-all or net-refit-W (W rows)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", nargs="+", default=["weather"], choices=STREAMS)
    parser.add_argument("--learners", nargs="+", default=list(NAMED_LEARNERS),
                        type=_learner_name,
                        help=f"of {', '.join(NAMED_LEARNERS)}, net-refit-all "
                        "and net-refit-W (a point net refitted on the last W rows)")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--strengths", type=float, nargs="+", default=[0.003, 0.01, 0.03, 0.1])
    parser.add_argument("--discount", type=float, default=1.0)
    parser.add_argument("--moving-ratio", type=float, default=10.0,
                        help="a moving bank's factor between neighbouring strengths")  # fmt: skip
    parser.add_argument("--moving-members", type=int,
                        help="a moving bank's learners (default: every strength of the range)")  # fmt: skip
    parser.add_argument("--hidden", type=int, nargs="*", default=[16, 16])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--first-iterations", type=int, default=1000)
    parser.add_argument(
        "--refit-iterations",
        type=int,
        help="a memory's refit iterations at every step (default: --iterations)",
    )
    parser.add_argument("--particles", type=int, default=10)
    parser.add_argument("--predictive-samples", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--variance-learning-rate",
        type=float,
        help="Adam's step for our learners' log-variances (default: --learning-rate's)",
    )
    parser.add_argument(
        "--kl-weight",
        type=float,
        default=1.0,
        help="β of our learners' β-ELBO (below 1: tempered, a plasticity knob); their folders "
        f"then end in {TEMPERED}β",
    )
    parser.add_argument(
        "--refit-epochs",
        type=int,
        default=1,
        help="a net-refit learner's passes over its rows at every later step",
    )
    parser.add_argument("--refit-first-epochs", type=int, default=100,
                        help="a net-refit learner's passes over the first step")  # fmt: skip
    parser.add_argument("--cyclic", action="store_true", help="add sin/cos of the time's cycles")
    parser.add_argument(
        "--constant-columns",
        choices=CONSTANT_COLUMNS,
        default="centre",
        help="a column constant over the first step: centred in raw units, or also scaled by the "
        "first step in which it varies (drift_stream's constant_columns; elec2's records: scaled)",
    )
    parser.add_argument(
        "--one-hot",
        action="store_true",
        help="a categorical column (elec2's day and half-hour) as one indicator column per value",
    )
    parser.add_argument(
        "--raw-inputs",
        action="store_true",
        help="the table's inputs as given, not standardised (elec2 is already in [0, 1])",
    )
    parser.add_argument(
        "--memory",
        choices=method_names("online"),
        default="none",
        help="every member's memory (an online method of pyro-cl stream); its members are then "
        "scored by their memory's refit, not carried to the step's time",
    )
    parser.add_argument("--memory-size", type=int, default=0, help="the memory's points M")
    parser.add_argument(
        "--term-samples",
        type=int,
        help="K_term of a GRS memory's factors (default: the stream preset's, 100,000 on weather)",
    )
    parser.add_argument("--num-steps", type=int, help="only the first steps (a quick check)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output", default="results/drift_vs_river")
    parser.add_argument("--table", type=Path, help="print the tables of a finished output folder")
    parser.add_argument(
        "--record",
        help="with --table: write each stream's runs as the record NAME-<stream> "
        "(benchmarks/records/)",
    )
    parser.add_argument(
        "--resume-from",
        metavar="NAME",
        help="with --record: keep the rows of each stream's committed record NAME-<stream> that "
        "the folder has no runs of, with their validation scores (rows added to a stream run "
        "alone)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume_from is not None and (args.table is None or args.record is None):
        parser.error(
            "--resume-from keeps a record's rows in a new record: give --table and --record"
        )
    if args.table is not None:
        print(table(args.table))
        for stream in sorted(p.name for p in args.table.iterdir() if p.is_dir()):
            if args.record:
                command = "python benchmarks/drift_vs_river.py " + " ".join(argv or sys.argv[1:])
                previous = None
                try:
                    if args.resume_from is not None:
                        previous = load_record(f"{args.resume_from}-{stream}")
                    path = write_stream_record(
                        args.table, stream, f"{args.record}-{stream}", command, previous
                    )
                except (FileNotFoundError, ValueError) as error:
                    parser.error(str(error))
                print(path)
        return 0
    global COMMIT
    from pyro_cl.app.records import current_commit

    COMMIT = current_commit()
    if (args.memory == "none") != (args.memory_size == 0):
        parser.error("--memory none takes no --memory-size; any other memory needs one")
    for stream in args.stream:
        for seed in args.seeds:
            run(args, stream, seed)
    print(table(Path(args.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
