"""A minibatch's rows gathered into one buffer that every step reuses."""

from __future__ import annotations

import torch

__all__ = ["RowGather"]


class RowGather:
    """``source[index]`` for one minibatch at a time, written into a buffer that every call
    reuses.

    A fresh minibatch tensor per step (``x[index]``) costs on CPU more than the gather itself: a
    few hundred KB of cold memory every step where a reused buffer stays in cache (on the
    project's 2-core VM, 5-10 ms of gathers per epoch of 40 batches of 256 MNIST-sized rows
    against 2-3 ms into a reused buffer; docs/lab/speed.md). The returned tensor is a view
    of the buffer that the next call overwrites: a fit takes one minibatch per step and is done
    with it (forward and backward) before the next; a backward pass through an overwritten
    minibatch fails (autograd's version counter), it does not go wrong silently.
    """

    def __init__(self, source: torch.Tensor) -> None:
        self.source = source
        self._buffer: torch.Tensor | None = None

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        """``source[index]`` for integer indices ``index``, in the reused buffer."""
        rows = index.shape[0]
        if self._buffer is None or self._buffer.shape[0] < rows:
            self._buffer = self.source.new_empty((rows, *self.source.shape[1:]))
        return torch.index_select(self.source, 0, index, out=self._buffer[:rows])
