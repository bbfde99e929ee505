"""Experience replay at a fixed budget: kept points in every step's fit, for every fitter.

What most practitioners reach for first (Chaudhry et al. 2019, "On tiny episodic memories in
continual learning"; Avalanche's ``Replay``): a buffer of old points, fitted again beside each new
task's data. Step ``k`` fits ``D_k ∪ M_{k-1}`` — the kept points shuffled into the new data, so
every minibatch mixes them in proportion — and then ``M_k`` is chosen from ``M_{k-1} ∪ D_k``:

* ``budget="total"`` (``M`` points in all): a reservoir sample (Vitter's algorithm R), every
  point seen so far equally likely to be held, whatever the task sizes;
* ``budget="task"`` (``K`` a task): ``K`` points of each new task drawn uniformly.

With a point estimate (fine-tuning, MAP, EWC) this is experience replay. ``balanced=True`` (the
default with a point estimate) weighs the buffer as much as the new data, each kept point's
likelihood ``|D_k| / |M_{k-1}|`` times a new one's: what Avalanche's replay does in expectation
when it draws a minibatch of each and weighs the two losses equally (200 kept points beside
12,000 new ones would otherwise be 1.6% of each minibatch). ``balanced="repeat"`` fits the same
objective with less noise: each kept point repeated ``r = round(|D_k| / |M_{k-1}|)`` times at
weight ``|D_k| / (r |M_{k-1}|)``, so each minibatch holds about as many kept points as new ones,
as Avalanche's minibatch of each does (an epoch is then about twice the steps, as Avalanche's
steps are twice the points); one heavy kept point in a few minibatches becomes a light one in
every minibatch. ``balanced=False`` mixes them in proportion. With a
Bayesian fitter it is its counterpart: the kept points are in the *likelihood* of every fit, and
the posterior handed on as the next prior holds only the points that left the buffer
(``(D_k ∪ M_{k-1}) \\ M_k``, fitted from the step's prior after the fit; Kurle et al. 2020,
Algorithm 1), so no point counts twice; the fit on ``D_k ∪ M_{k-1}`` predicts. A posterior takes
the buffer unweighted (balanced, a kept point would count ``|D_k| / |M|`` times in it). Unlike a VCL
coreset (Algorithm 1's refit, at test time only), the buffer is used while learning.
"""

from __future__ import annotations

import torch

from pyro_cl.infer.parts import Parts
from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import Memory, MemoryUpdate
from pyro_cl.points import Points

__all__ = ["ExperienceReplay"]


class ExperienceReplay(Memory):
    """A replay buffer of ``size`` points in all (``budget="total"``, a reservoir sample) or
    ``size`` points a task (``budget="task"``), fitted beside every step's new data (module
    docstring).

    :param size: ``M`` (total) or ``K`` (a task).
    :param budget: ``"total"`` (default) or ``"task"``.
    :param balanced: weigh the buffer as much as the new data (module docstring): ``True`` by
        weights, ``"repeat"`` by repeating the kept points, ``False`` in proportion; ``None``
        (default): ``True`` with a point estimate, ``False`` with a posterior.
    """

    name = "experience_replay"
    order = "after"
    refit = False

    def __init__(
        self, size: int, budget: str = "total", balanced: bool | str | None = None
    ) -> None:
        super().__init__(size, budget)
        if not (balanced is None or isinstance(balanced, bool) or balanced == "repeat"):
            raise TypeError(f'balanced must be True, False, "repeat" or None, got {balanced!r}')
        self.balanced = balanced
        #: Points seen so far (the reservoir's ``n``).
        self.seen = 0
        self._held = 0  # rows of M_{t-1} at the head of the candidates (set by update)
        self._point_estimate = False

    def check_parts(self, parts: Parts) -> None:
        super().check_parts(parts)
        # a point estimate replays and is done; a posterior must not hold the kept points twice
        self._point_estimate = bool(parts.fitter.point_estimate)
        if self.balanced and not self._point_estimate:
            raise ValueError(
                "balanced replay weighs each kept point |D_k|/|M| times a new one, which a "
                f"posterior ({type(parts.fitter).__name__}) would count as that many points: "
                "use balanced=False (or None) with it"
            )

    def replayed(self, memory: Points, new: Points) -> Points:
        balanced = self._point_estimate if self.balanced is None else self.balanced
        if not balanced or not len(memory):
            return memory
        times = max(1, round(len(new) / len(memory))) if balanced == "repeat" else 1
        if times > 1:  # each kept point r times, about as many as the new points
            memory = memory.select(torch.arange(len(memory), device=memory.x.device).repeat(times))
        return memory.weighted(memory.likelihood_weights() * (len(new) / len(memory)))

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        device = candidates.x.device
        if self.budget == "task":
            return torch.randperm(len(candidates), device=device)[:size]
        # algorithm R over the new points: the i-th point seen replaces a random slot with
        # probability M / i; candidates are M_{t-1} (its first rows) followed by D_t
        new = len(candidates) - min(len(candidates), self._held)
        slots = list(range(self._held))
        for offset in range(new):
            index = self._held + offset
            seen = self.seen + offset + 1
            if len(slots) < self.size:
                slots.append(index)
                continue
            slot = int(torch.randint(seen, (1,)))
            if slot < self.size:
                slots[slot] = index
        return torch.tensor(slots[:size], dtype=torch.long, device=device)

    def update(
        self, memory: Points | None, new: Points, view: ModelView | None = None
    ) -> MemoryUpdate:
        self._held = 0 if memory is None else len(memory)
        update = super().update(memory, new, view)
        self.seen += len(new)
        if self._point_estimate:  # nothing is handed on: no fit on the points that left
            empty = torch.zeros(0, dtype=torch.long, device=new.x.device)
            return update._replace(remaining=empty, dropped=update.dropped.select(slice(0, 0)))
        return update

    def state_dict(self) -> dict:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.seen = int(state.get("seen", 0))
