"""The posterior→prior handoff: a posterior is a dict ``{site name: distribution}``.

This is the one mechanism every method in pyro_cl shares (VCL eq. 1: ``q_{t-1}`` is the prior of
task ``t``):

* :func:`extract_posterior` reads a fitted guide as detached distributions keyed by site name;
* :func:`install_prior` makes such a dict the prior of a ``PyroModule``'s ``PyroSample`` sites;
* :func:`read_priors` reads the current priors back;
* :func:`posterior_to_state` / :func:`posterior_from_state` turn the dict into plain tensors and
  back, so it can be saved with ``torch.save`` and loaded with ``weights_only=True``; the classes
  a state may name are ``pyro.distributions``' and those registered with
  :func:`saveable_distribution` (a new prior's own distribution), never any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import pyro.distributions as pdist
import torch
from pyro.distributions import Distribution, Independent
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample

from pyro_cl.pyro_internals import (
    autonormal_loc_and_scale,
    pyro_module_prefix,
    pyro_sample_attributes,
    pyro_sample_prior,
)
from pyro_cl.spec import tensors_to

__all__ = [
    "Posterior",
    "sample_sites",
    "site_name",
    "read_priors",
    "install_prior",
    "extract_posterior",
    "map_parameters",
    "base_distribution",
    "detach_distribution",
    "detach_posterior",
    "distribution_parameters",
    "posterior_to_state",
    "posterior_from_state",
    "saveable_distribution",
]

Posterior = dict[str, Distribution]


def site_name(module: PyroModule, attribute: str) -> str:
    """The name Pyro gives the sample site ``attribute`` of ``module`` at run time."""
    prefix = pyro_module_prefix(module)
    return f"{prefix}.{attribute}" if prefix else attribute


def sample_sites(model: torch.nn.Module) -> Iterator[tuple[str, PyroModule, str]]:
    """Yield ``(site name, module, attribute)`` for every ``PyroSample`` in ``model``."""
    for module in model.modules():
        if isinstance(module, PyroModule):
            for attribute, _ in pyro_sample_attributes(module):
                yield site_name(module, attribute), module, attribute


def _site_index(model: torch.nn.Module) -> dict[str, tuple[PyroModule, str]]:
    return {name: (module, attribute) for name, module, attribute in sample_sites(model)}


def read_priors(model: torch.nn.Module, names: Iterable[str] | None = None) -> Posterior:
    """The current prior of every ``PyroSample`` site of ``model`` (or of the named ones)."""
    index = _site_index(model)
    if names is None:
        names = list(index)
    return {name: read_priors_of(*index[name]) for name in names}


def detach_distribution(distribution: Distribution, memo: dict | None = None) -> Distribution:
    """A copy of ``distribution`` whose parameters are detached from the autograd graph.

    A site of a joint block (:class:`~pyro_cl.guides.BlockSite`) keeps its block only when
    copied with the others through one ``memo`` (:func:`detach_posterior`); alone it is copied
    as its marginal."""
    base, event_dim = _unwrap(distribution)
    if memo is not None and hasattr(base, "detached"):
        detached = base.detached(memo)
        return detached.to_event(event_dim) if event_dim else detached
    return map_parameters(distribution, lambda value: value.detach().clone())


def map_parameters(distribution: Distribution, fn) -> Distribution:
    """The same family rebuilt with ``fn`` applied to each parameter (inside ``Independent``
    wrappers, whose event dimensions are kept): a detached copy, a move to another device."""
    base, event_dim = _unwrap(distribution)
    mapped = type(base)(**{key: fn(getattr(base, key)) for key in _parameter_names(base)})
    return mapped.to_event(event_dim) if event_dim else mapped


def detach_posterior(posterior: Mapping[str, Distribution]) -> Posterior:
    """Detached copies of every site of ``posterior``, the sites of one joint block still
    sharing one (copied) block."""
    memo: dict = {}
    return {name: detach_distribution(q, memo) for name, q in posterior.items()}


def install_prior(model: torch.nn.Module, posterior: Mapping[str, Distribution]) -> None:
    """Make each distribution in ``posterior`` the prior of the same-named site of ``model``.

    Library layers (those with a ``set_prior`` method) copy the parameters into their prior
    buffers; any other ``PyroModule`` gets a new ``PyroSample`` holding the detached distribution.
    Sites absent from ``posterior`` keep their current prior (for example heads never trained).

    :raises KeyError: if ``posterior`` names a site that ``model`` does not have.
    :raises ValueError: if a distribution's shape does not match the site's current prior.
    """
    index = _site_index(model)
    unknown = sorted(set(posterior) - set(index))
    if unknown:
        raise KeyError(f"the model has no sample sites named {unknown}")
    for name, distribution in posterior.items():
        module, attribute = index[name]
        current = read_priors_of(module, attribute)
        shape = distribution.batch_shape + distribution.event_shape
        expected = current.batch_shape + current.event_shape
        if shape != expected:
            raise ValueError(f"site {name!r} has shape {tuple(expected)}, got {tuple(shape)}")
        if hasattr(module, "set_prior"):
            module.set_prior(attribute, distribution)
        else:
            setattr(module, attribute, PyroSample(detach_distribution(distribution)))


def read_priors_of(module: PyroModule, attribute: str) -> Distribution:
    prior = pyro_sample_prior(module, attribute)
    return prior if isinstance(prior, Distribution) else prior(module)


def extract_posterior(guide) -> Posterior:
    """Read a fitted guide as ``{site name: detached distribution}``.

    Works with :class:`pyro_cl.guides.MeanFieldGuide` (anything with a ``posterior()`` method)
    and with Pyro's ``AutoNormal``.
    """
    if hasattr(guide, "posterior"):
        return {name: detach_distribution(d) for name, d in guide.posterior().items()}
    if isinstance(guide, AutoNormal):
        posterior = {}
        for name, site in guide.prototype_trace.iter_stochastic_nodes():
            loc, scale = autonormal_loc_and_scale(guide, name)
            event_dim = site["fn"].event_dim
            posterior[name] = detach_distribution(pdist.Normal(loc, scale).to_event(event_dim))
        return posterior
    raise TypeError(f"cannot read a posterior from a {type(guide).__name__}")


def _unwrap(distribution: Distribution) -> tuple[Distribution, int]:
    event_dim = 0
    while isinstance(distribution, Independent):
        event_dim += distribution.reinterpreted_batch_ndims
        distribution = distribution.base_dist
    return distribution, event_dim


def base_distribution(distribution: Distribution) -> Distribution:
    """The distribution inside any ``Independent`` wrappers (``.to_event``)."""
    return _unwrap(distribution)[0]


def distribution_parameters(distribution: Distribution) -> dict[str, torch.Tensor]:
    """``{name: tensor}``: the parameters that define ``distribution`` (inside ``Independent``)."""
    base, _ = _unwrap(distribution)
    return {key: getattr(base, key) for key in _parameter_names(base)}


def _parameter_names(base: Distribution) -> list[str]:
    names = list(base.arg_constraints)
    # Distributions with two parametrisations (probs/logits) are saved by one of them.
    if "probs" in names and "logits" in names:
        names.remove("probs" if "logits" in base.__dict__ else "logits")
    return names


def posterior_to_state(posterior: Mapping[str, Distribution]) -> dict:
    """Plain tensors and strings describing ``posterior`` (safe for ``weights_only`` loading).

    A distribution that carries more than its parameters (a joint block's site,
    :class:`~pyro_cl.guides.BlockSite`) saves it through its ``saved_extras(memo)`` (``memo``
    shared by the posterior's sites, so a block the sites share is saved once and rebuilt once by
    its class's ``from_saved(params, extras, memo)``, given its tensors on the loading device)."""
    state, memo = {}, {}
    for name, distribution in posterior.items():
        base, event_dim = _unwrap(distribution)
        state[name] = {
            "distribution": type(base).__name__,
            "event_dim": event_dim,
            "params": {k: getattr(base, k).detach().cpu() for k in _parameter_names(base)},
        }
        extras = base.saved_extras(memo) if hasattr(base, "saved_extras") else None
        if extras is not None:
            state[name]["extras"] = extras
    return state


#: Distribution classes beyond ``pyro.distributions``' that a saved state may name, by name.
_SAVEABLE: dict[str, type[Distribution]] = {}


def saveable_distribution(cls: type[Distribution]) -> type[Distribution]:
    """Let :func:`posterior_from_state` rebuild ``cls`` (a class decorator): its constructor
    takes its ``arg_constraints``' names, as :func:`posterior_to_state` saves them.

    :raises ValueError: for a name ``pyro.distributions`` or another registered class holds.
    """
    taken = _SAVEABLE.get(cls.__name__) or getattr(pdist, cls.__name__, None)
    if taken is not None and taken is not cls:
        raise ValueError(f"a distribution named {cls.__name__!r} is saveable already: {taken}")
    _SAVEABLE[cls.__name__] = cls
    return cls


def posterior_from_state(state: Mapping, device: torch.device | str | None = None) -> Posterior:
    """Inverse of :func:`posterior_to_state`; only classes of ``pyro.distributions`` and those
    registered with :func:`saveable_distribution` are built."""
    posterior, memo = {}, {}
    for name, entry in state.items():
        cls = _SAVEABLE.get(entry["distribution"]) or getattr(pdist, entry["distribution"], None)
        if not (isinstance(cls, type) and issubclass(cls, Distribution)):
            raise ValueError(f"unknown distribution {entry['distribution']!r} for site {name!r}")
        entry = entry if device is None else tensors_to(entry, device)
        if "extras" in entry:
            distribution = cls.from_saved(entry["params"], entry["extras"], memo)
        else:
            distribution = cls(**entry["params"])
        event_dim = int(entry["event_dim"])
        posterior[name] = distribution.to_event(event_dim) if event_dim else distribution
    return posterior
