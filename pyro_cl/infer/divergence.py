"""Divergence: when a fit's result must not be kept, and the error that says so.

The learner rolls a step back whenever a fit raises :class:`DivergenceError`, so the previous
posterior and all bookkeeping stay exactly as they were. :class:`Divergence` (the ``divergence``
group of :class:`~pyro_cl.infer.config.TrainingConfig`) holds the test every fitter's losses
and fitted values go through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyro_cl.checks import checked_real
from pyro_cl.finite import all_finite

__all__ = ["Divergence", "DivergenceError"]


class DivergenceError(RuntimeError):
    """A fit diverged (a NaN or infinite loss or parameter, or a blow-up); the caller must not
    keep its result."""


@dataclass(frozen=True)
class Divergence:
    """When a fit counts as diverged: the learner then raises :class:`DivergenceError` and rolls the step back, so nothing it fitted is kept.

    A fit diverges when

    * a loss or a fitted parameter is NaN or infinite (always checked);
    * an epoch's mean loss exceeds the fit's first-step loss ``L_0`` by more than
      ``loss_growth · max(|L_0|, 1)``: orders of magnitude up, which a step size that overshoots
      produces within an epoch, and which minibatch noise or the rise of the KL term during a
      fit stay far below;
    * a fitted mean (or point value) leaves ``[-parameter_bound, parameter_bound]``: weights of
      a net on standardised data are O(1), so means of 1e6 are a blow-up even while finite
      (raise the bound for unstandardised regression targets).

    :param loss_growth: the allowed rise of the loss, in units of ``max(|L_0|, 1)``; ``None``
        turns the test off.
    :param parameter_bound: the largest allowed absolute mean; ``None`` turns the test off.
    """

    loss_growth: float | None = 1e3
    parameter_bound: float | None = 1e6

    def __post_init__(self) -> None:
        for name in ("loss_growth", "parameter_bound"):
            value = getattr(self, name)
            if value is not None:
                checked = checked_real(value, name, 0, math.inf, low_open=True)
                object.__setattr__(self, name, checked)

    def check_loss(self, loss: float, first_loss: float, description: str) -> None:
        """:raises DivergenceError: if ``loss`` is not finite or rose past the allowed growth."""
        if not math.isfinite(loss):
            raise DivergenceError(f"{description}: the loss became {loss}")
        if self.loss_growth is None:
            return
        limit = first_loss + self.loss_growth * max(abs(first_loss), 1.0)
        if loss > limit:
            raise DivergenceError(
                f"{description}: the loss rose from {first_loss:.4g} to {loss:.4g}, more than "
                f"loss_growth={self.loss_growth:g} times max(|first loss|, 1)"
            )

    def check_values(self, values: dict, description: str) -> None:
        """Check the fitted ``values`` (``{site: means}``).

        :raises DivergenceError: if a tensor is not finite or leaves the bound.
        """
        for name, value in values.items():
            if not all_finite(value):
                raise DivergenceError(
                    f"{description}: the fitted values of {name!r} are not finite"
                )
            if self.parameter_bound is not None:
                largest = value.abs().max().item() if value.numel() else 0.0
                if largest > self.parameter_bound:
                    raise DivergenceError(
                        f"{description}: the fitted values of {name!r} reach {largest:.3g}, "
                        f"beyond parameter_bound={self.parameter_bound:g}"
                    )
