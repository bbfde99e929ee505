"""Run a model's net with chosen values or distributions for its latent sites.

Prediction (sampling from a posterior), maximum-likelihood training (point values) and the fast
ELBO all need "the net's outputs when site ``s`` is drawn from ``sites[s]``". This module gives that
once, with two interchangeable routes:

* the **fast path**, for nets built only from pyro_cl layers: each layer is handed its
  distributions directly (:func:`substitute_sites`) and no ``pyro.sample`` statement runs; all
  particles are drawn in one vectorised pass;
* the **Pyro path**, for any ``PyroModule``: a guide that samples ``sites`` is traced and the model
  replayed against it, once per particle, under local reparameterisation.

Sites missing from ``sites`` are drawn from the model's current prior on both routes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pyro
import torch
from pyro import poutine
from pyro.distributions import Delta, Distribution

from pyro_cl.model import SupervisedModel
from pyro_cl.nn.local_reparam import local_reparameterization
from pyro_cl.nn.substitution import SubstitutableModule, cached_on_net
from pyro_cl.posterior import sample_sites

__all__ = ["substitute_sites", "sample_outputs"]

SiteValues = Mapping[str, Distribution | torch.Tensor]


def _sites_of(net: torch.nn.Module) -> list:
    return cached_on_net(net, "_pyro_cl_sites", lambda: list(sample_sites(net)))


def _substitutable_modules(net: torch.nn.Module) -> list:
    return cached_on_net(
        net,
        "_pyro_cl_substitutable",
        lambda: [m for m in net.modules() if isinstance(m, SubstitutableModule)],
    )


@contextmanager
def substitute_sites(
    net: torch.nn.Module, sites: SiteValues, num_particles: int | None = None
) -> Iterator[None]:
    """Hand pyro_cl layers their site distributions/values directly (the fast path).

    While active, each layer of ``net`` takes site ``s`` from ``sites`` (falling back to its prior)
    without a ``pyro.sample`` statement; with ``num_particles`` inputs carry a leading particle
    dimension (of size 1 or ``num_particles``).
    """
    layers = {module: {} for module in _substitutable_modules(net)}
    for name, module, attribute in _sites_of(net):
        if module not in layers:
            raise TypeError(f"site {name!r} is not in a pyro_cl layer; use the Pyro path")
        layers[module][attribute] = sites.get(name)
    try:
        for module, values in layers.items():
            module._substitute = values
            module._num_particles = num_particles
        yield
    finally:
        for module in layers:
            module._substitute = None
            module._num_particles = None


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
) -> torch.Tensor:
    """Net outputs with latent sites drawn from ``sites``: shape ``(num_samples, N, ...)``.

    Point values (tensors) give identical samples; the fast path then returns a leading dimension
    of 1 instead of repeating them.
    """
    if fast is None:
        fast = model.library_layers_only
    if fast:
        with substitute_sites(model.net, sites, num_samples):
            return model.net_outputs(x.unsqueeze(0), task_id)

    def sites_guide():
        for name, value in sites.items():
            pyro.sample(name, _as_distribution(value))

    outputs = []
    for _ in range(num_samples):
        with local_reparameterization():
            guide_trace = poutine.trace(sites_guide).get_trace()
            outputs.append(poutine.replay(model.net_outputs, trace=guide_trace)(x, task_id))
    return torch.stack(outputs)
