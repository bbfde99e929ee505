"""One fit of a learner's step, checked: whatever fitter fits, its result passes the same
divergence test (:class:`~pyro_cl.infer.divergence.DivergenceError` names the failure, and the
learner's transaction rolls the step back)."""

from __future__ import annotations

from typing import Protocol

import torch

from pyro_cl.fitters.fitter import Fitter
from pyro_cl.guides import Guide
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.data_parallel import check_replicas_agree
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.posterior import Posterior
from pyro_cl.transitions.base import Transition

__all__ = ["checked_fit", "step_size"]


class Fitting(Protocol):
    """What a checked fit uses of :class:`~pyro_cl.ContinualLearner` (a protocol, so that this
    module does not import the learner)."""

    fitter: Fitter
    transition: Transition
    config: TrainingConfig
    model: object


def checked_fit(
    learner: Fitting, context: FitContext, guide: Guide, problem: FitProblem
) -> tuple[list[float], Posterior | None]:
    """Fit ``guide`` with the learner's fitter, then check the fitted values (the losses are
    checked during the fit).

    :returns: the epoch losses and the fitted posterior (``None`` for point estimates).
    :raises DivergenceError: if the fit diverged.
    :raises ValueError: for weighted data (a forgetting memory) and a fitter that cannot weigh
        likelihoods.
    """
    fitter = learner.fitter
    if problem.data.weights is not None and not fitter.takes_weights:
        raise ValueError(
            f"{type(fitter).__name__} cannot weigh the memory's likelihoods by age "
            f"(the {type(learner.transition).__name__} transition asks for it): use ELBOFitter, "
            "or no memory"
        )
    try:
        history = fitter.fit(context, guide, problem)
    except torch.linalg.LinAlgError as error:  # a joint family's covariance broke down
        raise DivergenceError(
            f"{problem.description}: a covariance of the fit stopped being positive definite "
            f"({' '.join(str(error).split())[:120]})"
        ) from error
    values = {**guide.locs(problem.sites), **learner.model.point_parameters()}
    learner.config.divergence.check_values(values, problem.description)
    check_replicas_agree(dict(guide.named_parameters()), "fitted parameters")
    return history, fitter.posterior(guide, problem.sites)


def step_size(fitter: Fitter, config: TrainingConfig) -> str:
    """The learning rate that shaped a fit, for an error message: the fitter's own (natural
    gradients), the optimiser's, or none for a closed-form fitter."""
    own = getattr(fitter, "learning_rate", None)
    if own is not None:
        return f", the fitter's learning rate {own:g}"
    if fitter.uses_optimiser:
        return f", learning rate {config.optimisation.learning_rate:g}"
    return ""
