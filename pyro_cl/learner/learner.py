"""The continual learner: one loop over time steps, composed of small parts.

For each step ``t_k`` with data ``D_k``::

    prior     = transition(posterior_{k-1}, t_k - t_{k-1})     # Transition (not at the first step)
    memory    : choose C_k before the fit, or after it          # Memory (optional)
    q̃_k       = fitter(model, guide, data, prior)               # Fitter, on D_k \\ C_k (before)
                                                                #   or D_k ∪ M_{k-1} (after)
    handoff   : install q̃_k as the priors of its sites          # pyro_cl.posterior
    q_k       = refit of q̃_k on C_k, for prediction only        # Algorithm 1, eq. 3
    callbacks : every optimiser step, epoch, fit and step       # Callback

Each part is a documented base class with built-ins, and saves and loads through its spec
(:mod:`pyro_cl.spec`). :class:`~pyro_cl.VCL`, :class:`~pyro_cl.CoresetOnly` and
:class:`~pyro_cl.FineTuning` are this learner with particular default parts. This file is the
loop. Around it: the memory's part of a step (when it chooses, the refits) is
:class:`~pyro_cl.learner.memory_step.MemoryStep`; what the learner answers about its posterior
(``predict``, ``evaluate``, ``posterior``, ``prior_at``) comes from
:class:`~pyro_cl.learner.prediction.PredictionMethods`, and its files (``save``, ``load``,
``state``) from :class:`~pyro_cl.learner.checkpoint.CheckpointMethods`; the state a step rolls
back is :mod:`pyro_cl.learner.state`; the parts check each other through
:class:`~pyro_cl.infer.parts.Parts`.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch
from pyro.distributions import Distribution

from pyro_cl.checks import checked_instance
from pyro_cl.fitters.elbo_fitter import ELBOFitter
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.guides import GuideFamily, guide_family_of
from pyro_cl.infer.adam_moments import AdamMoments
from pyro_cl.infer.callbacks import Callback, CallbackList, ProgressBar
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.data_parallel import check_same_step_data, refused_on_any_rank
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.parts import Parts
from pyro_cl.infer.random_stream import RandomStream
from pyro_cl.learner.checked_fit import checked_fit, step_size
from pyro_cl.learner.checkpoint import CheckpointMethods
from pyro_cl.learner.memory_step import MemoryStep
from pyro_cl.learner.ownership import claim, disown
from pyro_cl.learner.prediction import ALL_TASKS, PredictionMethods
from pyro_cl.learner.state import transaction
from pyro_cl.learner.step_time import next_time
from pyro_cl.likelihoods import Likelihood
from pyro_cl.memory.protocol import Memory
from pyro_cl.model import model_class_of
from pyro_cl.nn.exclusive import exclusive_mode
from pyro_cl.points import Points
from pyro_cl.posterior import (
    Posterior,
    detach_distribution,
    install_prior,
    read_priors,
)
from pyro_cl.transitions.base import Identity, Transition, TransitionContext

__all__ = ["ALL_TASKS", "ContinualLearner"]


class ContinualLearner(PredictionMethods, CheckpointMethods):
    """A Bayesian net, a guide and the current prior, fed one time step at a time.

    :param net: a ``PyroModule`` with ``PyroSample`` latent sites, e.g. :class:`BayesianMLP`.
        Its ``forward`` may take a ``task_id`` keyword (multi-head nets do). The net names the
        Pyro model it is part of by a ``model_class`` attribute (default
        :class:`~pyro_cl.model.SupervisedModel`; a generative decoder such as
        :class:`~pyro_cl.nn.VAEDecoder` names :class:`~pyro_cl.generative.GenerativeModel`,
        and ``observe`` then takes the observations alone).
    :param likelihood: observation model (default: the model class's, categorical for
        classification).
    :param config: a :class:`~pyro_cl.infer.config.TrainingConfig`; keyword ``settings``
        (``epochs=...``, ``learning_rate=...``) replace single fields of it.
    :param device: where the net, guide and data live ("cpu", "cuda", ...).
    :param seed: gives the learner random streams of its own, training's and prediction's
        (:mod:`pyro_cl.infer.random_stream`), swapped into torch's generator only while it works;
        ``None`` draws from the process's.
    :param fitter: fits each step's posterior (default :attr:`default_fitter`).
    :param transition: turns the last posterior into the next prior (default
        :attr:`default_transition`).
    :param memory: a :class:`~pyro_cl.memory.Memory`, or ``None`` for no memory.
    :param guide: the family the posterior is fitted in, a :class:`~pyro_cl.guides.GuideFamily`
        (default :class:`~pyro_cl.guides.MeanField`; :class:`~pyro_cl.guides.FullCovariance`
        and :class:`~pyro_cl.guides.LowRank` couple chosen sites), or one of Pyro's Gaussian
        autoguide classes, taken as the family it is (:mod:`pyro_cl.guides.autoguides`). The
        built guide module is :attr:`guide`, the family :attr:`guide_family`.
    :param callbacks: :class:`~pyro_cl.infer.callbacks.Callback` objects that watch every step;
        a progress bar is added when ``progress`` is on.
    :param refit_per_task: with a refitting memory, refit a separate prediction posterior per
        task; ``None`` chooses it for multi-head nets.
    """

    #: The parts a learner of this class uses where none is given.
    default_fitter: ClassVar[type[Fitter]] = ELBOFitter
    default_transition: ClassVar[type[Transition]] = Identity

    def __init__(
        self,
        net: torch.nn.Module,
        likelihood: Likelihood | None = None,
        config: TrainingConfig | None = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        fitter: Fitter | None = None,
        transition: Transition | None = None,
        memory: Memory | None = None,
        callbacks: list[Callback] | tuple[Callback, ...] = (),
        refit_per_task: bool | None = None,
        guide: GuideFamily | type | None = None,
        **settings,
    ) -> None:
        if not isinstance(net, torch.nn.Module):
            raise TypeError(
                f"net must be a torch.nn.Module (a net with PyroSample weights), got "
                f"{type(net).__name__}; a likelihood is the learner's second argument"
            )
        self.config = (config or TrainingConfig()).replace(**settings)
        self.device = torch.device(device or "cpu")
        self.seed = seed
        #: Where training's draws come from: the learner's own stream when seeded (see
        #: :mod:`pyro_cl.infer.random_stream`), else torch's global generator.
        self.random = RandomStream(seed, self.device)
        #: Where prediction's draws come from: a stream split from the same seed, so evaluating
        #: never changes what training draws.
        self.prediction_random = self.random.spawn(1)
        self.fitter = checked_instance(fitter, Fitter, "fitter") or self.default_fitter()
        self.transition = (
            checked_instance(transition, Transition, "transition") or self.default_transition()
        )
        self.memory = checked_instance(memory, Memory, "memory")
        self.guide_family = guide_family_of(guide)
        self.callbacks = CallbackList(callbacks)
        claim(net, self)  # before the net is moved: another learner's net is refused untouched
        try:
            model_class = model_class_of(net)
            self.model = model_class(
                net.to(self.device),
                likelihood or model_class.default_likelihood(),
                self.config.monte_carlo.elbo,
            )
            # each part refuses what it cannot work with (fitter, transition, memory, family)
            Parts(
                self.model,
                self.fitter,
                self.transition,
                self.memory,
                self.guide_family,
                self.config,
            ).check()
            initialisation = self.config.initialisation
            with self.random.scope():  # a family may refuse the net's sites as it builds
                self.guide = self.guide_family.build(
                    self.model, initialisation.init_log_variance, initialisation.init_loc_std
                )
        except Exception:
            disown(net, self)  # the net stays free for a learner built with the mistake mended
            raise
        self.refit_per_task = self.model.multi_head if refit_per_task is None else refit_per_task
        #: The priors before any step (for transitions that return towards them).
        self.initial_prior = {
            name: detach_distribution(d) for name, d in read_priors(self.net).items()
        }
        self.tasks_seen: list[int] = []
        #: The time stamp of every step observed so far.
        self.times: list[float] = []
        #: Sites trained so far, in order; their priors hold the current posterior.
        self.trained_sites: list[str] = []
        #: ``C_t``: the memory after the last step (``None`` without a memory or before step 1).
        self.memory_points: Points | None = None
        #: ``q_t`` per task (or under ``ALL_TASKS``): the refit posteriors used for prediction.
        self.prediction_posteriors: dict[int, dict[str, Distribution]] = {}
        #: Adam's state from the last step's fit, when ``carry_adam_state`` keeps it
        #: (:mod:`~pyro_cl.infer.adam_moments`); empty otherwise.
        self.adam_moments = AdamMoments()

    @property
    def net(self) -> torch.nn.Module:
        return self.model.net

    @property
    def point_estimate(self) -> bool:
        """True when the fitter produces point values, which then predict."""
        return self.fitter.point_estimate

    # ------------------------------------------------------------------ data
    def prepare_data(self, data, task_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``data`` (``(x, y)``; observations ``x`` alone for a generative model) and
        ``task_id`` checked, converted and on the learner's device.

        :raises ValueError: naming what is wrong with the data or the task id.
        """
        x, y = self.model.split_data(data)
        x, y, task_id = self.model.prepare_data(x, y, task_id)
        return x.to(self.device), y.to(self.device), task_id

    # ------------------------------------------------------------------ learning
    def observe(
        self,
        data,
        task_id: int | None = None,
        time: float | None = None,
        callbacks: list[Callback] | tuple[Callback, ...] = (),
        prior: Posterior | None = None,
    ) -> list[float]:
        """Learn step ``data = (x, y)`` of task ``task_id`` at time ``time`` (default: one after
        the last step); afterwards its posterior is the prior.

        If anything fails (for example the fit diverges) the guide, the priors, the net's
        buffers and every part's state are rolled back, so the previous posterior stays intact.

        :param task_id: which task (head) the data belongs to: required for a multi-head net
            (a missing one was silently head 0); ``None`` is head 0 of a single-head net.
        :param callbacks: extra callbacks for this step only (not saved with the learner).
        :param prior: the step starts from this posterior (of some of the net's sites) instead
            of the learner's own, installed inside the step's transaction (graph VCL's combined
            parents); the transition still applies to it.
        :returns: the loss of every epoch of the propagation fit.
        """
        refusal = None
        try:
            x, y, task_id = self.prepare_data(data, task_id)
            time = next_time(self.times, time)
            if prior is not None and not self.guide.mean_field:
                raise ValueError(
                    "a prior given to observe is installed site by site; the "
                    f"{self.guide_family.name} guide family keeps a joint prior: observe "
                    "without prior="
                )
        except (ValueError, TypeError) as error:
            refusal = error
        refused_on_any_rank(refusal)  # data-parallel: one rank's refusal is every rank's
        # Training mode whatever the user left the net in (an IBP net in eval() would train
        # with test-time Bernoulli masks); one model run at a time (see pyro_cl.nn.exclusive).
        with exclusive_mode(self.net, training=True), self.random.scope():
            check_same_step_data(  # data-parallel runs: every rank observes the same step
                {"inputs": x, "targets": y, "task and time": torch.tensor([task_id, time])}
            )
            progress = [ProgressBar()] if self.config.display.progress else []
            watchers = CallbackList([*progress, *self.callbacks, *callbacks])
            try:
                with transaction(self):  # any failure: the learner is left as it was
                    watchers.on_task_start(self, task_id)
                    if prior is not None:
                        install_prior(self.net, prior)
                    history = self._step(x, y, task_id, time, watchers)
                    self.tasks_seen.append(task_id)
                    self.times.append(time)
            except DivergenceError as error:  # name the parts that shaped the failed fit
                raise DivergenceError(
                    f"{error} (fitter {self.fitter!r}, transition {self.transition!r}"
                    f"{step_size(self.fitter, self.config)}); the learner is as it was before this step"
                ) from error
            watchers.on_task_end(self, task_id, history)
        return history

    def _step(
        self, x: torch.Tensor, y: torch.Tensor, task_id: int, time: float, callbacks: Callback
    ) -> list[float]:
        carried = self.adam_moments if self.config.optimisation.carry_adam_state else None
        context = FitContext(
            self.model, self.config, self.device, callbacks, self.initial_prior, carried
        )
        # the transition's view of this step: None at the first step (nothing to transition)
        between = (
            TransitionContext.after(
                self.times,
                time,
                self.initial_prior,
                self.net,
                self.prediction.evidence(x, y, task_id),
            )
            if self.times
            else None
        )
        if between is not None:
            self._apply_transition(between)
        new = Points.of_task(x, y, task_id, time)
        if self.memory is None:
            return self._propagate(context, new, task_id)
        step = MemoryStep(self, context, task_id, time)
        history, points, prediction_posteriors = step.run(new, between)
        # Everything that can fail has run once the refits are done; only then commit C_t, q_t.
        self.memory_points = points
        self.prediction_posteriors = prediction_posteriors
        return history

    def _apply_transition(self, between: TransitionContext) -> None:
        """``prior = transition(posterior, Δt)`` on the sites trained so far, and on the prior
        the guide keeps itself (a joint Gaussian's, through the transition's linear Gaussian
        step)."""
        posterior = read_priors(self.net, self.trained_sites)
        install_prior(self.net, self.transition(posterior, between))
        step = functools.partial(self.transition.gaussian_step, context=between)
        self.guide.carry_prior(step, self.initial_prior)

    def _propagate(self, context: FitContext, data: Points, task_id: int) -> list[float]:
        """Fit ``q̃_t`` on ``data`` against the current prior and install it as the new prior
        (nothing, when the transition never propagates)."""
        if not self.transition.propagates:
            return []
        sites = self.model.sites(self.guide, data.x, data.tasks())
        first_task = not self.tasks_seen
        self.fitter.prepare(context, self.guide, data, task_id, sites, first_task)
        problem = FitProblem(
            data,
            sites,
            self.config.schedule.task_epochs(first_task),
            context.batch_size(),
            f"{type(self.fitter).__name__}, step {len(self.tasks_seen) + 1} (task {task_id})",
        )
        history, posterior = checked_fit(self, context, self.guide, problem)
        if posterior is not None:
            install_prior(self.net, posterior)
            self.guide.hand_off(sites)  # what the family keeps beyond the per-site priors
        for name in sites:
            if name not in self.trained_sites:
                self.trained_sites.append(name)
        return history
