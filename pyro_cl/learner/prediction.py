"""A learner's predictions: what predicts each task, and the passes over posterior draws.

Prediction reads a learner and changes nothing in it::

    sites    = what predicts task t: the memory's refit q_t where there is one, else the
               priors (which hold the propagated posterior; the initial prior of a head not
               trained yet), or the point values of a fitter that predicts with its means
    samples  = f(x; θ_s), θ_s ~ sites, s = 1..S, chunk inputs at a time   (S, N, outputs)
    predict  = the likelihood's predictive probabilities (1/S) Σ_s p(y | f(x; θ_s))
    evaluate = the likelihood's metrics of the samples against y (accuracy, log-likelihood)

At a ``time`` after the last step's the draws come from the posterior carried there by the
transition (:meth:`~pyro_cl.ContinualLearner.prior_at`). Draws come from the learner's
prediction random stream, so predicting never moves the training stream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import torch

from pyro_cl.checks import checked_optional_count
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.infer.prediction import predictive_samples
from pyro_cl.infer.random_stream import random_state, set_random_state
from pyro_cl.learner.state import LearnerState, LearnerStores
from pyro_cl.learner.step_time import next_time
from pyro_cl.nn.exclusive import MODEL_LOCK, exclusive_mode
from pyro_cl.posterior import detach_posterior, read_priors
from pyro_cl.transitions.base import TransitionContext

__all__ = ["ALL_TASKS", "MAX_PREDICTIVE_SAMPLES", "Prediction", "PredictionMethods"]

#: The most posterior draws a prediction takes in one call.
MAX_PREDICTIVE_SAMPLES = 10**6
#: Key of the single prediction posterior of a learner that refits on the whole memory at once.
ALL_TASKS = -1


class Predicting(LearnerStores, Protocol):
    """What prediction reads of :class:`~pyro_cl.ContinualLearner` (a protocol, so that this
    module does not import the learner)."""

    fitter: Fitter

    def prepare_data(self, data, task_id: int | None) -> tuple: ...

    def prior_at(self, time: float) -> dict: ...


class Prediction:
    """The predictions of ``learner`` (module docstring): ``learner.prediction``.

    :param learner: the :class:`~pyro_cl.ContinualLearner` to predict with.
    """

    def __init__(self, learner: Predicting) -> None:
        self.learner = learner

    def sites(self, x: torch.Tensor | None, task_id: int) -> dict:
        """What predicts task ``task_id``: the point values (point-estimate fitters, and fitters
        that predict with their means), the memory refit ``q_t`` where there is one, otherwise
        the guide's joint prior sites or ``{}`` (the priors, which hold the propagated posterior
        and the initial prior of untrained heads). ``x``, inputs of the task, is needed only to
        find the point values' sites (``None``: the model's example input)."""
        learner = self.learner
        if learner.fitter.predicts_with_mean:
            if x is None:
                x = learner.model.example_input(learner.device)
            sites = learner.model.sites(learner.guide, x, [task_id])
            return {name: value.detach() for name, value in learner.guide.locs(sites).items()}
        refits = learner.prediction_posteriors
        key = task_id if learner.refit_per_task else ALL_TASKS
        refit = refits.get(key, refits.get(ALL_TASKS))
        return learner.guide.prior_sites() if refit is None else refit

    @property
    def num_samples(self) -> int:
        """Draws a prediction takes by default (one for a fitter that predicts with its means)."""
        if self.learner.fitter.predicts_with_mean:
            return 1
        return self.learner.config.monte_carlo.num_predictive_samples

    @torch.no_grad()
    def samples(
        self,
        x: torch.Tensor,
        task_id: int | None = None,
        num_samples: int | None = None,
        chunk: int | None = None,
        time: float | None = None,
        sites: dict | None = None,
    ) -> torch.Tensor:
        """Net outputs for ``num_samples`` posterior draws: shape ``(S, N, outputs)``, computed
        ``chunk`` inputs at a time (default: :func:`~pyro_cl.infer.prediction.prediction_chunk`).

        :param time: predict for this time, after the last step's: draws from the posterior
            carried to ``time`` by the transition instead of the posterior.
        :param sites: distributions or values of latent sites to draw from instead (others come
            from their priors), e.g. a pruned posterior; not with ``time``.
        """
        num_samples, chunk = _checked_passes(num_samples, chunk)
        learner = self.learner
        x, _, task_id = learner.model.prepare_data(x, None, task_id)
        x = x.to(learner.device)
        return self._draws(x, task_id, num_samples, self._given(sites, time, x, task_id), chunk)

    def metrics(
        self,
        data,
        task_id: int | None = None,
        num_samples: int | None = None,
        sites: dict | None = None,
        chunk: int | None = None,
        time: float | None = None,
    ) -> dict[str, float]:
        """The likelihood's metrics on ``data = (x, y)``: accuracy (classification) and mean
        test log-likelihood, from :meth:`samples` with these arguments."""
        num_samples, chunk = _checked_passes(num_samples, chunk)
        learner = self.learner
        x, y, task_id = learner.prepare_data(data, task_id)
        samples = self._draws(x, task_id, num_samples, self._given(sites, time, x, task_id), chunk)
        return learner.model.likelihood.metrics(samples, y)

    def evidence(self, x: torch.Tensor, y: torch.Tensor, task_id: int) -> Callable:
        """``prior ↦ Σ_n log (1/S) Σ_j p(y_n | x_n, θ_j)``, ``θ_j ~ prior``: a step's data scored
        one step ahead (:attr:`~pyro_cl.transitions.TransitionContext.evidence`). Every call
        draws from the random state there was when this was made, so candidates share their
        draws (a smooth function of a transition's strength), and leaves the stream where it
        was."""
        learner = self.learner
        state = random_state(learner.device)
        model, samples = learner.model, self.num_samples

        def evidence(prior: dict) -> float:
            outside = random_state(learner.device)
            set_random_state(learner.device, state)
            try:
                outputs = predictive_samples(model, prior, x, task_id, samples)
                return float(model.likelihood.predictive_log_likelihood(outputs, y).sum())
            finally:
                set_random_state(learner.device, outside)

        return evidence

    def _given(
        self, sites: dict | None, time: float | None, x: torch.Tensor, task_id: int
    ) -> dict | None:
        """The sites a prediction draws from: ``sites``, or those at ``time`` (not both), or
        ``None`` for the learner's own."""
        if sites is not None:
            if not isinstance(sites, dict):
                raise TypeError(
                    f"sites must be a dict {{site name: distribution or value}}, got {sites!r}"
                )
            known = self.learner.initial_prior
            unknown = sorted(set(sites) - set(known))
            if unknown:
                raise ValueError(
                    f"sites names {unknown}, which are not latent sites of this net; its sites "
                    f"are {sorted(known)}"
                )
        if time is None:
            return sites
        if sites is not None:
            raise ValueError("give sites or a time to predict at, not both")
        return self._at(time, x, task_id)

    def _at(self, time: float, x: torch.Tensor, task_id: int) -> dict:
        """What predicts at ``time``: the carried posterior, or the point values of a fitter that
        predicts with them (whatever the time); a memory's refit is not carried forward."""
        learner = self.learner
        with exclusive_mode(learner.net, training=False):
            own = self.sites(x, task_id)
        if learner.fitter.predicts_with_mean:
            next_time(learner.times, time)
            return own
        if own:
            raise ValueError(
                "predicting at a time carries the propagated posterior forward; this learner "
                "predicts with its memory's refit: predict without a time"
            )
        return learner.prior_at(time)

    def _draws(
        self,
        x: torch.Tensor,
        task_id: int,
        num_samples: int | None,
        sites: dict | None = None,
        chunk: int | None = None,
    ) -> torch.Tensor:
        """:meth:`samples` for inputs already checked and on the device, with the latent sites
        drawn from ``sites`` (default :meth:`sites`), by the learner's prediction stream."""
        learner = self.learner
        with learner.prediction_random.scope():
            if sites is None:
                with exclusive_mode(learner.net, training=False):
                    sites = self.sites(x, task_id)
            return predictive_samples(
                learner.model,
                sites,
                x,
                task_id,
                self.num_samples if num_samples is None else num_samples,
                chunk,
            )


class PredictionMethods:
    """What a :class:`~pyro_cl.ContinualLearner` answers about its posterior, through
    :class:`Prediction` (mixed into the learner, whose loop is its own file)."""

    @property
    def prediction(self) -> Prediction:
        """This learner's predictions (:class:`~pyro_cl.learner.prediction.Prediction`)."""
        return Prediction(self)

    def prediction_sites(self, x: torch.Tensor | None, task_id: int) -> dict:
        """What predicts task ``task_id`` (:meth:`Prediction.sites`)."""
        return self.prediction.sites(x, task_id)

    @property
    def num_predictive_samples(self) -> int:
        return self.prediction.num_samples

    @functools.wraps(Prediction.samples)
    def predictive_samples(self, *args, **kwargs) -> torch.Tensor:
        return self.prediction.samples(*args, **kwargs)

    @functools.wraps(Prediction.samples, assigned=())  # its signature, this docstring
    def predict(self, *args, **kwargs) -> torch.Tensor:
        """Class probabilities ``(1/S) Σ_s softmax(f(x; θ_s))`` (:meth:`Prediction.samples`'s
        arguments)."""
        samples = self.prediction.samples(*args, **kwargs)
        return self.model.likelihood.predictive_probabilities(samples)

    @functools.wraps(Prediction.metrics)
    def evaluate(self, *args, **kwargs) -> dict[str, float]:
        return self.prediction.metrics(*args, **kwargs)

    def posterior(self, task_id: int) -> dict:
        """The posterior used to predict task ``task_id``: ``{site: distribution}`` for every
        trained site (a memory refit where there is one, else the propagated posterior)."""
        task_id = self.model.checked_task_id(task_id)
        with MODEL_LOCK:  # not in the middle of another thread's step
            return {**self.current_prior(), **self.prediction_sites(None, task_id)}

    def current_prior(self) -> dict:
        """The prior the next step starts from, for every site trained so far (= the latest
        posterior, before the transition; empty for point-estimate fitters), as detached copies:
        later steps do not change what this returned."""
        if self.point_estimate:
            return {}
        with MODEL_LOCK:  # not in the middle of another thread's step
            priors = read_priors(self.net, self.trained_sites)
            joint = self.guide.prior_sites()  # the family's joint prior, where it keeps one
            return detach_posterior({name: joint.get(name, q) for name, q in priors.items()})

    def prior_at(self, time: float) -> dict:
        """The prior a step at ``time`` would start from: the transition of the current posterior
        over ``Δt = time - t_last`` (Kurle et al. 2020, eqs. 13-14), ``{site: distribution}`` for
        every trained site (``{}`` before the first step), as detached copies. The learner is
        left as it was (a transition that changes the net's hyperparameters is undone)."""
        time = next_time(self.times, time)
        if not self.times or self.point_estimate:
            return {}
        before = LearnerState.of(self)
        try:
            self._apply_transition(
                TransitionContext.after(self.times, time, self.initial_prior, self.net)
            )  # as a step at time would
            return self.current_prior()
        finally:
            before.restore_into(self)


def _checked_passes(num_samples: object, chunk: object) -> tuple[int | None, int | None]:
    """A prediction's ``num_samples`` and ``chunk`` checked (``None``: the default of each)."""
    return (
        checked_optional_count(num_samples, "num_samples", MAX_PREDICTIVE_SAMPLES),
        checked_optional_count(chunk, "chunk"),
    )
