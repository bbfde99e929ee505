"""Structured sites: latent variables whose posterior is the model's own conditional.

In the H-IBP posterior (supplement eq. 7-12) only the global sticks and the Gaussian weights have
variational parameters. Given the sticks, the per-layer probabilities ``π_j`` and the per-point
masks ``z_i`` follow fixed conditionals: ``q(π_j | v) = p(π_j | v)`` (eq. 10) and ``q(z_i | v)``
is the prior's Concrete at the posterior temperature ``λ1`` instead of ``λ2`` (eq. 11, 21).

Such sites carry ``infer={"structured": True}`` (:data:`STRUCTURED_FLAG`). A guide does not give
them parameters; it draws them by running the model with the global sites fixed to its own draws
under :func:`posterior_conditionals`, so the module switches to its posterior conditional.

On the fast path no ``pyro.sample`` runs: a module draws from the posterior conditional itself
and reports ``log q(site) - log p(site)`` per data point to :func:`collect_local_kl`, and its
relaxed masks to :func:`record_masks`.

The local sites live in the same ``pyro.plate("data")`` as the observations, with the same
size and subsample, so a minibatch's local KL terms are scaled like its log-likelihood;
:class:`pyro_cl.model.SupervisedModel` creates that plate once per run and shares it through
:func:`using_data_plate`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyro
import torch

from pyro_cl.nn.substitution import cached_on_net

__all__ = [
    "STRUCTURED_FLAG",
    "StructuredSites",
    "collect_local_kl",
    "data_plate",
    "current_data_plate",
    "using_data_plate",
    "has_structured_sites",
    "posterior_conditionals",
    "record_masks",
]

#: ``infer`` key of sites drawn from the model's own (posterior) conditional by the guide.
STRUCTURED_FLAG = "structured"

_DATA_PLATES: list[pyro.plate] = []


def data_plate(batch: int, device: torch.device, size: int | None = None) -> pyro.plate:
    """A new ``pyro.plate("data")`` over a minibatch of ``batch`` points out of ``size``
    (default ``batch``), which scales its sites by ``size / batch``."""
    size = batch if size is None else int(size)
    return pyro.plate("data", size=size, subsample=torch.arange(batch, device=device))


@contextmanager
def using_data_plate(plate: pyro.plate) -> Iterator[pyro.plate]:
    """Within this block, local sites use ``plate`` (a Pyro program's one data plate: creating a
    subsampled plate records a site, so a program may create it only once)."""
    _DATA_PLATES.append(plate)
    try:
        yield plate
    finally:
        _DATA_PLATES.pop()


def current_data_plate(batch: int, device: torch.device, size: int | None = None) -> pyro.plate:
    """The enclosing :func:`using_data_plate`'s plate if it covers ``batch`` points (out of
    ``size``, where given), else a new :func:`data_plate`."""
    if _DATA_PLATES:
        plate = _DATA_PLATES[-1]
        if plate.subsample_size == batch and (size is None or plate.size == int(size)):
            return plate
    return data_plate(batch, device, size)


class StructuredSites:
    """Mixin for modules with structured sites: the switches and sinks the contexts set."""

    #: Draw structured sites from the posterior conditional (set while a guide draws them).
    posterior_mode: bool = False
    #: Where the fast path reports per-point ``log q - log p`` (a list, or ``None``).
    _local_kl_sink: list | None = None
    #: Where relaxed masks are recorded (a list, or ``None``).
    _mask_sink: list | None = None


def _structured_modules(net: torch.nn.Module) -> list[StructuredSites]:
    return cached_on_net(
        net,
        "_pyro_cl_structured",
        lambda: [m for m in net.modules() if isinstance(m, StructuredSites)],
    )


def has_structured_sites(net: torch.nn.Module) -> bool:
    """Whether ``net`` contains modules with structured sites (IBP masks)."""
    return bool(_structured_modules(net))


@contextmanager
def posterior_conditionals(net: torch.nn.Module) -> Iterator[None]:
    """Within this block, structured sites of ``net`` are drawn from their posterior."""
    modules = _structured_modules(net)
    for module in modules:
        module.posterior_mode = True
    try:
        yield
    finally:
        for module in modules:
            module.posterior_mode = False


class LocalKL:
    """The per-point ``log q - log p`` terms reported while :func:`collect_local_kl` is active."""

    def __init__(self) -> None:
        self.terms: list[torch.Tensor] = []

    def per_point(self) -> torch.Tensor | float:
        """Their sum over modules, shape ``(particles, points)``; 0 if nothing was reported."""
        total = 0.0
        for term in self.terms:
            total = total + term
        return total


@contextmanager
def collect_local_kl(net: torch.nn.Module) -> Iterator[LocalKL]:
    """Collect the Monte Carlo local KL terms of the structured sites drawn on the fast path."""
    collector = LocalKL()
    modules = _structured_modules(net)
    for module in modules:
        module._local_kl_sink = collector.terms
    try:
        yield collector
    finally:
        for module in modules:
            module._local_kl_sink = None


@contextmanager
def record_masks(net: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Record every mask ``z`` the net's masked layers apply, in layer order."""
    masks: list[torch.Tensor] = []
    modules = _structured_modules(net)
    for module in modules:
        module._mask_sink = masks
    try:
        yield masks
    finally:
        for module in modules:
            module._mask_sink = None
