"""The memory's part of a learner's step: choose the kept points before the fit or after it,
and refit the posterior that predicts.

VCL's coreset (Nguyen et al. 2018, Algorithm 1) chooses before the fit; Kurle et al. 2020's
memory (Algorithm 1) after it. Which one is the memory's ``order``, a property of the memory::

    before:  C_t = memory.update(M_{t-1}, D_t)                  q̃_t = fit on D_t \\ C_t
    after:   q̃_t = fit on D_t ∪ M_{t-1}                         (eq. 7)
             M_t, q_t = memory.update(...) with q̃_t, p_t         (eqs. 8, 9a/9b)
    refit:   q_t = proj(q̃_t p(C_t | θ)) per task or whole        (VCL eq. 3; memories that refit)

``M_{t-1}`` enters with each point's likelihood weighted by the transition (by age under
Bayesian forgetting, Kurle et al. eq. 12). Nothing here changes the learner's memory or its
prediction posteriors: :meth:`MemoryStep.run` returns them, and the learner commits them once
everything that can fail has run.
"""

from __future__ import annotations

from typing import Protocol

from pyro.distributions import Distribution

from pyro_cl.fitters.fitter import Fitter
from pyro_cl.infer.data_parallel import check_replicas_agree, synchronise_random_state
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.learner.checked_fit import checked_fit
from pyro_cl.learner.prediction import ALL_TASKS
from pyro_cl.learner.state import LearnerStores, net_values_kept
from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory, MemoryUpdate
from pyro_cl.points import Points
from pyro_cl.posterior import (
    Posterior,
    detach_distribution,
    detach_posterior,
    install_prior,
    read_priors,
)
from pyro_cl.transitions.base import Transition, TransitionContext

__all__ = ["MemoryStep"]


class Stepping(LearnerStores, Protocol):
    """What the memory's part of a step uses of :class:`~pyro_cl.ContinualLearner` (a protocol,
    so that this module does not import the learner): its parts, and its fit."""

    memory: Memory
    fitter: Fitter
    transition: Transition
    num_predictive_samples: int

    def current_prior(self) -> dict: ...

    def _propagate(self, context: FitContext, data: Points, task_id: int) -> list[float]: ...


