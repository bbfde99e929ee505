"""Nets that a saved learner rebuilds from their constructor arguments."""

from __future__ import annotations

from typing import Any

from pyro_cl.spec import Registrable

__all__ = ["RebuildableNet"]


class RebuildableNet(Registrable, kind="net"):
    """Mixin of pyro_cl's nets: the spec is the net's ``config`` (its constructor arguments),
    so ``ContinualLearner.load`` rebuilds the net without being handed one. A user's net gets the
    same by deriving from it, setting ``name`` and providing ``config``."""

    @property
    def config(self) -> dict[str, Any]:
        """Constructor arguments, enough to rebuild the net."""
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, Any]:
        return self.config
