"""Fitters: how a task's posterior is fitted against the current prior.

A fitter is the part of a learner that turns data into a posterior: it gets the model (whose
priors hold the current prior), the guide, the points and the sites they use, and it fits the
guide. Built-ins:

* :class:`~pyro_cl.fitters.elbo_fitter.ELBOFitter` — Adam on the negative ELBO (VCL eq. 4), SVI;
* :class:`~pyro_cl.fitters.vogn.VOGN`, :class:`~pyro_cl.fitters.ivon.IVON` — natural-gradient
  updates of the guide's means and precisions (VOGN thesis eq. 52/53; Shen et al. 2024);
* :class:`~pyro_cl.fitters.point_estimate.PointEstimateFitter` — maximum likelihood (or MAP with a
  :class:`~pyro_cl.fitters.penalty.Penalty`) for the guide's means: fine-tuning, EWC, SI.

Write your own by subclassing :class:`Fitter`, giving it a ``name`` (it then saves and loads
like the built-ins) and implementing :meth:`Fitter.fit`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from torch.distributions import Normal

from pyro_cl.finite import all_finite
from pyro_cl.fitters.initialisation import initialise_guide
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.parts import Parts
from pyro_cl.points import Points
from pyro_cl.posterior import Posterior, base_distribution, distribution_parameters
from pyro_cl.spec import Registrable

__all__ = ["Fitter", "checked_posterior"]


class Fitter(Registrable, kind="fitter"):
    """Base class: fits a guide to data against the model's current priors."""

    #: True when the fit produces point values (the guide's means) and no posterior:
    #: prediction then uses the means and nothing is handed to the next prior.
    point_estimate: ClassVar[bool] = False

    @property
    def predicts_with_mean(self) -> bool:
        """True when predictions use the fitted means (point estimates always; a fitter with a
        posterior may choose to, e.g. Laplace propagation's MAP)."""
        return self.point_estimate

    #: True when the fit trains a model's amortised local guide (a generative model's
    #: encoders) along with the global sites; learners refuse such models otherwise.
    fits_local_guide: ClassVar[bool] = False

    #: True when the fit runs the configuration's optimiser (Adam at its learning rate); a
    #: closed-form fitter says False, so no error names a learning rate it never uses.
    uses_optimiser: ClassVar[bool] = True

    #: True when Adam fits the guide's log-variances (the ELBO's fitters), so the configuration's
    #: ``variance_learning_rate`` applies; a learner refuses that setting with any other fitter.
    adam_fits_variances: ClassVar[bool] = False

    #: True when the fit multiplies each point's log-likelihood by ``data.weights`` (Bayesian
    #: forgetting with a memory needs it); the learner refuses weighted data otherwise.
    takes_weights: ClassVar[bool] = False

    #: True when the fit also trains the net's own parameters (deterministic parts of a
    #: Bayesian net, ``make_bayesian(..., deterministic=...)``) as point values beside the guide.
    trains_point_parameters: ClassVar[bool] = False

    #: The distributions a pyro_cl layer's first prior may be for this fitter: Gaussian by
    #: default, since most fitters read a Gaussian prior's precision; ``None`` takes any (the
    #: ELBO fitters' KL is a closed form or a Monte Carlo term, :func:`~pyro_cl.kl.site_kl`).
    prior_families: ClassVar[tuple[type, ...] | None] = (Normal,)

    def check_parts(self, parts: Parts) -> None:
        """Refuse, when the learner is built, parts this fitter cannot work with (default: a
        model with amortised local sites, unless :attr:`fits_local_guide`; a net with
        parameters of its own, unless :attr:`trains_point_parameters`; a layer's first prior
        outside :attr:`prior_families`; a ``variance_learning_rate`` unless
        :attr:`adam_fits_variances`).

        :raises ValueError: naming the part and why.
        """
        model = parts.model
        site_index = getattr(model, "site_index", {})
        families = self.prior_families
        for name, (module, attribute) in site_index.items():
            if families is None or not hasattr(module, "set_prior"):  # not a pyro_cl layer
                continue
            prior = base_distribution(module.prior(attribute))
            if not isinstance(prior, families):
                raise ValueError(
                    f"{type(self).__name__} fits against "
                    f"{' or '.join(kind.__name__ for kind in families)} priors, and site "
                    f"{name!r} has a {type(prior).__name__} prior (fit it with ELBOFitter, "
                    "VCL's fitter, or choose a GaussianPrior)"
                )
        own = list(model.point_parameters()) if hasattr(model, "point_parameters") else []
        if own and not self.trains_point_parameters:
            raise ValueError(
                f"{type(self).__name__} fits the guide only, and the net has parameters of its "
                f"own (deterministic parts: {', '.join(own[:4])}{', ...' if len(own) > 4 else ''}"
                "): use ELBOFitter, FunctionSpaceFitter or a point estimate"
            )
        if getattr(model, "local_guide", None) is not None and not self.fits_local_guide:
            raise ValueError(
                f"{type(self).__name__} does not train the amortised encoders of "
                f"{type(model).__name__}; use ELBOFitter, PointEstimateFitter or "
                "LaplacePropagation"
            )
        config = parts.config
        if config is not None and config.optimisation.variance_learning_rate is not None:
            if not self.adam_fits_variances:
                raise ValueError(
                    "variance_learning_rate is Adam's step for the guide's log-variances, and "
                    f"{type(self).__name__} does not fit them with Adam: use ELBOFitter "
                    "(VCL's) or FunctionSpaceFitter, or leave it unset"
                )
        if config is not None and config.optimisation.carry_adam_state:
            if not self.uses_optimiser:
                raise ValueError(
                    f"carry_adam_state keeps Adam's state from task to task, and "
                    f"{type(self).__name__} does not fit with Adam: leave it False"
                )

    def prepare(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        data: Points,
        task_id: int,
        sites: list[str],
        first_task: bool,
    ) -> None:
        """Initialise ``guide`` before a task's fit (VCL appendix A's policy by default, see
        :func:`~pyro_cl.fitters.initialisation.initialise_guide`)."""
        initialise_guide(context, guide, data, task_id, sites, first_task)

    @abstractmethod
    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        problem: FitProblem,
    ) -> list[float]:
        """Fit ``guide``'s ``problem.sites`` to ``problem.data`` (whose likelihood counts
        ``problem.num_data`` points) against the model's current priors, for
        ``problem.epochs`` passes in minibatches of ``problem.batch_size``.

        :returns: the loss of every epoch.
        :raises DivergenceError: if the fit diverges (the learner then rolls everything back).
        """

    def posterior(self, guide: MeanFieldGuide, sites: list[str]) -> Posterior | None:
        """The fitted posterior of ``sites`` to hand to the next prior (``None``: nothing, for
        point estimates); checked finite."""
        return checked_posterior(guide.posterior(sites))


def checked_posterior(posterior: Posterior) -> Posterior:
    """``posterior`` unchanged, or a :class:`DivergenceError` if any site is not finite or has a
    zero scale."""
    for name, q in posterior.items():
        if not all(all_finite(value) for value in distribution_parameters(q).values()):
            raise DivergenceError(f"the posterior of site {name!r} is not finite")
        base = base_distribution(q)
        if hasattr(base, "scale") and not (base.scale > 0).all():
            raise DivergenceError(f"the posterior of site {name!r} has a zero variance")
    return posterior
