"""Plain fine-tuning: maximum likelihood on each task in turn, no prior (the forgetting baseline)."""

from __future__ import annotations

import torch

from pyro_cl.infer.learner import ContinualLearner

__all__ = ["FineTuning"]


class FineTuning(ContinualLearner):
    """Train the deterministic net (the guide's means) by maximum likelihood on each task,
    starting from the previous task's weights and ignoring the prior entirely.

    Same net, optimiser, batches and epochs as :class:`~pyro_cl.VCL`, so the difference in
    accuracy is what the Bayesian prior buys. Predicts with the point estimate.
    """

    point_estimate = True

    def _learn(self, x: torch.Tensor, y: torch.Tensor, task_id: int) -> list[float]:
        history = self._fit_point_estimate(
            x,
            y,
            task_id,
            self.config.task_epochs(first_task=not self.tasks_seen),
            f"fine-tuning task {task_id}",
        )
        self._record_trained(self._active_sites(x, task_id))
        return history

    def prediction_sites(self, x: torch.Tensor, task_id: int) -> dict:
        return {k: v.detach() for k, v in self.guide.locs(self._active_sites(x, task_id)).items()}

    def current_prior(self) -> dict:
        return {}
