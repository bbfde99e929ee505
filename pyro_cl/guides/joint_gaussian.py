"""Gaussian posteriors that couple chosen sites into blocks, one family per covariance form.

The chosen sites of a model (all its Gaussian sites, or those named) are flattened and joined
into blocks ``θ_B`` of ``D`` numbers, each with one Gaussian ``q(θ_B) = N(μ_B, Σ_B)``; every
other site stays mean-field (:class:`~pyro_cl.guides.MeanFieldGuide`). How ``Σ_B`` is
parametrised is a :class:`BlockCovariance`, the small protocol a family implements:

* which sites form a block (:meth:`BlockCovariance.blocks`: by default those the model first
  uses in one call, or one block per module with ``per_module``; a Kronecker factor takes each
  weight matrix alone);
* the block's starting parameters and prior from the sites' initial priors
  (:meth:`~BlockCovariance.start`), and the joint Gaussian they make
  (:meth:`~BlockCovariance.joint`, :meth:`~BlockCovariance.prior`): an object with ``loc``,
  ``variance``, ``rsample``, ``detached`` and ``distribution``, a torch distribution whose KL
  to the prior's is a closed form registered with torch's ``kl_divergence`` (so the block's KL
  is :func:`~pyro_cl.kl.site_kl`'s, as every site's);
* the handoff (:meth:`~BlockCovariance.hand_off`: ``q_t`` becomes the prior's buffers), the
  restart at the prior (:meth:`~BlockCovariance.parameters_at`) and, where the form is closed
  under it, a transition's linear Gaussian step (:meth:`~BlockCovariance.carried`).

The forms: :class:`~pyro_cl.guides.FullCovariance` (``Σ = L Lᵀ``,
pyro_cl/guides/full_covariance.py), :class:`~pyro_cl.guides.LowRank` (``diag(d) + W Wᵀ``,
pyro_cl/guides/low_rank.py) and :class:`~pyro_cl.guides.KroneckerFactored` (a matrix normal
``U ⊗ V`` per weight matrix, pyro_cl/guides/kronecker.py), each one file.

**The handoff** (VCL eq. 1 with the whole covariance): the guide keeps each block's prior
``p(θ_B)`` itself — the product of the sites' initial priors at first, then ``q_t(θ_B)``
after step ``t`` (:meth:`JointGaussianGuide.hand_off`) — and the online ELBO's KL term is the
closed form ``KL(q(θ_B) ‖ p(θ_B))`` between the two Gaussians (:meth:`joint_terms`). The net's
per-site priors hold the marginals of ``p(θ_B)``, for whatever reads one site at a time.
Predictions and the ELBO's likelihood term draw each block's sites together
(:func:`draw_joint_sites`), so the correlations reach the outputs.

On a linear-Gaussian model the ELBO's optimum over full-covariance Gaussians is the exact
posterior, so VCL with a full-covariance block is exact online Bayesian inference, as is a low
rank ``r ≥ D``, and a Kronecker factor for a multi-output regression with shared inputs (each
tested against the closed form); a mean-field posterior is not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyro
import torch
from pyro.distributions import Delta, Distribution, Independent, Normal
from torch import nn

from pyro_cl.guides.family import MEAN_FIELD, GuideFamily
from pyro_cl.guides.mean_field import (
    DEFAULT_INIT_LOG_VARIANCE,
    MeanFieldGuide,
    _parameter_key,
    task_id_key,
)
from pyro_cl.kl import site_kl
from pyro_cl.posterior import base_distribution, sample_sites, saveable_distribution

__all__ = [
    "GAUSSIAN_FAMILIES",
    "BlockCovariance",
    "BlockLayout",
    "BlockSite",
    "JointGaussian",
    "JointGaussianFamily",
    "JointGaussianGuide",
    "draw_joint_sites",
    "relative_tril",
    "tril_parameters",
    "has_joint_sites",
    "joint_form",
]


@dataclass(frozen=True)
class BlockLayout:
    """Which sites a block joins, in order, and their shapes."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]

    @property
    def size(self) -> int:
        """``D``: the numbers in the block."""
        return sum(shape.numel() for shape in self.shapes)

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: value}`` from ``flat`` of shape ``(..., D)``, each ``(..., *site shape)``."""
        lead = flat.shape[:-1]
        pieces = flat.split([shape.numel() for shape in self.shapes], dim=-1)
        return {
            name: piece.reshape(*lead, *shape)
            for name, shape, piece in zip(self.names, self.shapes, pieces, strict=True)
        }

    def join(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The flat ``(D,)`` vector of one value per site."""
        return torch.cat([values[name].reshape(-1) for name in self.names])


