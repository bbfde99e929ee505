"""Variational Continual Learning (Nguyen et al., 2018): online VI with posterior→prior handoff,
optionally with a coreset (Algorithm 1)."""

from __future__ import annotations

import torch
from pyro.distributions import Distribution

from pyro_cl.coresets import Coreset, CoresetSelector, selector_from_spec
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.infer.natural_gradient import NaturalGradientUpdate, update_from_spec
from pyro_cl.infer.objectives import negative_elbo
from pyro_cl.infer.training import DivergenceError
from pyro_cl.likelihoods import Likelihood
from pyro_cl.posterior import (
    base_distribution,
    detach_distribution,
    distribution_parameters,
    install_prior,
    posterior_from_state,
    posterior_to_state,
    read_priors,
)

__all__ = ["VCL"]

#: Key of the single prediction posterior of a learner that refits on the whole coreset at once.
ALL_TASKS = -1


class VCL(ContinualLearner):
    """Online variational inference, VCL eq. 1: ``q_t = argmin_q KL(q || q_{t-1} p(D_t | θ) / Z_t)``.

    For each task the mean-field Gaussian guide maximises eq. 4 (divided by ``N_t``) with Adam,
    with ``num_particles`` Monte Carlo samples under local reparameterisation and the analytic
    Gaussian KL against the current prior. Then the guide's distributions of the sites this task
    used are installed as those sites' priors (:func:`pyro_cl.posterior.install_prior`), so the
    net's priors *are* the running posterior.

    Before the first task, the guide's means are set by maximum-likelihood training of the
    deterministic net (``ml_init_epochs``, VCL appendix A). Before later tasks the guide is
    re-initialised by ``between_tasks`` ("keep" starts from ``q_{t-1}``, as the reference code).

    **Coreset VCL (Algorithm 1)** — with a ``coreset`` selector, each task runs:

    1. ``C_t`` ← the selector's update of ``C_{t-1}`` with ``D_t`` (points remember their task);
    2. *propagation*: ``q̃_t = proj(q̃_{t-1} p(D_t ∪ C_{t-1} \\ C_t | θ))`` (eq. 2) — the fit above
       on the task's points outside the coreset (plus any old coreset points the selector
       dropped), so no coreset point is used twice; ``q̃_t`` becomes the prior;
    3. *prediction*: ``q_t = proj(q̃_t p(C_t | θ))`` (eq. 3) — a copy of the guide, started at
       ``q̃_t``, fitted on the coreset with ``KL(q || q̃_t)`` and the likelihood scaled to the
       coreset's own size. ``q_t`` is used for prediction only and never propagated. With
       ``refit_per_task`` (the default for multi-head nets, as in the paper's split MNIST) there
       is one ``q_t`` per task, fitted on that task's coreset points only.

    A task of exactly ``K`` points goes entirely into the coreset; its propagation step is then
    empty and ``q̃_t = q̃_{t-1}``.

    **Natural-gradient updates** — with ``update=VOGN(...)`` (or :class:`~pyro_cl.infer.ivon.IVON`)
    every fit above (propagation and coreset refits) runs that update on the guide instead of
    Adam on the ELBO; the handoff, coresets, prediction and save/load are the same.

    :param update: a :class:`~pyro_cl.infer.natural_gradient.NaturalGradientUpdate`, or ``None``
        for SVI (Adam on the ELBO with ``learning_rate`` and ``num_particles``).
    :param coreset: a :class:`~pyro_cl.coresets.CoresetSelector`, or ``None`` for plain VCL.
    :param refit_per_task: refit a separate prediction posterior per task; ``None`` chooses it
        for nets whose ``multi_head`` attribute is true.

    Example::

        net = BayesianMLP(784, [100, 100], 2, heads=5)
        learner = VCL(net, coreset=KCenterCoreset(40), epochs=120, batch_size=None)
        for task in split_mnist(root):
            learner.observe(task.train, task_id=task.id)
            print(learner.evaluate(task.test, task_id=task.id))
    """

    #: Whether tasks update the propagated posterior ``q̃`` (the coreset-only baseline does not).
    propagates = True

    def __init__(
        self,
        net: torch.nn.Module,
        likelihood: Likelihood | None = None,
        config=None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        coreset: CoresetSelector | None = None,
        refit_per_task: bool | None = None,
        update: NaturalGradientUpdate | None = None,
        **overrides,
    ) -> None:
        super().__init__(net, likelihood, config, device, seed, **overrides)
        if update is not None and not isinstance(update, NaturalGradientUpdate):
            raise TypeError(
                f"update must be a NaturalGradientUpdate (VOGN, IVON) or None, got {update!r}"
            )
        self.update = update
        if coreset is not None and not isinstance(coreset, CoresetSelector):
            raise TypeError(f"coreset must be a CoresetSelector, got {type(coreset).__name__}")
        if coreset is None and not self.propagates:
            raise ValueError(
                f"{type(self).__name__} needs a coreset selector, e.g. RandomCoreset(200)"
            )
        self.coreset_selector = coreset
        if refit_per_task is None:
            refit_per_task = bool(getattr(net, "multi_head", False))
        self.refit_per_task = refit_per_task
        #: ``C_t``: the coreset after the last task (``None`` without a selector or before task 1).
        self.coreset: Coreset | None = None
        #: ``q_t`` per task (or under ``ALL_TASKS``): the refit posteriors used for prediction.
        self.prediction_posteriors: dict[int, dict[str, Distribution]] = {}

    # ------------------------------------------------------------------ one task
    def _learn(self, x: torch.Tensor, y: torch.Tensor, task_id: int) -> list[float]:
        if self.coreset_selector is None:
            return self._propagate(Coreset.of_task(x, y, task_id), task_id)
        update = self.coreset_selector.update(self.coreset, x, y, task_id)
        rest = update.remaining
        data = Coreset.of_task(x[rest], y[rest], task_id).concat(update.dropped)
        history = self._propagate(data, task_id) if self.propagates and len(data) else []
        # Everything that can fail has run once the refits are done; only then commit C_t and q_t.
        prediction_posteriors = self._refit_on_coreset(update.coreset)
        self.coreset = update.coreset
        self.prediction_posteriors = prediction_posteriors
        return history

    def _propagate(self, data: Coreset, task_id: int) -> list[float]:
        """Fit ``q̃_t`` on ``data`` against the current prior and install it as the new prior."""
        cfg = self.config
        names = self._sites_of(data)
        ml_epochs = cfg.epochs if cfg.ml_init_epochs is None else cfg.ml_init_epochs
        priors = read_priors(self.net, names)
        if self.tasks_seen:
            self.guide.reinitialise(cfg.between_tasks, priors, cfg.later_init_log_variance)
        elif ml_epochs > 0:
            x, y = data.for_task(task_id)
            if x.shape[0]:
                self._fit_point_estimate(x, y, task_id, ml_epochs, "ML initialisation")
        elif "fresh" in (cfg.init_means, cfg.between_tasks):
            self.guide.reinitialise("fresh", priors)
        method = "VCL" if self.update is None else type(self.update).__name__
        epochs = cfg.task_epochs(first_task=not self.tasks_seen)
        history = self._fit(self.guide, data, epochs, "same", f"{method} task {task_id}")
        install_prior(self.net, _checked(self.guide.posterior(names)))
        end_task = getattr(self.net, "end_task", None)
        if end_task is not None:  # per-task hyperparameter schedules (H-IBP's child α)
            end_task()
        self._record_trained(names)
        return history

    def _fit(
        self, guide: MeanFieldGuide, data: Coreset, epochs: int, batch_size, description: str
    ) -> list[float]:
        """Fit ``guide`` on ``data`` against the net's current priors, the likelihood scaled to
        ``len(data)``: Adam on the negative ELBO (:func:`negative_elbo`), or the natural-gradient
        ``update``."""
        cfg = self.config
        tasks = data.tasks()
        single_task = len(tasks) == 1 or getattr(self.net, "multi_head", True) is False
        num_data = len(data)
        names = self._sites_of(data, guide)  # creates the guide's parameters before use
        if self.update is not None:
            return self.update.fit(
                self.model,
                guide,
                data.x,
                data.y,
                tasks[0] if single_task else data.task_ids,
                names,
                epochs,
                cfg.batch_size if batch_size == "same" else batch_size,
                description,
                cfg.progress,
            )

        def loss(index: torch.Tensor) -> torch.Tensor:
            task_id = tasks[0] if single_task else data.task_ids[index]
            return negative_elbo(
                self.model,
                guide,
                data.x[index],
                data.y[index],
                task_id,
                num_data,
                cfg.num_particles,
                self.fast,
            )

        return self._minimise(loss, guide.parameters(), num_data, epochs, description, batch_size)

    def _refit_on_coreset(self, coreset: Coreset) -> dict[int, dict[str, Distribution]]:
        """``q_t = proj(q̃_t p(C_t | θ))`` (eq. 3) per task or for the whole coreset.

        Each refit starts from a copy of the propagated guide (``q̃_t``), whose distributions are
        also the net's priors by now, so the KL term is ``KL(q || q̃_t)``; the copy is discarded
        after reading its posterior, so the propagated posterior is never touched.
        """
        cfg = self.config
        epochs = cfg.epochs if cfg.refit_epochs is None else cfg.refit_epochs
        parts = (
            [(task, coreset.select(coreset.task_ids == task)) for task in coreset.tasks()]
            if self.refit_per_task
            else [(ALL_TASKS, coreset)]
        )
        refits = {}
        for key, points in parts:
            guide = self.guide.clone()
            description = "coreset refit" + ("" if key == ALL_TASKS else f" task {key}")
            self._fit(guide, points, epochs, cfg.refit_batch_size, description)
            posterior = _checked(guide.posterior(self._sites_of(points, guide)))
            refits[key] = {name: detach_distribution(q) for name, q in posterior.items()}
        return refits

    def _sites_of(self, data: Coreset, guide: MeanFieldGuide | None = None) -> list[str]:
        """The sites used by any task present in ``data``, in order, each once."""
        return list(
            dict.fromkeys(n for t in data.tasks() for n in self._active_sites(data.x[:1], t, guide))
        )

    # ------------------------------------------------------------------ prediction
    def prediction_sites(self, x: torch.Tensor, task_id: int) -> dict:
        """The coreset refit ``q_t`` for this task where there is one; otherwise ``{}``: the
        priors, which hold the propagated posterior (and the initial prior for untrained heads)."""
        key = task_id if self.refit_per_task else ALL_TASKS
        return self.prediction_posteriors.get(key, {})

    # ------------------------------------------------------------------ state
    def _extra_state(self) -> dict:
        return {
            "coreset_selector": None
            if self.coreset_selector is None
            else self.coreset_selector.spec(),
            "refit_per_task": self.refit_per_task,
            "update": None if self.update is None else self.update.spec(),
            "coreset": None if self.coreset is None else self.coreset.state(),
            "prediction_posteriors": [
                [key, posterior_to_state(posterior)]
                for key, posterior in self.prediction_posteriors.items()
            ],
        }

    @classmethod
    def _constructor_arguments(cls, extra: dict) -> dict:
        spec = extra.get("coreset_selector")
        return {
            "coreset": None if spec is None else selector_from_spec(spec),
            "refit_per_task": extra.get("refit_per_task"),
            "update": None if extra.get("update") is None else update_from_spec(extra["update"]),
        }

    def _load_extra_state(self, state: dict) -> None:
        if state.get("coreset") is not None:
            self.coreset = Coreset.from_state(state["coreset"], self.device)
        self.prediction_posteriors = {
            int(key): posterior_from_state(posterior, self.device)
            for key, posterior in state.get("prediction_posteriors", [])
        }


def _checked(posterior: dict[str, Distribution]) -> dict[str, Distribution]:
    """``posterior`` unchanged, or a :class:`DivergenceError` if any site is not finite."""
    for name, q in posterior.items():
        if not all(torch.isfinite(value).all() for value in distribution_parameters(q).values()):
            raise DivergenceError(f"the posterior of site {name!r} is not finite")
        base = base_distribution(q)
        if hasattr(base, "scale") and not (base.scale > 0).all():
            raise DivergenceError(f"the posterior of site {name!r} has a zero variance")
    return posterior
