"""The Gaussian sites of a fit packed into two flat tensors: one exp, one KL, one Adam update.

A mean-field guide holds one ``(μ, log σ²)`` pair per site; a step of the fast ELBO over ``S``
sites would run ``S`` exps, ``S`` KLs (each a handful of element-wise kernels, forward and
backward) and an optimiser over ``2S`` tensors. For the small tensors of a Bayesian MLP that
per-kernel overhead costs as much as the arithmetic. :class:`PackedGaussians` concatenates the
sites' means and log-variances into two flat leaves for the length of a fit: the per-site tensors
the net needs are views of them (``split`` + ``view``: no copies, and one ``cat`` in the backward
pass), ``σ² = exp(log σ²)`` is one kernel, the KL is one fused function with its gradient in closed
form (:class:`~pyro_cl.kl.PackedGaussianKL`), and Adam updates two tensors.

While packed, the guide's own per-site parameters are views of the same memory, so the guide
always shows the current values (callbacks, checkpoints and a rollback see what the fit did);
leaving the ``with`` block gives each its own memory back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from pyro.distributions import Normal
from torch import nn

from pyro_cl.diagonal_gaussian import DiagonalGaussian
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.kl import PackedGaussianPrior, site_kl
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import base_distribution, read_priors_of

__all__ = ["PackedGaussians", "site_views"]


def site_views(flat: torch.Tensor, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """``{site: (*leading, *shape)}`` views of a flat ``(*leading, D)`` tensor that holds the
    sites ``shapes`` one after another in the last dimension (no copies)."""
    pieces = flat.split([math.prod(shape) for shape in shapes.values()], dim=-1)
    return {  # view, not unflatten: a scalar site's shape () is one number
        name: piece.view(piece.shape[:-1] + torch.Size(shape))
        for (name, shape), piece in zip(shapes.items(), pieces, strict=True)
    }


class PackedGaussians:
    """The Gaussian sites ``names`` of ``guide`` as two flat leaves, against the model's current
    priors (read once, on entry).

    Use it as a context manager around a fit::

        with PackedGaussians(model, guide, sites) as packed:
            optimiser = Adam(packed.parameters().values())
            ... negative_elbo(..., packed=packed) ...

    :meth:`kl_and_sites` gives the summed KL of all packed sites and ``{site:
    DiagonalGaussian(μ, σ²)}`` views for the fast route. Non-Gaussian sites (Beta sticks) and
    Gaussian sites under a Laplace prior are left out: the objective handles them per site. Sites in ``kl_free`` are packed
    but left out of the KL (a fit that treats them as free parameters of ``q``, as the VCL
    reference code does with the generative heads).
    """

    def __init__(
        self,
        model: SupervisedModel,
        guide: MeanFieldGuide,
        names: Iterable[str],
        kl_free: Iterable[str] = (),
    ):
        self.guide = guide
        self.names = self.packable(model, guide, names)
        pairs = guide.gaussian_parameters(self.names)
        self.shapes = [pairs[name][0].shape for name in self.names]
        self.site_shapes = dict(zip(self.names, self.shapes, strict=True))
        with torch.no_grad():
            self.loc = nn.Parameter(_flat([pairs[n][0] for n in self.names]))
            self.log_variance = nn.Parameter(_flat([pairs[n][1] for n in self.names]))
            priors = [_prior_parameters(model, name) for name in self.names]
            prior_loc = _flat([loc for loc, _ in priors], self.shapes).to(self.loc)
            prior_scale = _flat([scale for _, scale in priors], self.shapes)
            precision = prior_scale.to(self.loc).square().reciprocal()
            # Σ log σ_p² - D: the KL's bracket holds it, a constant of the fit
            constant = float(-precision.log().sum()) - self.loc.numel()
            weight = None  # 1 where a coordinate's KL counts, 0 for the kl_free sites
            free = set(kl_free)
            if free & set(self.names):
                counts = [torch.full(s, float(n not in free)) for n, s in self.site_shapes.items()]
                weight = _flat(counts).to(self.loc)
                included = weight.bool()
                precision = precision * weight
                constant = float(-precision[included].log().sum()) - int(included.sum())
            #: The packed sites' priors as one distribution (its KL from them is registered):
            #: ``loc``, ``precision`` (0 off the KL), ``constant`` and ``weight``.
            self.prior = PackedGaussianPrior(prior_loc, precision, constant, weight)
        self._share_memory(pairs)

    @staticmethod
    def packable(model: SupervisedModel, guide: MeanFieldGuide, names: Iterable[str]) -> list[str]:
        """The Gaussian sites of ``names`` under a Gaussian prior (the KL to another family, a
        Laplace or Student-t first prior, is another term: those sites stay per site)."""
        index = model.site_index
        return [
            name
            for name in guide.gaussian_parameters(list(names))  # the protocol's, any family
            if name not in index
            or isinstance(base_distribution(read_priors_of(*index[name])), Normal)
        ]

    def _share_memory(self, pairs: dict) -> None:
        for flat, index in ((self.loc, 0), (self.log_variance, 1)):
            for name, view in site_views(flat.data, self.site_shapes).items():
                pairs[name][index].data = view

    def sample_views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: (S, *shape)}`` views of ``S`` flat draws ``(S, D)`` of all packed sites."""
        return site_views(flat, self.site_shapes)

    def parameters(self) -> dict[str, nn.Parameter]:
        """``{"loc": μ, "log_variance": log σ²}``: the flat leaves a fit optimises."""
        return {"loc": self.loc, "log_variance": self.log_variance}

    def kl_and_sites(self) -> tuple[torch.Tensor, dict[str, DiagonalGaussian]]:
        """The KL of every packed site to its prior and ``{site: DiagonalGaussian}`` views (one
        ``exp`` for all variances)."""
        variance = self.log_variance.exp()
        kl = site_kl(DiagonalGaussian(self.loc, variance, self.log_variance), self.prior)
        locs = site_views(self.loc, self.site_shapes)
        variances = site_views(variance, self.site_shapes)
        sites = {name: DiagonalGaussian(locs[name], variances[name]) for name in self.names}
        return kl, sites

    def __enter__(self) -> PackedGaussians:
        return self

    def __exit__(self, *exc) -> None:
        """Give every per-site parameter its own memory again (the values stay)."""
        pairs = self.guide.gaussian_parameters(self.names)
        with torch.no_grad():
            for loc, log_variance in pairs.values():
                loc.data = loc.data.clone()
                log_variance.data = log_variance.data.clone()


def _prior_parameters(model: SupervisedModel, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loc, scale)`` of site ``name``'s Gaussian prior: the layer's buffers for pyro_cl layers,
    else read off the ``PyroSample`` prior of any module.

    :raises TypeError: if the prior is not Gaussian.
    """
    module, attribute = model.site_index[name]
    if hasattr(module, "prior_parameters"):
        return module.prior_parameters(attribute)
    normal = base_distribution(read_priors_of(module, attribute))
    if not isinstance(normal, Normal):
        raise TypeError(f"site {name!r} needs a Gaussian prior, got {type(normal).__name__}")
    return normal.loc, normal.scale


def _flat(tensors: list[torch.Tensor], shapes: list[torch.Size] | None = None) -> torch.Tensor:
    """The tensors (broadcast to ``shapes`` where given) one after another in one vector."""
    if shapes is not None:
        tensors = [tensor.expand(shape) for tensor, shape in zip(tensors, shapes, strict=True)]
    return torch.cat([tensor.detach().reshape(-1) for tensor in tensors])