class JointGaussian(Protocol):
    """A block's Gaussian over its flat ``D`` numbers, as a :class:`BlockCovariance` makes it."""

    loc: torch.Tensor

    @property
    def variance(self) -> torch.Tensor: ...

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor: ...

    def detached(self) -> JointGaussian: ...

    def distribution(self) -> Distribution:
        """The same Gaussian as a torch distribution (a ``MultivariateNormal`` or kin), whose KL
        to the prior's is registered with torch's ``kl_divergence`` (:func:`~pyro_cl.kl.site_kl`
        computes it)."""


@saveable_distribution
class BlockSite(Normal):
    """One site's marginal ``N(loc, scale)`` of a Gaussian block, carrying the block's joint
    distribution (``joint``, over the flat block of ``layout``), so that :func:`draw_joint_sites`
    draws the block's sites together. A copy made from its parameters alone (e.g. installed as a
    net's prior) is the marginal and nothing more."""

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        validate_args: bool | None = None,
        joint: JointGaussian | None = None,
        layout: BlockLayout | None = None,
    ) -> None:
        super().__init__(loc, scale, validate_args=False)
        self.joint = joint
        self.layout = layout

    def detached(self, memo: dict) -> BlockSite:
        """A detached copy whose block is copied once per ``memo`` (shared by its sites)."""
        joint = None
        if self.joint is not None:
            key = id(self.joint)
            if key not in memo:
                memo[key] = self.joint.detached()
            joint = memo[key]
        return BlockSite(
            self.loc.detach().clone(), self.scale.detach().clone(), joint=joint, layout=self.layout
        )

    def saved_extras(self, memo: dict) -> dict | None:
        """The block, for :func:`~pyro_cl.posterior.posterior_to_state`: its form's name and
        tensors and the layout, under a key shared by the block's sites (``memo``); ``None``
        for a marginal alone."""
        if self.joint is None:
            return None
        key = memo.setdefault(id(self.joint), len(memo))
        return {
            "block": key,
            "form": type(self.joint).__name__,
            "joint": {
                field: getattr(self.joint, field).detach().cpu() for field in self.joint._fields
            },
            "names": list(self.layout.names),
            "shapes": [list(shape) for shape in self.layout.shapes],
        }

    @classmethod
    def from_saved(cls, params: dict, extras: dict, memo: dict) -> BlockSite:
        """The inverse of :meth:`saved_extras`: the sites of a block share one rebuilt block."""
        key = extras["block"]
        if key not in memo:
            form = JOINT_FORMS.get(extras["form"])
            if form is None:
                raise ValueError(
                    f"unknown joint form {extras['form']!r} (known: {sorted(JOINT_FORMS)}): "
                    "import the module that defines it before loading"
                )
            layout = BlockLayout(
                tuple(extras["names"]), tuple(torch.Size(shape) for shape in extras["shapes"])
            )
            memo[key] = (form(**extras["joint"]), layout)
        joint, layout = memo[key]
        return cls(**params, joint=joint, layout=layout)


#: The joint Gaussians a saved posterior may rebuild, by class name (:func:`joint_form`).
JOINT_FORMS: dict[str, type] = {}


def joint_form(cls: type) -> type:
    """Let a saved :class:`BlockSite` rebuild ``cls``, a :class:`JointGaussian` that is a
    ``NamedTuple`` of tensors (a class decorator, as a form's module applies to its own)."""
    JOINT_FORMS[cls.__name__] = cls
    return cls


#: The families whose guides hold Gaussian sites (what a part written for Gaussians may accept).
GAUSSIAN_FAMILIES = (MEAN_FIELD, "full-covariance", "low-rank")


