"""The shared base of pyro_cl's Bayesian layers: Gaussian priors in buffers (any other first
prior kept as its distribution),
``PyroSample`` sites, direct substitution of site values (the fast path) and recording of
inputs/outputs (for per-example gradients)."""

from __future__ import annotations

import torch
from pyro.distributions import Distribution, Normal

from pyro_cl.checks import checked_real
from pyro_cl.finite import all_finite
from pyro_cl.nn.effects import ParticlePlate, RecordLayers, innermost
from pyro_cl.nn.local_reparam import DiagonalGaussian, normal_source, unbroadcast_normal
from pyro_cl.nn.substitution import SubstitutableModule, prior_site
from pyro_cl.posterior import (
    base_distribution,
    detach_distribution,
    distribution_parameters,
    map_parameters,
)

__all__ = ["BayesianLayer"]


def as_diagonal_gaussian(value) -> DiagonalGaussian | None:
    """Means and variances of ``value`` if it is a (possibly ``Independent``) Normal."""
    if isinstance(value, DiagonalGaussian):
        return value
    if not isinstance(value, Distribution):
        return None
    normal = base_distribution(value)
    return DiagonalGaussian(normal.loc, normal.scale**2) if isinstance(normal, Normal) else None


class BayesianLayer(SubstitutableModule):
    """A layer whose parameters are ``PyroSample`` sites with mean-field Gaussian priors.

    The priors ``θ_i ~ N(prior_loc_i, prior_scale_i²)`` live in buffers (so ``.to(device)`` moves
    them and ``state_dict`` saves them) and are read by the ``PyroSample`` sites.
    :meth:`set_prior` replaces them, which is how a posterior becomes the next prior. A site's
    prior may also be any other distribution of the site's shape (a first prior of another
    family, :class:`~pyro_cl.nn.priors.LaplacePrior` or a user's): the layer keeps it as it is,
    and :meth:`prior_parameters`, which the Gaussian computations read, refuses it by name.

    Subclasses call :meth:`_register_sites` with the weight's shape and implement ``forward`` with
    :meth:`_site` (the value or distribution of a site) and :meth:`_record` (the pre-activation
    the layer returns, so per-example gradients can be formed from it).
    """

    #: Whether a fresh start (``init_means="fresh"``/``"moment_matched"``, ``between_tasks=
    #: "fresh"``) puts this layer's means at its prior's mean rather than drawing them as PyTorch
    #: initialises a new layer: a FiLM layer starts at the identity map, as GVCL initialises it.
    starts_at_prior_mean: bool = False

    def _register_sites(
        self,
        weight_shape: tuple[int, ...],
        bias: bool,
        prior_loc: float,
        prior_scale: float,
        local_reparameterization: bool,
    ) -> None:
        """Create the ``weight`` site (and a ``bias`` site of ``weight_shape[0]`` outputs) with
        ``N(prior_loc, prior_scale²)`` priors."""
        prior_scale = checked_real(prior_scale, "prior_scale", 0, low_open=True)
        self.has_bias = bias
        self.local_reparameterization = local_reparameterization
        shapes = {"weight": weight_shape}
        if bias:
            shapes["bias"] = weight_shape[:1]
        for name, shape in shapes.items():
            self.register_buffer(f"{name}_prior_loc", torch.full(shape, float(prior_loc)))
            self.register_buffer(f"{name}_prior_scale", torch.full(shape, float(prior_scale)))
            setattr(self, name, prior_site(name))
        self._site_names = tuple(shapes)
        #: ``{site: prior}`` for the sites whose prior is not the Gaussian in the buffers.
        self._other_priors: dict[str, Distribution] = {}

    @property
    def site_names(self) -> tuple[str, ...]:
        return self._site_names

    def prior_location_and_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)`` buffers of site ``name``: its Gaussian prior's, or where its prior is
        another family, the location and scale it was made from (:func:`~pyro_cl.nn.priors.
        use_prior`)."""
        return getattr(self, f"{name}_prior_loc"), getattr(self, f"{name}_prior_scale")

    def prior_parameters(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)`` buffers of the Gaussian prior of site ``name``.

        :raises TypeError: if the prior is another family (what reads a Gaussian's parameters
            would misread it).
        """
        other = self._other_priors.get(name)
        if other is not None:
            raise TypeError(
                f"site {name!r} of {type(self).__name__} has a "
                f"{type(base_distribution(other)).__name__} prior, and this computation needs a "
                "Gaussian one (fit the first task with an ELBO fitter)"
            )
        return self.prior_location_and_scale(name)

    def prior(self, name: str) -> Distribution:
        """The current prior of site ``name``."""
        other = self._other_priors.get(name)
        if other is not None:
            return other
        loc, scale = self.prior_location_and_scale(name)
        # set_prior checked the buffers, so argument validation would only cost time.
        return Normal(loc, scale, validate_args=False).to_event(loc.dim())

    def set_prior(self, name: str, prior: Distribution) -> None:
        """Make ``prior`` the prior of ``name``: a Normal (possibly wrapped in ``Independent``)
        goes to the buffers; any other distribution of the site's shape is kept as it is
        (detached; a ``loc`` and ``scale`` it has go to the buffers too)."""
        base = base_distribution(prior)
        loc_buffer, scale_buffer = self.prior_location_and_scale(name)
        shape = prior.batch_shape + prior.event_shape
        if shape != loc_buffer.shape:
            raise ValueError(
                f"{type(self).__name__} site {name!r} has shape {tuple(loc_buffer.shape)}, "
                f"got a prior of shape {tuple(shape)}"
            )
        values = [v for v in distribution_parameters(base).values() if torch.is_tensor(v)]
        checked = not loc_buffer.is_meta  # a net built on "meta" to compare shapes has no values
        if checked and not all(all_finite(value) for value in values):
            raise ValueError(f"prior for {name!r} has non-finite parameters")
        if isinstance(base, Normal):
            loc, scale = base.loc, base.scale
            if checked and not (scale > 0).all():
                raise ValueError(f"prior for {name!r} has non-positive scales")
            self._other_priors.pop(name, None)
        else:
            loc, scale = getattr(base, "loc", None), getattr(base, "scale", None)
            event_dim = loc_buffer.dim()
            self._other_priors[name] = detach_distribution(base).to_event(event_dim)
        if loc is not None and scale is not None:
            loc_buffer.copy_(loc.detach().to(loc_buffer).expand_as(loc_buffer))
            scale_buffer.copy_(scale.detach().to(loc_buffer).expand_as(loc_buffer))

    def _apply(self, fn, recurse: bool = True):
        """Move the priors kept as distributions with the buffers (``.to``, ``.double``)."""
        module = super()._apply(fn, recurse)
        for name, prior in self._other_priors.items():
            self._other_priors[name] = map_parameters(prior, fn)
        return module

    def _site(self, name: str):
        """The value to use for site ``name``: a Normal (for local reparameterisation) or a
        tensor (with a leading particle dimension inside a Pyro route's particle plate)."""
        value = self._site_value(name)
        if self.substituted:
            return value
        normal = normal_source(value) if self.local_reparameterization else None
        if innermost(ParticlePlate) is None:
            return value if normal is None else normal
        event_dim = self.prior(name).event_dim  # the site's own dimensions, left of the plates
        normal = None if normal is None else unbroadcast_normal(normal, event_dim)
        return normal if normal is not None else ParticlePlate.particles_of(value, event_dim)

    def _gaussians(self, *values) -> list[DiagonalGaussian] | None:
        """The values as diagonal Gaussians if local reparameterisation applies to all of them."""
        if not self.local_reparameterization:
            return None
        gaussians = [None if v is None else as_diagonal_gaussian(v) for v in values]
        if any(g is None and v is not None for g, v in zip(gaussians, values, strict=True)):
            return None
        return gaussians

    def _record(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        recorder = innermost(RecordLayers)
        if recorder is not None:
            recorder.records.append((self, x, out))
        return out

    def squared_gradient_sums(
        self, x: torch.Tensor, output_gradient: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """``Σ_{s,n} (∂ℓ_{s,n}/∂θ)²`` per site from the recorded input ``x`` and the gradient of
        ``Σ ℓ`` with respect to the layer's output (per-example gradients, squared and summed).

        Layers that support natural-gradient updates override this; others refuse by name."""
        raise TypeError(
            f"{type(self).__name__} cannot form per-example gradients; natural-gradient updates "
            "need BayesianLinear or BayesianConv2d layers (or a net outside pyro_cl's layers, "
            "which uses torch.func)"
        )

    def example_variances(
        self, x: torch.Tensor, output_gradient: torch.Tensor, variances: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``Σ_θ (∂(g · out_n)/∂θ)² v_θ`` per example, shape ``(S, N)``: the variance a
        linearised net's output direction ``g`` gets from this layer's independent weights of
        variances ``variances`` (``{site attribute: v}``), from the recorded input ``x`` and the
        output gradient (S-FSVI's ``J Σ Jᵀ``, one layer's share of its diagonal).

        Layers whose linearised variances are written out override this; others refuse by name.
        """
        raise TypeError(
            f"{type(self).__name__} has no linearised output variance; linearised function "
            "moments need BayesianLinear, BayesianConv2d and FiLM layers (use the Monte Carlo moments)"
        )

    def example_gradient_sums(
        self,
        x: torch.Tensor,
        output_gradient: torch.Tensor,
        weights: dict[str, torch.Tensor | None],
    ) -> dict[str, torch.Tensor]:
        """Per example ``n`` and site ``θ``: ``Σ_s (∂ℓ_{s,n}/∂θ_s) ⊙ weights[θ]_s`` (shape ``(N,
        *site shape)``; a ``None`` weight sums the per-example gradients over the samples ``s``).

        ``x`` is the recorded input (``(P, N, ...)``, ``P`` 1 or ``S``) and ``output_gradient`` the
        gradient of ``Σ_{s,n} ℓ_{s,n}`` with respect to the layer's output. Gaussian factors of
        single data points (:mod:`pyro_cl.memory.gaussian_factors`) need these; layers that can
        form them override this, others refuse by name."""
        raise TypeError(
            f"{type(self).__name__} cannot form per-example gradient sums; use BayesianLinear "
            "layers or the Pyro route (model route 'pyro'), which uses torch.func"
        )
