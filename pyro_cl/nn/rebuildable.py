"""Nets that a saved learner rebuilds from their constructor arguments."""

from __future__ import annotations

from typing import Any

from pyro_cl.spec import Registrable

__all__ = ["RebuildableNet"]


class RebuildableNet(Registrable, kind="net"):
    """Mixin of pyro_cl's nets: the spec is the net's ``config`` (its constructor arguments),
    so ``ContinualLearner.load`` rebuilds the net without being handed one. A user's net gets the
    same by deriving from it, setting ``name`` and providing ``config``."""

    def hyperparameters(self) -> dict[str, Any]:
        """The net's ``config``: its constructor arguments, enough to rebuild it."""
        config = getattr(self, "config", None)
        if not isinstance(config, dict):
            raise TypeError(f"{type(self).__name__} has no `config` dict of constructor arguments")
        return config
