"""Walks over a net's modules, computed once per net.

Walking the module tree on every training step would cost more than the math, so each walk is
cached per net in a weak dictionary owned by this module (nothing is stored on the net).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

__all__ = ["cached_walk", "modules_of_type"]

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached_walk(net: torch.nn.Module, key: object, compute: Callable[[], list]) -> list:
    """``compute()`` once per ``(net, key)``."""
    walks = _CACHE.setdefault(net, {})
    if key not in walks:
        walks[key] = compute()
    return walks[key]


def modules_of_type(net: torch.nn.Module, module_type: type) -> list:
    """The modules of ``net`` (itself included) that are instances of ``module_type``."""
    return cached_walk(
        net, module_type, lambda: [m for m in net.modules() if isinstance(m, module_type)]
    )