class MemoryStep:
    """One step of ``learner`` with its memory (module docstring).

    :param learner: the learner whose memory chooses.
    :param context: the step's fit context.
    :param task_id: the step's task.
    :param time: the step's time.
    """

    def __init__(self, learner: Stepping, context: FitContext, task_id: int, time: float) -> None:
        self.learner, self.context, self.task_id, self.time = learner, context, task_id, time

    def run(
        self, new: Points, between: TransitionContext | None
    ) -> tuple[list[float], Points, dict[int, Posterior]]:
        """The step on ``new`` (``between``: the transition's context, ``None`` at the first
        step): the propagation fit's epoch losses, the points kept ``M_t`` and the prediction
        posteriors (``{}``: the propagated posterior predicts)."""
        memory = self.learner.memory
        old = self.weighted_memory(between)
        if memory.order == "before":
            history, update, prediction_posteriors = self.choose_then_fit(old, new)
        else:  # "after", the only other order a Memory accepts
            history, update, prediction_posteriors = self.fit_then_choose(old, new)
        if memory.refit:
            prediction_posteriors = self.refit(update.points)
        return history, update.points, prediction_posteriors

    def weighted_memory(self, between: TransitionContext | None) -> Points | None:
        """``M_{t-1}`` with each point's likelihood weighted for the step ``between`` leads to
        by the transition; unweighted where the transition does not weigh, and at the first
        step (``between`` is None)."""
        points = self.learner.memory_points
        if points is None or between is None:
            return points
        ages = between.time - points.times
        return points.weighted(self.learner.transition.likelihood_weights(ages, between))

    def view(self, prior: Posterior | None = None) -> ModelView:
        """What the memory sees of this step: the current posterior, ``prior`` (after the fit)."""
        learner = self.learner
        return ModelView(
            learner.model,
            learner.current_prior(),
            prior,
            self.time,
            self.task_id,
            learner.num_predictive_samples,
        )

    def choose(self, old: Points | None, new: Points, view: ModelView) -> MemoryUpdate:
        """The memory's update, made from the same random state on every rank of a
        data-parallel fit (so all ranks choose the same points, checked)."""
        synchronise_random_state()
        update = self.learner.memory.update(old, new, view)
        check_replicas_agree({"remaining": update.remaining.double()}, "memory choices")
        return update

    def choose_then_fit(self, old: Points | None, new: Points):
        """VCL's order: ``C_t`` chosen first, ``q̃_t`` fitted on the points not kept (and those
        the memory let go).

        :returns: the fit's epoch losses, the memory update and ``{}`` (no prediction posterior
            yet)."""
        update = self.choose(old, new, self.view())
        data = new.select(update.remaining).concat(update.dropped)
        history = self.learner._propagate(self.context, data, self.task_id) if len(data) else []
        return history, update, {}

    def fit_then_choose(self, old: Points | None, new: Points):
        """Kurle et al.'s order::

            q̃_t = fit on D_t ∪ M_{t-1} against the step's prior p_t       (eq. 7)
            M_t, q_t = memory.update(...)  with q̃_t and p_t in view      (eq. 8, 9a/9b)

        ``old`` is ``M_{t-1}`` with the transition's likelihood weights (``p_t`` includes the
        memory's age-weighted likelihood, and every fit, factor and score below uses it).
        ``q_t`` (the update's posterior, else an ELBO fit of the points that left, from ``p_t``,
        else ``q̃_t``) becomes the prior; ``q̃_t`` predicts.

        :returns: the fit's epoch losses, the memory update and the prediction posteriors.
        """
        learner, context, task_id = self.learner, self.context, self.task_id
        data = new if old is None else learner.memory.replayed(old, new).concat(new)
        net = learner.net
        step_prior = {name: detach_distribution(d) for name, d in read_priors(net).items()}
        history = learner._propagate(context, data, task_id)
        fitted = learner.current_prior()  # a copy: the refit below overwrites the priors
        update = self.choose(old, new, self.view(step_prior))
        if update.posterior is not None:
            install_prior(net, update.posterior)
        else:
            rest = new.select(update.remaining).concat(update.dropped)
            if len(rest):  # the ELBO Gaussian update: (D_t ∪ M_{t-1}) \ M_t from p_t
                install_prior(net, step_prior)
                learner._propagate(context, rest, task_id)
        return history, update, {ALL_TASKS: fitted}

    def refit(self, coreset: Points) -> dict[int, dict[str, Distribution]]:
        """``q_t = proj(q̃_t p(C_t | θ))`` (VCL eq. 3) per task or for the whole memory.

        Each refit starts from a copy of the propagated guide (``q̃_t``), whose distributions are
        also the net's priors by now, so the KL term is ``KL(q || q̃_t)``; the copy is discarded
        after reading its posterior, and the net's own values (deterministic parts) are put back,
        so the propagated posterior and values are never touched.
        """
        learner = self.learner
        refit = learner.config.refit
        epochs = (
            learner.config.schedule.epochs if refit.refit_epochs is None else refit.refit_epochs
        )
        parts = (
            [(task, coreset.select(coreset.task_ids == task)) for task in coreset.tasks()]
            if learner.refit_per_task
            else [(ALL_TASKS, coreset)]
        )
        refits = {}
        with net_values_kept(learner.net):  # the propagation fit's point values stay
            for key, points in parts:
                posterior = self.refit_one(key, points, epochs)
                if posterior is not None:
                    refits[key] = detach_posterior(posterior)  # a block's sites keep their block
        return refits

    def refit_one(self, key: int, points: Points, epochs: int) -> Posterior | None:
        """One refit of a copy of the propagated guide on ``points``: its posterior (``None``
        for a point estimate). The copy is discarded afterwards."""
        learner = self.learner
        guide = learner.guide.clone()
        try:
            sites = learner.model.sites(guide, points.x, points.tasks())
            problem = FitProblem(
                points,
                sites,
                epochs,
                self.context.batch_size(learner.config.refit.refit_batch_size),
                "coreset refit" + ("" if key == ALL_TASKS else f" task {key}"),
            )
            # a fit for prediction only: a fresh Adam, the carried state left to training's
            return checked_fit(learner, self.context.with_fresh_adam(), guide, problem)[1]
        finally:
            guide.release()  # keep Pyro's parameter store bounded
