"""Per-datum training objectives: the online ELBO (VCL eq. 4) and the plain likelihood."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from pyro.infer import TraceMeanField_ELBO

from pyro_cl.diagonal_gaussian import DiagonalGaussian
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.packed_gaussians import PackedGaussians
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.kl import kl_to_prior, site_kl
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.effects import CollectLocalKL, in_particle_plate
from pyro_cl.nn.local_reparam import local_reparameterization
from pyro_cl.nn.structured import has_structured_sites
from pyro_cl.posterior import read_priors, read_priors_of

__all__ = ["Minibatch", "kl_and_sites", "negative_elbo", "negative_log_likelihood"]


class Minibatch(NamedTuple):
    """The rows one loss evaluation sees: inputs, targets, the task (one id for every row, or a
    tensor of one id per row, for data mixing tasks such as a coreset) and optional per-row
    likelihood weights (``p(y_n | θ)^{w_n}``, Bayesian forgetting's memory, Kurle et al. 2020
    eq. 12)."""

    x: torch.Tensor
    y: torch.Tensor
    task_id: int | torch.Tensor
    weights: torch.Tensor | None = None


def negative_elbo(
    model: SupervisedModel,
    guide: MeanFieldGuide,
    batch: Minibatch,
    dataset_size: float,
    num_particles: int = 1,
    fast: bool | None = None,
    packed: PackedGaussians | None = None,
    kl_weight: float = 1.0,
) -> torch.Tensor:
    """``-L_VCL / N_t``: ``KL(q_t || q_{t-1}) / N_t - (1/M) Σ_{n in batch} E_q[log p(y_n | θ, x_n)]``.

    This is eq. 4 divided by the data set's size ``N_t`` (the reference code's scaling), estimated
    on a :class:`Minibatch` ``(x, y)`` of size ``M`` with ``num_particles`` Monte Carlo samples and an
    analytic KL against the model's current priors.

    The batch's ``task_id`` is one task for the whole batch, or a tensor of one task id per point (data mixing
    tasks, such as a coreset): then each task's points run through the net with that task's
    ``task_id`` and the KL covers the union of the sites the tasks use, counted once.

    ``fast=True`` computes it directly from the guide's parameters (library layers only, particles
    vectorised); ``fast=False`` runs the model and guide as Pyro programs (Pyro's
    ``TraceMeanField_ELBO`` for a single task). Both give the same value and gradients for the same
    random draws (tested).

    Nets with local structured sites (IBP masks, :mod:`pyro_cl.nn.structured`) add each point's
    Monte Carlo ``log q(z_n) - log p(z_n)`` to its negative log-likelihood (H-IBP supplement
    eq. 14's last term); the Pyro route gets the same term from ``TraceMeanField_ELBO``.

    The batch's ``weights`` (one per point) multiply each point's term: a likelihood
    ``p(y_n | θ)^{w_n}`` (Bayesian forgetting's memory, Kurle et al. 2020 eq. 12). Both routes
    then compute the terms explicitly.

    ``kl_weight`` ``β`` multiplies the KL term: the β-ELBO of GVCL (Loo, Swaroop & Turner 2021,
    eq. 3), ``E_q[log p(D_t | θ)] - β KL(q_t || q_{t-1})``, whose optimum over all distributions is
    the tempered posterior ``∝ q_{t-1}(θ) p(D_t | θ)^{1/β}``. ``β = 1`` is VCL.

    ``packed`` (fast route): the fit's Gaussian sites packed into flat tensors
    (:class:`~pyro_cl.infer.packed_gaussians.PackedGaussians`); their KL, the sum over every
    packed site, and their values then come from it in a few fused kernels.
    """
    if fast is None:
        fast = model.fast
    x, y, task_id, weights = batch
    groups = task_groups(task_id, x.shape[0])
    if (len(groups) > 1 or weights is not None) and not fast and has_structured_sites(model.net):
        raise ValueError("weighted or task-mixing batches need elbo='fast' for nets with IBP masks")
    if len(groups) == 1 and not fast and weights is None and kl_weight == 1.0 and guide.mean_field:
        return _trace_mean_field_loss(model, guide, x, y, groups[0][0], dataset_size, num_particles)
    names_by_task = {task: model.sites(guide, x, [task]) for task, _ in groups}
    names = list(dict.fromkeys(name for group in names_by_task.values() for name in group))
    kl, sites = kl_and_sites(model, guide, names, fast, packed)
    log_likelihood = 0.0
    for task, rows in groups:
        task_sites = {name: sites[name] for name in names_by_task[task]}
        with CollectLocalKL() as local_kl:
            outputs = sample_outputs(model, task_sites, x[rows], task, num_particles, fast)
        # per point: E_q[log p(y_n | θ)] - KL of its local sites (masks); mean over particles
        per_point = model.likelihood.log_prob(outputs, y[rows])
        if local_kl.terms:  # local sites (masks, a VAE's codes) reported their KL
            per_point = per_point - local_kl.per_point()
        if weights is not None:
            per_point = per_point * weights[rows]
        log_likelihood = log_likelihood + per_point.mean(0).sum()
    return kl_weight * kl / dataset_size - log_likelihood / x.shape[0]


def _trace_mean_field_loss(
    model: SupervisedModel,
    guide: MeanFieldGuide,
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    dataset_size: float,
    num_particles: int,
) -> torch.Tensor:
    """Pyro's ``TraceMeanField_ELBO`` loss divided by ``N``: its particles in one pass in a
    :class:`~pyro_cl.nn.effects.ParticlePlate` (the loss then sums them, so it is divided by
    their number too) where the net broadcasts over particles, else Pyro's loop over them."""
    vectorized = model.vectorized_particles and num_particles > 1
    elbo = TraceMeanField_ELBO(num_particles=1 if vectorized else num_particles)
    if vectorized:
        model, guide = (
            in_particle_plate(model, num_particles),
            in_particle_plate(guide, num_particles),
        )
    with local_reparameterization():
        loss = elbo.differentiable_loss(
            model, guide, x, y, task_id=task_id, dataset_size=dataset_size
        )
    return loss / (dataset_size * (num_particles if vectorized else 1))


def task_groups(
    task_id: int | torch.Tensor, num_rows: int
) -> list[tuple[int, slice | torch.Tensor]]:
    """``[(task, rows)]``: a single task covers every row; per-point ids (non-negative) are
    grouped, each group's rows in increasing order, with one read of the group sizes back to the
    host per call (on a GPU, one synchronisation, not one per task)."""
    if not isinstance(task_id, torch.Tensor):
        return [(task_id, slice(None))]
    if task_id.shape != (num_rows,):
        raise ValueError(f"expected {num_rows} task ids, got shape {tuple(task_id.shape)}")
    counts = torch.bincount(task_id).tolist()
    tasks = [task for task, count in enumerate(counts) if count > 0]
    if len(tasks) == 1:
        return [(tasks[0], slice(None))]
    rows = torch.argsort(task_id, stable=True).split(counts)
    return [(task, rows[task]) for task in tasks]


def kl_and_sites(
    model: SupervisedModel,
    guide: MeanFieldGuide,
    names: list[str],
    fast: bool,
    packed: PackedGaussians | None = None,
) -> tuple[torch.Tensor, dict]:
    """``KL(q || prior)`` over ``names`` (and every packed site) and the guide's distributions
    of them, every term by :func:`~pyro_cl.kl.site_kl`: the sites a guide couples
    (:meth:`~pyro_cl.guides.MeanFieldGuide.joint_terms`, one KL per block against the block's
    prior), the packed ones in one term, the others site by site (a Gaussian site as a
    :class:`~pyro_cl.diagonal_gaussian.DiagonalGaussian` on the fast route)."""
    joint_kl, joint = guide.joint_terms(names)
    if not fast:
        rest = [name for name in names if name not in joint]
        posterior = guide.posterior(rest)
        kl = kl_to_prior(posterior, read_priors(model.net, rest)) if rest else 0.0
        return joint_kl + kl, {**posterior, **joint}
    kl, sites = packed.kl_and_sites() if packed is not None else (0.0, {})
    kl, sites = joint_kl + kl, {**sites, **joint}
    gaussians = guide.gaussian_parameters(name for name in names if name not in sites)
    for name in names:
        if name in sites:
            continue
        if name in gaussians:
            loc, log_variance = gaussians[name]
            sites[name] = DiagonalGaussian(loc, log_variance.exp(), log_variance)
        else:  # Beta sticks, ...
            sites[name] = guide.distribution(name)
        kl = kl + site_kl(sites[name], _prior(model, name))
    return kl, sites


def _prior(model: SupervisedModel, name: str):
    """Site ``name``'s prior as the model reads it (a pyro_cl layer's, or a ``PyroSample``'s)."""
    module, attribute = model.site_index[name]
    if hasattr(module, "prior"):
        return module.prior(attribute)
    return read_priors_of(module, attribute)


def negative_log_likelihood(
    model: SupervisedModel,
    values: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int | torch.Tensor,
    fast: bool | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """``-(1/M) Σ_n w_n log p(y_n | θ, x_n)`` with the latent sites fixed at ``values`` (no
    prior; ``weights`` ``w_n`` of the likelihoods, default 1).

    ``task_id`` is one task for the whole batch or one per point (each group of points then
    runs through its own head, as in :func:`negative_elbo`).

    Local latent variables that report a KL on the route (a generative model's ``z``, whose
    encoder is then trained too; IBP masks) make it the bound
    ``-(1/M) Σ_n (E_q[log p(y_n | θ, z_n)] - KL(q(z_n) ‖ p(z_n)))`` on the marginal, the VAE
    objective of VCL eq. 5 for point values ``θ``."""
    per_group = []
    for task, rows in task_groups(task_id, x.shape[0]):
        with CollectLocalKL() as local_kl:
            outputs = sample_outputs(model, values, x[rows], task, 1, fast=fast)
        terms = model.likelihood.log_prob(outputs, y[rows]) - local_kl.per_point()
        per_group.append(terms if weights is None else terms * weights[rows])
    if len(per_group) == 1:
        return -per_group[0].mean()
    return -sum(terms.sum() for terms in per_group) / x.shape[0]
