"""The trunk of a fit as a fixed encoder: what the head reads, every site at its posterior mean."""

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.inspection import penultimate_features
from pyro_cl.nn import BayesianMLP


def fitted(seed=0):
    generator = torch.Generator().manual_seed(seed)
    net = BayesianMLP(3, [4, 5], 2, heads=2, activation="tanh")
    learner = VCL(net, epochs=5, batch_size=None, seed=seed, progress=False)
    for task in range(2):
        x = torch.randn(30, 3, generator=generator)
        learner.observe((x, (x[:, task] > 0).long()), task_id=task)
    return learner


def test_features_are_the_trunk_at_the_posterior_means():
    """``tanh(W₂ tanh(W₁ x + b₁) + b₂)`` from the posterior's means, for the head of either task
    (the trunk is shared, so both read the same features)."""
    learner = fitted()
    x = torch.randn(6, 3)
    posterior = learner.posterior(1)
    mean = {name: q.mean for name, q in posterior.items()}
    hidden = torch.tanh(x @ mean["hidden.0.weight"].T + mean["hidden.0.bias"])
    expected = torch.tanh(hidden @ mean["hidden.1.weight"].T + mean["hidden.1.bias"])
    features = penultimate_features(learner, x, task_id=1)
    torch.testing.assert_close(features, expected)
    torch.testing.assert_close(penultimate_features(learner, x, task_id=0), expected)
    # the means, not a draw: the same features every call
    assert torch.equal(features, penultimate_features(learner, x, task_id=1))


def test_a_task_the_net_has_no_head_for_is_refused():
    with pytest.raises(ValueError):
        penultimate_features(fitted(), torch.randn(2, 3), task_id=5)
