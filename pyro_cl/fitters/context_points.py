"""Where function-space VI's context points ``X_C`` come from (S-FSVI, Rudner et al. 2022, and
the context-point options of their code, timrudner/S-FSVI).

:class:`~pyro_cl.fitters.function_space.FunctionSpaceFitter` regularises the net's outputs at
context points of earlier tasks. A context source has two hooks: :meth:`ContextPoints.after_task`
records a task once its fit has succeeded, and :meth:`ContextPoints.draw` returns the points of
one step, ``None`` while there is nothing to regularise. Two kinds:

* **kept points** (:class:`FromMemory`): a :class:`~pyro_cl.memory.protocol.Memory` keeps points
  of every task (random, k-center, a user's own); every step uses all of them, or
  ``per_task`` of each task's drawn afresh at every step (S-FSVI's ``coreset.draw``);
* **drawn inputs**, no data kept: :class:`UniformInputs` draws ``per_task`` inputs uniformly
  within the range of the inputs seen for each earlier task (whose head they run through) at
  every step (S-FSVI's ``uniform_rand``); :class:`CurrentInputs` draws them from the task being
  fitted (S-FSVI's ``train_pixel_rand_1.0``, the context points of their "no coreset" rows,
  99.62% on split MNIST in their README; ours 99.27 ± 0.17%, docs/lab/keeps_learning.md): the old
  heads' outputs on the new task's inputs are held where they were, the idea of learning without
  forgetting (Li & Hoiem 2016) in function space. Meant for multi-head nets: with one shared
  head the old outputs on the new inputs are what the new labels overwrite;
* **drawn from kept moments** (:class:`GaussianInputs`, ours, not a published choice): each
  task's input mean and covariance are kept (no point) and every step draws ``per_task``
  inputs from that Gaussian, clipped to the task's range: between uniform noise, which holds the
  function where no input of the task lies, and kept points, which keep data.

A source whose points change from step to step says so (:attr:`ContextPoints.per_step`): the
fitter then computes the old posterior's moments at every step instead of once per task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.points import Points
from pyro_cl.spec import Registrable

__all__ = [
    "ContextPoints",
    "CurrentInputs",
    "FromMemory",
    "GaussianInputs",
    "UniformInputs",
    "probabilistic_pca",
]


class ContextPoints(Registrable, ABC, kind="context_points"):
    """A function-space fitter's source of context points: subclass it, give it a ``name``
    and implement :meth:`after_task` and :meth:`draw`."""

    @property
    def per_step(self) -> bool:
        """Whether :meth:`draw` returns new points at every step."""
        return False

    @abstractmethod
    def after_task(self, data: Points) -> None:
        """Record a task whose fit succeeded (``data``: its training points)."""

    @abstractmethod
    def draw(self, data: Points) -> Points | None:
        """The context points of one step, each with the task whose head it runs through;
        ``None`` before the first task. ``data`` is what the step fits (the task's points, or
        a memory's in a refit). Draws come from torch's generator (the learner's training
        stream while it fits)."""

    def candidates(self) -> Points | None:
        """A fixed set that every draw is rows of, while a task is fitted (``None``, the
        default: draws are new points). A source that returns one also gives
        ``draw_rows(data)``, the rows of one step's draw (as :meth:`draw` would draw them, e.g.
        :meth:`FromMemory.draw_rows`); the fitter then computes the old posterior's moments at
        the set once per fit and takes each step's rows, not the moments at every step."""
        return None


class FromMemory(ContextPoints):
    """The points a memory keeps of every task.

    :param memory: the :class:`~pyro_cl.memory.protocol.Memory` that chooses them (e.g.
        ``RandomCoreset(40)``, which keeps 40 of every task).
    :param per_task: ``None`` uses every kept point at every step; a number draws that many of
        each task's kept points afresh at every step (without replacement; all of a task's if
        it has fewer).
    :param total: instead, draw this many of all the kept points afresh at every step, whatever
        the number of tasks (a context of fixed size: on a task-free stream every batch is a
        step of its own, and ``per_task`` draws grow with their number).
    """

    name = "from_memory"

    def __init__(
        self, memory: Registrable, per_task: int | None = None, total: int | None = None
    ) -> None:
        if getattr(memory, "kind", None) != "memory":
            raise TypeError(f"memory must be a Memory part, got {memory!r}")
        if per_task is not None and total is not None:
            raise ValueError("draw per_task points of each task or total points in all, not both")
        self.memory = memory
        self.per_task = None if per_task is None else checked_count(per_task, "per_task")
        self.total = None if total is None else checked_count(total, "total")
        #: The kept points so far (with their tasks), ``None`` before the first task.
        self.points: Points | None = None

    @property
    def per_step(self) -> bool:
        return self.per_task is not None or self.total is not None

    def after_task(self, data: Points) -> None:
        self.points = self.memory.update(self.points, data).points

    def draw(self, data: Points) -> Points | None:
        if self.points is None or not self.per_step:
            return self.points
        return self.points.select(self.draw_rows(data))

    def candidates(self) -> Points | None:
        return self.points if self.per_step else None

    def draw_rows(self, data: Points) -> torch.Tensor:  # noqa: ARG002 (the kept points only)
        """The rows of :meth:`candidates` of one step's draw, without replacement: ``total`` of
        all the kept points, or ``per_task`` of each task's."""
        if self.total is not None:
            return torch.randperm(len(self.points), device=self.points.x.device)[: self.total]
        chosen = []
        for task in self.points.tasks():
            rows = torch.nonzero(self.points.task_ids == task).flatten()
            order = torch.randperm(len(rows), device=rows.device)[: self.per_task]
            chosen.append(rows[order])
        return torch.cat(chosen)

    def state_dict(self) -> dict:
        return {} if self.points is None else {"context_points": self.points.state()}

    def load_state_dict(self, state: dict) -> None:
        points = state.get("context_points")
        self.points = None if points is None else Points.from_state(points)


