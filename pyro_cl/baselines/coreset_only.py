"""Training on the coreset alone: the episodic-memory baseline of the VCL paper (section 6.1)."""

from __future__ import annotations

import torch

from pyro_cl.coresets import CoresetSelector
from pyro_cl.infer.vcl import VCL
from pyro_cl.likelihoods import Likelihood

__all__ = ["CoresetOnly"]


class CoresetOnly(VCL):
    """Coreset VCL without propagation: ``q̃_t`` stays the initial prior, and prediction uses the
    variational fit of the coreset ``C_t`` alone (eq. 3 with ``q̃_t = p``).

    The rest of each task's data is never used, which measures how much the memory by itself
    remembers. Each refit starts from a fresh random initialisation of the guide.
    """

    propagates = False

    def __init__(
        self,
        net: torch.nn.Module,
        likelihood: Likelihood | None = None,
        config=None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        coreset: CoresetSelector | None = None,
        refit_per_task: bool | None = None,
        **overrides,
    ) -> None:
        if coreset is None:
            raise ValueError("CoresetOnly needs a coreset selector, e.g. RandomCoreset(200)")
        super().__init__(
            net, likelihood, config, device, seed, coreset, refit_per_task, **overrides
        )
