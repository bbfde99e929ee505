"""Run a model's net with chosen values or distributions for its latent sites.

Prediction (sampling from a posterior), maximum-likelihood training (point values) and the fast
ELBO all need "the net's outputs when site ``s`` is drawn from ``sites[s]``". This module gives that
once, with two interchangeable routes:

* the **fast path**, for nets built only from pyro_cl layers: each layer is handed its
  distributions directly (:func:`substitute_sites`) and no ``pyro.sample`` statement runs; all
  particles are drawn in one vectorised pass;
* the **Pyro path**, for any ``PyroModule``: a guide that samples ``sites`` is traced and the model
  replayed against it under local reparameterisation, all particles in one pass inside a
  :class:`~pyro_cl.nn.effects.ParticlePlate` when the net's layers broadcast over particles
  (:attr:`~pyro_cl.model.SupervisedModel.vectorized_particles`), else once per particle.

Sites missing from ``sites`` are drawn from the model's current prior on both routes; the sites
of a joint block (:class:`~pyro_cl.guides.BlockSite`) are drawn together, once per draw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext

import pyro
import torch
from pyro import poutine
from pyro.distributions import Delta, Distribution

from pyro_cl.guides.joint_gaussian import draw_joint_sites, has_joint_sites
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.effects import ParticlePlate, SubstituteSites
from pyro_cl.nn.local_reparam import local_reparameterization
from pyro_cl.nn.module_walks import cached_walk, modules_of_type
from pyro_cl.nn.substitution import SubstitutableModule
from pyro_cl.posterior import sample_sites

__all__ = ["outputs_per_draw", "substitute_sites", "sample_outputs"]

SiteValues = Mapping[str, Distribution | torch.Tensor]


def substitute_sites(
    net: torch.nn.Module, sites: SiteValues, num_particles: int | None = None
) -> SubstituteSites:
    """A :class:`~pyro_cl.nn.effects.SubstituteSites` handler for the fast path of ``net``.

    While active, each pyro_cl module of ``net`` takes site ``s`` from ``sites`` (falling back to
    its prior) without a ``pyro.sample`` statement; with ``num_particles`` inputs carry a leading
    particle dimension (of size 1 or ``num_particles``).
    """
    values = {module: {} for module in modules_of_type(net, SubstitutableModule)}
    for name, module, attribute in cached_walk(
        net, "sample_sites", lambda: list(sample_sites(net))
    ):
        if module not in values:
            raise TypeError(f"site {name!r} is not in a pyro_cl layer; use the Pyro path")
        values[module][attribute] = sites.get(name)
    return SubstituteSites(values, num_particles)


def _as_distribution(value: Distribution | torch.Tensor) -> Distribution:
    if isinstance(value, Distribution):
        return value
    return Delta(value).to_event(value.dim())


def sample_outputs(
    model: SupervisedModel,
    sites: SiteValues,
    x: torch.Tensor,
    task_id: int = 0,
    num_samples: int = 1,
    fast: bool | None = None,
    rows_at_once: int | None = None,
) -> torch.Tensor:
    """Net outputs with latent sites drawn from ``sites``: shape ``(num_samples, N, ...)``.

    Point values (tensors) give identical samples; the fast path then returns a leading dimension
    of 1 instead of repeating them.

    :param rows_at_once: on the fast path, run at most this many (draw, point) rows through the
        net at a time, in a fraction of one pass's memory (a conv net's activations at 64 draws
        of 400 points are gigabytes): a block's joint draws are made once for every chunk, and
        a mean-field site's draws are per point under local reparameterisation anyway, so a
        point's outputs have the distribution one pass gives them. ``None``: every row at once.
    """
    if fast is None:
        fast = model.fast
    forward = model.net_outputs
    if fast and rows_at_once is not None and num_samples * x.shape[0] > rows_at_once:
        points = max(1, rows_at_once // num_samples)

        def forward(inputs: torch.Tensor, task: int) -> torch.Tensor:  # under one draw
            chunks = range(0, inputs.shape[1], points)
            return torch.cat(
                [model.net_outputs(inputs[:, start : start + points], task) for start in chunks],
                dim=1,
            )

    return _outputs(forward, model, sites, x.unsqueeze(0), task_id, num_samples, fast)


def outputs_per_draw(
    forward: Callable[..., torch.Tensor],
    model: SupervisedModel,
    sites: SiteValues,
    inputs: torch.Tensor,
    task_id: int,
) -> torch.Tensor:
    """``forward(inputs[k], task_id)`` for every ``k`` of ``inputs``' leading dimension, each
    with its own draw of the latent sites from ``sites``: shape ``(K, ...)``.

    ``forward`` runs ``model.net`` (e.g. a generative model's decoder on latent codes ``z`` of
    shape ``(K, N, D)``: one decoder draw per importance sample). The fast path does all ``K``
    draws in one vectorised pass, and so does the Pyro path in a particle plate where the net
    broadcasts; otherwise it replays ``forward`` against a guide of ``sites`` once per draw.
    """
    return _outputs(forward, model, sites, inputs, task_id, inputs.shape[0], model.fast)


def _outputs(
    forward: Callable[..., torch.Tensor],
    model: SupervisedModel,
    sites: SiteValues,
    inputs: torch.Tensor,
    task_id: int,
    num_draws: int,
    fast: bool,
) -> torch.Tensor:
    """``forward(inputs, task_id)`` with ``num_draws`` draws of ``sites``, ``inputs`` leading
    with a dimension of 1 or ``num_draws``: in one pass on the fast path and, where the net
    broadcasts, in a particle plate on the Pyro path; else one replay per draw."""
    if fast:
        with substitute_sites(model.net, draw_joint_sites(sites, num_draws), num_draws):
            return forward(inputs, task_id)
    if model.vectorized_particles and not has_joint_sites(sites):
        return _replayed(forward, sites, inputs, task_id, num_draws)
    # one draw at a time, each block's sites drawn together in each
    rows = inputs.expand(num_draws, *inputs.shape[1:])
    return torch.stack(
        [_replayed(forward, draw_joint_sites(sites, None), row, task_id) for row in rows]
    )


def _replayed(
    forward: Callable[..., torch.Tensor],
    sites: SiteValues,
    x: torch.Tensor,
    task_id: int,
    num_particles: int | None = None,
) -> torch.Tensor:
    """``forward(x, task_id)`` with one draw of ``sites`` (a guide trace replayed into it, under
    local reparameterisation), or ``num_particles`` draws in one pass in a particle plate (``x``
    then leads with a particle dimension of 1 or ``num_particles``)."""

    def sites_guide():
        for name, value in sites.items():
            pyro.sample(name, _as_distribution(value))

    plate = nullcontext() if num_particles is None else ParticlePlate(num_particles)
    with local_reparameterization(), plate:
        guide_trace = poutine.trace(sites_guide).get_trace()
        return poutine.replay(forward, trace=guide_trace)(x, task_id)
