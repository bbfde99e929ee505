"""A net's first prior as a part, chosen layer by layer.

The VCL paper's first task starts from ``N(0, 1)`` on every weight; later priors are the
posteriors handed on, so the first prior is all a user chooses. A :class:`Prior` says, for each
layer ``make_bayesian`` turns Bayesian (by its path in ``named_modules``, and its fan-in: inputs
per output unit), the location and scale of that layer's weights and biases, in the prior's
``family``::

    make_bayesian(net, prior=GaussianPrior(1.0, layers={"classifier": 0.1}))
    make_bayesian(net, prior=GaussianPrior(1.0, fan_in=True))   # s / √fan_in per layer
    make_bayesian(net, prior=LaplacePrior(0.1))                 # sparsity: an L1 first prior

Write your own by subclassing :class:`Prior`, giving it a ``name`` and implementing
:meth:`Prior.layer_prior` (docs/architecture.md, "A prior").

A Laplace first prior ``Laplace(m, b)`` (density ``exp(-|w - m|/b) / 2b``) is fitted by the ELBO
fitters, whose KL from a Gaussian posterior to it is closed-form
(:func:`~pyro_cl.kl.gaussian_laplace_kl`). The posterior of the first task is Gaussian and is the
next prior as usual; fitters and transitions that read a Gaussian prior's precision (VOGN, IVON,
Laplace propagation, the penalties, the diffusions) refuse a Laplace first prior by name when the
learner is built. A Student-t has no closed-form KL from a Gaussian and is not offered.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping

from torch import nn

from pyro_cl.checks import checked_real
from pyro_cl.spec import Registrable

__all__ = [
    "FAMILIES",
    "GaussianPrior",
    "LaplacePrior",
    "LayerwisePrior",
    "Prior",
    "bayesian_layers",
    "use_family",
]

#: The families of a first prior: ``(loc, scale)`` is ``(mean, standard deviation)`` of a Normal
#: or ``(location m, scale b)`` of a Laplace.
FAMILIES = ("normal", "laplace")


def checked_family(family: str) -> str:
    """``family`` if it is one of :data:`FAMILIES`, else a ``ValueError`` naming them."""
    if family not in FAMILIES:
        raise ValueError(f"a first prior's family is one of {', '.join(FAMILIES)}, not {family!r}")
    return family


def bayesian_layers(layers: Iterable[nn.Module]) -> list[nn.Module]:
    """The pyro_cl layers among ``layers`` (a net's deterministic layers have no prior)."""
    return [layer for layer in layers if hasattr(layer, "set_prior_family")]


def use_family(layers: Iterable[nn.Module], family: str) -> None:
    """Make the priors of every site of the pyro_cl ``layers`` ``family``, keeping each site's
    location and scale (``"laplace"``: ``N(m, s²)`` becomes ``Laplace(m, s)``)."""
    checked_family(family)
    for layer in layers:
        for name in layer.site_names:
            layer.set_prior_family(name, family)


class Prior(Registrable, kind="prior"):
    """Base class: the first prior of each layer of a net (module docstring)."""

    #: The distribution of every weight: one of :data:`FAMILIES`.
    family: str = "normal"

    @abstractmethod
    def layer_prior(self, path: str, fan_in: int) -> tuple[float, float]:
        """``(loc, scale)`` of the prior (in :attr:`family`) of every weight and bias of the
        layer at ``path`` with ``fan_in`` inputs per output unit."""

    def check_layers(self, paths: list[str]) -> None:  # noqa: B027 (optional hook)
        """Refuse a prior that names layers the net does not have (default: names none).

        :raises ValueError: naming them and the layers there are.
        """


class LayerwisePrior(Prior):
    """``scale`` for every layer but those in ``layers`` (by path), ``loc`` for all; with
    ``fan_in`` each scale is divided by ``√fan_in`` (He et al.'s scaling, which keeps the
    prior's pre-activations of one size whatever a layer's width). Its subclasses name the family.

    :param scale: the scale of layers not in ``layers``.
    :param loc: the location of every weight.
    :param layers: ``{path: scale}`` for chosen layers (paths as in ``named_modules``).
    :param fan_in: divide every scale by the square root of its layer's fan-in.
    """

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


class GaussianPrior(LayerwisePrior):
    """``N(loc, s²)`` on every weight, ``s`` the layer's standard deviation
    (:class:`LayerwisePrior`): the VCL paper's first prior with ``scale=1``."""

    name = "gaussian"
    family = "normal"


class LaplacePrior(LayerwisePrior):
    """``Laplace(loc, b)`` on every weight, ``b`` the layer's scale (:class:`LayerwisePrior`;
    the standard deviation is ``√2 b``): a sparsity-inducing first prior, the Bayesian form of
    an L1 penalty. Fitted by the ELBO fitters (the module docstring)."""

    name = "laplace"
    family = "laplace"
