"""A learner's parts, as each part's compatibility check sees them.

A learner composes a model, a guide family, a fitter, a transition and a memory. Some combinations cannot work
(a memory that replays old points beside a prior that already holds them, a fitter that cannot
train a generative model's encoders); the part that knows why refuses them. When the learner is
built it hands every part one :class:`Parts` value and calls its ``check_parts``
(:meth:`pyro_cl.fitters.Fitter.check_parts`, :meth:`pyro_cl.transitions.Transition.check_parts`,
:meth:`pyro_cl.memory.Memory.check_parts`); a user's part overrides it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Parts"]


@dataclass(frozen=True)
class Parts:
    """The learner's model (``model.net``, ``model.local_guide``), ``fitter``, ``transition``,
    ``memory`` (``None`` for none), ``guide`` family (:class:`~pyro_cl.guides.GuideFamily`) and
    training ``config``."""

    model: object
    fitter: object
    transition: object
    memory: object | None
    guide: object | None = None
    #: The learner's :class:`~pyro_cl.infer.config.TrainingConfig` (``None``: not checked).
    config: object | None = None

    def check(self) -> None:
        """Each part's ``check_parts`` of these parts: each refuses what it cannot work with."""
        for part in (self.fitter, self.transition, self.memory, self.guide):
            if part is not None:
                part.check_parts(self)
