"""Natural-gradient fitting of a mean-field Gaussian guide: the part VOGN and IVON share.

A natural-gradient update keeps, for every latent site, the guide's mean ``μ`` and a precision
``s`` (``1/σ²``), and for each minibatch

1. draws ``S`` weights ``θ_s = μ + ε_s / √s`` from the guide (``ε_s ~ N(0, I)``, one
   ``torch.randn((S, D))`` over all ``D`` parameters: the sites are packed into flat vectors for
   the length of the fit, :class:`~pyro_cl.infer.packed_gaussians.PackedGaussians`);
2. computes the minibatch's gradient statistics at every ``θ_s``
   (:mod:`pyro_cl.infer.per_example`);
3. moves ``(μ, s)`` by the method's rule (:meth:`NaturalGradientUpdate._update`), with the
   Gaussian prior ``N(μ_p, 1/λ_p)`` the net's sites hold — after task ``k-1`` that is the posterior
   of task ``k-1`` (VOGN thesis eq. 53), installed by the same handoff as VCL's.

The guide's means are updated in place and its log-variances set to ``-log s`` when the fit
ends, so everything downstream (the handoff, prediction, coresets, save/load) sees an ordinary
:class:`~pyro_cl.guides.MeanFieldGuide`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.guides import MEAN_FIELD, MeanFieldGuide
from pyro_cl.infer.data_parallel import Shard, all_reduce_sums, rank_and_world, sharded_step
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.fusion import fused
from pyro_cl.infer.objectives import task_groups
from pyro_cl.infer.packed_gaussians import PackedGaussians, site_views
from pyro_cl.infer.per_example import gradient_statistics
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.nn.structured import has_structured_sites
from pyro_cl.points import Points

__all__ = ["GradientSums", "NaturalGradientState", "NaturalGradientUpdate"]


class NaturalGradientState:
    """Everything an update tracks, flat over all ``D`` parameters of the fit's sites: the mean
    ``loc`` (the packed guide's own memory, so the guide shows every step), the precision ``s``,
    the prior's mean and precision (read once per fit) and method-specific buffers."""

    def __init__(self, packed: PackedGaussians) -> None:
        self.packed = packed
        self.loc = packed.loc.data
        self.prior_loc = packed.prior.loc
        self.prior_precision = packed.prior.precision
        #: Σ log σ_p² - D (twice the part of the KL that is constant during the fit).
        self.kl_constant = packed.prior.constant
        #: Method-specific buffers (momentum, Hessian estimate, ...), flat.
        self.buffers: dict[str, torch.Tensor] = {}
        self.set_precision(packed.log_variance.detach().neg().exp())

    def set_precision(self, precision: torch.Tensor) -> None:
        """Start from ``precision`` ``s`` (and ``σ = 1/√s``, the weight samples' scale, which
        every step then keeps up to date in place)."""
        self.precision = precision
        self.scale = precision.rsqrt()


class GradientSums:
    """The minibatch sums a step reads, in flat buffers in the packed order that every step
    reuses (on CPU a fresh ``(S, D)`` tensor per step costs page faults that the arithmetic does
    not): the gradients ``(S, D)`` and, for curvature methods, the squared gradients ``(D,)``,
    each with per-site views the per-task statistics are added into.

    :param shapes: ``{site: shape}`` in the flat order.
    :param num_samples: ``S``.
    :param curvature: whether to keep squared gradients.
    :param like: a tensor of the fit's dtype and device.
    """

    def __init__(
        self, shapes: dict[str, torch.Size], num_samples: int, curvature: bool, like: torch.Tensor
    ) -> None:
        size = sum(math.prod(shape) for shape in shapes.values())
        self.gradients = like.new_zeros((num_samples, size))
        self.squared = like.new_zeros(size) if curvature else None
        self.gradient_views = site_views(self.gradients, shapes)
        self.squared_views = None if self.squared is None else site_views(self.squared, shapes)

    def zero_(self) -> GradientSums:
        self.gradients.zero_()
        if self.squared is not None:
            self.squared.zero_()
        return self


class NaturalGradientUpdate(Fitter):
    """Base class of VOGN-style updates of a :class:`MeanFieldGuide`: fitters that take their own
    step size and sample count (the configuration's Adam and ``num_particles`` settings do not
    apply).

    :param learning_rate: step size ``α`` of the mean.
    :param num_samples: Monte Carlo samples ``S`` per step (the VOGN thesis trains with 10).
    :param data_scale: ``ρ``, the factor on the data set's size ``N`` for data augmentation (VOGN
        thesis section 3.4); the likelihood counts ``ρN`` points.
    :param kl_weight: ``β`` of GVCL's β-ELBO (Loo, Swaroop & Turner 2021, eq. 3), the KL's
        weight: the update then fits ``∝ prior · likelihood^{1/β}``, i.e. the likelihood counts
        ``ρN/β`` points (the same optimum as weighting the KL, the objective divided by ``β``).
    :param compiled: fuse the update's element-wise work into one kernel with ``torch.compile``
        (:mod:`pyro_cl.infer.fusion`; seconds to compile once per process, eager fallback).
    :param spread_samples: in a data-parallel fit (:mod:`pyro_cl.infer.data_parallel`), spread
        the ``S`` weight samples over the ``W`` ranks: rank ``r`` evaluates samples
        ``r, r + W, ...`` on its shard only, its sums scaled by ``M / M_r`` (Osawa et al. 2019:
        one sample per GPU; ``S = W`` samples at the cost of one). Unbiased, noisier; without a
        process group it changes nothing.
    """

    #: Which curvature statistic the update needs (see :data:`pyro_cl.infer.per_example.CURVATURES`).
    curvature: str | None = None
    #: The update keeps one precision per weight: a mean-field Gaussian, against Gaussian priors.
    guide_families = (MEAN_FIELD,)
    #: Its own update rule, not Adam (VCL's maximum-likelihood start aside).
    uses_optimiser = False

    def __init__(
        self,
        learning_rate: float,
        num_samples: int,
        data_scale: float = 1.0,
        compiled: bool = False,
        spread_samples: bool = False,
        kl_weight: float = 1.0,
    ) -> None:
        self.kl_weight = checked_real(kl_weight, "kl_weight", 0, low_open=True)
        self.learning_rate = checked_real(learning_rate, "learning_rate", 0, low_open=True)
        self.num_samples = checked_count(num_samples, "num_samples")
        self.data_scale = checked_real(data_scale, "data_scale", 0, low_open=True)
        self.compiled = bool(compiled)
        self.spread_samples = bool(spread_samples)
        self._kernels: dict = {}
        self._constants: dict = {}

    def _fused(self, step: Callable) -> Callable:
        """``step`` (a module-level update on flat tensors), compiled once per fitter when
        ``compiled`` is set (:func:`~pyro_cl.infer.fusion.fused`)."""
        if step not in self._kernels:
            self._kernels[step] = fused(step, self.compiled)
        return self._kernels[step]

    def _constant(self, value: float, like: torch.Tensor) -> torch.Tensor:
        """``value`` as a 0-d tensor of ``like``'s dtype and device, made once per value and fit:
        a tensor made from a Python number every step is a blocking host-to-device copy on a GPU
        (and a number passed to a compiled step would recompile it as it changes)."""
        key = (float(value), like.dtype, like.device)
        if key not in self._constants:
            self._constants[key] = torch.tensor(key[0], dtype=like.dtype, device=like.device)
        return self._constants[key]

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        problem: FitProblem,
    ) -> list[float]:
        """Fit the guide's ``problem.sites`` to ``problem.data`` against the net's current priors.

        The data may mix tasks (e.g. a coreset); the guide must already have parameters for
        every site the tasks use.

        :returns: per epoch, the mean of ``-ELBO/N`` estimated on each minibatch (the Monte Carlo
            negative log-likelihood per point plus ``KL(q || prior)/N``) — the same quantity the
            SVI route reports.
        """
        model, data = context.model, problem.data
        x, names = data.x, problem.sites
        task_id = model.task_argument(data)
        others = sorted(set(names) - set(guide.gaussian_sites(names)))
        if others or has_structured_sites(model.net):
            raise TypeError(
                f"{type(self).__name__} updates Gaussian sites only; this net also has "
                f"{others or 'IBP masks'}: train it with SVI (ELBOFitter)"
            )
        num_data = x.shape[0]
        effective_size = self.data_scale * num_data / self.kl_weight
        sites_by_task = {task: model.sites(guide, x, [task]) for task in data.tasks()}
        with PackedGaussians(model, guide, names) as packed:
            state = NaturalGradientState(packed)
            self._constants.clear()
            self._initialise(state, effective_size)

            # ε and θ = μ + ε σ are redrawn in place every step: a fresh (S, D) tensor per step
            # costs page faults on CPU that the draw itself does not
            noise = state.loc.new_empty((self.num_samples, state.loc.numel()))
            theta = torch.empty_like(noise)
            theta_by_site = packed.sample_views(theta)
            rows_of = RowGather(data.x)
            sums = GradientSums(
                packed.site_shapes, self.num_samples, self.curvature is not None, state.loc
            )

            def step(index: torch.Tensor) -> torch.Tensor:
                batch = index.shape[0]
                with sharded_step(index) as shard:  # the whole minibatch without a group
                    torch.addcmul(state.loc, noise.normal_(), state.scale, out=theta)
                    loss, gradients, squared = self._statistics(
                        model, theta_by_site, sites_by_task, data, task_id, shard, sums, rows_of
                    )
                with torch.no_grad():
                    kl = self._update(state, gradients, squared, noise, batch, effective_size)
                    kl = kl + 0.5 * state.kl_constant
                return loss / (batch * self.num_samples) + kl / effective_size

            locs = guide.locs(names)  # views of the packed means: callbacks see every step
            history = context.run_epochs(step, locs, problem)
            packed.log_variance.data.copy_(state.precision.log().neg())
        return history

    def _statistics(
        self,
        model,
        theta: dict,
        sites_by_task: dict,
        data: Points,
        task_id,
        shard: Shard,
        sums: GradientSums,
        rows_of: RowGather,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Sums over this rank's points of the loss, the gradients and (for VOGN) the squared
        per-example gradients, at every weight sample, summed over ranks (data-parallel fits),
        which gives the global minibatch's sums: ``(loss, gradients (S, D), squared (D,) or
        None)``, the last two flat in ``sums``' order (``sums``' own buffers without a process
        group). ``rows_of`` gathers the inputs ``data.x`` of a group of points.

        With ``spread_samples`` in a data-parallel fit, this rank evaluates only the samples
        ``rank, rank + W, ...`` on its shard, scaled by ``M / M_r`` to stand for the minibatch."""
        mine, scale = self._samples_of_this_rank(shard)
        sums.zero_()
        total = torch.zeros((), device=data.x.device)
        ids = task_id if isinstance(task_id, int) else task_id[shard.index]
        empty = shard.empty or next(iter(theta.values()))[mine].shape[0] == 0
        for task, rows in task_groups(ids, shard.index.shape[0]) if not empty else ():
            rows = shard.index[rows]
            task_theta = {name: theta[name][mine] for name in sites_by_task[task]}
            stats = gradient_statistics(
                model, task_theta, rows_of(rows), data.y[rows], task, self.curvature
            )
            total = total + stats.loss
            for name, value in stats.gradients.items():
                sums.gradient_views[name][mine].add_(value)
            for name, value in (stats.squared or {}).items():
                sums.squared_views[name].add_(value)
        flat = [total, sums.gradients] + ([sums.squared] if sums.squared is not None else [])
        if scale != 1.0:  # this rank's samples stand for the whole minibatch
            flat = [value * scale for value in flat]
        total, gradients, *squared = all_reduce_sums(flat)
        return total, gradients, squared[0] if squared else None

    def _samples_of_this_rank(self, shard: Shard) -> tuple[slice, float]:
        """Which weight samples this rank evaluates (a slice of the sample dimension) and the
        factor on its sums: all samples and 1, unless ``spread_samples`` spreads them over the
        ranks."""
        rank, world = rank_and_world()
        if not self.spread_samples or world == 1:
            return slice(None), 1.0
        if shard.empty:
            raise ValueError(
                f"spread_samples needs at least one point per process in every minibatch; a "
                f"minibatch of {shard.global_size} points is split over {world} processes"
            )
        return slice(rank, None, world), shard.global_size / len(shard.index)

    def _initialise(self, state: NaturalGradientState, effective_size: float) -> None:  # noqa: B027
        """Set up method-specific buffers before the first step (nothing by default)."""

    @abstractmethod
    def _update(
        self,
        state: NaturalGradientState,
        gradients: torch.Tensor,
        squared: torch.Tensor | None,
        noise: torch.Tensor,
        batch_size: int,
        effective_size: float,
    ) -> torch.Tensor:
        """Move ``state.loc``, ``state.precision`` and ``state.scale`` (in place) one step, from
        the minibatch's summed gradients ``(S, D)`` at the samples ``θ_s = μ + ε_s/√s``
        (``noise`` is ``ε``, ``(S, D)``) and, for curvature methods, the summed squared
        per-example gradients ``(D,)``.

        :returns: the KL of the new guide to the prior but for its constant,
            :func:`~pyro_cl.kl.precision_kl` (computed in the same, possibly fused, function).
        """


def check_rate(name: str, value: float) -> float:
    """``value`` if it lies in (0, 1], else a ``ValueError`` naming it."""
    return checked_real(value, name, 0, 1, low_open=True)