class _DrawnInputs(ContextPoints):
    """Inputs drawn afresh at every step for each task fitted so far, no data kept: the base of
    :class:`CurrentInputs` and of the generated inputs, which keeps the tasks seen.

    :param per_task: inputs drawn for each earlier task at every step.
    """

    def __init__(self, per_task: int) -> None:
        self.per_task = checked_count(per_task, "per_task")
        self._tasks: list[int] = []

    @property
    def per_step(self) -> bool:
        return True

    def after_task(self, data: Points) -> None:
        self._tasks = sorted(set(self._tasks) | set(data.tasks()))

    def state_dict(self) -> dict:
        return {"tasks": torch.tensor(self._tasks, dtype=torch.long)} if self._tasks else {}

    def load_state_dict(self, state: dict) -> None:
        self._tasks = [int(t) for t in state["tasks"]] if state else []


class _GeneratedInputs(_DrawnInputs):
    """Inputs made up at every step, not taken from data: the base of :class:`UniformInputs`
    and :class:`GaussianInputs`, which keeps the inputs' shape (the same for every task) and
    builds the step's points with targets of the tasks' type, unused.

    :param per_task: inputs drawn for each earlier task at every step.
    """

    def __init__(self, per_task: int) -> None:
        super().__init__(per_task)
        self._shape: tuple[int, ...] | None = None
        self._like: torch.Tensor | None = None  # dtype and device of the targets

    def after_task(self, data: Points) -> None:
        shape = tuple(data.x.shape[1:])
        if self._shape is not None and shape != self._shape:
            raise ValueError(f"inputs of shape {shape} after inputs of shape {self._shape}")
        self._shape, self._like = shape, data.y[:0]
        super().after_task(data)

    def _points(self, x: torch.Tensor) -> Points:
        """``x`` (``per_task`` rows for each task so far, in task order) as context points."""
        task_ids = torch.tensor(self._tasks, device=x.device).repeat_interleave(self.per_task)
        # targets of the tasks' type, unused: context points have none
        y = self._like.new_zeros((len(x), *self._like.shape[1:]))
        return Points(x, y, task_ids)

    def state_dict(self) -> dict:
        if not self._tasks:
            return {}
        return {**super().state_dict(), "shape": torch.tensor(self._shape), "like": self._like}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if not state:
            self._shape, self._like = None, None
            return
        self._shape = tuple(int(s) for s in state["shape"])
        self._like = state["like"]


class UniformInputs(_GeneratedInputs):
    """``per_task`` inputs drawn uniformly at every step for each earlier task, no data kept.

    :param per_task: inputs drawn for each earlier task at every step.
    :param low: the smallest value of every input feature; ``None`` takes the smallest value
        of any input seen so far.
    :param high: the largest; ``None`` takes the largest seen so far.
    """

    name = "uniform_inputs"

    def __init__(self, per_task: int, low: float | None = None, high: float | None = None) -> None:
        super().__init__(per_task)
        if low is not None and high is not None and not low < high:
            raise ValueError(f"low must be below high, got low={low} and high={high}")
        self.low, self.high = low, high
        self._range: torch.Tensor | None = None  # (smallest, largest) input value seen

    def after_task(self, data: Points) -> None:
        super().after_task(data)
        seen = torch.stack([data.x.min(), data.x.max()]).detach()
        if self._range is not None:
            seen = torch.stack([seen[0].minimum(self._range[0]), seen[1].maximum(self._range[1])])
        self._range = seen

    def draw(self, data: Points) -> Points | None:  # noqa: ARG002 (only its range)
        if not self._tasks:
            return None
        low = self._range[0] if self.low is None else self.low
        high = self._range[1] if self.high is None else self.high
        n = self.per_task * len(self._tasks)
        device, dtype = self._range.device, self._range.dtype
        return self._points(
            low + (high - low) * torch.rand(n, *self._shape, device=device, dtype=dtype)
        )

    def state_dict(self) -> dict:
        state = super().state_dict()
        return {**state, "range": self._range} if state else state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._range = state["range"] if state else None


