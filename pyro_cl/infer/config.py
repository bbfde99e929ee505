"""A learner's settings, one small dataclass per concern.

:class:`TrainingConfig` groups them: the schedule (epochs, batches), the optimiser (Adam's
learning rate and its decay), Monte Carlo (particles, predictive samples, the ELBO's route),
the guide's initialisation, the coreset refit, the display, and when a fit counts as
diverged. Each field name is unique across
groups, so learners and the command line take them as flat keywords
(``VCL(net, epochs=5, learning_rate=1e-2)``), and :meth:`TrainingConfig.replace` routes each to
its group. Defaults follow the VCL paper's permuted MNIST set-up (appendix A).

Natural-gradient fitters read the schedule, initialisation and refit settings and take their own
step sizes and sample counts (:class:`~pyro_cl.fitters.natural_gradient.NaturalGradientUpdate`);
the optimisation group and ``num_particles`` are Adam's and the ELBO's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pyro_cl.checks import checked_count, checked_optional_count, checked_real
from pyro_cl.guides import DEFAULT_INIT_LOG_VARIANCE, REINIT_POLICIES
from pyro_cl.infer.divergence import Divergence
from pyro_cl.model import ROUTES

__all__ = [
    "Display",
    "Divergence",
    "Initialisation",
    "MonteCarlo",
    "Optimisation",
    "Refit",
    "Schedule",
    "TrainingConfig",
]


@dataclass(frozen=True)
class Schedule:
    """:param epochs: passes over each task's data.
    :param first_epochs: passes over the first task's data (``None``: ``epochs``); the VOGN
        thesis trains 60 epochs on CIFAR-10 and 600 on each smaller CIFAR-100 task.
    :param batch_size: minibatch size; ``None`` uses the whole task as one batch."""

    epochs: int = 100
    first_epochs: int | None = None
    batch_size: int | None = 256

    def __post_init__(self) -> None:
        _store(self, "epochs", checked_count(self.epochs, "epochs", low=0))
        _store(
            self, "first_epochs", checked_optional_count(self.first_epochs, "first_epochs", low=0)
        )
        _store(self, "batch_size", checked_optional_count(self.batch_size, "batch_size"))

    def task_epochs(self, first_task: bool) -> int:
        """Epochs for a task: ``first_epochs`` for the first one where it is set."""
        return self.first_epochs if first_task and self.first_epochs is not None else self.epochs


@dataclass(frozen=True)
class Optimisation:
    """Adam's settings.

    :param learning_rate: Adam's learning rate.
    :param learning_rate_decay: the learning rate is multiplied by this every
        ``learning_rate_decay_steps`` optimiser steps, smoothly (``lr · decay^(step/steps)``),
        restarting with each fit; the H-IBP supplement uses 0.87 every 1000 steps (section 6).
    :param learning_rate_decay_steps: see ``learning_rate_decay``.
    :param variance_learning_rate: Adam's learning rate for the mean-field guide's log-variances
        (``None``: ``learning_rate``; a joint family's blocks keep ``learning_rate``). Adam moves
        a parameter by about its learning rate a step whatever the gradient's size, so a short
        schedule leaves every log σ² near its start: on split CIFAR, 200 steps at 10⁻³ took
        every weight's log σ² from -12 to -11.8 (docs/lab/keeps_learning.md), a posterior far tighter than the
        data say, and the next task's prior.
    :param carry_adam_state: keep Adam's moments and step count from each task's fit to the
        next, as one optimiser built for the whole stream does (Avalanche's strategies, a plain
        PyTorch loop), instead of a fresh Adam a fit (:mod:`~pyro_cl.infer.adam_moments`); the
        learning-rate decay still restarts with each fit. A memory's refits for prediction never
        carry it."""

    learning_rate: float = 1e-3
    learning_rate_decay: float = 1.0
    learning_rate_decay_steps: int = 1000
    variance_learning_rate: float | None = None
    carry_adam_state: bool = False

    def __post_init__(self) -> None:
        # a step of 0 fits nothing and would hand the initial guide on as a posterior
        _store(
            self,
            "learning_rate",
            checked_real(self.learning_rate, "learning_rate", 0, low_open=True),
        )
        if self.variance_learning_rate is not None:
            rate = checked_real(
                self.variance_learning_rate, "variance_learning_rate", 0, low_open=True
            )
            _store(self, "variance_learning_rate", rate)
        decay = checked_real(self.learning_rate_decay, "learning_rate_decay", 0, 1, low_open=True)
        _store(self, "learning_rate_decay", decay)
        steps = checked_count(self.learning_rate_decay_steps, "learning_rate_decay_steps")
        _store(self, "learning_rate_decay_steps", steps)
        if not isinstance(self.carry_adam_state, bool):
            raise TypeError(
                f"carry_adam_state must be True or False, got {self.carry_adam_state!r}"
            )

    @property
    def decay(self) -> tuple[float, int]:
        return self.learning_rate_decay, self.learning_rate_decay_steps


@dataclass(frozen=True)
class MonteCarlo:
    """:param num_particles: Monte Carlo samples of the expected log-likelihood per step (10 in
        the reference code).
    :param num_predictive_samples: posterior samples averaged for prediction (100 in the
        reference code).
    :param elbo: the route (:data:`pyro_cl.model.ROUTES`): "fast" (direct computation for
        pyro_cl layers), "pyro" (``TraceMeanField_ELBO`` on the Pyro programs) or "auto"."""

    num_particles: int = 10
    num_predictive_samples: int = 100
    elbo: str = "auto"

    def __post_init__(self) -> None:
        _store(self, "num_particles", checked_count(self.num_particles, "num_particles"))
        samples = checked_count(self.num_predictive_samples, "num_predictive_samples")
        _store(self, "num_predictive_samples", samples)
        if self.elbo not in ROUTES:
            raise ValueError(f"elbo must be one of {ROUTES}, got {self.elbo!r}")


#: How the guide's means start when maximum-likelihood initialisation is off.
INIT_MEANS = ("prior", "fresh", "moment_matched")


@dataclass(frozen=True)
class Initialisation:
    """How the guide starts each task.

    :param ml_init_epochs: epochs of maximum-likelihood training that set the guide's means before
        the first task (VCL appendix A); ``None`` means ``epochs``, 0 switches it off.
    :param init_log_variance: log σ² of new guide sites (-6, the reference code's value).
    :param init_loc_std: scale of the random initial means of sites not set by ML.
    :param init_means: initial means when ML initialisation is off: "prior" (the prior mean plus
        noise of scale ``init_loc_std``), "fresh" (PyTorch's initialisation of a new layer,
        as the VOGN thesis does; implied by ``between_tasks="fresh"``) or "moment_matched"
        (means and variances drawn so each weight's second moment is its prior variance, Kurle
        et al. 2020 appendix I, with ``init_alpha`` and ``init_beta``; pair it with
        ``BayesianMLP(prior_scale="moment_matched")``).
    :param init_alpha: appendix I's α, the spread of the initial log-scales (paper: 0.001).
    :param init_beta: appendix I's β, the share of the variance in the means (paper: 0.999).
    :param between_tasks: guide re-initialisation before each later task: "keep" (start from the
        previous posterior), "prior" (start from the step's prior: the transitioned posterior for
        drifting data), "reset_variance", "cap_variance", "fresh_cap_variance" (GVCL's: fresh
        means, variances capped), "reset" or "fresh" (see
        :meth:`~pyro_cl.guides.MeanFieldGuide.reinitialise`).
    :param later_init_log_variance: log σ² that re-initialisation resets to after the first task
        (``None``: ``init_log_variance``; the VOGN thesis uses precision 4e3 then 4e4 on CIFAR)."""

    ml_init_epochs: int | None = None
    init_log_variance: float = DEFAULT_INIT_LOG_VARIANCE
    init_loc_std: float = 0.1
    init_means: str = "prior"
    between_tasks: str = "keep"
    later_init_log_variance: float | None = None
    init_alpha: float = 0.001
    init_beta: float = 0.999

    def __post_init__(self) -> None:
        epochs = checked_optional_count(self.ml_init_epochs, "ml_init_epochs", low=0)
        _store(self, "ml_init_epochs", epochs)
        _store(self, "init_log_variance", checked_real(self.init_log_variance, "init_log_variance"))
        _store(self, "init_loc_std", checked_real(self.init_loc_std, "init_loc_std", 0))
        if self.later_init_log_variance is not None:
            later = checked_real(self.later_init_log_variance, "later_init_log_variance")
            _store(self, "later_init_log_variance", later)
        if self.init_means not in INIT_MEANS:
            raise ValueError(f"init_means must be one of {INIT_MEANS}, got {self.init_means!r}")
        if not (self.init_alpha >= 0 and 0 <= self.init_beta < 1):
            raise ValueError(
                f"need init_alpha >= 0 and 0 <= init_beta < 1, got {self.init_alpha}/{self.init_beta}"
            )
        if self.between_tasks not in REINIT_POLICIES:
            raise ValueError(f"between_tasks must be one of {REINIT_POLICIES}")


@dataclass(frozen=True)
class Refit:
    """The coreset refit before prediction (VCL eq. 3).

    :param refit_epochs: its epochs; ``None`` means the schedule's ``epochs``.
    :param refit_batch_size: its minibatch size: ``"same"`` uses the schedule's ``batch_size``
        (the reference code's choice), ``None`` the whole coreset (the paper's text for
        coreset-only training)."""

    refit_epochs: int | None = None
    refit_batch_size: int | str | None = "same"

    def __post_init__(self) -> None:
        _store(
            self, "refit_epochs", checked_optional_count(self.refit_epochs, "refit_epochs", low=0)
        )
        if self.refit_batch_size != "same":
            try:
                size = checked_optional_count(self.refit_batch_size, "refit_batch_size")
            except ValueError:
                raise ValueError(
                    "refit_batch_size must be 'same', None or a positive integer, got "
                    f"{self.refit_batch_size!r}"
                ) from None
            _store(self, "refit_batch_size", size)


@dataclass(frozen=True)
class Display:
    """:param progress: show a progress bar per fit (the :class:`~pyro_cl.infer.callbacks.ProgressBar` callback)."""

    progress: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.progress, bool):
            raise TypeError(f"progress must be True or False, got {self.progress!r}")


_GROUPS = {
    "schedule": Schedule,
    "optimisation": Optimisation,
    "monte_carlo": MonteCarlo,
    "initialisation": Initialisation,
    "refit": Refit,
    "display": Display,
    "divergence": Divergence,
}


def _store(group: object, name: str, value: Any) -> None:
    """Keep a checked setting as the type it is read as (``epochs=5.0`` as 5)."""
    object.__setattr__(group, name, value)


@dataclass(frozen=True)
class TrainingConfig:
    """All settings of a learner, by concern (see the module docstring)."""

    schedule: Schedule = field(default_factory=Schedule)
    optimisation: Optimisation = field(default_factory=Optimisation)
    monte_carlo: MonteCarlo = field(default_factory=MonteCarlo)
    initialisation: Initialisation = field(default_factory=Initialisation)
    refit: Refit = field(default_factory=Refit)
    display: Display = field(default_factory=Display)
    divergence: Divergence = field(default_factory=Divergence)

    @staticmethod
    def field_names() -> dict[str, str]:
        """``{setting: group}`` for every flat setting name."""
        return {f.name: group for group, cls in _GROUPS.items() for f in fields(cls)}

    def replace(self, **settings: Any) -> TrainingConfig:
        """A copy with the given flat settings changed (``epochs=5, learning_rate=1e-2``)."""
        names = self.field_names()
        unknown = sorted(set(settings) - set(names))
        if unknown:
            raise TypeError(f"unknown settings {unknown}; known: {sorted(names)}")
        changes: dict[str, dict[str, Any]] = {}
        for key, value in settings.items():
            changes.setdefault(names[key], {})[key] = value
        return replace(
            self,
            **{group: replace(getattr(self, group), **values) for group, values in changes.items()},
        )

    def flat(self) -> dict[str, Any]:
        """``{setting: value}`` over all groups."""
        return {k: v for group in _GROUPS for k, v in asdict(getattr(self, group)).items()}

    def state(self) -> dict[str, dict[str, Any]]:
        """Plain data, ``{group: {setting: value}}``."""
        return {group: asdict(getattr(self, group)) for group in _GROUPS}

    @classmethod
    def from_state(cls, state: dict[str, dict[str, Any]]) -> TrainingConfig:
        return cls(**{group: _GROUPS[group](**state.get(group, {})) for group in _GROUPS})
