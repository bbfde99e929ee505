"""Variational Continual Learning (Nguyen et al., 2018): online VI with the posterior→prior
handoff, optionally with a coreset (Algorithm 1)."""

from __future__ import annotations

from pyro_cl.learner.learner import ContinualLearner

__all__ = ["VCL"]


class VCL(ContinualLearner):
    """Online variational inference, VCL eq. 1: ``q_t = argmin_q KL(q || q_{t-1} p(D_t | θ) / Z_t)``.

    A :class:`~pyro_cl.learner.learner.ContinualLearner` with the ELBO fitter and the identity
    transition: for each task the mean-field Gaussian guide maximises eq. 4 (divided by ``N_t``)
    with Adam, with ``num_particles`` Monte Carlo samples under local reparameterisation and the
    analytic KL against the current prior; then the guide's distributions of the sites this task
    used are installed as those sites' priors (:func:`pyro_cl.posterior.install_prior`), so the
    net's priors *are* the running posterior.

    Before the first task, the guide's means are set by maximum-likelihood training of the
    deterministic net (``ml_init_epochs``, VCL appendix A). Before later tasks the guide is
    re-initialised by ``between_tasks`` ("keep" starts from ``q_{t-1}``, as the reference code).

    **Coreset VCL (Algorithm 1)** — with a coreset (the learner's ``memory``), each
    task runs:

    1. ``C_t`` ← the memory's update of ``C_{t-1}`` with ``D_t`` (points remember their task);
    2. *propagation*: ``q̃_t = proj(q̃_{t-1} p(D_t ∪ C_{t-1} \\ C_t | θ))`` (eq. 2) — the fit above
       on the task's points outside the coreset (plus any old coreset points the memory
       dropped), so no coreset point is used twice; ``q̃_t`` becomes the prior;
    3. *prediction*: ``q_t = proj(q̃_t p(C_t | θ))`` (eq. 3) — a copy of the guide, started at
       ``q̃_t``, fitted on the coreset with ``KL(q || q̃_t)`` and the likelihood scaled to the
       coreset's own size. ``q_t`` is used for prediction only and never propagated. With
       ``refit_per_task`` (the default for multi-head nets, as in the paper's split MNIST) there
       is one ``q_t`` per task, fitted on that task's coreset points only.

    A task of exactly ``K`` points goes entirely into the coreset; its propagation step is then
    empty and ``q̃_t = q̃_{t-1}``.

    **Natural-gradient fitters** — with ``fitter=VOGN(...)`` (or :class:`~pyro_cl.fitters.ivon.IVON`)
    every fit above (propagation and coreset refits) runs that update on the guide instead of
    Adam on the ELBO; the handoff, coresets, prediction and save/load are the same.

    The parameters are :class:`~pyro_cl.learner.learner.ContinualLearner`'s; the paper's coreset is
    its ``memory`` (a :class:`~pyro_cl.memory.Memory`, e.g. ``KCenterCoreset(40)``).

    Example::

        net = BayesianMLP(784, [100, 100], 2, heads=5)
        learner = VCL(net, memory=KCenterCoreset(40), epochs=120, batch_size=None)
        for task in split_mnist(root):
            learner.observe(task.train, task_id=task.id)
            print(learner.evaluate(task.test, task_id=task.id))
    """
