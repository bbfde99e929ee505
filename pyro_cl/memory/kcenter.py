"""The K-center coreset: greedy farthest-first traversal of the inputs (Gonzalez, 1985; VCL
section 2.1)."""

from __future__ import annotations

import torch

from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory
from pyro_cl.points import Points

__all__ = ["KCenterCoreset", "farthest_first"]


class KCenterCoreset(Memory):
    """Greedy K-center selection (Gonzalez, 1985) on the inputs: :func:`farthest_first`.

    Deterministic: it starts from the task's first point, as the VCL reference code does
    (``first="random"`` draws the start from torch's global generator instead).
    """

    name = "kcenter"
    #: Chooses by the inputs alone; the refit fits a copy of any family's guide.
    guide_families = None

    def __init__(self, size: int, first: int | str = 0, budget: str = "task") -> None:
        super().__init__(size, budget)
        if first != "random" and (not isinstance(first, int) or first < 0):
            raise ValueError(f"first must be a non-negative index or 'random', got {first!r}")
        self.first = first

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        first = self.first
        if first == "random":
            first = int(torch.randint(len(candidates), ()).item())
        return farthest_first(candidates.x, size, first)


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
