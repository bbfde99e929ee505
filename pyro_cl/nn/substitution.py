"""The fast-path protocol shared by every pyro_cl module with latent sites."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pyro.distributions import Distribution
from pyro.nn import PyroModule

from pyro_cl.nn.local_reparam import DiagonalGaussian

__all__ = ["SubstitutableModule", "cached_on_net"]


def cached_on_net(net: torch.nn.Module, key: str, compute: Callable[[], list]) -> list:
    """``compute()`` once per net, kept in the net's ``__dict__`` under ``key``: walking the module
    tree on every training step would cost more than the math."""
    cached = net.__dict__.get(key)
    if cached is None:
        cached = compute()
        net.__dict__[key] = cached
    return cached


class SubstitutableModule(PyroModule):
    """A ``PyroModule`` whose sites can be handed values or distributions directly.

    :func:`pyro_cl.infer.site_values.substitute_sites` sets ``_substitute`` (``{attribute:
    value or distribution}``; an empty dict for modules without sites of their own) and
    ``_num_particles`` on every such module of a net; while they are set, the module takes its
    sites from there (falling back to its prior) and runs no ``pyro.sample`` statement, with all
    particles along a leading dimension. Otherwise it is an ordinary Pyro program.
    """

    _substitute: dict | None = None
    _num_particles: int | None = None

    @property
    def substituted(self) -> bool:
        """True on the fast path (inside ``substitute_sites``)."""
        return self._substitute is not None

    def prior(self, name: str) -> Distribution:
        """The current prior of site ``name``."""
        raise KeyError(f"{type(self).__name__} has no site {name!r}")

    def _site_value(self, name: str):
        """Site ``name``'s substituted value or distribution (its prior where none was given) on
        the fast path; otherwise a ``pyro.sample`` draw."""
        if self._substitute is not None:
            value = self._substitute.get(name)
            return self.prior(name) if value is None else value
        return getattr(self, name)

    def _draw(self, value) -> torch.Tensor:
        """A draw from ``value`` (with the particle dimension on the fast path) or ``value``."""
        if isinstance(value, (Distribution, DiagonalGaussian)):
            shape = () if self._num_particles is None else (self._num_particles,)
            return value.rsample(shape)
        return value
