"""A net's first prior as a part, chosen layer by layer.

The VCL paper's first task starts from ``N(0, 1)`` on every weight; later priors are the
posteriors handed on, so the first prior is all a user chooses. A :class:`Prior` says, for each
layer ``make_bayesian`` turns Bayesian (by its path in ``named_modules``, and its fan-in: inputs
per output unit), the location and scale of that layer's weights and biases, and which
distribution they make (:meth:`Prior.distribution`)::

    make_bayesian(net, prior=GaussianPrior(1.0, layers={"classifier": 0.1}))
    make_bayesian(net, prior=GaussianPrior(1.0, fan_in=True))   # s / √fan_in per layer
    make_bayesian(net, prior=LaplacePrior(0.1))                 # sparsity: an L1 first prior
    make_bayesian(net, prior=StudentTPrior(3.0, 0.1))           # heavy tails (its own file)

A prior is a distribution, so a new family is one file: subclass :class:`LayerwisePrior` (or
:class:`Prior`), give it a ``name`` and implement :meth:`Prior.distribution`
(docs/architecture.md, "A prior"). Its KL from the Gaussian posterior is the registered closed
form where torch or :mod:`pyro_cl.kl` has one (Gaussian, Laplace), a Monte Carlo term otherwise
(:func:`~pyro_cl.kl.site_kl`); the posterior of the first task is Gaussian and is the next prior
as usual. Fitters that read a Gaussian prior's precision (VOGN, IVON, Laplace propagation,
the penalties) refuse another first prior by name when the learner is built; the diffusions
move towards its mean and standard deviation and refuse one without a finite variance.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping

import torch
from pyro.distributions import Distribution, Laplace, Normal
from torch import nn

from pyro_cl.checks import checked_real
from pyro_cl.spec import REGISTRIES, Registrable, from_spec

__all__ = [
    "GaussianPrior",
    "LaplacePrior",
    "LayerwisePrior",
    "Prior",
    "bayesian_layers",
    "prior_named",
    "use_prior",
]


def bayesian_layers(layers: Iterable[nn.Module]) -> list[nn.Module]:
    """The pyro_cl layers among ``layers`` (a net's deterministic layers have no prior)."""
    return [layer for layer in layers if hasattr(layer, "set_prior")]


def use_prior(layers: Iterable[nn.Module], prior: Prior) -> None:
    """Make the prior of every site of the pyro_cl ``layers`` ``prior``'s distribution at the
    location and scale the site has (``LaplacePrior``: ``N(m, s²)`` becomes ``Laplace(m, s)``)."""
    for layer in layers:
        for name in layer.site_names:
            loc, scale = layer.prior_location_and_scale(name)
            layer.set_prior(name, prior.distribution(loc, scale).to_event(loc.dim()))


def prior_named(family: str | Prior | dict) -> Prior:
    """The prior whose distribution a pyro_cl net's ``prior_family`` names: a :class:`Prior`
    (or its spec), or the name it registered under (``"normal"`` for :class:`GaussianPrior`),
    built with its defaults.

    :raises ValueError: naming the registered priors.
    """
    if isinstance(family, Prior):
        return family
    if isinstance(family, dict):
        return from_spec(family, "prior")
    registry = REGISTRIES["prior"]
    cls = registry.get("gaussian" if family == "normal" else family)
    if not isinstance(family, str) or cls is None:
        names = ", ".join(["normal", *sorted(n for n in registry if n != "gaussian")])
        raise ValueError(f"a first prior's family is one of {names}, not {family!r}")
    return cls()


class Prior(Registrable, kind="prior"):
    """Base class: the first prior of each layer of a net (module docstring)."""

    @abstractmethod
    def layer_prior(self, path: str, fan_in: int) -> tuple[float, float]:
        """``(loc, scale)`` of the prior of every weight and bias of the layer at ``path`` with
        ``fan_in`` inputs per output unit."""

    def distribution(self, loc: torch.Tensor, scale: torch.Tensor) -> Distribution:
        """The prior of the weights at ``loc`` and ``scale`` (element by element): ``N(loc,
        scale²)`` unless a family says otherwise."""
        return Normal(loc, scale)

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


class LaplacePrior(LayerwisePrior):
    """``Laplace(loc, b)`` on every weight, ``b`` the layer's scale (:class:`LayerwisePrior`;
    the standard deviation is ``√2 b``): a sparsity-inducing first prior, the Bayesian form of
    an L1 penalty, whose KL from a Gaussian is closed-form (:func:`~pyro_cl.kl.gaussian_laplace_kl`)."""

    name = "laplace"

    def distribution(self, loc: torch.Tensor, scale: torch.Tensor) -> Distribution:
        return Laplace(loc, scale)
