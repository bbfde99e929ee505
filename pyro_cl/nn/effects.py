"""Dynamically scoped effects of pyro_cl's modules, beyond ``pyro.sample``.

What crosses a module boundary is entered as a context manager around a model run, and a module
asks for the innermost active one of a kind with :func:`innermost` (as
:func:`pyro_cl.nn.local_reparam.normal_source` does). Most of them only carry a value or collect
one, so they are plain scoped contexts (:class:`Scoped`), not Pyro handlers: nothing here
rewrites a sample site. The two that are Pyro handlers — :class:`ParticlePlate` (a
``pyro.plate``) and :class:`~pyro_cl.nn.local_reparam.LocalReparameterizationMessenger` (which
reads every draw in ``_pyro_post_sample``) — also enter the same scope so :func:`innermost`
finds them. The scope is a :class:`contextvars.ContextVar`, so each thread sees its own; nothing
sets attributes on modules from outside and nothing reads Pyro's private handler stack.

* :class:`SubstituteSites` — the fast path: layers take their sites' values or distributions
  from the handler instead of running ``pyro.sample`` (all particles along a leading dimension);
* :class:`RecordLayers` — layers append ``(layer, input, output)`` (per-example gradients);
* :class:`CollectLocalKL` — structured modules report per-point ``log q - log p`` on the fast
  path (H-IBP supplement eq. 14's last term);
* :class:`PosteriorConditionals` — structured sites are drawn from their posterior conditional;
* :class:`RecordMasks` — masked layers append the masks they apply;
* :class:`MinibatchShard` — this process's rows of a global minibatch (data-parallel fits):
  per-point noise is drawn for the global minibatch and this process keeps its rows;
* :class:`DataPlate` — the one ``pyro.plate("data")`` of a model run, shared by the likelihood
  and local latent sites;
* :class:`ParticlePlate` — the Pyro route's Monte Carlo particles in one vectorised pass (a
  ``pyro.plate`` left of the data plate).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

import pyro
import torch

__all__ = [
    "CollectLocalKL",
    "DataPlate",
    "MinibatchShard",
    "PARTICLE_DIM",
    "ParticlePlate",
    "Scoped",
    "active_effects",
    "enter_scope",
    "exit_scope",
    "in_particle_plate",
    "PosteriorConditionals",
    "RecordLayers",
    "RecordMasks",
    "SubstituteSites",
    "current_data_plate",
    "innermost",
]

ScopedType = TypeVar("ScopedType")

#: The active scoped effects, innermost last.
_ACTIVE: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "pyro_cl_effects", default=()
)


def enter_scope(effect: Any) -> contextvars.Token:
    """Make ``effect`` the innermost active effect; returns the token for :func:`exit_scope`."""
    return _ACTIVE.set((*_ACTIVE.get(), effect))


def exit_scope(token: contextvars.Token) -> None:
    """Undo the :func:`enter_scope` that returned ``token``."""
    _ACTIVE.reset(token)


def active_effects(effect_type: type[ScopedType]) -> list[ScopedType]:
    """The active effects of ``effect_type``, innermost first."""
    return [effect for effect in reversed(_ACTIVE.get()) if isinstance(effect, effect_type)]


def innermost(effect_type: type[ScopedType]) -> ScopedType | None:
    """The innermost active effect of ``effect_type``, or ``None``."""
    for effect in reversed(_ACTIVE.get()):
        if isinstance(effect, effect_type):
            return effect
    return None


class Scoped:
    """Base of a scoped effect: active between ``__enter__`` and ``__exit__``."""

    def __enter__(self):
        self._tokens = [*getattr(self, "_tokens", []), enter_scope(self)]
        return self

    def __exit__(self, *exc_info) -> None:
        exit_scope(self._tokens.pop())


class SubstituteSites(Scoped):
    """Hand pyro_cl modules their site values directly (the fast path, no ``pyro.sample``).

    :param values: ``{module: {attribute: value or distribution}}``; a module listed with an
        empty dict is on the fast path with every site drawn from its prior; modules not listed
        run as ordinary Pyro programs.
    :param num_particles: if given, inputs carry a leading particle dimension of size 1 or
        ``num_particles`` and every draw has ``num_particles`` rows along it.
    """

    def __init__(self, values: dict, num_particles: int | None = None) -> None:
        self.values = values
        self.num_particles = num_particles


class MinibatchShard(Scoped):
    """While active, the net runs on rows ``start .. start + size`` of a global minibatch of
    ``global_size`` points (one process's shard, :mod:`pyro_cl.infer.data_parallel`): per-point
    noise (:func:`pyro_cl.nn.local_reparam.sample_gaussian_outputs`) is drawn for all
    ``global_size`` points and these rows kept, so every process, and a single process running
    the whole minibatch, draws the same number for the same point."""

    def __init__(self, start: int, size: int, global_size: int) -> None:
        self.start = start
        self.size = size
        self.global_size = global_size

    def rows_of(self, shape: torch.Size, data_dim: int, draw) -> torch.Tensor:
        """``draw(shape)``, drawn at the global minibatch's size along ``data_dim`` (when
        ``shape`` has this shard's size there) and narrowed to this shard's rows."""
        if len(shape) <= data_dim or shape[data_dim] != self.size:
            return draw(shape)
        full = list(shape)
        full[data_dim] = self.global_size
        return draw(torch.Size(full)).narrow(data_dim, self.start, self.size)


class RecordLayers(Scoped):
    """Collects ``(layer, input, output)`` of every pyro_cl layer call while active."""

    def __init__(self) -> None:
        self.records: list = []

    def __enter__(self) -> list:
        super().__enter__()
        return self.records


class CollectLocalKL(Scoped):
    """Collects the per-point Monte Carlo ``log q(z_n) - log p(z_n)`` of local structured sites
    drawn on the fast path."""

    def __init__(self) -> None:
        self.terms: list[torch.Tensor] = []

    def __enter__(self) -> CollectLocalKL:
        super().__enter__()
        return self

    def per_point(self) -> torch.Tensor | float:
        """The reported terms summed over modules, shape ``(particles, points)``; 0 if none."""
        total = 0.0
        for term in self.terms:
            total = total + term
        return total


class PosteriorConditionals(Scoped):
    """Within this handler structured sites are drawn from their posterior conditional
    (temperature ``λ1`` instead of ``λ2`` for Concrete masks, H-IBP supplement eq. 11)."""


class RecordMasks(Scoped):
    """Collects every mask ``z`` that masked layers apply, in layer order."""

    def __init__(self) -> None:
        self.masks: list[torch.Tensor] = []

    def __enter__(self) -> list[torch.Tensor]:
        super().__enter__()
        return self.masks


class DataPlate(Scoped):
    """Makes ``plate`` the data plate of everything run inside (a Pyro program's one data plate:
    creating a subsampled plate records a site, so a program may create it only once)."""

    def __init__(self, plate: pyro.plate) -> None:
        self.plate = plate

    def __enter__(self) -> pyro.plate:
        super().__enter__()
        return self.plate


#: The particle plate's dimension: left of the data plate, the one plate (dim -1) of a model run.
PARTICLE_DIM = -2


class ParticlePlate(pyro.plate):
    """``pyro.plate("particles", P, dim=-2)``: ``P`` Monte Carlo particles of a Pyro program in
    one pass (what ``vectorize_particles=True`` does inside Pyro's ELBOs, here a handler that
    pyro_cl modules can find with :func:`innermost`).

    Run a guide and the model inside it and every latent site drawn there gets the plate's batch
    dimension: a global site's draw has shape ``(P, 1, *site shape)`` (particles, then the data
    plate's 1). pyro_cl modules view such a draw as ``(P, *site shape)`` (:meth:`particles_of`)
    and run with the particles along the leading dimension of their inputs and outputs, exactly
    as on the fast path; the model gives its inputs that leading dimension (of size 1).
    """

    def __init__(self, num_particles: int) -> None:
        super().__init__("particles", num_particles, dim=PARTICLE_DIM)

    def __enter__(self):
        entered = super().__enter__()
        self._scope = enter_scope(self)
        return entered

    def __exit__(self, *exc_info):
        exit_scope(self._scope)
        return super().__exit__(*exc_info)

    @staticmethod
    def particles_of(value: torch.Tensor, event_dim: int) -> torch.Tensor:
        """A draw of shape ``(*batch, *event)`` drawn in this plate, as ``(P, *event)``."""
        return value.reshape(-1, *value.shape[value.dim() - event_dim :])


def in_particle_plate(fn: Callable, num_particles: int) -> Callable:
    """``fn`` (a model or guide) run inside a :class:`ParticlePlate` of ``num_particles``."""

    def run_in_plate(*args, **kwargs):
        with ParticlePlate(num_particles):
            return fn(*args, **kwargs)

    return run_in_plate


def new_data_plate(batch: int, device: torch.device, size: int | None = None) -> pyro.plate:
    """A new ``pyro.plate("data")`` over a minibatch of ``batch`` points out of ``size``
    (default ``batch``), which scales its sites by ``size / batch``."""
    size = batch if size is None else int(size)
    return pyro.plate("data", size=size, subsample=torch.arange(batch, device=device))


def current_data_plate(batch: int, device: torch.device, size: int | None = None) -> pyro.plate:
    """The innermost :class:`DataPlate`'s plate if it covers ``batch`` points (out of ``size``,
    where given), else a new :func:`new_data_plate`."""
    handler = innermost(DataPlate)
    if handler is not None:
        plate = handler.plate
        if plate.subsample_size == batch and (size is None or plate.size == int(size)):
            return plate
    return new_data_plate(batch, device, size)
