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


class MixturePredictor:
    """A regression learner predicting the same two-normal mixture for every row."""

    def __init__(self, predicted: set) -> None:
        self.predicted, self.learnt = predicted, []

    def predict_normals(self, x, time):
        self.predicted.add(int(time))
        means = np.array([[0.0], [2.0]]).repeat(len(x), 1)
        return means, np.array([[1.0], [0.5]]).repeat(len(x), 1)

    def learn(self, x, y, time):
        self.learnt.append(np.asarray(y).tolist())


def regression_stream(targets_per_step, predicted=None):
    steps = []
    for k, targets in enumerate(targets_per_step):
        y = torch.tensor(targets, dtype=torch.float32)
        y = y if predicted is None else SealedLabels(y, k, predicted)
        steps.append(TimeStep(k, float(k), torch.zeros(len(targets), 2), y))
    return OnlineStream("test", tuple(steps), None, 2, 1, True)


def test_a_regression_step_is_scored_by_its_predictive_mixture_by_hand():
    from scipy.stats import norm

    predicted = set()
    learner = MixturePredictor(predicted)
    scores = one_step_ahead(learner, regression_stream([[5.0], [0.5, 3.0]], predicted))
    assert learner.learnt == [[5.0], [0.5, 3.0]]
    density = [0.5 * norm.pdf(y, 0.0, 1.0) + 0.5 * norm.pdf(y, 2.0, 0.5) for y in (0.5, 3.0)]
    assert scores.log_likelihood == pytest.approx([np.mean(np.log(density))])
    assert scores.rmse == pytest.approx([math.sqrt(((1.0 - 0.5) ** 2 + (1.0 - 3.0) ** 2) / 2)])
    assert scores.accuracy == []
    last = summary(scores)
    assert set(last) == {"rmse", "log_likelihood", "seconds_per_step", "steps"}


class FakeRiverRegressor:
    """river's regressor interface: predicts the mean of the targets it has learnt (0 first)."""

    def __init__(self):
        self.targets = []

    def predict_one(self, x):
        return float(np.mean(self.targets)) if self.targets else 0.0

    def learn_one(self, x, y):
        assert isinstance(y, float)
        self.targets.append(y)


def test_a_river_regressor_is_charged_the_mean_squared_error_of_its_past_predictions():
    from pyro_cl.app.one_step_ahead import RiverRegressorOnStream

    adapter = RiverRegressorOnStream(FakeRiverRegressor())
    means, scales = adapter.predict_normals(np.zeros((2, 2)), 0.0)
    assert means.shape == (1, 2) and np.allclose(scales, 1.0)  # no error seen yet
    scores = one_step_ahead(adapter, regression_stream([[1.0, 3.0], [2.0, 6.0]]))
    # rows 1, 3 were predicted one at a time before each was learnt: 0, then 1
    errors = [(1.0 - 0.0) ** 2, (3.0 - 1.0) ** 2]
    mean, scale = 2.0, math.sqrt(np.mean(errors))
    expected = np.mean([-0.5 * ((y - mean) / scale) ** 2 - math.log(scale * math.sqrt(2 * math.pi))
                        for y in (2.0, 6.0)])  # fmt: skip
    assert scores.log_likelihood == pytest.approx([expected])
    assert adapter.rows == 4


def test_a_regression_drift_stream_is_standardised_by_its_first_step_and_learnt_by_a_net():
    from pyro_cl import VCL
    from pyro_cl.data.streams import drift_stream
    from pyro_cl.likelihoods import HeteroscedasticGaussianLikelihood
    from pyro_cl.nn import BayesianMLP

    rng = np.random.default_rng(0)
    x = rng.normal(size=(70, 2))
    y = 10.0 + 3.0 * x[:, 0] + 0.1 * rng.normal(size=70)
    stream = drift_stream(x, y, first_size=30, step_size=20, regression=True)
    assert stream.regression and stream.num_outputs == 1 and stream[0].y.dtype == torch.float32
    first = stream[0].y.double()
    assert float(first.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(first.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    later = (y[30:50] - y[:30].mean()) / y[:30].std()
    assert np.allclose(stream[1].y.numpy(), later, atol=1e-5)  # the first step's statistics
    learner = VCL(BayesianMLP(2, [8], 2), HeteroscedasticGaussianLikelihood(), epochs=100,
                  learning_rate=0.03, ml_init_epochs=0, progress=False, seed=0)  # fmt: skip
    scores = one_step_ahead(OnStream(learner), stream)
    assert len(scores.rmse) == 2 and np.isfinite(scores.log_likelihood).all()
    assert scores.rmse[-1] < float(torch.cat([s.y for s in stream]).std())  # it learnt x₀'s slope
    with pytest.raises(ValueError, match="finite"):
        drift_stream(x, np.where(np.arange(70) == 3, np.nan, y), regression=True)
