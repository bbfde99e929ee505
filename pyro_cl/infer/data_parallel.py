"""Data-parallel fitting over ``torch.distributed``: every rank takes a shard of every global
minibatch and all ranks hold the same posterior.

When a process group is initialised (``torchrun`` and :func:`init_from_environment`, or your own
``torch.distributed.init_process_group``), every fitter's steps run sharded:

* each global minibatch of ``M`` indices (the same on every rank: all ranks draw the same
  permutation) is cut into ``W`` contiguous shards, rank ``r`` computing its loss on its ``M_r``
  points;
* Adam-based fits (SVI, maximum likelihood, EWC, SI, the ML initialisation) all-reduce the
  gradients weighted by ``M_r / M``: rank ``r``'s loss is ``global terms + (1/M_r) Σ_shard ℓ_n``,
  so ``Σ_r (M_r/M) ∇loss_r`` is exactly the single-process gradient of the global minibatch;
* natural-gradient fits (VOGN, IVON) all-reduce their sums over points (the minibatch gradient
  and VOGN's per-example squared-gradient sums) before the update;
* per-point noise of local reparameterisation is drawn for the whole global minibatch on every
  rank and each rank keeps its rows (:class:`~pyro_cl.nn.effects.MinibatchShard`), so a
  ``W``-process fit makes the same random draws as one process, and weight samples (drawn once
  per step from the same random state on every rank) are the same too;
* after every step each rank re-seeds from a seed drawn before it, so randomness whose amount
  depends on the shard (IBP masks, a VAE's codes) cannot put the ranks out of step.

At the end of every fit the learner checks that all ranks hold the same parameters
(:func:`check_replicas_agree`) and raises if not. Checkpoints and result files are written by
rank 0 only (:func:`is_writer`). Without a process group nothing here changes anything; a group
of one process re-seeds as ``W`` processes do, so it draws what they draw (the reference of
``tests/test_data_parallel.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import pyro
import torch
import torch.distributed as dist

from pyro_cl.nn.effects import MinibatchShard

__all__ = [
    "Shard",
    "check_replicas_agree",
    "all_reduce_sums",
    "check_same_step_data",
    "refused_on_any_rank",
    "fingerprint",
    "in_process_group",
    "init_from_environment",
    "is_data_parallel",
    "is_writer",
    "rank_and_world",
    "sharded_step",
    "synchronise_random_state",
    "writer_barrier",
]


def in_process_group() -> bool:
    """True when a default process group is initialised (even one of a single process)."""
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group, ``(0, 1)`` without one."""
    if in_process_group():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _collective_device() -> torch.device:
    """Where tensors for collectives live: the current GPU for NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def is_data_parallel() -> bool:
    """True when fits are sharded over more than one process."""
    return rank_and_world()[1] > 1


def is_writer() -> bool:
    """True on the process that writes files (rank 0; the only process without a group)."""
    return rank_and_world()[0] == 0


def writer_barrier() -> None:
    """Wait until every rank gets here (after rank 0 wrote something the others will read)."""
    if is_data_parallel():
        dist.barrier()


def init_from_environment(device: str | None = None) -> str | None:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1 in the environment):
    NCCL for CUDA devices, gloo otherwise. Returns the device this rank should use (``cuda``
    becomes ``cuda:LOCAL_RANK``); without ``torchrun`` returns ``device`` unchanged."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return device
    cuda = device is not None and torch.device(device).type == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return f"cuda:{local}"
    return device


def synchronise_random_state() -> None:
    """Seed every rank from one seed drawn on rank 0 and broadcast (torch's, Python's and
    NumPy's generators), so that all ranks draw the same permutations and weight samples even
    when their seeds differed. Called at the start of every fit inside a process group (also
    one of a single process, which therefore draws exactly what each of ``W`` ranks draws)."""
    if not in_process_group():
        return
    seed = torch.randint(0, 2**32, (1,), dtype=torch.int64).to(_collective_device())
    dist.broadcast(seed, src=0)
    _seed_everything(int(seed))


def _seed_everything(seed: int) -> None:
    pyro.set_rng_seed(seed)  # torch (CPU and CUDA), Python's and NumPy's generators


def _reseed_torch(seed: int) -> None:
    """Seed torch's CPU generator and that of the current GPU (what a step draws from):
    microseconds, where ``torch.manual_seed`` visits every device's generator."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.default_generators[torch.cuda.current_device()].manual_seed(seed)


@dataclass
class Shard:
    """This rank's part of one global minibatch.

    :ivar index: the rows (indices into the data) this rank computes.
    :ivar share: ``M_r / M``, the weight of this rank's mean-per-point loss in the global one.
    :ivar start: where this rank's rows begin in the global minibatch.
    :ivar global_size: ``M``, the points of the global minibatch.
    """

    index: torch.Tensor
    share: float
    start: int
    global_size: int

    @property
    def empty(self) -> bool:
        return self.index.numel() == 0

    def all_reduce_gradients(
        self, parameters: Iterable[torch.Tensor], loss: torch.Tensor | None
    ) -> torch.Tensor:
        """Replace every gradient by ``Σ_r share_r ∇loss_r`` (the single-process gradient of the
        global minibatch) and return the global loss ``Σ_r share_r loss_r``, in one all-reduce.
        A parameter gets a gradient exactly when some rank's shard reached it (as it would have
        in a single process); the others keep ``None``, so Adam skips them there too."""
        parameters = list(parameters)
        if not in_process_group():
            return loss.detach()
        like = parameters[0]
        reached = [p.grad is not None for p in parameters]
        weighted = [
            torch.zeros_like(p) if p.grad is None else p.grad * self.share for p in parameters
        ]
        value = torch.zeros((), device=like.device) if loss is None else loss.detach()
        flags = like.new_ones(len(parameters))  # fills on the device: no host-to-device copy
        for position, hit in enumerate(reached):
            if not hit:
                flags[position] = 0
        *grads, total, ranks_reached = all_reduce_sums([*weighted, value * self.share, flags])
        if not all(reached):  # read on the host only where this rank missed a parameter
            reached = [count > 0 for count in ranks_reached.tolist()]
        for parameter, grad, hit in zip(parameters, grads, reached, strict=True):
            parameter.grad = grad if hit else None
        return total


def all_reduce_sums(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The element-wise sums over ranks of ``tensors`` (sums over each rank's points), in one
    all-reduce; the tensors themselves without a process group."""
    if not in_process_group() or not tensors:
        return tensors
    collective = _collective_device()
    flat = torch.cat([t.reshape(-1).to(collective) for t in tensors])
    dist.all_reduce(flat)
    pieces = flat.split([t.numel() for t in tensors])
    return [p.view_as(t).to(t.device) for p, t in zip(pieces, tensors, strict=True)]


@contextmanager
def sharded_step(index: torch.Tensor) -> Iterator[Shard]:
    """This rank's :class:`Shard` of the global minibatch ``index``; while active, local
    reparameterisation draws its noise for the global minibatch and keeps this rank's rows, and
    on leaving every rank re-seeds from one seed drawn (identically on all ranks) on entry.
    Without a process group the shard is the whole minibatch and nothing else happens."""
    if not in_process_group():
        yield Shard(index, 1.0, 0, index.shape[0])
        return
    rank, world = rank_and_world()
    size = index.shape[0]
    bounds = [size * r // world for r in range(world + 1)]
    start, stop = bounds[rank], bounds[rank + 1]
    shard = Shard(index[start:stop], (stop - start) / size, start, size)
    next_seed = int(torch.randint(0, 2**32, (1,)))
    try:
        with MinibatchShard(start, stop - start, size):
            yield shard
    finally:
        _reseed_torch(next_seed)


def fingerprint(tensor: torch.Tensor) -> torch.Tensor:
    """A few float64 numbers that change when ``tensor``'s values, order or shape change: its
    shape, sum, sum of squares and a position-weighted sum (cheap: a pass over the data)."""
    flat = tensor.detach().reshape(-1).double()
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
    weights = torch.remainder(weights * 0.6180339887, 1.0)
    shape = torch.tensor(list(tensor.shape) or [0], dtype=torch.float64, device=flat.device)
    sums = torch.stack([flat.sum(), flat.square().sum(), (flat * weights).sum()])
    return torch.cat([shape, sums])


def refused_on_any_rank(error: Exception | None) -> None:
    """Inside a process group, make one rank's refusal every rank's (one all-reduce): each rank
    passes the error it raised while checking its input, or ``None``; if any rank refused, every
    rank raises at once, instead of the others waiting in their next collective until the
    group's timeout.

    :raises Exception: this rank's own error, or a ``ValueError`` naming the rank that refused.
    """
    if not is_data_parallel():
        if error is not None:
            raise error
        return
    rank, _ = rank_and_world()
    first = torch.tensor(
        [rank if error is not None else 2**30], dtype=torch.float64, device=_collective_device()
    )
    dist.all_reduce(first, op=dist.ReduceOp.MIN)
    if error is not None:
        raise error
    if int(first) < 2**30:
        raise ValueError(f"rank {int(first)} refused its input for this step; nothing was fitted")


def check_same_step_data(tensors: Mapping[str, torch.Tensor]) -> None:
    r"""Inside a process group, refuse a step unless every rank was given the same data (one
    all-reduce of their :func:`fingerprint`\ s), before anything is fitted: ranks given
    different data would otherwise average their gradients into a blend and finish silently.

    :raises ValueError: on every rank, when the ranks' data differ.
    """
    if not is_data_parallel():
        return
    try:
        check_replicas_agree({k: fingerprint(t) for k, t in tensors.items()}, "step data")
    except RuntimeError as error:
        raise ValueError(
            f"{error}: every rank must observe the same data (shard nothing yourself; the "
            "learner shards each minibatch); nothing was fitted"
        ) from None


def check_replicas_agree(tensors: Mapping[str, torch.Tensor], what: str) -> None:
    """Raise ``RuntimeError`` unless every rank holds exactly the same ``tensors`` (one
    all-reduce of their maxima and minima over ranks)."""
    if not is_data_parallel():
        return
    values = [t.detach().reshape(-1).double() for t in tensors.values() if t.is_floating_point()]
    values = values or [torch.zeros(0, dtype=torch.float64)]
    flat = torch.cat(values).to(_collective_device())
    sizes = torch.tensor([flat.numel(), -flat.numel()], device=flat.device, dtype=torch.float64)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    if sizes[0] != -sizes[1]:
        raise RuntimeError(f"the ranks' {what} differ in size")
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not torch.equal(high, low):
        raise RuntimeError(
            f"the ranks' {what} differ (largest difference {float((high - low).max()):.3g}): "
            "the processes did not see the same data, minibatches or random draws"
        )
