"""Argument checks shared by every part's constructor: one wording for every refusal.

Each returns the value as the type the part stores (``float`` or ``int``) or raises a
``ValueError`` that names the argument and says what it must be. Booleans are refused where a
number is meant (``True`` is an ``int`` to Python, not to a user), and so are NaN and infinity.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "LARGEST_COUNT",
    "LARGEST_REAL",
    "checked_count",
    "checked_instance",
    "checked_optional_count",
    "checked_real",
]


#: The largest magnitude a real argument may have: parts keep their numbers in float32 tensors.
LARGEST_REAL = 3.0e38


def checked_real(
    value: object,
    name: str,
    low: float = -LARGEST_REAL,
    high: float = LARGEST_REAL,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (open at an end where
    asked; by default within float32's range, :data:`LARGEST_REAL`).

    :raises ValueError: naming ``name`` and the interval otherwise.
    """
    left = "(" if low_open or low == -math.inf else "["
    right = ")" if high_open or high == math.inf else "]"
    interval = f"{left}{_show(low)}, {_show(high)}{right}"
    number = math.nan  # a bool, or no number at all, lies in no interval
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        number = float(value)
    inside = math.isfinite(number) and (low < number if low_open else low <= number)
    if not (inside and (number < high if high_open else number <= high)):
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return number


#: The largest size a part accepts (a net of more units, heads or samples cannot be built).
LARGEST_COUNT = 2**31 - 1


def checked_count(value: object, name: str, high: int = LARGEST_COUNT, low: int = 1) -> int:
    """``value`` as an int in ``low .. high`` (an integral float such as ``1e3`` counts; ``low``
    is 1 unless a count of none is meaningful).

    :raises ValueError: naming ``name`` otherwise.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(float(value))
        or float(value) != int(value)
        or not low <= int(value) <= high
    ):
        kind = "a positive integer" if low == 1 else f"an integer of at least {low}"
        raise ValueError(f"{name} must be {kind} (at most {high}), got {value!r}")
    return int(value)


def checked_optional_count(
    value: object, name: str, high: int = LARGEST_COUNT, low: int = 1
) -> int | None:
    """:func:`checked_count`, with ``None`` (the default's marker) passed through."""
    return None if value is None else checked_count(value, name, high, low)


def _show(bound: float) -> str:
    if math.isinf(bound):
        return "∞" if bound > 0 else "-∞"
    return f"{bound:g}"


def checked_instance(part: object, base: type, role: str) -> object:
    """``part`` if it is ``None`` or a ``base``.

    :raises TypeError: naming the ``role`` and the type it must have.
    """
    if part is not None and not isinstance(part, base):
        raise TypeError(f"{role} must be a {base.__name__} or None, got {part!r}")
    return part
