"""A pyro_cl learner offered to river users: river's classifier interface over whole time steps.

river's online classifiers learn one row at a time (``learn_one``) or a frame at a time
(``learn_many``) and predict class probabilities as dicts (``predict_proba_one``) or frames
(``predict_proba_many``). A Bayesian continual learner learns a *time step* at a time, each step
one transaction whose posterior becomes the next prior. :class:`OnlineClassifier` keeps both
promises: rows are buffered in arrival order, and every ``step_size`` rows become one
``observe`` (one transaction, one transition); predictions use the posterior of the steps learnt
so far, never rows still in the buffer. So ``step_size`` rows given one at a time and the same
rows given at once leave the learner in the same state, and a river evaluation loop (predict a
row, then learn it) is one-step-ahead at the granularity of a step.

Rows are ``{feature: value}`` dicts (or a pandas frame's rows); the feature names and their
order are fixed by the first row seen. Labels may be any hashable values listed in ``classes``.
River itself is not imported: any caller of this interface works.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch

from pyro_cl.checks import checked_count
from pyro_cl.learner.learner import ContinualLearner

__all__ = ["OnlineClassifier"]


class OnlineClassifier:
    """``learn_one`` / ``learn_many`` / ``predict_proba_one`` / ``predict_proba_many`` /
    ``predict_one`` over ``learner``, ``step_size`` rows a step.

    :param learner: a learner of a classifier (categorical or Bernoulli likelihood) whose net
        takes ``len(features)`` inputs.
    :param classes: the labels, in the order of the net's classes.
    :param step_size: rows per time step (one ``observe`` each).
    """

    def __init__(
        self, learner: ContinualLearner, classes: Sequence[Hashable], step_size: int
    ) -> None:
        if not isinstance(learner, ContinualLearner):
            raise TypeError(f"learner must be a ContinualLearner, got {type(learner).__name__}")
        self.learner = learner
        self.classes = list(classes)
        if len(set(self.classes)) != len(self.classes) or len(self.classes) < 2:
            raise ValueError(f"classes must be two or more distinct labels, got {self.classes}")
        self.step_size = checked_count(step_size, "step_size")
        self.features: list[Hashable] | None = None
        self.rows_learnt = 0
        self._rows: list[np.ndarray] = []
        self._labels: list[int] = []

    # ------------------------------------------------------------------ rows
    def _vector(self, x: Mapping) -> np.ndarray:
        if not isinstance(x, Mapping):
            raise TypeError(f"a row must be a {{feature: value}} dict, got {type(x).__name__}")
        if self.features is None:
            self.features = list(x)
        if set(x) != set(self.features):
            missing = [f for f in self.features if f not in x]
            extra = [f for f in x if f not in self.features]
            raise ValueError(
                f"row's features differ from the first row's: missing {missing}, new {extra}"
            )
        return np.array([float(x[f]) for f in self.features])

    def _class_index(self, y: Hashable) -> int:
        try:
            return self.classes.index(y)
        except ValueError:
            raise ValueError(f"label {y!r} is not one of the classes {self.classes}") from None

    def _frame_rows(self, X) -> list[dict]:
        if hasattr(X, "to_dict"):  # a pandas frame
            return X.to_dict(orient="records")
        return [dict(row) for row in X]

    # ------------------------------------------------------------------ learning
    def learn_one(self, x: Mapping, y: Hashable) -> None:
        """Buffer the row; learn a step when ``step_size`` rows are buffered."""
        self._rows.append(self._vector(x))
        self._labels.append(self._class_index(y))
        if len(self._rows) == self.step_size:
            self.flush()

    def learn_many(self, X, y) -> None:
        """:meth:`learn_one` for every row of ``X`` (a frame or a sequence of dicts) in order."""
        rows = self._frame_rows(X)
        labels = list(y.tolist() if hasattr(y, "tolist") else y)
        if len(rows) != len(labels):
            raise ValueError(f"{len(rows)} rows but {len(labels)} labels")
        for row, label in zip(rows, labels, strict=True):
            self.learn_one(row, label)

    def flush(self) -> None:
        """Learn the buffered rows now as one step (if any), even if fewer than ``step_size``;
        if the step fails the rows stay buffered and the learner is as it was."""
        if not self._rows:
            return
        x = torch.as_tensor(np.stack(self._rows), dtype=torch.float32)
        y = torch.as_tensor(self._labels, dtype=torch.long)
        time = float(self.rows_learnt + len(self._rows))
        self.learner.observe((x, y), time=time)
        self.rows_learnt += len(self._rows)
        self._rows, self._labels = [], []

    # ------------------------------------------------------------------ prediction
    def _probabilities(self, rows: list[dict]) -> np.ndarray:
        if not self.learner.tasks_seen:
            return np.full((len(rows), len(self.classes)), 1 / len(self.classes))
        x = torch.as_tensor(np.stack([self._vector(row) for row in rows]), dtype=torch.float32)
        return self.learner.predict(x).detach().cpu().double().numpy()

    def predict_proba_one(self, x: Mapping) -> dict[Hashable, float]:
        """``{label: probability}`` from the steps learnt so far (uniform before the first)."""
        return dict(zip(self.classes, self._probabilities([x])[0].tolist(), strict=True))

    def predict_one(self, x: Mapping) -> Hashable:
        """The most probable label."""
        probabilities = self.predict_proba_one(x)
        return max(probabilities, key=probabilities.get)

    def predict_proba_many(self, X):
        """A frame of probabilities, a column per label (a frame in, a frame out; otherwise an
        ``(N, C)`` array)."""
        probabilities = self._probabilities(self._frame_rows(X))
        if hasattr(X, "to_dict"):
            import pandas as pd

            return pd.DataFrame(probabilities, columns=self.classes, index=X.index)
        return probabilities