def _block_site(value: object) -> BlockSite | None:
    while isinstance(value, Independent):
        value = value.base_dist
    return value if isinstance(value, BlockSite) and value.joint is not None else None


def has_joint_sites(sites: Mapping[str, object]) -> bool:
    """Whether any of ``sites`` is a block's site to be drawn with the rest of its block."""
    return any(_block_site(value) is not None for value in sites.values())


def draw_joint_sites(sites: Mapping[str, object], num_draws: int | None) -> dict:
    """``sites`` with every block's sites replaced by one joint draw of the block: values of
    shape ``(num_draws, *site shape)`` (``num_draws`` of ``None``: one draw, the site's shape),
    reparameterised. Other entries are left as they are."""
    drawn: dict[int, dict[str, torch.Tensor]] = {}
    out = dict(sites)
    for name, value in sites.items():
        site = _block_site(value)
        if site is None:
            continue
        key = id(site.joint)
        if key not in drawn:
            shape = () if num_draws is None else (num_draws,)
            drawn[key] = site.layout.split(site.joint.rsample(shape))
        out[name] = drawn[key][name]
    return out


_LOWER_MASKS: dict[tuple, torch.Tensor] = {}


def _strictly_lower(like: torch.Tensor) -> torch.Tensor:
    """Ones below the diagonal, zeros elsewhere, shaped, typed and placed like ``like``."""
    key = (like.shape, like.dtype, like.device)
    if key not in _LOWER_MASKS:
        _LOWER_MASKS[key] = torch.ones(like.shape, dtype=like.dtype, device=like.device).tril(-1)
    return _LOWER_MASKS[key]


def relative_tril(raw: torch.Tensor) -> torch.Tensor:
    """The lower-triangular ``L = diag(s) (I + N)`` of the raw parameter holding ``log s`` on
    its diagonal and the strictly lower ``N`` below it: an optimiser's step moves an entry
    relative to its row's scale, so fixed-size steps on many coupling entries do not inflate
    the covariance."""
    scale = raw.diagonal().exp()
    return scale.unsqueeze(-1) * (raw * _strictly_lower(raw)) + torch.diag_embed(scale)


def tril_parameters(tril: torch.Tensor) -> torch.Tensor:
    """The raw parameter whose :func:`relative_tril` is ``tril``."""
    diagonal = tril.diagonal()
    return tril.tril(-1) / diagonal.unsqueeze(-1) + torch.diag_embed(diagonal.log())


