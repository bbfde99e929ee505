"""Point estimates: maximum likelihood, or MAP under a quadratic (or any) penalty.

Fine-tuning is this fitter with no penalty; EWC, online EWC, SI and the maximum-likelihood
initialisation of VCL (appendix A) are the same fit with a different :class:`~pyro_cl.fitters.penalty.Penalty` or none.
The fitted values are the guide's means, so the guide carries them from task to task.
"""

from __future__ import annotations

from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.initialisation import start_means
from pyro_cl.fitters.penalty import Penalty
from pyro_cl.fitters.point_fit import fit_point_estimate
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem

__all__ = ["PointEstimateFitter"]


class PointEstimateFitter(Fitter):
    """Maximum likelihood for the guide's means (fine-tuning), or MAP with a ``penalty``.

    Each task starts from the previous task's values; prediction uses them as a point estimate
    and no posterior is handed on (:attr:`Fitter.point_estimate`).

    :param penalty: a :class:`Penalty` (EWC, SI, ...), or ``None`` for plain fine-tuning.
    """

    name = "point_estimate"
    point_estimate = True
    takes_weights = True  # weighted likelihoods: a balanced replay buffer's
    fits_local_guide = True
    trains_point_parameters = True  # the net's own parameters, unpenalised

    def __init__(self, penalty: Penalty | None = None) -> None:
        if penalty is not None and not isinstance(penalty, Penalty):
            raise TypeError(f"penalty must be a Penalty or None, got {penalty!r}")
        self.penalty = penalty

    def prepare(self, context, guide, data, task_id, sites, first_task) -> None:
        """The first task starts where ``init_means`` says (:func:`start_means`: the guide's
        own start, PyTorch's ``"fresh"`` one, or ``"moment_matched"``; a maximum-likelihood
        start is moot before a maximum-likelihood fit); later tasks from the previous task's
        values."""
        if first_task:
            start_means(context, guide, sites)

    def fit(
        self,
        context: FitContext,
        guide: MeanFieldGuide,
        problem: FitProblem,
    ) -> list[float]:
        history = fit_point_estimate(context, guide, problem, self.penalty)
        if self.penalty is not None:
            values = {name: value.detach() for name, value in guide.locs(problem.sites).items()}
            self.penalty.after_fit(context, values, problem.data, problem.data.tasks()[0])
        return history

    def posterior(self, guide: MeanFieldGuide, sites: list[str]) -> None:
        """Nothing is handed on: the fitted values stay in the guide's means."""
        return None

    def state_dict(self) -> dict:
        return {} if self.penalty is None else {"penalty": self.penalty.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.penalty is not None:
            self.penalty.load_state_dict(state.get("penalty", {}))
