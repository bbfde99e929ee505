"""Gradual self-training (Kumar, Ma & Liang, "Understanding self-training for gradual domain
adaptation", ICML 2020), as a step of a continual learner.

A model fitted on a labelled source predicts an unlabelled domain a little shifted from it; its
confident predictions are mostly right, so fitting them as labels moves the model toward the
domain. Repeated along a sequence of gradually shifting domains (their algorithm 1, "gradual
self-training"), each step's shift stays small enough for the pseudo-labels to hold, where
self-training on the far target directly fails. The paper regularises every fit (an L2 penalty,
early stopping, hard labels); here the regulariser is the learner's own: the step's prior is the
posterior so far, so :func:`self_train` is one ordinary ``observe`` of pseudo-labelled data, with
the learner's transaction, transition and memory.

Pseudo-labels are hard (the argmax of the learner's predictive, as the paper finds necessary:
soft labels leave a model where it is) and only the ``keep`` most confident fraction of the
points is fitted (the paper drops the least confident 10-20%).
"""

from __future__ import annotations

import torch

from pyro_cl.learner.learner import ContinualLearner

__all__ = ["self_train"]


def self_train(
    learner: ContinualLearner,
    x: torch.Tensor,
    task_id: int | None = None,
    keep: float = 0.8,
    time: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label ``x`` with ``learner``'s predictive, keep the ``keep`` most confident fraction and
    observe it as one step (Kumar et al. 2020, eq. 2's self-training step, with the posterior so
    far as the regulariser).

    :param task_id: the head that predicts and learns (a multi-head net's).
    :param keep: the fraction of the points fitted, the most confident first (``0 < keep <= 1``).
    :returns: the indices of the points fitted (into ``x``) and their pseudo-labels.
    :raises ValueError: for a ``keep`` outside ``(0, 1]`` or a learner of a regression model.
    """
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep is the fraction of points fitted, in (0, 1], not {keep!r}")
    x = torch.as_tensor(x)
    try:
        probabilities = learner.predict(x, task_id)
    except TypeError as error:  # a likelihood without classes
        raise ValueError(f"self-training needs a classifier: {error}") from error
    confidence, labels = probabilities.max(-1)
    count = max(1, int(round(keep * len(x))))
    chosen = confidence.argsort(descending=True, stable=True)[:count].cpu()
    chosen = chosen.sort().values  # the points in their own order
    labels = labels.cpu()[chosen]
    learner.observe((x[chosen], labels), task_id=task_id, time=time)
    return chosen, labels
