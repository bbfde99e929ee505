"""Element-wise updates fused into one kernel with ``torch.compile``, with an eager fallback.

A natural-gradient step ends in a dozen element-wise operations over every parameter (VOGN
thesis eq. 52; IVON's algorithm 1). Run one by one, each is a pass over memory the matrix
products have just evicted from the cache, so on a small net they cost as much as the forward
and backward passes. ``torch.compile`` turns the whole update into one loop (measured in the
compiled rows of ``benchmarks/speed.py``). Compiling takes seconds to a minute the first time in
a process (Inductor needs a C++ compiler on the CPU), so it is opt-in; where it cannot compile,
the update runs eagerly after one warning, with the same result.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

__all__ = ["fused"]

Function = TypeVar("Function", bound=Callable)


def fused(function: Function, enabled: bool) -> Function:
    """``function`` compiled by ``torch.compile`` when ``enabled`` (else ``function`` itself).

    If compiling or running the compiled code fails (no C++ compiler, an unsupported device),
    a ``RuntimeWarning`` names the error and every later call runs ``function`` eagerly.
    """
    if not enabled:
        return function
    current = [torch.compile(function, fullgraph=True)]

    def call(*args, **kwargs):
        try:
            return current[0](*args, **kwargs)
        except Exception as error:  # torch._dynamo / inductor errors have no common base
            if current[0] is function:
                raise
            warnings.warn(
                f"torch.compile could not fuse {function.__name__} ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); running it eagerly",
                RuntimeWarning,
                stacklevel=2,
            )
            current[0] = function
            return function(*args, **kwargs)

    return call
