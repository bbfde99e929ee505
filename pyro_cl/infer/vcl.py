"""Variational Continual Learning (Nguyen et al., 2018): online VI with posterior→prior handoff."""

from __future__ import annotations

import torch

from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.infer.objectives import negative_elbo
from pyro_cl.infer.training import DivergenceError
from pyro_cl.posterior import install_prior, read_priors

__all__ = ["VCL"]


class VCL(ContinualLearner):
    """Online variational inference, VCL eq. 1: ``q_t = argmin_q KL(q || q_{t-1} p(D_t | θ) / Z_t)``.

    For each task the mean-field Gaussian guide maximises eq. 4 (divided by ``N_t``) with Adam,
    with ``num_particles`` Monte Carlo samples under local reparameterisation and the analytic
    Gaussian KL against the current prior. Then the guide's distributions of the sites this task
    used are installed as those sites' priors (:func:`pyro_cl.posterior.install_prior`), so the
    net's priors *are* the running posterior; prediction samples from them.

    Before the first task, the guide's means are set by maximum-likelihood training of the
    deterministic net (``ml_init_epochs``, VCL appendix A). Before later tasks the guide is
    re-initialised by ``between_tasks`` ("keep" starts from ``q_{t-1}``, as the reference code).

    Example::

        net = BayesianMLP(784, [100, 100], 2, heads=5)
        learner = VCL(net, epochs=120, batch_size=None)
        for task in split_mnist(root):
            learner.observe(task.train, task_id=task.id)
            print(learner.evaluate(task.test, task_id=task.id))
    """

    def _learn(self, x: torch.Tensor, y: torch.Tensor, task_id: int) -> list[float]:
        cfg = self.config
        names = self._active_sites(x, task_id)
        if not self.tasks_seen:
            ml_epochs = cfg.epochs if cfg.ml_init_epochs is None else cfg.ml_init_epochs
            if ml_epochs > 0:
                self._fit_point_estimate(x, y, task_id, ml_epochs, "ML initialisation")
        else:
            self.guide.reinitialise(cfg.between_tasks, read_priors(self.net, names))
        num_data = x.shape[0]

        def loss(index: torch.Tensor) -> torch.Tensor:
            return negative_elbo(
                self.model,
                self.guide,
                x[index],
                y[index],
                task_id,
                num_data,
                cfg.num_particles,
                self.fast,
            )

        history = self._minimise(
            loss, self.guide.parameters(), num_data, cfg.epochs, f"VCL task {task_id}"
        )
        posterior = self.guide.posterior(names)
        for name, q in posterior.items():
            base = q.base_dist
            if not (torch.isfinite(base.loc).all() and (base.scale > 0).all()):
                raise DivergenceError(f"the posterior of site {name!r} is not finite")
        install_prior(self.net, posterior)
        self._record_trained(names)
        return history

    def prediction_sites(self, x: torch.Tensor, task_id: int) -> dict:
        # The priors hold the running posterior (and the initial prior for untrained heads).
        return {}