class CurrentInputs(_DrawnInputs):
    """``per_task`` of the fitted task's own inputs for each earlier task's head, drawn afresh
    at every step (without replacement; all of them if the task has fewer); no data kept.

    :param per_task: inputs drawn for each earlier task at every step.
    """

    name = "current_inputs"

    def draw(self, data: Points) -> Points | None:
        earlier = [t for t in self._tasks if t not in data.tasks()]
        if not earlier:
            return None
        rows = torch.cat(
            [torch.randperm(len(data), device=data.x.device)[: self.per_task] for _ in earlier]
        )
        task_ids = torch.tensor(earlier, device=data.x.device).repeat_interleave(
            min(self.per_task, len(data))
        )
        return Points(data.x[rows], data.y[rows], task_ids)


def _square_root(covariance: torch.Tensor, jitter: float) -> torch.Tensor:
    """A factor ``L`` with ``L Lᵀ = Σ + jitter I``: its Cholesky factor, or where that fails (a
    singular ``Σ``: constant or collinear features, in floating point) ``V diag(√λ)`` of its
    eigendecomposition, eigenvalues rounded below zero taken as zero."""
    eye = torch.eye(len(covariance), dtype=covariance.dtype, device=covariance.device)
    factor, info = torch.linalg.cholesky_ex(covariance + jitter * eye)
    if not info.item():
        return factor
    eigenvalues, vectors = torch.linalg.eigh(covariance + jitter * eye)
    return vectors * eigenvalues.clamp(min=0).sqrt()


