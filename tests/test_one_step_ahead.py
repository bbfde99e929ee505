"""The one-step-ahead protocol: no label is read before its step is predicted, scores by hand,
river's interface row by row."""

import math

import numpy as np
import pytest
import torch

from pyro_cl.app.one_step_ahead import OnStream, RiverOnStream, one_step_ahead, summary
from pyro_cl.data.streams import OnlineStream, TimeStep
from pyro_cl.transitions import Wiener
from tests.test_transitions_drift import drift_data, drift_learner


class SealedLabels:
    """Labels that refuse to be read until the learner has predicted their step."""

    def __init__(self, labels: torch.Tensor, step: int, predicted: set) -> None:
        self.labels, self.step, self.predicted = labels, step, predicted

    def _open(self) -> torch.Tensor:
        if self.step > 0 and self.step not in self.predicted:
            raise AssertionError(f"step {self.step}'s labels were read before it was predicted")
        return self.labels

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._open(), dtype=dtype)

    def __len__(self):
        return len(self._open())


class Recorder:
    """A learner predicting fixed probabilities; it records what it was given, in order."""

    def __init__(self, probabilities: np.ndarray, predicted: set) -> None:
        self.probabilities, self.predicted, self.calls = probabilities, predicted, []

    def predict_proba(self, x, time):
        self.predicted.add(int(time))
        self.calls.append(("predict", int(time)))
        return np.tile(self.probabilities, (len(x), 1))

    def learn(self, x, y, time):
        self.calls.append(("learn", int(time), list(y)))


def stream(labels_per_step, predicted=None):
    steps = []
    for k, labels in enumerate(labels_per_step):
        y = torch.tensor(labels)
        y = y if predicted is None else SealedLabels(y, k, predicted)
        steps.append(TimeStep(k, float(k), torch.zeros(len(labels), 2), y))
    return OnlineStream("test", tuple(steps), None, 2, 3, False)


def test_no_label_is_read_before_its_step_is_predicted():
    predicted = set()
    learner = Recorder(np.array([0.2, 0.5, 0.3]), predicted)
    one_step_ahead(learner, stream([[0, 1], [2, 2], [1, 0]], predicted))
    assert learner.calls == [
        ("learn", 0, [0, 1]),
        ("predict", 1),
        ("learn", 1, [2, 2]),
        ("predict", 2),
        ("learn", 2, [1, 0]),
    ]


def test_scores_by_hand_with_the_floor():
    learner = Recorder(np.array([0.0, 0.7, 0.3]), set())
    scores = one_step_ahead(learner, stream([[0], [1, 2], [0, 1]]), floor=1e-4)
    assert scores.accuracy == [0.5, 0.5]
    assert scores.log_likelihood == pytest.approx(
        [(math.log(0.7) + math.log(0.3)) / 2, (math.log(1e-4) + math.log(0.7)) / 2]
    )
    assert len(scores.learn_seconds) == 3 and len(scores.predict_seconds) == 2
    last = summary(scores, 0.5)
    assert last["steps"] == 1
    assert last["log_likelihood"] == pytest.approx(scores.log_likelihood[1])
    # both rows of the last step are predicted with confidence 0.7: one right, one wrong
    assert last["calibration_error"] == pytest.approx(abs(0.5 - 0.7))
    assert summary(scores, 1.0)["accuracy"] == 0.5
    with pytest.raises(ValueError, match="fraction"):
        summary(scores, 0.0)


class FakeRiverModel:
    """river's interface: dict rows; knows only the labels it has learnt."""

    def __init__(self):
        self.learnt = []

    def predict_proba_one(self, x):
        assert list(x) == [0, 1]
        if not self.learnt:
            return {}
        labels = [label for _, label in self.learnt]
        return {label: labels.count(label) / len(labels) for label in set(labels)}

    def learn_one(self, x, y):
        self.learnt.append((x, y))


def test_a_river_model_learns_row_by_row_and_unseen_classes_get_the_floor():
    model = FakeRiverModel()
    adapter = RiverOnStream(model, num_classes=3)
    steps = stream([[0, 0], [0, 2], [1, 2]])
    assert np.allclose(adapter.predict_proba(np.zeros((2, 2)), 0.0), 1 / 3)  # no opinion yet
    scores = one_step_ahead(adapter, steps)
    assert [y for _, y in model.learnt] == [0, 0, 0, 2, 1, 2]
    assert [x for x, _ in model.learnt][0] == {0: 0.0, 1: 0.0}
    # step 1 predicted from two 0s: label 2 never seen, charged log(1e-6)
    assert scores.log_likelihood[0] == pytest.approx((math.log(1.0) + math.log(1e-6)) / 2)


class SpyLearner:
    """A pyro_cl learner's surface: records the time it is asked to predict at."""

    def __init__(self):
        self.predicted_at, self.observed = [], []

    def predict(self, x, time=None):
        self.predicted_at.append(time)
        return torch.full((len(x), 2), 0.5)

    def observe(self, data, time=None):
        x, y = data
        assert x.dtype == torch.float32 and y.dtype == torch.long
        self.observed.append(time)


@pytest.mark.parametrize("at_time", [True, False])
def test_a_pyro_cl_learner_predicts_at_the_step_time_or_with_its_posterior(at_time):
    spy = SpyLearner()
    one_step_ahead(OnStream(spy, at_time), stream([[0], [1], [0, 1]]))
    assert spy.observed == [0.0, 1.0, 2.0]
    assert spy.predicted_at == ([1.0, 2.0] if at_time else [None, None])


def test_a_real_learner_runs_the_protocol():
    data = drift_data(4)
    steps = tuple(TimeStep(k, float(k), x, y) for k, (x, y) in enumerate(data))
    scores = one_step_ahead(
        OnStream(drift_learner(Wiener(0.3, 1.0))), OnlineStream("drift", steps, None, 2, 2, False)
    )
    assert len(scores.accuracy) == 3
    for probabilities in scores.probabilities:
        assert np.allclose(probabilities.sum(1), 1.0)
