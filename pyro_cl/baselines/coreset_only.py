"""Training on the coreset alone: the episodic-memory baseline of the VCL paper (section 6.1)."""

from __future__ import annotations

from pyro_cl.infer.vcl import VCL

__all__ = ["CoresetOnly"]


class CoresetOnly(VCL):
    """Coreset VCL without propagation: ``q̃_t`` stays the initial prior, and prediction uses the
    variational fit of the coreset ``C_t`` alone (eq. 3 with ``q̃_t = p``).

    The rest of each task's data is never used, which measures how much the memory by itself
    remembers. Each refit starts from a fresh random initialisation of the guide. It needs a
    ``coreset`` selector (the constructor is :class:`~pyro_cl.VCL`'s).
    """

    propagates = False
