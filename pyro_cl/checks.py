"""Argument checks shared by every part's constructor: one wording for every refusal.

Each returns the value as the type the part stores (``float`` or ``int``) or raises a
``ValueError`` that names the argument and says what it must be. Booleans are refused where a
number is meant (``True`` is an ``int`` to Python, not to a user), and so are NaN and infinity.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["checked_count", "checked_real"]


def checked_real(
    value: object,
    name: str,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (open at an end where
    asked, and always at an infinite end).

    :raises ValueError: naming ``name`` and the interval otherwise.
    """
    left = "(" if low_open or low == -math.inf else "["
    right = ")" if high_open or high == math.inf else "]"
    interval = f"{left}{_show(low)}, {_show(high)}{right}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    number = float(value)
    inside = math.isfinite(number) and (low < number if low_open else low <= number)
    inside = inside and (number < high if high_open else number <= high)
    if not inside:
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return number


def checked_count(value: object, name: str) -> int:
    """``value`` as a positive int (an integral float such as ``1e3`` counts).

    :raises ValueError: naming ``name`` otherwise.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(float(value))
        or float(value) != int(value)
        or int(value) < 1
    ):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _show(bound: float) -> str:
    if math.isinf(bound):
        return "∞" if bound > 0 else "-∞"
    return f"{bound:g}"
