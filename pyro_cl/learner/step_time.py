"""A step's time stamp: given, or one after the last step's; always after it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

__all__ = ["next_time"]


def next_time(times: Sequence[float], time: float | None) -> float:
    """The time of a step after the steps at ``times``: ``time`` checked, or by default one after
    the last (``0.0`` for the first step).

    :raises TypeError: if ``time`` is not a real number.
    :raises ValueError: if it is not finite, not after the last step's, or (the default) cannot
        be told apart from the last step's in a float.
    """
    if time is None:
        if not times:
            return 0.0
        following = times[-1] + 1.0
        if not following > times[-1]:  # beyond 2**53 a float cannot hold last + 1
            raise ValueError(
                f"the default time is one after the last step's, {times[-1]!r}, which a "
                "float cannot tell apart from it at this size: give time= explicitly"
            )
        return following
    if isinstance(time, bool) or not isinstance(time, numbers.Real):
        raise TypeError(f"time must be a real number, got {time!r}")
    time = float(time)
    if not math.isfinite(time):
        raise ValueError(f"time must be finite, got {time}")
    if times and not time > times[-1]:
        raise ValueError(f"time {time} is not after the last step's time {times[-1]}")
    return time
