"""Memories: how coreset points are chosen (random and greedy K-center, VCL section 2.1).

A memory is a part of a learner. It runs either *before* the fit (Algorithm 1: choose ``C_t``,
propagate on the other points, refit on ``C_t`` for prediction) or *after* it (fit on
``D_t ∪ M_{t-1}``, then choose ``M_t`` with the fitted posterior in view), as its ``order`` says.

To add a heuristic, subclass :class:`CoresetSelector`, give it a ``name`` (so it saves and
loads) and implement :meth:`~CoresetSelector.choose` (which points of a new task to keep);
override :meth:`~CoresetSelector.update` instead to also drop or replace points of the old
coreset (Algorithm 1 allows ``C_t`` to be any function of ``C_{t-1}`` and ``D_t``; dropped points
are then propagated with the new task's data) or to score points by the model: ``update``
receives a read-only :class:`~pyro_cl.infer.model_view.ModelView` of the model and the current
posterior.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch

from pyro_cl.points import Points
from pyro_cl.spec import Registrable

if TYPE_CHECKING:
    from pyro_cl.infer.model_view import ModelView
    from pyro_cl.posterior import Posterior

__all__ = [
    "BUDGETS",
    "CoresetSelector",
    "CoresetUpdate",
    "RandomCoreset",
    "KCenterCoreset",
    "farthest_first",
    "split_candidates",
]


#: How a selector's ``size`` is counted: ``"task"`` — ``K`` new points from every task, kept for
#: ever (VCL's coreset); ``"total"`` — a running memory of at most ``M`` points in all, chosen
#: from ``D_t ∪ M_{t-1}`` at every step (Kurle et al. 2020, section 2.2).
BUDGETS = ("task", "total")


class CoresetUpdate(NamedTuple):
    """The result of one coreset step of Algorithm 1.

    :ivar coreset: the new coreset ``C_t``.
    :ivar remaining: indices of the new task's points that are *not* in ``C_t`` (``D_t \\ C_t``).
    :ivar dropped: points of ``C_{t-1}`` that are not in ``C_t`` (``C_{t-1} \\ C_t``).
    :ivar posterior: for memories that run after the fit, the Gaussian part ``q_t`` of the
        posterior to hand on as the next prior (e.g. the fit with the memory's factors removed,
        Kurle et al. eq. 9); ``None`` hands on the fit itself, or, where ``remaining`` or
        ``dropped`` hold points, a fit of them from the step's prior (the ELBO Gaussian update).
    """

    coreset: Points
    remaining: torch.Tensor
    dropped: Points
    posterior: Posterior | None = None


class CoresetSelector(Registrable, ABC, kind="memory"):
    """Builds ``C_t`` from ``C_{t-1}`` and ``D_t`` with :meth:`choose`: by keeping all old points
    and adding ``size`` points of the new task (``budget="task"``), or by choosing ``size`` points
    in all from ``C_{t-1} ∪ D_t`` (``budget="total"``, a running memory; the points not chosen are
    propagated with the rest of the step's data).

    :param size: points taken from each task (K), or the memory's total size (M). It must be at
        least 1 (a coreset of size 0 is plain VCL: pass no selector); with ``budget="task"`` at
        most the task's size, else :meth:`update` raises.
    :param budget: one of :data:`BUDGETS`.
    """

    #: ``"before"`` the fit (Algorithm 1's order) or ``"after"`` it (fit on ``D_t ∪ M_{t-1}``,
    #: then choose ``M_t`` from those points with the new posterior in view).
    order: ClassVar[str] = "before"
    #: Whether prediction uses a refit of the posterior on the memory (Algorithm 1's ``q_t``,
    #: eq. 3); without it the propagated posterior predicts.
    refit: ClassVar[bool] = True

    def __init__(self, size: int, budget: str = "task") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(
                f"coreset size must be a positive integer, got {size!r} "
                "(for no coreset, use VCL without a coreset selector)"
            )
        if budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
        self.size = size
        self.budget = budget

    @abstractmethod
    def choose(self, x: torch.Tensor, y: torch.Tensor, size: int) -> torch.Tensor:
        """Indices of ``size`` distinct points of ``(x, y)`` to keep."""

    def update(
        self,
        coreset: Points | None,
        x: torch.Tensor,
        y: torch.Tensor,
        task_id: int,
        view: ModelView | None = None,
    ) -> CoresetUpdate:
        """One coreset step: ``C_t = C_{t-1} ∪ choose(D_t)``, nothing dropped (``budget="task"``),
        or ``C_t = choose(C_{t-1} ∪ D_t)`` (``budget="total"``).

        :param view: the model and the current posterior, read-only (here only its time stamp
            is used, for the new points; memories that score points by the model override this
            method)."""
        time = 0.0 if view is None else view.time
        old = coreset if coreset is not None else Points.empty(x, y)
        if self.budget == "total":
            return self._running_update(old, Points.of_task(x, y, task_id, time))
        n = x.shape[0]
        if self.size > n:
            raise ValueError(
                f"coreset size {self.size} is larger than task {task_id}, which has {n} points"
            )
        chosen = _checked_choice(self.choose(x, y, self.size), self.size, n, type(self).__name__)
        chosen = chosen.to(x.device)
        keep = torch.ones(n, dtype=torch.bool, device=x.device)
        keep[chosen] = False
        new_points = Points.of_task(x[chosen], y[chosen], task_id, time)
        return CoresetUpdate(
            old.concat(new_points), keep.nonzero().squeeze(1), old.select(slice(0, 0))
        )

    def _running_update(self, old: Points, new: Points) -> CoresetUpdate:
        """``M_t = choose(M_{t-1} ∪ D_t)`` of at most ``size`` points; the others are propagated."""
        candidates = old.concat(new)
        size = min(self.size, len(candidates))
        chosen = _checked_choice(
            self.choose(candidates.x, candidates.y, size),
            size,
            len(candidates),
            type(self).__name__,
        ).to(candidates.x.device)
        return split_candidates(old, candidates, chosen)[1]


def split_candidates(
    old: Points, candidates: Points, chosen: torch.Tensor
) -> tuple[torch.Tensor, CoresetUpdate]:
    """A running memory's step: ``M_t = candidates[chosen]`` where ``candidates`` is ``M_{t-1}``
    (``old``) followed by ``D_t``; the new points not chosen are ``remaining``, the old ones
    ``dropped``.

    :returns: the boolean mask of chosen candidates, and the update.
    """
    kept = torch.zeros(len(candidates), dtype=torch.bool, device=chosen.device)
    kept[chosen] = True
    remaining = (~kept[len(old) :]).nonzero().squeeze(1)
    update = CoresetUpdate(candidates.select(chosen), remaining, old.select(~kept[: len(old)]))
    return kept, update


def _checked_choice(chosen, size: int, n: int, who: str) -> torch.Tensor:
    """``chosen`` (a tensor, array or list of indices) as int64 indices, or a ``ValueError``
    naming what is wrong with it (never truncating float indices)."""
    try:
        chosen = torch.as_tensor(chosen)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{who}.choose must return integer indices, got {chosen!r}") from error
    if chosen.dtype.is_floating_point or chosen.dtype.is_complex or chosen.dtype == torch.bool:
        raise ValueError(f"{who}.choose must return integer indices, got dtype {chosen.dtype}")
    if chosen.dim() != 1 or chosen.numel() != size:
        raise ValueError(f"{who}.choose returned {tuple(chosen.shape)} indices, expected ({size},)")
    chosen = chosen.long()
    if chosen.numel() and (chosen.min() < 0 or chosen.max() >= n):
        raise ValueError(f"{who}.choose returned an index outside 0..{n - 1}")
    if torch.unique(chosen).numel() != size:
        raise ValueError(f"{who}.choose picked a point twice")
    return chosen


class RandomCoreset(CoresetSelector):
    """``K`` points of each task drawn uniformly without replacement (an unbiased coreset).

    Draws from torch's global random number generator, so a learner's seed fixes the choice.
    """

    name = "random"

    def choose(self, x: torch.Tensor, y: torch.Tensor, size: int) -> torch.Tensor:
        return torch.randperm(x.shape[0], device=x.device)[:size]


class KCenterCoreset(CoresetSelector):
    """Greedy K-center selection (Gonzalez, 1985) on the inputs: :func:`farthest_first`.

    Deterministic: it starts from the task's first point, as the VCL reference code does
    (``first="random"`` draws the start from torch's global generator instead).
    """

    name = "kcenter"

    def __init__(self, size: int, first: int | str = 0, budget: str = "task") -> None:
        super().__init__(size, budget)
        if first != "random" and (not isinstance(first, int) or first < 0):
            raise ValueError(f"first must be a non-negative index or 'random', got {first!r}")
        self.first = first

    def choose(self, x: torch.Tensor, y: torch.Tensor, size: int) -> torch.Tensor:
        first = self.first
        if first == "random":
            first = int(torch.randint(x.shape[0], ()).item())
        return farthest_first(x, size, first)


def farthest_first(x: torch.Tensor, k: int, first: int = 0) -> torch.Tensor:
    """Indices of ``k`` points chosen by greedy farthest-first traversal (Gonzalez, 1985).

    Starting from point ``first``, each step adds the point whose Euclidean distance to the
    nearest chosen point is largest (ties: the lowest index). This is a 2-approximation of the
    K-center problem. Each step is one matrix-vector product over the data: squared distances to
    the newest centre ``c`` as ``|x|² - 2 x·c + |c|²`` (reading the data once, where ``x - c``
    would write a copy of it), then an elementwise minimum — ``O(N·D)`` tensor work per step and
    no Python loop over points. The expansion rounds differently from ``|x - c|²`` (relative
    error ~1e-7 in float32), which can only reorder candidates whose distances tie to that
    precision. A chosen point is never chosen again, even among duplicates.

    :param x: inputs of shape ``(N, ...)``; trailing dimensions are flattened.
    """
    n = x.shape[0]
    if not 0 <= k <= n:
        raise ValueError(f"cannot choose {k} of {n} points")
    if not 0 <= first < n:
        raise ValueError(f"first={first} is not an index of {n} points")
    points = x.reshape(n, -1)
    if not points.is_floating_point():
        points = points.float()
    # Distances' order is unchanged by a shift and a common scale; centring and scaling to
    # [-1, 1] keeps |x|² finite for data of any finite magnitude (1e20 overflows float32).
    scale = points.abs().max()
    if scale > 0:
        points = points / scale
    points = points - points.mean(0)
    squared_norms = points.square().sum(1)
    chosen = torch.empty(k, dtype=torch.long, device=x.device)
    nearest = torch.full((n,), float("inf"), dtype=points.dtype, device=x.device)
    current = first
    for step in range(k):
        chosen[step] = current
        distance = torch.addmv(squared_norms, points, points[current], alpha=-2.0)
        distance += squared_norms[current]
        torch.minimum(nearest, distance, out=nearest)
        nearest[current] = -float("inf")
        current = int(torch.argmax(nearest))
    return chosen
