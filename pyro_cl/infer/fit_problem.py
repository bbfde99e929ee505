"""One fit as a value: the points, the latent sites they use, the schedule and a name."""

from __future__ import annotations

from dataclasses import dataclass

from pyro_cl.points import Points

__all__ = ["FitProblem"]


@dataclass(frozen=True)
class FitProblem:
    """What one fit solves: fit ``sites`` to ``data`` for ``epochs`` passes in minibatches of
    ``batch_size`` points (``None``: the whole data at once); ``description`` names the fit in
    progress bars and errors.

    The likelihood counts ``len(data)`` points (each weighted by ``data.weights`` where given).
    """

    data: Points
    sites: list[str]
    epochs: int
    batch_size: int | None
    description: str = "fit"

    @property
    def num_data(self) -> int:
        return len(self.data)
