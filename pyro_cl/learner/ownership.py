"""One learner per net: a learner rewrites its net's priors in place at every step."""

from __future__ import annotations

import weakref

import torch

__all__ = ["claim", "disown"]

#: Which learner owns each net.
_OWNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def claim(net: torch.nn.Module, learner: object) -> None:
    """Make ``learner`` the owner of ``net``.

    :raises ValueError: if another learner that still exists owns it: two learners would
        rewrite each other's priors (the second would start from the first one's posterior).
    """
    owner = _OWNERS.get(net)
    if owner is not None and owner() is not None and owner() is not learner:
        raise ValueError(
            f"this net already belongs to a {type(owner()).__name__}, which rewrites its priors "
            "at every step: build a new net for each learner, or pass copy.deepcopy(net)"
        )
    _OWNERS[net] = weakref.ref(learner)


def disown(net: torch.nn.Module, learner: object) -> None:
    """Let go of ``net`` if ``learner`` owns it (a learner whose construction failed)."""
    owner = _OWNERS.get(net)
    if owner is not None and owner() is learner:
        del _OWNERS[net]
