"""Every use pyro_cl makes of a private name of Pyro, in one place, each with the reason.

Pyro has no public way to ask a ``PyroModule`` which of its attributes are ``PyroSample`` sites
or what prefix it gives their names, nor to read an ``AutoNormal``'s location and scale of one
site; everything else in pyro_cl uses Pyro's public API. If a Pyro release renames one of these,
this file is the one to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from pyro.nn import PyroModule

__all__ = [
    "autonormal_loc_and_scale",
    "pyro_module_prefix",
    "pyro_sample_attributes",
    "pyro_sample_prior",
]


def pyro_sample_attributes(module: PyroModule) -> Iterator[tuple[str, Any]]:
    """``(attribute, prior)`` of every ``PyroSample`` attribute of ``module`` (the prior is a
    distribution, or a callable of the module that returns one).

    Reads ``PyroModule._pyro_samples``: Pyro lists sample attributes nowhere else.
    """
    yield from module._pyro_samples.items()


def pyro_sample_prior(module: PyroModule, attribute: str) -> Any:
    """The prior of ``module``'s ``PyroSample`` attribute (see :func:`pyro_sample_attributes`)."""
    return module._pyro_samples[attribute]


def pyro_module_prefix(module: PyroModule) -> str:
    """The prefix Pyro puts before the names of ``module``'s sample sites (``""`` at the root).

    Reads ``PyroModule._pyro_name``, which Pyro sets when a module is attached to its parent.
    """
    return module.__dict__["_pyro_name"]


def autonormal_loc_and_scale(guide: Any, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The location and scale an ``AutoNormal`` guide holds for ``site``.

    Calls ``AutoNormal._get_loc_and_scale``: its public ``median()`` gives locations only.
    """
    return guide._get_loc_and_scale(site)
