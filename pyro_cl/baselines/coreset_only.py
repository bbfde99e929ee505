"""Training on the coreset alone: the episodic-memory baseline of the VCL paper (section 6.1)."""

from __future__ import annotations

from pyro_cl.learner.vcl import VCL
from pyro_cl.transitions.base import NoPropagation

__all__ = ["CoresetOnly"]


class CoresetOnly(VCL):
    """Coreset VCL with the :class:`~pyro_cl.transitions.base.NoPropagation` transition:
    ``q̃_t`` stays the initial prior, and prediction uses the variational fit of the coreset
    ``C_t`` alone (eq. 3 with ``q̃_t = p``).

    The rest of each task's data is never used, which measures how much the memory by itself
    remembers. Each refit starts from the guide's initial values. It needs a ``memory``, e.g.
    ``RandomCoreset(200)`` (the constructor is :class:`~pyro_cl.VCL`'s).
    """

    default_transition = NoPropagation
