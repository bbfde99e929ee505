"""What a guide provides: the protocol a guide family's module follows.

A :class:`~pyro_cl.guides.GuideFamily` builds, for a model, an ordinary Pyro guide (an
``nn.Module`` whose ``forward`` samples the model's latent sites) that also provides the
members below. They are what the learner, the ELBO fitter, the identity transition and the
checkpoints call; a family that provides them goes wherever those go, whatever its classes
(:class:`~pyro_cl.guides.MeanFieldGuide` and the joint Gaussian guide over a
:class:`~pyro_cl.guides.BlockCovariance` are two such). Grouped by what they are for::

    build       sites_for(*args, **kwargs)        create the sites a call samples, lazily
                site_names
    read        posterior(names)                  {site: q(site)}, each site's marginal
                distribution(name)
                locs(names)                       the means, as point values
                gaussian_parameters(names)        {site: (μ, log σ²)} of the sites fitted as
                                                  free Gaussians (the packed fast path; may be {})
    couple      joint_terms(names)                (KL, {site: block site}) of coupled blocks
                prior_sites()                     the coupled prior the guide keeps itself
                mean_field                        True when no site is coupled
    hand off    hand_off(names)                   q_t becomes what the guide keeps as prior
                carry_prior(step, initial_prior)  that prior through a transition's step
    restart     reinitialise(policy, priors, log_variance)
    lifecycle   clone(), release(), restore(state_dict), state_dict(), load_state_dict()

The natural-gradient fitters (VOGN, IVON), Laplace propagation and coordinate ascent read more
(:data:`MEAN_FIELD_MEMBERS`: the Gaussian sites' precisions and the Gamma sites' parameters,
set in place); they state ``guide_families = ("mean-field",)`` and another family is refused by
name there. Laplace propagation also takes the Kronecker-factored family, whose joint Gaussian
guide it reads and sets block by block (:data:`JOINT_GAUSSIAN_MEMBERS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

import torch
from pyro.distributions import Distribution

__all__ = ["JOINT_GAUSSIAN_MEMBERS", "MEAN_FIELD_MEMBERS", "Guide"]

#: What the mean-field-only fitters read of a mean-field guide beyond :class:`Guide`.
MEAN_FIELD_MEMBERS = (
    "gaussian_sites",
    "set_precisions",
    "amortised_parameters",
    "match_prior_moments",
    "log_shape",
    "log_rate",
)

#: What Laplace propagation reads and sets of a joint Gaussian guide's blocks beyond
#: :class:`Guide` (:class:`~pyro_cl.guides.joint_gaussian.JointGaussianGuide`).
JOINT_GAUSSIAN_MEMBERS = ("block_layouts", "joint_prior", "set_joint")


@runtime_checkable
class Guide(Protocol):
    """A guide family's module (module docstring)."""

    mean_field: bool

    @property
    def site_names(self) -> list[str]: ...

    def sites_for(self, *args, **kwargs) -> list[str]: ...

    def posterior(self, names: Iterable[str] | None = None) -> dict[str, Distribution]: ...

    def distribution(self, name: str) -> Distribution: ...

    def locs(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]: ...

    def gaussian_parameters(
        self, names: Iterable[str]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]: ...

    def joint_terms(self, names: Iterable[str]) -> tuple[torch.Tensor | float, dict]: ...

    def prior_sites(self) -> dict[str, Distribution]: ...

    def hand_off(self, names: Iterable[str]) -> None: ...

    def carry_prior(self, step: Callable, initial_prior: Mapping[str, Distribution]) -> None: ...

    def reinitialise(
        self, policy: str, priors: Mapping[str, Distribution], log_variance: float | None = None
    ) -> None: ...

    def clone(self) -> Guide: ...

    def release(self) -> None: ...

    def restore(self, state_dict: Mapping[str, torch.Tensor]) -> None: ...

    def state_dict(self, *args, **kwargs) -> dict: ...

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True): ...
