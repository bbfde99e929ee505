"""The memory protocol: which data points a learner keeps beside its Gaussian posterior.

It lives with the learner that consumes it (as :class:`~pyro_cl.fitters.fitter.Fitter`,
:class:`~pyro_cl.transitions.base.Transition` and :class:`~pyro_cl.fitters.penalty.Penalty` do);
the memories themselves are in :mod:`pyro_cl.memory`, above it, which re-exports this protocol.

A memory is a part of a learner with one hook, :meth:`Memory.select`: given the candidate
points, how many to keep and a read-only :class:`~pyro_cl.memory.model_view.ModelView` of the
model (with the step's task and time), it returns the indices of the points to keep. The base
class does the rest of the bookkeeping, for both budgets:

* ``budget="task"`` (VCL's coreset, section 2.1): the candidates are the step's new points
  ``D_t``, and ``size`` of them join the old memory, which keeps every point:
  ``C_t = C_{t-1} ∪ select(D_t)``;
* ``budget="total"`` (a running memory, Kurle et al. 2020 section 2.2): the candidates are
  ``M_{t-1} ∪ D_t`` and ``size`` in all are kept: ``M_t = select(M_{t-1} ∪ D_t)``.

Points not kept are fitted into the Gaussian part: the new ones (``remaining``) and the old
ones the memory let go (``dropped``). A memory declares when it selects (:attr:`Memory.order`):
``"before"`` the fit (VCL Algorithm 1: propagate on the points not kept, then refit on ``C_t``
for prediction) or ``"after"`` it (fit on ``D_t ∪ M_{t-1}``, then select with the new posterior
in view). A memory that changes the Gaussian part it hands on (GRS divides its points' factors
out of the fit) also overrides :meth:`Memory.handed_on`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from pyro_cl.infer.parts import Parts
from pyro_cl.points import Points
from pyro_cl.spec import Registrable

if TYPE_CHECKING:
    from pyro_cl.memory.model_view import ModelView
    from pyro_cl.posterior import Posterior

__all__ = ["BUDGETS", "ORDERS", "Memory", "MemoryUpdate"]


#: How a memory's ``size`` is counted: ``"task"`` — ``K`` new points from every task, kept for
#: ever (VCL's coreset); ``"total"`` — at most ``M`` points in all, chosen from ``D_t ∪ M_{t-1}``
#: at every step (Kurle et al. 2020, section 2.2).
BUDGETS = ("task", "total")
#: When a memory selects: before the step's fit, or after it with the new posterior in view.
ORDERS = ("before", "after")


class MemoryUpdate(NamedTuple):
    """The result of one memory step.

    :ivar points: the new memory, ``C_t`` or ``M_t``.
    :ivar remaining: indices of the step's new points that are *not* kept (``D_t \\ C_t``).
    :ivar dropped: points of the old memory that are not kept (``C_{t-1} \\ C_t``).
    :ivar posterior: for memories that run after the fit, the Gaussian part ``q_t`` to hand on
        as the next prior (see :meth:`Memory.handed_on`); ``None`` hands on the fit itself, or,
        where ``remaining`` or ``dropped`` hold points, a fit of them from the step's prior (the
        ELBO Gaussian update).
    """

    points: Points
    remaining: torch.Tensor
    dropped: Points
    posterior: Posterior | None = None


class Memory(Registrable, ABC, kind="memory"):
    """Chooses the points a learner keeps: subclass it, give it a ``name`` (so it saves and
    loads) and implement :meth:`select`.

    :param size: points taken from each task (``K``, ``budget="task"``), or the memory's total
        size (``M``, ``budget="total"``). At least 1 (a memory of size 0 is no memory: pass
        none); with ``budget="task"`` at most the task's size, else :meth:`update` raises.
    :param budget: one of :data:`BUDGETS`.
    """

    #: One of :data:`ORDERS`: ``"before"`` the fit (Algorithm 1's order) or ``"after"`` it.
    order: ClassVar[str] = "before"
    #: Whether prediction uses a refit of the posterior on the memory (Algorithm 1's ``q_t``,
    #: eq. 3); without it the propagated posterior predicts.
    refit: ClassVar[bool] = True
    #: Whether the memory's points are only right for a fitter that ignores the prior (a
    #: replay of old points beside a prior that already holds them counts them twice).
    needs_point_fitter: ClassVar[bool] = False

    def __init__(self, size: int, budget: str = "task") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(
                f"memory size must be a positive integer, got {size!r} "
                "(for no memory, build the learner without one)"
            )
        if budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
        if self.order not in ORDERS:
            raise ValueError(
                f"{type(self).__name__}.order must be one of {ORDERS}, not {self.order!r}"
            )
        self.size = size
        self.budget = budget

    def check_parts(self, parts: Parts) -> None:
        """Refuse, when the learner is built, parts this memory cannot work with: a transition
        that fits nothing for a memory choosing after the fit, a fitter with a posterior for a
        memory whose points only a point estimate may replay, a model with amortised local
        sites (a memory scores labelled points).

        :raises ValueError: naming the part and why.
        """
        name = type(self).__name__
        if self.order == "after" and not parts.transition.propagates:
            raise ValueError(
                f"{name} chooses its points after the step's fit, and the "
                f"{type(parts.transition).__name__} transition fits nothing: use another transition"
            )
        if self.needs_point_fitter and not parts.fitter.point_estimate:
            raise ValueError(
                f"{name} fits old points again, which {type(parts.fitter).__name__}'s prior "
                "already holds (each would count twice): use it with a point estimate, e.g. "
                "FineTuning"
            )
        if getattr(parts.model, "local_guide", None) is not None:
            raise ValueError(f"{type(parts.model).__name__} takes no memory (coreset)")

    @abstractmethod
    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        """Indices of ``size`` distinct rows of ``candidates`` to keep.

        :param candidates: ``D_t`` (``budget="task"``) or ``M_{t-1}`` followed by ``D_t``
            (``budget="total"``), each point with its task and time stamp.
        :param view: the model and its current posterior, read-only (``None`` outside a learner).
        """

    def replayed(self, memory: Points, new: Points) -> Points:
        """The kept points as a memory chosen after the fit replays them in the step's fit of
        ``M_{t-1} ∪ D_t`` (default: as they are; a balanced replay buffer weighs them)."""
        return memory

    def handed_on(
        self, candidates: Points, kept: torch.Tensor, update: MemoryUpdate, view: ModelView | None
    ) -> Posterior | None:
        """The Gaussian part to hand on as the next prior, for memories that run after the fit
        (``None``, the default: the learner decides, see :class:`MemoryUpdate`).

        :param kept: boolean mask of the candidates kept.
        """
        return None

    def kept_state(self, points: Points | None) -> dict[str, torch.Tensor]:
        """The tensors this memory keeps between steps, given the learner's ``points`` (what a
        benchmark counts as its bytes kept): the points themselves, by default; a memory whose
        points are drawn afresh from something it keeps (a generator) names that instead."""
        return {} if points is None else points.state()

    def check_holds(self, points: Points) -> None:
        """The budget rule, in one place (the update and a checkpoint's load and save all call
        it): ``budget="total"`` holds at most ``size`` points in all; ``budget="task"`` at most
        ``size`` points of every step — a step's points carry its task and time stamp, so a
        single-head learner that observes task 0 twice holds ``2 size`` points of task 0.

        :raises ValueError: naming how many points break the rule.
        """
        if self.budget == "total":
            count, what = len(points), "points"
        else:
            steps = torch.stack([points.task_ids.double(), points.times.double()], dim=1)
            counts = torch.unique(steps, dim=0, return_counts=True)[1] if len(points) else None
            count, what = (0 if counts is None else int(counts.max())), "points of one step"
        if count > self.size:
            raise ValueError(
                f"the memory holds {count} {what} where its size allows {self.size} "
                f"(budget {self.budget!r})"
            )

    def update(
        self, memory: Points | None, new: Points, view: ModelView | None = None
    ) -> MemoryUpdate:
        """One memory step: ``C_t = C_{t-1} ∪ select(D_t)`` (``budget="task"``) or
        ``M_t = select(M_{t-1} ∪ D_t)`` (``budget="total"``).

        :param memory: the old memory (``None`` before the first step).
        :param new: the step's points ``D_t``.
        :raises ValueError: if a task is smaller than its ``K``, or :meth:`select` returns
            anything but ``size`` distinct indices of the candidates.
        """
        old = memory if memory is not None else Points.empty(new.x, new.y)
        if self.budget == "task":
            if self.size > len(new):
                raise ValueError(
                    f"memory size {self.size} is larger than task {new.tasks()[0]}, "
                    f"which has {len(new)} points"
                )
            candidates, size = new, self.size
        else:
            candidates = old.concat(new)
            size = min(self.size, len(candidates))
        chosen = self._checked(self.select(candidates, size, view), size, len(candidates))
        kept = torch.zeros(len(candidates), dtype=torch.bool, device=candidates.x.device)
        kept[chosen.to(kept.device)] = True
        if self.budget == "task":
            update = MemoryUpdate(
                old.concat(new.select(chosen)),
                (~kept).nonzero().squeeze(1),
                old.select(slice(0, 0)),
            )
        else:
            update = MemoryUpdate(
                candidates.select(chosen),
                (~kept[len(old) :]).nonzero().squeeze(1),
                old.select(~kept[: len(old)]),
            )
        self.check_holds(update.points)
        return update._replace(posterior=self.handed_on(candidates, kept, update, view))

    def _checked(self, chosen, size: int, n: int) -> torch.Tensor:
        """``chosen`` (a tensor, array or list of indices) as int64 indices, or a ``ValueError``
        naming what is wrong with it (never truncating float indices)."""
        who = type(self).__name__
        try:
            chosen = torch.as_tensor(chosen)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"{who}.select must return integer indices, got {chosen!r}") from error
        if chosen.dtype.is_floating_point or chosen.dtype.is_complex or chosen.dtype == torch.bool:
            raise ValueError(f"{who}.select must return integer indices, got dtype {chosen.dtype}")
        if chosen.dim() != 1 or chosen.numel() != size:
            raise ValueError(
                f"{who}.select returned {tuple(chosen.shape)} indices, expected ({size},)"
            )
        chosen = chosen.long()
        if chosen.numel() and (chosen.min() < 0 or chosen.max() >= n):
            raise ValueError(f"{who}.select returned an index outside 0..{n - 1}")
        if torch.unique(chosen).numel() != size:
            raise ValueError(f"{who}.select picked a point twice")
        return chosen
