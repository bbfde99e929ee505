"""One cheap test of "every element is finite", used wherever inputs or results are checked."""

from __future__ import annotations

import torch

__all__ = ["all_finite"]


def all_finite(tensor: torch.Tensor) -> bool:
    """True when no element of ``tensor`` is NaN or ±inf.

    A NaN or an infinity anywhere makes the sum NaN or infinite, so a finite sum proves every
    element finite in one reduction (``torch.isfinite`` runs three element-wise kernels and
    writes a mask as large as the tensor). Only when the sum is not finite, which large finite
    values can also cause by overflowing, is every element checked.
    """
    if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex:
        return True
    if torch.isfinite(tensor.sum()):
        return True
    return bool(torch.isfinite(tensor).all())
