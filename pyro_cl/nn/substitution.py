"""The fast-path protocol shared by every pyro_cl module with latent sites."""

from __future__ import annotations

from functools import partial

import torch
from pyro.distributions import Distribution
from pyro.nn import PyroModule, PyroSample

from pyro_cl.nn.effects import ParticlePlate, SubstituteSites, innermost
from pyro_cl.nn.local_reparam import DiagonalGaussian

__all__ = ["SubstitutableModule", "prior_site"]


def _current_prior(module: SubstitutableModule, name: str) -> Distribution:
    return module.prior(name)


def prior_site(name: str) -> PyroSample:
    """A ``PyroSample`` whose distribution is the module's current ``prior(name)``, read at every
    draw (so replacing the prior's buffers replaces the prior)."""
    return PyroSample(partial(_current_prior, name=name))


class SubstitutableModule(PyroModule):
    """A ``PyroModule`` whose sites can be handed values or distributions directly.

    Inside a :class:`~pyro_cl.nn.effects.SubstituteSites` handler that lists this module, the
    module takes its sites from the handler (falling back to its prior) and runs no
    ``pyro.sample`` statement, with all particles along a leading dimension. Otherwise it is an
    ordinary Pyro program; inside a :class:`~pyro_cl.nn.effects.ParticlePlate` its draws and
    activations carry the plate's particles along the same leading dimension.
    """

    def _substitution(self) -> dict | None:
        """This module's ``{attribute: value}`` from the innermost substitution, or ``None``."""
        handler = innermost(SubstituteSites)
        return None if handler is None else handler.values.get(self)

    @property
    def substituted(self) -> bool:
        """True on the fast path (inside a :class:`SubstituteSites` that lists this module)."""
        return self._substitution() is not None

    @property
    def num_particles(self) -> int | None:
        """The particle count of the fast path, or of the Pyro route's :class:`ParticlePlate`
        (``None`` without particles)."""
        handler = innermost(SubstituteSites)
        if handler is not None and self in handler.values:
            return handler.num_particles
        plate = innermost(ParticlePlate)
        return None if plate is None else plate.size

    def prior(self, name: str) -> Distribution:
        """The current prior of site ``name``."""
        raise KeyError(f"{type(self).__name__} has no site {name!r}")

    def _site_value(self, name: str):
        """Site ``name``'s substituted value or distribution (its prior where none was given) on
        the fast path; otherwise a ``pyro.sample`` draw."""
        values = self._substitution()
        if values is not None:
            value = values.get(name)
            return self.prior(name) if value is None else value
        return getattr(self, name)

    def _particles_of(self, name: str, value):
        """A Pyro-route draw of site ``name`` made inside a :class:`ParticlePlate` (shape
        ``(P, 1, *site shape)``) as ``(P, *site shape)``; anything else as it is."""
        if not torch.is_tensor(value) or innermost(ParticlePlate) is None:
            return value
        return ParticlePlate.particles_of(value, self.prior(name).event_dim)

    def _draw(self, value) -> torch.Tensor:
        """A draw from ``value`` (with the particle dimension on the fast path) or ``value``."""
        if isinstance(value, (Distribution, DiagonalGaussian)):
            particles = self.num_particles
            return value.rsample(() if particles is None else (particles,))
        return value
