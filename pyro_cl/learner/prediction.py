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

from collections.abc import Callable
from typing import Protocol

import torch

from pyro_cl.checks import checked_optional_count
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.infer.prediction import predictive_samples
from pyro_cl.infer.random_stream import random_state, set_random_state
from pyro_cl.learner.state import LearnerStores
from pyro_cl.nn.exclusive import exclusive_mode

__all__ = ["ALL_TASKS", "MAX_PREDICTIVE_SAMPLES", "Prediction"]

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

    def _check_time(self, time: float | None) -> float: ...


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
            learner._check_time(time)
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


def _checked_passes(num_samples: object, chunk: object) -> tuple[int | None, int | None]:
    """A prediction's ``num_samples`` and ``chunk`` checked (``None``: the default of each)."""
    return (
        checked_optional_count(num_samples, "num_samples", MAX_PREDICTIVE_SAMPLES),
        checked_optional_count(chunk, "chunk"),
    )
