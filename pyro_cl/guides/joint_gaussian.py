"""Gaussian posteriors that couple chosen sites: full covariance, and low rank plus diagonal.

The chosen sites of a model (all its Gaussian sites, or those named) are flattened and joined
into blocks ``θ_B`` of ``D`` numbers, each with one Gaussian::

    q(θ_B) = N(μ_B, Σ_B),   Σ_B = L Lᵀ               (full: L lower-triangular, diagonal > 0)
                            Σ_B = diag(d) + W Wᵀ      (low rank: W of D × r)

(the full factor parametrised as ``L = diag(s) (I + N)``, ``log s`` and the strictly lower ``N``
the parameters, and the low-rank factor as ``W = diag(√d) V`` with ``V`` the parameter: an
optimiser's step moves an entry relative to its row's scale, so Adam's fixed-size steps on the
many coupling entries do not inflate the covariance), and every other site stays mean-field (:class:`~pyro_cl.guides.MeanFieldGuide`). A block is
made of the chosen sites the model first uses in one call (all of them at the first task; a
head first used by task 7 forms a block of its own then), or one block per module
(``per_module``): the last layer alone, as last-layer Laplace does, is ``sites=["head"]``.

**The handoff** (VCL eq. 1 with the whole covariance): the guide keeps each block's prior
``p(θ_B)`` itself — the product of the sites' initial priors at first, then ``q_t(θ_B)``
after step ``t`` (:meth:`JointGaussianGuide.hand_off`) — and the online ELBO's KL term is the
closed form ``KL(q(θ_B) ‖ p(θ_B))`` between the two Gaussians (:meth:`joint_terms`). The net's
per-site priors hold the marginals of ``p(θ_B)``, for whatever reads one site at a time.
Predictions and the ELBO's likelihood term draw each block's sites together
(:func:`draw_joint_sites`), so the correlations reach the outputs.

On a linear-Gaussian model the ELBO's optimum over full-covariance Gaussians is the exact
posterior, so VCL with a full-covariance block is exact online Bayesian inference, as is a low
rank ``r ≥ D`` (both tested against the closed form); a mean-field posterior is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pyro
import torch
from pyro.distributions import (
    Delta,
    Distribution,
    Independent,
    LowRankMultivariateNormal,
    MultivariateNormal,
    Normal,
)
from torch import nn
from torch.distributions import kl_divergence

from pyro_cl.guides.family import MEAN_FIELD, GuideFamily
from pyro_cl.guides.mean_field import (
    DEFAULT_INIT_LOG_VARIANCE,
    MeanFieldGuide,
    _parameter_key,
    task_id_key,
)
from pyro_cl.kl import full_gaussian_kl
from pyro_cl.posterior import base_distribution, sample_sites

__all__ = [
    "GAUSSIAN_FAMILIES",
    "BlockLayout",
    "BlockSite",
    "FullCovariance",
    "JointGaussianGuide",
    "LowRank",
    "draw_joint_sites",
    "has_joint_sites",
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


class FullGaussian(NamedTuple):
    """``N(loc, L Lᵀ)`` over a flat block, ``L`` = ``scale_tril`` (lower-triangular)."""

    loc: torch.Tensor
    scale_tril: torch.Tensor

    @property
    def variance(self) -> torch.Tensor:
        return self.scale_tril.square().sum(-1)

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        noise = torch.randn(
            *sample_shape, self.loc.shape[-1], dtype=self.loc.dtype, device=self.loc.device
        )
        return self.loc + noise @ self.scale_tril.T

    def kl(self, prior: FullGaussian) -> torch.Tensor:
        """``KL(self ‖ prior)`` in closed form."""
        return full_gaussian_kl(self.loc, self.scale_tril, prior.loc, prior.scale_tril)

    def detached(self) -> FullGaussian:
        return FullGaussian(self.loc.detach().clone(), self.scale_tril.detach().clone())

    def distribution(self) -> MultivariateNormal:
        """The same Gaussian as a torch distribution."""
        return MultivariateNormal(self.loc, scale_tril=self.scale_tril, validate_args=False)


class LowRankGaussian(NamedTuple):
    """``N(loc, diag(cov_diag) + W Wᵀ)`` over a flat block, ``W`` = ``cov_factor`` (``D × r``)."""

    loc: torch.Tensor
    cov_factor: torch.Tensor
    cov_diag: torch.Tensor

    @property
    def variance(self) -> torch.Tensor:
        return self.cov_factor.square().sum(-1) + self.cov_diag

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        like = {"dtype": self.loc.dtype, "device": self.loc.device}
        low = torch.randn(*sample_shape, self.cov_factor.shape[-1], **like)
        diagonal = torch.randn(*sample_shape, self.loc.shape[-1], **like)
        return self.loc + low @ self.cov_factor.T + diagonal * self.cov_diag.sqrt()

    def kl(self, prior: LowRankGaussian) -> torch.Tensor:
        """``KL(self ‖ prior)`` in closed form (torch's, ``O(D r²)``)."""
        return kl_divergence(self.distribution(), prior.distribution())

    def detached(self) -> LowRankGaussian:
        return LowRankGaussian(*(t.detach().clone() for t in self))

    def distribution(self) -> LowRankMultivariateNormal:
        """The same Gaussian as a torch distribution."""
        return LowRankMultivariateNormal(
            self.loc, self.cov_factor, self.cov_diag, validate_args=False
        )


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
        joint: FullGaussian | LowRankGaussian | None = None,
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


#: The size of the low-rank factor's relative entries at the start (``V`` of ``W = diag(√d) V``
#: has rows of norm about this): a covariance close to its diagonal.
INITIAL_CORRELATION = 0.1


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
    :param rank: ``r`` of a low-rank-plus-diagonal covariance; ``None`` for a full covariance.
    :param sites: the sites to join, by name or by module prefix (``"head"`` takes
        ``head.weight`` and ``head.bias``); ``None`` for every Gaussian site.
    :param per_module: one block per module instead of one per first use.
    :param init_log_variance: log σ² of new sites' variances (the full covariance's diagonal;
        the low-rank diagonal ``d``, with ``W = diag(√d) V`` and ``V``'s entries of standard
        deviation :data:`INITIAL_CORRELATION` ``/√r``).
    :param init_loc_std: as :class:`~pyro_cl.guides.MeanFieldGuide`'s.
    """

    mean_field = False
    parameter_groups = (
        *MeanFieldGuide.parameter_groups,
        "block_tril",
        "block_factor",
        "block_log_diag",
        "prior_loc",
        "prior_tril",
        "prior_factor",
        "prior_diag",
    )

    def __init__(
        self,
        model,
        rank: int | None = None,
        sites: Sequence[str] | None = None,
        per_module: bool = False,
        init_log_variance: float = DEFAULT_INIT_LOG_VARIANCE,
        init_loc_std: float = 0.1,
        site_key=task_id_key,
        local_guide: nn.Module | None = None,
    ) -> None:
        super().__init__(model, init_log_variance, init_loc_std, site_key, local_guide)
        self.rank = rank
        self.chosen = None if sites is None else tuple(sites)
        self.per_module = per_module
        self.block_tril = nn.ParameterDict()
        self.block_factor = nn.ParameterDict()
        self.block_log_diag = nn.ParameterDict()
        self.prior_loc = _BufferDict()
        self.prior_tril = _BufferDict()
        self.prior_factor = _BufferDict()
        self.prior_diag = _BufferDict()
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
        groups: dict[str, list[str]] = {}
        for name in self._new_priors:
            groups.setdefault(name.rpartition(".")[0] if self.per_module else "", []).append(name)
        for group in groups.values():
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
            del self.log_variance[_parameter_key(name)]
            self._families[name] = "block"
            self._block_of[name] = key
        self.prior_loc[key] = torch.cat(prior_loc)
        variance = torch.cat(prior_variance)
        size = layout.size
        if self.rank is None:
            self.prior_tril[key] = torch.diag(variance.sqrt())
            raw = torch.diag(torch.full((size,), 0.5 * self.init_log_variance, dtype=like.dtype))
            self.block_tril[key] = nn.Parameter(raw.to(like.device))
        else:
            self.prior_factor[key] = torch.zeros(size, self.rank, dtype=like.dtype).to(like)
            self.prior_diag[key] = variance
            # V of W = diag(√d) V starts small: the covariance starts near its diagonal
            relative = torch.randn(size, self.rank).to(like) * (
                INITIAL_CORRELATION / math.sqrt(self.rank)
            )
            self.block_factor[key] = nn.Parameter(relative)
            self.block_log_diag[key] = nn.Parameter(
                torch.full_like(variance, self.init_log_variance)
            )
        self._blocks[key] = layout

    def _blocks_of(self, names: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(self._block_of[n] for n in names if n in self._block_of))

    def joint(self, key: str) -> FullGaussian | LowRankGaussian:
        """``q(θ_B)`` of block ``key``, differentiable in the guide's parameters (its
        ``distribution()`` is the torch distribution)."""
        layout = self._blocks[key]
        loc = layout.join({name: self.loc[_parameter_key(name)] for name in layout.names})
        if self.rank is None:
            raw = self.block_tril[key]
            below = _strictly_lower(raw)  # a mask: tril's kernel is slow on small blocks
            scale = raw.diagonal().exp()  # L = diag(s) (I + N): N's entries are relative
            return FullGaussian(loc, scale.unsqueeze(-1) * (raw * below) + torch.diag_embed(scale))
        diagonal = self.block_log_diag[key].exp()  # W = diag(√d) V: V's entries are relative
        return LowRankGaussian(
            loc, diagonal.sqrt().unsqueeze(-1) * self.block_factor[key], diagonal
        )

    def joint_prior(self, key: str) -> FullGaussian | LowRankGaussian:
        """``p(θ_B)`` of block ``key``: the last step's ``q(θ_B)`` (the sites' initial priors
        before the first)."""
        if self.rank is None:
            return FullGaussian(self.prior_loc[key], self.prior_tril[key])
        return LowRankGaussian(self.prior_loc[key], self.prior_factor[key], self.prior_diag[key])

    def _sites_of(self, key: str, joint: Distribution) -> dict[str, Distribution]:
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
        kl = sum((joint.kl(self.joint_prior(key)) for key, joint in joints.items()), 0.0)
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
            if self.rank is None:
                self.prior_tril[key].copy_(joint.scale_tril)
            else:
                self.prior_factor[key].copy_(joint.cov_factor)
                self.prior_diag[key].copy_(joint.cov_diag)

    @torch.no_grad()
    def carry_prior(self, step, initial_prior: Mapping[str, Distribution]) -> None:
        """Each block's prior through ``w' = a w + b + ε``, ``ε ~ N(0, diag v)``:
        ``μ ← a μ + b`` and ``Σ ← a² Σ + diag v`` (the low-rank form kept: ``W ← a W``,
        ``d ← a² d + v``); a ``step`` that returns ``None`` (the identity transition) leaves
        them as they are."""
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
            self.prior_loc[key].copy_(a * self.prior_loc[key] + b)
            if self.rank is None:
                tril = self.prior_tril[key]
                covariance = a**2 * (tril @ tril.T) + torch.diag(v)
                self.prior_tril[key].copy_(torch.linalg.cholesky(covariance))
            else:
                self.prior_factor[key].mul_(a)
                self.prior_diag[key].copy_(a**2 * self.prior_diag[key] + v)

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
            prior = self.joint_prior(key)
            for name, value in self._blocks[key].split(prior.loc).items():
                self.loc[_parameter_key(name)].copy_(value)
            if self.rank is None:
                tril = prior.scale_tril
                diagonal = tril.diagonal()
                relative = tril.tril(-1) / diagonal.unsqueeze(-1)
                self.block_tril[key].copy_(relative + torch.diag_embed(diagonal.log()))
            else:
                self.block_factor[key].copy_(prior.cov_factor / prior.cov_diag.sqrt().unsqueeze(-1))
                self.block_log_diag[key].copy_(prior.cov_diag.log())

    def _empty_like(self) -> JointGaussianGuide:
        return JointGaussianGuide(
            self.model,
            self.rank,
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
        covariance = "full" if self.rank is None else f"rank {self.rank} + diagonal"
        return f"{super().extra_repr()}, blocks={len(self._blocks)}, covariance={covariance}"


class _JointFamily(GuideFamily):
    """A family of :class:`JointGaussianGuide` (the two below differ only in ``rank``)."""

    rank: int | None

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
            self.rank,
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


class FullCovariance(_JointFamily):
    """A full-covariance Gaussian over the chosen sites (``Σ = L Lᵀ``; ``D(D+1)/2``
    parameters a block, so for a layer or a small model), the rest mean-field.

    :param sites: site names or module prefixes to join (``None``: every Gaussian site).
    :param per_module: one block per module (each layer its own covariance).
    """

    name = "full-covariance"
    rank = None


class LowRank(_JointFamily):
    """A low-rank-plus-diagonal Gaussian ``Σ = diag(d) + W Wᵀ`` over the chosen sites (``D(r+2)``
    parameters a block: every weight of a net at small ``r``), the rest mean-field.

    :param rank: ``r``, the columns of ``W``.
    :param sites: site names or module prefixes to join (``None``: every Gaussian site).
    :param per_module: one block per module.
    """

    name = "low-rank"

    def __init__(
        self, rank: int = 10, sites: Sequence[str] | None = None, per_module: bool = False
    ) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive integer, got {rank!r}")
        super().__init__(sites, per_module)
        self.rank = rank
