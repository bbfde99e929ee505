"""SVI: Adam on the negative ELBO of VCL eq. 4, the default fitter."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from pyro_cl.checks import checked_real
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.mean_precision import mean_precision_term
from pyro_cl.fitters.point_fit import net_point_parameters
from pyro_cl.guides import MEAN_FIELD, MeanFieldGuide
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.infer.packed_gaussians import PackedGaussians
from pyro_cl.infer.parts import Parts
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.points import data_size

__all__ = ["ELBOFitter", "data_size"]


class ELBOFitter(Fitter):
    """Minimise ``KL(q || prior)/N - (1/M) Σ_{batch} E_q[log p(y_n | θ, x_n)]`` with Adam.

    This is VCL eq. 4 divided by the data's size ``N`` (:func:`~pyro_cl.infer.objectives.negative_elbo`),
    with the configuration's ``num_particles`` Monte Carlo samples (local reparameterisation) and
    the analytic KL against the model's current priors, optimised with Adam at
    ``learning_rate`` (and its decay) over minibatches. Points of several tasks (a coreset) run
    each through its own head. Weighted data (``data.weights``) fits
    ``KL(q || prior) - Σ_n w_n E_q[log p(y_n | θ, x_n)]`` (Kurle et al. 2020, eq. 12).

    :param heads_in_kl: with ``False`` the output heads' sites of a multi-head net are fitted
        without their KL term (free parameters of ``q``, as the VCL reference code fits the
        generative heads; an ablation, not eq. 4). Needs the fast route.
    :param kl_weight: ``β`` of GVCL's β-ELBO (Loo, Swaroop & Turner 2021, eq. 3): the KL term is
        multiplied by ``β``, so the fit targets the tempered posterior
        ``∝ prior · likelihood^{1/β}``; ``β < 1`` lets each task move the posterior further from
        the last (GVCL's answer to VCL's over-pruning), and ``β → 0`` with the variances
        ``O(β)`` is online EWC (GVCL section 3). ``β = 1`` is VCL.
    :param mean_precision_weight: GVCL's ``λ``: the precision the data have added to each
        weight's prior counts ``λ`` times in the KL's mean term
        (:mod:`~pyro_cl.fitters.mean_precision`); with ``β → 0`` the means then follow online EWC
        at strength ``λ``. ``1`` is the KL. Mean-field guides.
    """

    name = "elbo"
    takes_weights = True
    adam_fits_variances = True
    fits_local_guide = True
    trains_point_parameters = True
    #: Any family: the ELBO takes each block's KL and joint draws (the guide's ``joint_terms``).
    guide_families = None
    #: Any first prior: its KL is the registered closed form or a Monte Carlo term
    #: (:func:`~pyro_cl.kl.site_kl`).
    prior_families = None

    def __init__(
        self, heads_in_kl: bool = True, kl_weight: float = 1.0, mean_precision_weight: float = 1.0
    ) -> None:
        if not isinstance(heads_in_kl, bool):
            raise ValueError(f"heads_in_kl must be True or False, got {heads_in_kl!r}")
        self.heads_in_kl = heads_in_kl
        self.kl_weight = checked_real(kl_weight, "kl_weight", 0, low_open=True)
        self.mean_precision_weight = checked_real(mean_precision_weight, "mean_precision_weight", 0)

    def check_parts(self, parts: Parts) -> None:
        """As :meth:`Fitter.check_parts`; and ``heads_in_kl=False`` drops the heads' KL, and
        ``mean_precision_weight`` reweighs its mean term, of a mean-field guide only (a joint
        block's KL is one term)."""
        super().check_parts(parts)
        mean_field = parts.guide is None or MEAN_FIELD in parts.guide.lineage()
        if not self.heads_in_kl and not mean_field:
            raise ValueError(
                f"heads_in_kl=False needs the mean-field guide family, not {parts.guide.name!r}"
            )
        if self.mean_precision_weight != 1 and not mean_field:
            raise ValueError(
                "mean_precision_weight (GVCL's λ) needs the mean-field guide family, not "
                f"{parts.guide.name!r}"
            )

    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        problem: FitProblem,
    ) -> list[float]:
        model, data, sites = context.model, problem.data, problem.sites
        task_id = model.task_argument(data)
        num_data = len(data)
        num_particles = context.config.monte_carlo.num_particles
        # Weighted likelihoods: N_eff = Σ w_n is the data size of the bound (a zero-weight point
        # changes nothing), and the weights are rescaled to mean 1 so that a minibatch's
        # (1/M) Σ w̃_n log p(y_n) estimates Σ_n w_n log p(y_n) / N_eff.
        size = data_size(data)
        weights = None if data.weights is None else data.likelihood_weights() * (num_data / size)

        rows_of = RowGather(data.x)
        # Adam's carried state is kept per site: a packed fit of a later step (a new head
        # beside the trunk) would share one step count among sites with different histories
        packable = context.adam_moments is None
        with _packed(model, guide, sites, self._kl_free(model, sites), packable) as packed:
            regulariser = self._regulariser(context, guide, problem, packed)
            kl_weight = self._parameter_kl_weight()

            def loss(index: torch.Tensor) -> torch.Tensor:
                ids = task_id if isinstance(task_id, int) else task_id[index]
                rows = Minibatch(
                    rows_of(index),
                    data.y[index],
                    ids,
                    None if weights is None else weights[index],
                )
                value = negative_elbo(
                    model, guide, rows, size, num_particles, packed=packed, kl_weight=kl_weight
                )
                return value if regulariser is None else value + regulariser() / size

            parameters = {**_trained_parameters(guide, packed), **net_point_parameters(model)}
            by_site = dict(guide.named_parameters())  # what callbacks see: values by site
            return context.minimise(loss, parameters, problem, watched=by_site)

    def _parameter_kl_weight(self) -> float:
        """The weight of ``KL(q || prior)`` in this fit (``β``)."""
        return self.kl_weight

    def _regulariser(self, context, guide, problem, packed):
        """A term ``R`` added to every minibatch's loss as ``R / N`` (``None``: nothing), built
        once per fit: ``β (KL_λ - KL)``, GVCL's λ (:mod:`~pyro_cl.fitters.mean_precision`);
        subclasses put function-space terms here."""
        model = context.model
        free = set(self._kl_free(model, problem.sites))
        term = mean_precision_term(
            model,
            guide,
            [name for name in problem.sites if name not in free],
            context.initial_prior,
            self.mean_precision_weight,
            packed,
        )
        if term is None:
            return None
        kl_weight = self._parameter_kl_weight()
        return lambda: kl_weight * term()

    def _kl_free(self, model, sites: list[str]) -> list[str]:
        """The sites fitted without a KL term: the heads' with ``heads_in_kl=False``."""
        if self.heads_in_kl:
            return []
        if not model.fast or not hasattr(model.net, "head_sites"):
            raise ValueError(
                "heads_in_kl=False needs a multi-head net of pyro_cl's layers on the fast route"
            )
        return model.net.head_sites(sites)


def _packed(
    model, guide: MeanFieldGuide, sites: list[str], kl_free: list[str], packable: bool = True
) -> PackedGaussians | nullcontext:
    """The fit's Gaussian sites packed into flat tensors on the fast route (a no-op context,
    giving ``None``, on the Pyro route, without Gaussian sites or unless ``packable``)."""
    if not (packable and model.fast and PackedGaussians.packable(model, guide, sites)):
        return nullcontext()
    return PackedGaussians(model, guide, sites, kl_free)


def _trained_parameters(
    guide: MeanFieldGuide, packed: PackedGaussians | None
) -> dict[str, torch.nn.Parameter]:
    """What Adam updates: the packed leaves in place of the per-site tensors they hold, and every
    other parameter of the guide."""
    parameters = dict(guide.named_parameters())
    if packed is None:
        return parameters
    inside = {id(p) for pair in guide.gaussian_parameters(packed.names).values() for p in pair}
    rest = {name: p for name, p in parameters.items() if id(p) not in inside}
    return {**{f"packed.{k}": v for k, v in packed.parameters().items()}, **rest}
