"""The shared base of pyro_cl's Bayesian layers: Gaussian (or Laplace) priors in buffers,
``PyroSample`` sites, direct substitution of site values (the fast path) and recording of
inputs/outputs (for per-example gradients)."""

from __future__ import annotations

import torch
from pyro.distributions import Distribution, Laplace, Normal

from pyro_cl.checks import checked_real
from pyro_cl.finite import all_finite
from pyro_cl.nn.effects import ParticlePlate, RecordLayers, innermost
from pyro_cl.nn.local_reparam import DiagonalGaussian, normal_source, unbroadcast_normal
from pyro_cl.nn.priors import checked_family
from pyro_cl.nn.substitution import SubstitutableModule, prior_site
from pyro_cl.posterior import base_distribution

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
    prior may also be a Laplace ``Laplace(prior_loc_i, prior_scale_i)`` (a first prior,
    :class:`~pyro_cl.nn.priors.LaplacePrior`); :meth:`prior_family` says which, and
    :meth:`prior_parameters`, which the Gaussian computations read, refuses a Laplace by name.

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
        #: ``{site: "normal" or "laplace"}``: the family of each site's prior.
        self._prior_families = dict.fromkeys(shapes, "normal")

    @property
    def site_names(self) -> tuple[str, ...]:
        return self._site_names

    def prior_family(self, name: str) -> str:
        """``"normal"`` or ``"laplace"``: the family of site ``name``'s current prior."""
        return self._prior_families[name]

    def set_prior_family(self, name: str, family: str) -> None:
        """Make site ``name``'s prior ``"normal"`` or ``"laplace"``, its location and scale kept
        (``N(m, s²)`` becomes ``Laplace(m, s)``)."""
        self._prior_families[name] = checked_family(family)

    def prior_parameters(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)`` buffers of the Gaussian prior of site ``name``.

        :raises TypeError: if the prior is a Laplace (what reads a Gaussian's parameters would
            misread it).
        """
        if self._prior_families[name] != "normal":
            raise TypeError(
                f"site {name!r} of {type(self).__name__} has a {self._prior_families[name]} "
                "prior, and this computation needs a Gaussian one (fit the first task with an "
                "ELBO fitter)"
            )
        return self._prior_buffers(name)

    def _prior_buffers(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return getattr(self, f"{name}_prior_loc"), getattr(self, f"{name}_prior_scale")

    def prior(self, name: str) -> Distribution:
        """The current prior of site ``name``."""
        loc, scale = self._prior_buffers(name)
        # set_prior checked the buffers, so argument validation would only cost time.
        family = Laplace if self._prior_families[name] == "laplace" else Normal
        return family(loc, scale, validate_args=False).to_event(loc.dim())

    def set_prior(self, name: str, prior: Distribution) -> None:
        """Make ``prior`` (a Normal or a Laplace, possibly wrapped in ``Independent``) the prior
        of ``name``."""
        base = base_distribution(prior)
        loc_buffer = getattr(self, f"{name}_prior_loc")
        if not isinstance(base, (Normal, Laplace)):
            raise TypeError(
                f"{type(self).__name__} site {name!r} takes a Normal or Laplace prior, "
                f"got {type(prior).__name__}"
            )
        loc = base.loc.detach().to(loc_buffer).expand_as(loc_buffer)
        scale = base.scale.detach().to(loc_buffer).expand_as(loc_buffer)
        if not all_finite(loc) or not (scale > 0).all():
            raise ValueError(f"prior for {name!r} has non-finite means or non-positive scales")
        loc_buffer.copy_(loc)
        getattr(self, f"{name}_prior_scale").copy_(scale)
        self._prior_families[name] = "laplace" if isinstance(base, Laplace) else "normal"

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
