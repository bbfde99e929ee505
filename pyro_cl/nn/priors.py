"""A net's first prior as a part, chosen layer by layer.

The VCL paper's first task starts from ``N(0, 1)`` on every weight; later priors are the
posteriors handed on, so the first prior is all a user chooses. A :class:`Prior` says, for each
layer ``make_bayesian`` turns Bayesian (by its path in ``named_modules``, and its fan-in: inputs
per output unit), the mean and standard deviation of that layer's Gaussian weights and biases::

    make_bayesian(net, prior=GaussianPrior(1.0, layers={"classifier": 0.1}))
    make_bayesian(net, prior=GaussianPrior(1.0, fan_in=True))   # s / √fan_in per layer

Write your own by subclassing :class:`Prior`, giving it a ``name`` and implementing
:meth:`Prior.layer_prior` (docs/architecture.md, "A prior"). The families other than Gaussian
(Laplace, Student-t) are not here yet: the fast route's closed-form KL and the transitions assume
a Gaussian first prior.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping

from pyro_cl.checks import checked_real
from pyro_cl.spec import Registrable

__all__ = ["GaussianPrior", "Prior"]


class Prior(Registrable, kind="prior"):
    """Base class: the first prior of each layer of a net (module docstring)."""

    @abstractmethod
    def layer_prior(self, path: str, fan_in: int) -> tuple[float, float]:
        """``(mean, standard deviation)`` of the Gaussian prior of every weight and bias of the
        layer at ``path`` with ``fan_in`` inputs per output unit."""

    def check_layers(self, paths: list[str]) -> None:  # noqa: B027 (optional hook)
        """Refuse a prior that names layers the net does not have (default: names none).

        :raises ValueError: naming them and the layers there are.
        """


class GaussianPrior(Prior):
    """``N(loc, s²)`` on every weight, ``s`` the layer's own scale in ``layers`` (by path) or
    ``scale``; with ``fan_in`` each scale is divided by ``√fan_in`` (He et al.'s scaling, which
    keeps the prior's pre-activations of one size whatever a layer's width).

    :param scale: the standard deviation of layers not in ``layers``.
    :param loc: the mean of every weight.
    :param layers: ``{path: scale}`` for chosen layers (paths as in ``named_modules``).
    :param fan_in: divide every scale by the square root of its layer's fan-in.
    """

    name = "gaussian"

    def __init__(
        self,
        scale: float = 1.0,
        loc: float = 0.0,
        layers: Mapping[str, float] | None = None,
        fan_in: bool = False,
    ) -> None:
        self.scale = checked_real(scale, "scale", low=0.0, low_open=True)
        self.loc = checked_real(loc, "loc")
        self.layers = {
            str(path): checked_real(value, f"the scale of layer {path!r}", low=0.0, low_open=True)
            for path, value in (layers or {}).items()
        }
        if not isinstance(fan_in, bool):
            raise TypeError(f"fan_in must be True or False, got {fan_in!r}")
        self.fan_in = fan_in

    def layer_prior(self, path: str, fan_in: int) -> tuple[float, float]:
        scale = self.layers.get(path, self.scale)
        return self.loc, scale / math.sqrt(fan_in) if self.fan_in else scale

    def check_layers(self, paths: list[str]) -> None:
        unknown = sorted(set(self.layers) - set(paths))
        if unknown:
            raise ValueError(
                f"the prior names layers {unknown}, which are not Bayesian layers of the net "
                f"(those are: {', '.join(paths)})"
            )
