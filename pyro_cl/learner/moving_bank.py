"""A bank of a few neighbouring strengths that moves along a ladder toward the strength its
evidence prefers: a transition's strength learnt online, each candidate scored on its own path.

A :class:`~pyro_cl.learner.bank.LearnerBank` over a grid of strengths weighs every strength by
its own prequential evidence, but only the strengths its grid holds; a
:class:`~pyro_cl.transitions.LearnedStrength` needs no grid but reads every strength's evidence
on its own single path, where the strength it applied last keeps winning (docs/lab/drift.md:
it settles at its range's floor on four streams whose best fixed strength is 0.01-0.1). This
bank keeps ``M`` learners at consecutive rungs of a log-spaced ladder,

.. math::

    s_i = s_0 \\, r^{i}, \\qquad i = b, b + 1, \\dots, b + M - 1,                       (1)

weighs them as the bank does (the discounted one-step-ahead evidence of each member's own
path),

.. math::

    \\log w_i \\leftarrow \\gamma \\log w_i + \\log p_i(D_{t_k} \\mid D_{t_{<k}}),       (2)

and after each step, when the member at an end of the window holds strictly the largest weight,
moves the window one rung that way: the member at the other end is dropped and the end member is
copied (its posterior, memory and random state) to the next rung out, with the end member's
weight,

.. math::

    b \\leftarrow b \\pm 1, \\qquad q_{\\text{new}} = q_{\\text{end}}, \\qquad
    \\log w_{\\text{new}} = \\log w_{\\text{end}}.                                          (3)

A copy starts level with the member it was copied from and overtakes it only by predicting the
next steps better at its own strength, so the window climbs one rung a step while the stream
keeps preferring the end, and stops where the evidence peaks; ``low`` and ``high`` bound the
ladder (the family's range of :data:`~pyro_cl.transitions.learned_strength.FAMILIES` by
default). Predictions are the members' model average, as the bank's; :attr:`strength` is the
strength of the member with the largest weight and :attr:`history` that strength after every
step.

By default the bank holds every rung of the range a decade apart (seven Wiener strengths from
``1e-4`` to ``1e2``), so it never moves: on the validation steps of five drift streams that was
within 0.0054 nats a point of the best fixed strength in hindsight on each, where windows of
three or five members, whose copies carry the path of the strength they were copied from, fell
0.018-0.05 nats behind on one stream or another (docs/lab/drift.md). A window
(``members=3``) costs less and follows a strength that changes along the stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.learner.bank import LearnerBank
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.learner.state import LearnerState
from pyro_cl.transitions.base import Transition, check_time_constant
from pyro_cl.transitions.learned_strength import family_range

__all__ = ["MovingBank"]


class MovingBank(LearnerBank):
    """``members`` learners at neighbouring strengths of one transition family, weighted by
    their evidence and moved along the ladder of eq. (1) toward the best (module docstring).

    :param learner_at: builds one learner with the given transition, each call with a net of its
        own (e.g. ``lambda transition: VCL(make_net(), transition=transition, seed=0)``).
    :param family: ``"wiener"``, ``"ornstein_uhlenbeck"`` or ``"bayesian_forgetting"``.
    :param start: the middle member's strength at the start (default: the geometric mean of
        ``low`` and ``high``).
    :param ratio: ``r``, the factor between neighbouring rungs (above 1).
    :param members: ``M``, the learners kept (two or more); ``None``: every rung of
        ``[low, high]`` (a bank over the family's whole range, which then never moves).
    :param low: the smallest strength on the ladder (default: the family's).
    :param high: the largest (default: the family's).
    :param time_constant: ``τ`` of the family's transition (``None``: the mean lag).
    :param discount: ``γ`` of eq. (2) in ``(0, 1]``.
    :param num_samples: posterior draws for the members' predictives (default: each member's).
    :param at_time: as :class:`~pyro_cl.learner.bank.LearnerBank`'s.
    """

    def __init__(
        self,
        learner_at: Callable[[Transition], ContinualLearner],
        family: str = "wiener",
        start: float | None = None,
        ratio: float = 10.0,
        members: int | None = None,
        low: float | None = None,
        high: float | None = None,
        time_constant: float | None = None,
        discount: float = 1.0,
        num_samples: int | None = None,
        at_time: bool = True,
    ) -> None:
        self._kind, self.low, self.high = family_range(family, low, high)
        self.family = family
        self.ratio = checked_real(ratio, "ratio", 1, low_open=True)
        self.time_constant = check_time_constant(time_constant)
        middle = math.sqrt(self.low * self.high) if start is None else start
        self.start = checked_real(middle, "start", self.low, self.high)
        rungs_below = math.floor(math.log(self.start / self.low) / math.log(self.ratio) + 1e-9)
        rungs_above = math.floor(math.log(self.high / self.start) / math.log(self.ratio) + 1e-9)
        count = (
            rungs_below + rungs_above + 1 if members is None else checked_count(members, "members")
        )
        if count < 2:
            raise ValueError(f"a moving bank needs two or more members, got {count}")
        if rungs_below + rungs_above + 1 < count:
            raise ValueError(
                f"{count} members at ratio {self.ratio:g} do not fit in [{self.low:g}, "
                f"{self.high:g}]: widen the range or lower the ratio"
            )
        #: ``b`` of eq. (1): the rung of the weakest member, the window kept inside the ladder.
        self.bottom = min(max(-((count - 1) // 2), -rungs_below), rungs_above - count + 1)
        strengths = [self.rung(i) for i in range(self.bottom, self.bottom + count)]
        learners = {
            label: learner_at(self._at(s))
            for label, s in zip(self._labels(strengths), strengths, strict=True)
        }
        super().__init__(learners, discount, num_samples, at_time)
        #: The strength of the member with the largest weight after every step, in order.
        self.history: list[float] = []

    def rung(self, index: int) -> float:
        """``s_i = s_0 r^i`` (eq. 1)."""
        return self.start * self.ratio**index

    def _at(self, strength: float) -> Transition:
        return self._kind(strength, self.time_constant)

    @property
    def strengths(self) -> list[float]:
        """The members' strengths, weakest first."""
        return [self.rung(i) for i in range(self.bottom, self.bottom + len(self.members))]

    def _labels(self, strengths: list[float]) -> list[str]:
        return [f"{self.family} {s:.3g}" for s in strengths]

    @property
    def strength(self) -> float:
        """The strength of the member with the largest weight."""
        return self.strengths[int(self.log_weights.argmax())]

    def observe(self, data, task_id: int | None = None, time: float | None = None) -> None:
        """The bank's step (eq. 2), then the window's move (eq. 3) if an end member leads."""
        super().observe(data, task_id, time)
        self._move()
        self.history.append(self.strength)

    def _move(self) -> None:
        weights = self.log_weights
        best = int(weights.argmax())
        others = torch.cat([weights[:best], weights[best + 1 :]])
        if not bool(weights[best] > others.max()):
            return  # a tie: nothing leads
        last = len(self.members) - 1
        if best == last and self.rung(self.bottom + last + 1) <= self.high * (1 + 1e-9):
            step = 1
        elif best == 0 and self.rung(self.bottom - 1) >= self.low * (1 - 1e-9):
            step = -1
        else:
            return
        learners = list(self.members.values())
        if step == 1:  # drop the weakest; the strongest's copy one rung up
            dropped, end = learners[0], learners[-1]
            learners = [*learners[1:], dropped]
            weights = torch.cat([weights[1:], weights[-1:]])
        else:  # drop the strongest; the weakest's copy one rung down
            dropped, end = learners[-1], learners[0]
            learners = [dropped, *learners[:-1]]
            weights = torch.cat([weights[:1], weights[:-1]])
        LearnerState.of(end).restore_into(dropped)
        self.bottom += step
        dropped.transition = self._at(self.strengths[-1 if step == 1 else 0])
        self.members = dict(zip(self._labels(self.strengths), learners, strict=True))
        self.log_weights = weights - torch.logsumexp(weights, 0)
