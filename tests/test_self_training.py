"""Gradual self-training (Kumar et al. 2020) as a learner step: which points, which labels, one
transaction."""

import pytest
import torch

from pyro_cl import VCL, ContinualLearner, GaussianLikelihood
from pyro_cl.learner.self_training import self_train
from pyro_cl.nn import BayesianLinear, BayesianMLP
from tests.helpers import two_class_data


def fitted(seed=0):
    learner = VCL(BayesianMLP(4, [8], 2), epochs=40, learning_rate=0.05, batch_size=None,
                  ml_init_epochs=0, seed=seed, progress=False)  # fmt: skip
    learner.observe(two_class_data(100))
    return learner


def test_the_most_confident_points_are_fitted_with_the_predicted_labels(monkeypatch):
    learner = fitted()
    x, _ = two_class_data(50, seed=1)
    probabilities = torch.softmax(
        torch.randn(50, 2, generator=torch.Generator().manual_seed(2)), -1
    )
    monkeypatch.setattr(learner, "predict", lambda inputs, task_id=None: probabilities)
    seen = []
    monkeypatch.setattr(learner, "observe", lambda data, **kwargs: seen.append((data, kwargs)))
    chosen, labels = self_train(learner, x, keep=0.3)
    confidence = probabilities.max(-1).values
    assert len(chosen) == 15
    assert confidence[chosen].min() >= confidence[~torch.isin(torch.arange(50), chosen)].max()
    assert torch.equal(labels, probabilities.argmax(-1)[chosen])
    (((inputs, targets), kwargs),) = seen
    assert torch.equal(inputs, x[chosen]) and torch.equal(targets, labels)
    assert kwargs == {"task_id": None, "time": None}


def test_a_self_training_step_is_one_ordinary_step():
    learner, twin = fitted(), fitted()
    x, _ = two_class_data(60, seed=3)
    chosen, labels = self_train(learner, x, keep=1.0)
    assert len(chosen) == 60 and learner.times == [0.0, 1.0]
    twin.observe((x, twin.predict(x).argmax(-1)))  # the same step by hand
    for name, q in learner.current_prior().items():
        torch.testing.assert_close(q.base_dist.loc, twin.current_prior()[name].base_dist.loc)


def test_bad_fractions_and_regression_learners_are_refused():
    with pytest.raises(ValueError, match="fraction of points"):
        self_train(fitted(), torch.randn(5, 4), keep=0.0)
    regression = ContinualLearner(BayesianLinear(4, 1), likelihood=GaussianLikelihood(1.0),
                                  epochs=1, progress=False)  # fmt: skip
    regression.observe((torch.randn(10, 4), torch.randn(10)))
    with pytest.raises(ValueError, match="needs a classifier"):
        self_train(regression, torch.randn(5, 4))
