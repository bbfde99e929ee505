"""How the guide starts a task: VCL appendix A's initialisation and the re-initialisation
policies between tasks (:class:`~pyro_cl.infer.config.Initialisation`)."""

from __future__ import annotations

from pyro_cl.fitters.point_fit import fit_point_estimate
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.points import Points
from pyro_cl.posterior import read_priors

__all__ = ["initialise_guide", "start_means"]


def initialise_guide(
    context: FitContext,
    guide: MeanFieldGuide,
    data: Points,
    task_id: int,
    sites: list[str],
    first_task: bool,
) -> None:
    """Before a task's fit:

    * later tasks: re-initialise the sites by ``between_tasks`` ("keep" starts from the last
      posterior, as the VCL reference code does; see :meth:`MeanFieldGuide.reinitialise`), with
      ``later_init_log_variance``;
    * the first task: maximum-likelihood training of the means for ``ml_init_epochs`` epochs on
      the task's own points (VCL appendix A), or, with that off, Kurle et al.'s appendix I where
      ``init_means`` is "moment_matched", or PyTorch's initialisation of a new layer where
      ``init_means`` or ``between_tasks`` is "fresh" (the VOGN thesis).
    """
    settings = context.config.initialisation
    priors = read_priors(context.model.net, sites)
    if not first_task:
        guide.reinitialise(settings.between_tasks, priors, settings.later_init_log_variance)
        return
    epochs = settings.ml_init_epochs
    if epochs is None:
        epochs = context.config.schedule.epochs
    if epochs > 0:
        own = data.select(data.task_ids == task_id)
        if len(own):
            task_sites = context.model.sites(guide, own.x, [task_id])
            problem = FitProblem(own, task_sites, epochs, context.batch_size(), "ML initialisation")
            # a start, not a task's fit: a fresh Adam whether or not the learner carries one
            fit_point_estimate(context.with_fresh_adam(), guide, problem)
    else:
        start_means(context, guide, sites)


def start_means(context: FitContext, guide: MeanFieldGuide, sites: list[str]) -> None:
    """The first task's start without a maximum-likelihood fit: Kurle et al.'s appendix I where
    ``init_means`` is "moment_matched", PyTorch's initialisation of a new layer where it or
    ``between_tasks`` is "fresh"; else the guide's own (the prior mean plus noise)."""
    settings = context.config.initialisation
    priors = read_priors(context.model.net, sites)
    if settings.init_means == "moment_matched":
        guide.match_prior_moments(priors, settings.init_alpha, settings.init_beta)
    elif "fresh" in (settings.init_means, settings.between_tasks):
        guide.reinitialise("fresh", priors)