def probabilistic_pca(covariance: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The maximum-likelihood ``W W^T + σ² I`` of rank ``rank`` plus isotropic noise for a
    sample covariance (Tipping & Bishop 1999, eqs. 7-8): ``σ²`` the mean of the ``D - rank``
    smallest eigenvalues, ``W = U_r (Λ_r - σ² I)^{1/2}`` from the ``rank`` largest.

    :returns: ``W`` (``D x rank``) and ``σ²`` (a scalar tensor).
    """
    eigenvalues, vectors = torch.linalg.eigh(covariance)  # ascending
    kept = len(eigenvalues) - rank
    noise = eigenvalues[:kept].clamp(min=0).mean()
    factor = vectors[:, kept:] * (eigenvalues[kept:] - noise).clamp(min=0).sqrt()
    return factor, noise


class GaussianInputs(_GeneratedInputs):
    """``per_task`` inputs drawn at every step for each earlier task from a Gaussian with that
    task's input mean and covariance, clipped to the smallest and largest input value the task
    had; the moments are kept, no point.

    A task seen again (the same task id) merges its moments with the earlier ones (Chan et al.'s
    pooled mean and covariance of all its inputs: exact but for the low-rank covariance, whose
    earlier part is its low-rank form). For ``D`` input features a task keeps ``D + D²``
    numbers with ``covariance="full"`` (the scatter matrix), ``2 D`` with ``"diagonal"``, and
    ``D (rank + 1) + 1`` with ``"low_rank"``: probabilistic PCA's ``W W^T + σ² I``
    (:func:`probabilistic_pca`), the choice between for images, whose full covariance is large
    (784² numbers a task of MNIST against a coreset's 785 a point).

    :param per_task: inputs drawn for each earlier task at every step.
    :param covariance: ``"full"``, ``"low_rank"`` or ``"diagonal"``.
    :param rank: the rank of ``W`` with ``"low_rank"`` (below ``D``).
    :param jitter: added to the covariance's diagonal before its Cholesky factor (constant
        features have zero variance).
    """

    name = "gaussian_inputs"

    def __init__(
        self,
        per_task: int,
        covariance: str = "full",
        jitter: float = 1e-6,
        rank: int | None = None,
    ) -> None:
        super().__init__(per_task)
        if covariance not in ("full", "low_rank", "diagonal"):
            raise ValueError(
                f"covariance must be 'full', 'low_rank' or 'diagonal', not {covariance!r}"
            )
        if (rank is None) != (covariance != "low_rank"):
            raise ValueError(f"rank is given with covariance='low_rank' only, got rank={rank!r}")
        self.covariance, self.jitter = covariance, checked_real(jitter, "jitter", 0)
        self.rank = None if rank is None else checked_count(rank, "rank")
        #: Per task: the count, mean, scatter (sum of squared deviations: a matrix, or a vector
        #: when diagonal; for a low-rank covariance its ``factor`` W and ``noise`` σ² instead)
        #: and the (smallest, largest) input value.
        self.moments: dict[int, dict[str, torch.Tensor]] = {}
        self._factors: dict[int, torch.Tensor] = {}  # Cholesky factors (or standard deviations)

    def after_task(self, data: Points) -> None:
        super().after_task(data)
        for task in data.tasks():
            x = data.x[data.task_ids == task].detach().flatten(1)
            if not x.is_floating_point():  # e.g. uint8 pixels: moments need a float type
                x = x.to(torch.get_default_dtype())
            if self.rank is not None and self.rank >= x.shape[1]:
                raise ValueError(
                    f"rank {self.rank} is not below the {x.shape[1]} input features: use "
                    "covariance='full'"
                )
            earlier = self.moments.get(task)
            if earlier is not None and self.rank is not None:
                earlier = self._scatter_of_low_rank(earlier)
            moments = self._merged(earlier, self._moments(x))
            self.moments[task] = moments if self.rank is None else self._low_rank(moments)
            self._factors.pop(task, None)

    def _low_rank(self, moments: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        covariance = moments.pop("scatter") / moments["count"].clamp(min=1.0)
        moments["factor"], moments["noise"] = probabilistic_pca(covariance, self.rank)
        return moments

    @staticmethod
    def _scatter_of_low_rank(moments: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        factor, noise = moments["factor"], moments["noise"]
        covariance = factor @ factor.T + noise * torch.eye(len(factor), dtype=factor.dtype,
                                                           device=factor.device)  # fmt: skip
        scatter = covariance * moments["count"]
        return {name: moments[name] for name in ("count", "mean", "range")} | {"scatter": scatter}

    def _moments(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        mean = x.mean(0)
        centred = x - mean
        diagonal = self.covariance == "diagonal"
        scatter = centred.pow(2).sum(0) if diagonal else centred.T @ centred
        count = torch.tensor(float(len(x)), dtype=x.dtype, device=x.device)
        return {"count": count, "mean": mean, "scatter": scatter,
                "range": torch.stack([x.min(), x.max()])}  # fmt: skip

    def _merged(self, old: dict | None, new: dict) -> dict[str, torch.Tensor]:
        """Chan et al.'s pairwise update: the moments of both sets of inputs together."""
        if old is None:
            return new
        count = old["count"] + new["count"]
        delta = new["mean"] - old["mean"]
        weight = old["count"] * new["count"] / count
        cross = delta.pow(2) if self.covariance == "diagonal" else torch.outer(delta, delta)
        return {
            "count": count,
            "mean": old["mean"] + delta * new["count"] / count,
            "scatter": old["scatter"] + new["scatter"] + weight * cross,
            "range": torch.stack(
                [old["range"][0].minimum(new["range"][0]), old["range"][1].maximum(new["range"][1])]
            ),
        }

    def _factor(self, task: int) -> torch.Tensor:
        if task not in self._factors and self.covariance == "low_rank":
            self._factors[task] = self.moments[task]["factor"]
        if task not in self._factors:
            moments = self.moments[task]
            covariance = moments["scatter"] / moments["count"].clamp(min=1.0)
            if self.covariance == "full":
                self._factors[task] = _square_root(covariance, self.jitter)
            else:
                self._factors[task] = (covariance + self.jitter).sqrt()
        return self._factors[task]

    def draw(self, data: Points) -> Points | None:  # noqa: ARG002 (only the kept moments)
        if not self._tasks:
            return None
        drawn = []
        for task in self._tasks:
            moments, factor = self.moments[task], self._factor(task)
            z = torch.randn(self.per_task, len(moments["mean"]), dtype=factor.dtype,
                            device=factor.device)  # fmt: skip
            if self.covariance == "low_rank":  # W z' + σ z with z' of the rank's size
                spread = (moments["noise"] + self.jitter).sqrt()
                z_low = torch.randn(self.per_task, factor.shape[1], dtype=factor.dtype,
                                    device=factor.device)  # fmt: skip
                noise = z_low @ factor.T + spread * z
            else:
                noise = z @ factor.T if self.covariance == "full" else z * factor
            low, high = moments["range"]
            drawn.append((moments["mean"] + noise).clamp(low, high))
        return self._points(torch.cat(drawn).reshape(-1, *self._shape))

    def state_dict(self) -> dict:
        state = super().state_dict()
        for task, moments in self.moments.items():
            state.update({f"task{task}.{name}": value for name, value in moments.items()})
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.moments, self._factors = {}, {}
        names = ("factor", "noise") if self.covariance == "low_rank" else ("scatter",)
        for task in self._tasks:
            self.moments[task] = {
                name: state[f"task{task}.{name}"] for name in ("count", "mean", "range", *names)
            }