class BlockCovariance(ABC):
    """How a family parametrises a block's covariance (module docstring): the guide keeps, per
    block, one tensor in each of its dictionaries named in :attr:`parameters` (fitted) and
    :attr:`prior_buffers` (the prior ``p(θ_B)`` beside its mean ``prior_loc``)."""

    #: The guide's dictionaries of fitted per-block tensors this form uses.
    parameters: tuple[str, ...] = ()
    #: The guide's dictionaries of the blocks' priors (besides ``prior_loc``).
    prior_buffers: tuple[str, ...] = ()

    def blocks(
        self, names: Sequence[str], shapes: Sequence[torch.Size], per_module: bool
    ) -> list[list[str]]:
        """The blocks new sites form: all in one, or one per module (the sites left out stay
        mean-field)."""
        groups: dict[str, list[str]] = {}
        for name in names:
            groups.setdefault(name.rpartition(".")[0] if per_module else "", []).append(name)
        return list(groups.values())

    @abstractmethod
    def start(
        self,
        layout: BlockLayout,
        prior_variance: torch.Tensor,
        init_log_variance: float,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``({parameter: tensor}, {prior buffer: tensor})`` of a new block whose sites' initial
        priors have the flat variances ``prior_variance`` (independent: a diagonal covariance),
        its variances starting at ``exp(init_log_variance)``; typed and placed like
        ``prior_variance``."""

    @abstractmethod
    def joint(self, loc: torch.Tensor, parameters: Mapping[str, torch.Tensor]) -> JointGaussian:
        """``q(θ_B)`` from the block's mean and fitted tensors (differentiable in both)."""

    @abstractmethod
    def prior(self, loc: torch.Tensor, buffers: Mapping[str, torch.Tensor]) -> JointGaussian:
        """``p(θ_B)`` from the prior's mean and buffers."""

    @abstractmethod
    def hand_off(self, joint: JointGaussian) -> dict[str, torch.Tensor]:
        """The prior buffers that make ``joint`` (a fitted ``q``) the next prior."""

    @abstractmethod
    def parameters_at(self, prior: JointGaussian) -> dict[str, torch.Tensor]:
        """The fitted tensors whose :meth:`joint` is ``prior`` (a restart at the prior)."""

    def carried(
        self, buffers: Mapping[str, torch.Tensor], a: torch.Tensor | float, v: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The prior buffers after ``Σ ← a² Σ + diag v``.

        :raises TypeError: where the form is not closed under it (the default)."""
        raise TypeError(
            f"a {type(self).__name__} block cannot carry a transition's step Σ ← a² Σ + diag v"
        )

    def check_block(self, layout: BlockLayout, prior_variance: torch.Tensor) -> None:  # noqa: B027
        """Refuse a block this form cannot start (default: any).

        :raises TypeError: naming the sites."""


class _BufferDict(nn.Module):
    """Named buffers added and removed by key (the blocks' priors), saved in the state dict."""

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._buffers[key]

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        self.register_buffer(key, value)

    def __delitem__(self, key: str) -> None:
        del self._buffers[key]

    def __contains__(self, key: str) -> bool:
        return key in self._buffers

    def keys(self):
        return self._buffers.keys()


class JointGaussianGuide(MeanFieldGuide):
    """A guide with chosen Gaussian sites joined into blocks (see the module docstring).

    :param model: the Pyro model.
    :param covariance: the blocks' :class:`BlockCovariance`.
    :param sites: the sites to join, by name or by module prefix (``"head"`` takes
        ``head.weight`` and ``head.bias``); ``None`` for every Gaussian site.
    :param per_module: one block per module instead of one per first use.
    :param init_log_variance: log σ² of new sites' variances.
    :param init_loc_std: as :class:`~pyro_cl.guides.MeanFieldGuide`'s.
    """

    mean_field = False

    def __init__(
        self,
        model,
        covariance: BlockCovariance,
        sites: Sequence[str] | None = None,
        per_module: bool = False,
        init_log_variance: float = DEFAULT_INIT_LOG_VARIANCE,
        init_loc_std: float = 0.1,
        site_key=task_id_key,
        local_guide: nn.Module | None = None,
    ) -> None:
        super().__init__(model, init_log_variance, init_loc_std, site_key, local_guide)
        self.covariance = covariance
        self.chosen = None if sites is None else tuple(sites)
        self.per_module = per_module
        self.parameter_groups = (
            *MeanFieldGuide.parameter_groups,
            *covariance.parameters,
            "prior_loc",
            *covariance.prior_buffers,
        )
        for group in covariance.parameters:
            setattr(self, group, nn.ParameterDict())
        for group in ("prior_loc", *covariance.prior_buffers):
            setattr(self, group, _BufferDict())
        self._blocks: dict[str, BlockLayout] = {}
        self._block_of: dict[str, str] = {}
        self._new_priors: dict[str, Distribution] = {}

    # ----------------------------------------------------------------- blocks
    def _chooses(self, name: str) -> bool:
        if self.chosen is None:
            return True
        return any(name == s or name.startswith(s + ".") for s in self.chosen)

    def _create_site(self, name: str, prior: Distribution) -> None:
        super()._create_site(name, prior)
        if self._families[name] == "normal" and self._chooses(name):
            self._new_priors[name] = prior

    def _discover(self, key, args: tuple, kwargs: dict) -> list[str]:
        self._new_priors = {}
        names = super()._discover(key, args, kwargs)
        if self._structured_keys:
            raise ValueError(
                "a model with structured sites (IBP masks) takes a mean-field guide, not "
                f"{type(self).__name__}"
            )
        new = list(self._new_priors)
        shapes = [self.loc[_parameter_key(name)].shape for name in new]
        for group in self.covariance.blocks(new, shapes, self.per_module):
            self._create_block(group)
        self._new_priors = {}
        return names

    @torch.no_grad()
    def _create_block(self, names: list[str]) -> None:
        key = f"block{len(self._blocks)}"
        while key in self._blocks:  # after a restore removed a later block
            key += "_"
        layout = BlockLayout(tuple(names), tuple(self.loc[_parameter_key(n)].shape for n in names))
        like = self.loc[_parameter_key(names[0])]
        prior_loc, prior_variance = [], []
        for name, shape in zip(names, layout.shapes, strict=True):
            normal = base_distribution(self._new_priors[name])
            if not isinstance(normal, Normal):
                raise TypeError(
                    f"a joint Gaussian block starts from Gaussian priors; site {name!r} has a "
                    f"{type(normal).__name__} prior (choose a GaussianPrior, or leave the site "
                    "out of the block)"
                )
            prior_loc.append(normal.loc.detach().to(like).expand(shape).reshape(-1))
            prior_variance.append(normal.scale.detach().to(like).expand(shape).reshape(-1) ** 2)
        variance = torch.cat(prior_variance)
        self.covariance.check_block(layout, variance)
        parameters, buffers = self.covariance.start(layout, variance, self.init_log_variance)
        for name in names:
            del self.log_variance[_parameter_key(name)]
            self._families[name] = "block"
            self._block_of[name] = key
        self.prior_loc[key] = torch.cat(prior_loc)
        for group, value in parameters.items():
            getattr(self, group)[key] = nn.Parameter(value)
        for group, value in buffers.items():
            getattr(self, group)[key] = value
        self._blocks[key] = layout

    def _blocks_of(self, names: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(self._block_of[n] for n in names if n in self._block_of))

    def block_layouts(self, names: Iterable[str]) -> dict[str, BlockLayout]:
        """``{block key: its layout}`` of the blocks the sites ``names`` belong to."""
        return {key: self._blocks[key] for key in self._blocks_of(names)}

    def joint(self, key: str) -> JointGaussian:
        """``q(θ_B)`` of block ``key``, differentiable in the guide's parameters (its
        ``distribution()`` is the torch distribution)."""
        layout = self._blocks[key]
        loc = layout.join({name: self.loc[_parameter_key(name)] for name in layout.names})
        parameters = {group: getattr(self, group)[key] for group in self.covariance.parameters}
        return self.covariance.joint(loc, parameters)

    def joint_prior(self, key: str) -> JointGaussian:
        """``p(θ_B)`` of block ``key``: the last step's ``q(θ_B)`` (the sites' initial priors
        before the first)."""
        buffers = {group: getattr(self, group)[key] for group in self.covariance.prior_buffers}
        return self.covariance.prior(self.prior_loc[key], buffers)

    def _sites_of(self, key: str, joint: JointGaussian) -> dict[str, Distribution]:
        layout = self._blocks[key]
        locs = layout.split(joint.loc)
        scales = layout.split(joint.variance.sqrt())
        return {
            name: BlockSite(locs[name], scales[name], joint=joint, layout=layout).to_event(
                self._event_dims[name]
            )
            for name in layout.names
        }

    # ----------------------------------------------------------------- the family's protocol
    def joint_terms(self, names: Iterable[str]) -> tuple[torch.Tensor | float, dict]:
        joints, sites = self._joint_sites(names)
        kl = sum(
            (
                site_kl(joint.distribution(), self.joint_prior(key).distribution())
                for key, joint in joints.items()
            ),
            0.0,
        )
        return kl, sites

    def _joint_sites(self, names: Iterable[str]) -> tuple[dict, dict[str, Distribution]]:
        """``({block: q(θ_B)}, {site: its BlockSite})`` for the blocks of the sites among
        ``names``, each block's ``q`` built once and shared by its sites."""
        names = list(names)
        joints = {key: self.joint(key) for key in self._blocks_of(names)}
        sites = {}
        for key, joint in joints.items():
            sites.update(self._sites_of(key, joint))
        return joints, {name: q for name, q in sites.items() if name in names}

    def prior_sites(self) -> dict[str, Distribution]:
        sites = {}
        for key in self._blocks:
            sites.update(self._sites_of(key, self.joint_prior(key)))
        return sites

    @torch.no_grad()
    def hand_off(self, names: Iterable[str]) -> None:
        for key in self._blocks_of(names):
            joint = self.joint(key)
            self.prior_loc[key].copy_(joint.loc)
            for group, value in self.covariance.hand_off(joint).items():
                getattr(self, group)[key].copy_(value)

    @torch.no_grad()
    def carry_prior(self, step: Callable, initial_prior: Mapping[str, Distribution]) -> None:
        """Each block's prior through ``w' = a w + b + ε``, ``ε ~ N(0, diag v)``:
        ``μ ← a μ + b`` and ``Σ ← a² Σ + diag v`` (:meth:`BlockCovariance.carried`); a
        ``step`` that returns ``None`` (the identity transition) leaves them as they are."""
        for key, layout in self._blocks.items():
            locs, scales = {}, {}
            for name, shape in zip(layout.names, layout.shapes, strict=True):
                normal = base_distribution(initial_prior[name])
                locs[name] = normal.loc.expand(shape)
                scales[name] = normal.scale.expand(shape)
            like = self.prior_loc[key]
            carried = step(layout.join(locs).to(like), layout.join(scales).to(like))
            if carried is None:
                return
            a, b, v = carried
            buffers = {group: getattr(self, group)[key] for group in self.covariance.prior_buffers}
            moved = self.covariance.carried(buffers, a, v)
            self.prior_loc[key].copy_(a * self.prior_loc[key] + b)
            for group, value in moved.items():
                getattr(self, group)[key].copy_(value)

    def posterior(self, names: Iterable[str] | None = None) -> dict[str, Distribution]:
        names = list(names or self.site_names)
        _, joint = self._joint_sites(names)  # no KL: only the distributions are asked for
        return {name: joint[name] if name in joint else self.distribution(name) for name in names}

    def distribution(self, name: str) -> Distribution:
        key = self._block_of.get(name)
        if key is None:
            return super().distribution(name)
        return self._sites_of(key, self.joint(key))[name]

    def locs(self, names: Iterable[str] | None = None) -> dict[str, nn.Parameter]:
        names = list(names or self.site_names)
        own = super().locs(names)
        blocks = {n: self.loc[_parameter_key(n)] for n in names if n in self._block_of}
        return {n: own.get(n, blocks.get(n)) for n in names if n in own or n in blocks}

    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Draw each block as one auxiliary site and its sites as ``Delta``s of the draw (as
        Pyro's ``AutoMultivariateNormal`` does), so that Pyro's ``Trace_ELBO`` scores the
        joint ``q``; the other sites as :class:`MeanFieldGuide` does."""
        names = self.sites_for(*args, **kwargs)
        pyro.module(self._store_name, self)
        if self.local_guide is not None:
            self.local_guide(*args, **kwargs)
        values = {}
        for key in self._blocks_of(names):
            flat = pyro.sample(
                f"{self._store_name}.{key}",
                self.joint(key).distribution(),
                infer={"is_auxiliary": True},
            )
            values.update(self._blocks[key].split(flat))
        out = {}
        for name in names:
            if name in self._block_of:
                delta = Delta(values[name], event_dim=self._event_dims[name])
                out[name] = pyro.sample(name, delta)
            else:
                out[name] = pyro.sample(name, super().distribution(name))
        return out

    # ----------------------------------------------------------------- initialisation
    @torch.no_grad()
    def reinitialise(
        self,
        policy: str,
        priors: Mapping[str, Distribution],
        log_variance: float | None = None,
    ) -> None:
        """As :meth:`MeanFieldGuide.reinitialise` for the mean-field sites; a block keeps its
        posterior (``"keep"``) or restarts at its prior (``"prior"``), the only two policies
        defined for it."""
        own = {name: prior for name, prior in priors.items() if name not in self._block_of}
        super().reinitialise(policy, own, log_variance)
        blocks = self._blocks_of(priors)
        if policy == "keep" or not blocks:
            return
        if policy != "prior":
            raise ValueError(
                f"a {type(self).__name__} block restarts from its posterior ('keep') or its "
                f"prior ('prior'), not {policy!r}"
            )
        for key in blocks:
            self.set_joint(key, self.joint_prior(key))

    @torch.no_grad()
    def set_joint(self, key: str, joint: JointGaussian) -> None:
        """Make ``q(θ_B)`` of block ``key`` the Gaussian ``joint`` (its mean and the fitted
        tensors of :meth:`BlockCovariance.parameters_at`): a restart at the prior, or a
        posterior a fitter computes in closed form (Laplace propagation's)."""
        for name, value in self._blocks[key].split(joint.loc).items():
            self.loc[_parameter_key(name)].copy_(value)
        for group, value in self.covariance.parameters_at(joint).items():
            getattr(self, group)[key].copy_(value)

    def _empty_like(self) -> JointGaussianGuide:
        return JointGaussianGuide(
            self.model,
            self.covariance,
            self.chosen,
            self.per_module,
            self.init_log_variance,
            self.init_loc_std,
            self.site_key,
            self.local_guide,
        )

    # ----------------------------------------------------------------- saving and loading
    def get_extra_state(self) -> dict:
        return {
            **super().get_extra_state(),
            "blocks": [
                [key, list(layout.names), [list(shape) for shape in layout.shapes]]
                for key, layout in self._blocks.items()
            ],
        }

    def set_extra_state(self, state: dict) -> None:
        super().set_extra_state(state)
        self._blocks = {
            key: BlockLayout(tuple(names), tuple(torch.Size(s) for s in shapes))
            for key, names, shapes in state["blocks"]
        }
        self._block_of = {
            name: key for key, layout in self._blocks.items() for name in layout.names
        }

    def extra_repr(self) -> str:
        form = type(self.covariance).__name__
        return f"{super().extra_repr()}, blocks={len(self._blocks)}, covariance={form}"


class JointGaussianFamily(GuideFamily):
    """A family of :class:`JointGaussianGuide`: subclass it, give it a ``name`` and implement
    :meth:`block_covariance`.

    :param sites: site names or module prefixes to join (``None``: every Gaussian site).
    :param per_module: one block per module instead of one per first use.
    """

    def __init__(self, sites: Sequence[str] | None = None, per_module: bool = False) -> None:
        if sites is not None and (
            isinstance(sites, str) or not all(isinstance(s, str) for s in sites)
        ):
            raise TypeError(f"sites must be a list of site names or module prefixes, got {sites!r}")
        if sites is not None and not len(sites):
            raise ValueError(
                f"{type(self).__name__}(sites=[]) joins no site, which is the mean-field family: "
                "name the sites to join, leave sites=None for every Gaussian site, or use MeanField()"
            )
        if not isinstance(per_module, bool):
            raise TypeError(f"per_module must be True or False, got {per_module!r}")
        self.sites = None if sites is None else list(sites)
        self.per_module = per_module

    @abstractmethod
    def block_covariance(self) -> BlockCovariance:
        """The form of the blocks' covariance."""

    def build(self, model, init_log_variance: float, init_loc_std: float) -> JointGaussianGuide:
        """The guide; sites named that the model's net does not have are refused by name."""
        net = getattr(model, "net", None)
        if self.sites is not None and isinstance(net, nn.Module):
            names = [name for name, _, _ in sample_sites(net)]
            unknown = [
                s for s in self.sites if not any(n == s or n.startswith(s + ".") for n in names)
            ]
            if unknown:
                raise ValueError(
                    f"the {self.name} guide joins sites {unknown}, which the net does not have "
                    f"(its sites: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
                )
        return JointGaussianGuide(
            model,
            self.block_covariance(),
            self.sites,
            self.per_module,
            init_log_variance,
            init_loc_std,
            local_guide=getattr(model, "local_guide", None),
        )

    def check_initialisation(self, between_tasks: str, init_means: str) -> None:
        if between_tasks not in ("keep", "prior"):
            raise ValueError(
                f"the {self.name} family restarts each task from its posterior ('keep') or its "
                f"prior ('prior'), not between_tasks={between_tasks!r}"
            )
        if init_means != "prior":
            raise ValueError(
                f"the {self.name} family starts its means at the prior's (or by maximum "
                f"likelihood), not init_means={init_means!r}"
            )
