"""A learner's own random streams: reproducible from its seed, without touching the process's.

Every draw pyro_cl makes (weight samples, minibatch orders, coreset choices, Monte Carlo
estimates) comes from torch's global generator, as Pyro's do. A seeded learner keeps generator
states of its own and swaps one in only while it works (:meth:`RandomStream.scope`): whatever the
caller does with torch's generator between two calls, the learner's draws are the same, and the
caller's generator is left as it was. An unseeded learner draws from the global generator.

A seeded learner has two streams, split from its seed by :meth:`RandomStream.spawn`: training's
(fits, memory choices) and prediction's. Evaluating between steps, on any number of inputs with
any number of samples, then never changes what training draws: a run's posteriors are the same
whether or not, and however, it is evaluated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from pyro_cl.nn.exclusive import MODEL_LOCK

__all__ = ["RandomStream", "random_state", "set_random_state"]


def random_state(device: torch.device) -> dict[str, torch.Tensor]:
    """torch's CPU generator state, and the device's on CUDA."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_random_state(device: torch.device, state: dict[str, torch.Tensor]) -> None:
    """Restore what :func:`random_state` returned."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


class RandomStream:
    """The random state a learner draws from.

    :param seed: seeds the stream as ``torch.manual_seed(seed)`` would seed the process's (CPU
        and ``device``); ``None`` draws from the process's generator instead.
    :param device: where the learner's tensors live ("cuda" keeps the GPU generator's state too).
    """

    def __init__(self, seed: int | None, device: torch.device) -> None:
        self.seed = seed
        self.device = device
        self._state: dict[str, torch.Tensor] | None = None
        self._depth = 0
        if seed is not None:
            with self._swapped_in({}):
                torch.manual_seed(seed)
                self._state = random_state(device)

    @property
    def seeded(self) -> bool:
        return self._state is not None

    def spawn(self, key: int) -> RandomStream:
        """An independent stream on the same device, seeded by the child ``key`` of
        ``numpy.random.SeedSequence(seed)`` (the standard way to split one seed into streams that
        do not overlap); unseeded, it draws from the process's generator too."""
        if self.seed is None:
            return RandomStream(None, self.device)
        child = np.random.SeedSequence(self.seed, spawn_key=(key,))
        return RandomStream(int(child.generate_state(1, np.uint64)[0]), self.device)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Within the block torch's generator is this stream (re-entrant; one thread at a time,
        under :data:`~pyro_cl.nn.exclusive.MODEL_LOCK`); the process's state is restored after."""
        if self._state is None:
            yield
            return
        with MODEL_LOCK:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with self._swapped_in(self._state):
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0
                    self._state = random_state(self.device)

    @contextlib.contextmanager
    def _swapped_in(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        outside = random_state(self.device)
        if state:
            set_random_state(self.device, state)
        try:
            yield
        finally:
            set_random_state(self.device, outside)

    def state(self) -> dict[str, torch.Tensor]:
        """The stream's state (the process's generator's, when unseeded), for a checkpoint."""
        if self._state is None or self._depth:
            return random_state(self.device)
        return {key: value.clone() for key, value in self._state.items()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Continue from ``state`` (:meth:`state`'s): the stream's own when seeded, else the
        process's generator (an unseeded learner draws from it)."""
        if self._state is None or self._depth:  # the stream is in the process's generator
            set_random_state(self.device, state)
        else:
            self._state = {key: value.cpu().clone() for key, value in state.items()}
