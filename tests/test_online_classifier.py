"""river's classifier interface over a pyro_cl learner: a step per ``step_size`` rows."""

import numpy as np
import pytest
import torch

from pyro_cl import Wiener
from pyro_cl.learner.online_classifier import OnlineClassifier
from tests.test_transitions_drift import assert_same_posterior, drift_data, drift_learner

CLASSES = ["dry", "rain"]


def rows(step):
    x, y = drift_data(3)[step]
    return [{"pressure": float(a), "humidity": float(b)} for a, b in x], [
        CLASSES[int(v)] for v in y
    ]


def test_one_row_at_a_time_equals_the_learner_observing_the_steps():
    classifier = OnlineClassifier(drift_learner(Wiener(0.1)), CLASSES, step_size=12)
    learner = drift_learner(Wiener(0.1))
    for step in range(2):
        x, y = rows(step)
        for row, label in zip(x, y, strict=True):
            classifier.learn_one(row, label)
        learner.observe(drift_data(3)[step], time=12.0 * (step + 1))
    assert classifier.learner.times == learner.times == [12.0, 24.0]
    assert_same_posterior(classifier.learner, learner)


def test_rows_wait_in_the_buffer_until_a_step_is_full():
    classifier = OnlineClassifier(drift_learner(Wiener(0.1)), CLASSES, step_size=12)
    x, y = rows(0)
    assert classifier.predict_proba_one(x[0]) == {"dry": 0.5, "rain": 0.5}  # nothing learnt
    classifier.learn_many(x[:11], y[:11])
    assert classifier.learner.times == []
    classifier.learn_one(x[11], y[11])
    assert classifier.learner.times == [12.0]
    probabilities = classifier.predict_proba_one(x[0])
    assert set(probabilities) == set(CLASSES)
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert classifier.predict_one(x[0]) == max(probabilities, key=probabilities.get)
    classifier.learn_one(x[0], y[0])
    classifier.flush()  # a partial step, on request
    assert classifier.learner.times == [12.0, 13.0]
    many = classifier.predict_proba_many(x[:3])
    assert many.shape == (3, 2) and np.allclose(many.sum(1), 1.0)


def test_a_frame_in_gives_a_frame_out():
    pd = pytest.importorskip("pandas")
    classifier = OnlineClassifier(drift_learner(Wiener(0.1)), CLASSES, step_size=12)
    x, y = rows(0)
    classifier.learn_many(pd.DataFrame(x), pd.Series(y))
    frame = classifier.predict_proba_many(pd.DataFrame(x[:4], index=[5, 6, 7, 8]))
    assert list(frame.columns) == CLASSES and list(frame.index) == [5, 6, 7, 8]


def test_bad_rows_and_labels_are_refused_by_name():
    classifier = OnlineClassifier(drift_learner(Wiener(0.1)), CLASSES, step_size=12)
    x, y = rows(0)
    classifier.learn_one(x[0], y[0])
    with pytest.raises(ValueError, match="'snow' is not one of the classes"):
        classifier.learn_one(x[1], "snow")
    with pytest.raises(ValueError, match=r"missing \['humidity'\], new \['wind'\]"):
        classifier.learn_one({"pressure": 1.0, "wind": 2.0}, "dry")
    with pytest.raises(TypeError, match="dict"):
        classifier.learn_one([1.0, 2.0], "dry")
    with pytest.raises(ValueError, match="2 rows but 1 labels"):
        classifier.learn_many(x[:2], y[:1])
    with pytest.raises(ValueError, match="distinct"):
        OnlineClassifier(drift_learner(Wiener(0.1)), ["a", "a"], step_size=2)
    with pytest.raises(TypeError, match="ContinualLearner"):
        OnlineClassifier("learner", CLASSES, step_size=2)


def test_a_failed_step_keeps_its_rows_buffered(monkeypatch):
    classifier = OnlineClassifier(drift_learner(Wiener(0.1)), CLASSES, step_size=2)
    x, y = rows(0)

    def diverge(*args, **kwargs):
        raise RuntimeError("the fit diverged")

    monkeypatch.setattr(classifier.learner, "_step", diverge)
    classifier.learn_one(x[0], y[0])
    with pytest.raises(RuntimeError):
        classifier.learn_one(x[1], y[1])
    monkeypatch.undo()
    classifier.flush()
    assert classifier.learner.times == [2.0] and classifier.rows_learnt == 2
    assert torch.is_tensor(classifier.learner.predict(torch.zeros(1, 2)))
