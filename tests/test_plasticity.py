"""Measuring plasticity: intransigence against a fresh fit, weights still at the prior, units in
use, and the validation split that chooses settings without the test sets."""

import numpy as np
import pytest
import torch
from pyro.distributions import Normal

from pyro_cl.data.tasks import Task, TaskStream
from pyro_cl.inspection import PRUNED_KL, share_at_prior, units_in_use
from pyro_cl.metrics import intransigence


def test_intransigence_is_the_mean_shortfall_on_the_diagonal():
    accuracy = np.array([[0.9, np.nan, np.nan], [0.8, 0.7, np.nan], [0.8, 0.6, 0.95]])
    scratch = [0.95, 0.9, 0.9]
    # (0.05 + 0.2 - 0.05) / 3: every task counts, the first and the last too
    assert intransigence(accuracy, scratch) == pytest.approx(0.2 / 3)
    with pytest.raises(ValueError, match="one scratch accuracy per task"):
        intransigence(accuracy, scratch[:2])


def layer(loc, scale):
    return Normal(torch.as_tensor(loc), torch.as_tensor(scale)).to_event(1)


def test_weights_and_units_at_the_prior_are_counted():
    prior = {
        "hidden.0.weight": Normal(torch.zeros(3, 4), torch.ones(3, 4)).to_event(2),
        "hidden.0.bias": layer(torch.zeros(3), torch.ones(3)),
    }
    loc = torch.zeros(3, 4)
    scale = torch.ones(3, 4)
    loc[0] = 2.0  # unit 0 learnt: KL 2 nats a weight
    scale[1, :2] = 0.1  # unit 1: two of four weights sharpened (KL ≈ 1.8 each)
    posterior = {
        "hidden.0.weight": Normal(loc, scale).to_event(2),
        "hidden.0.bias": layer(torch.zeros(3), torch.ones(3)),
    }
    # 6 of 12 weights moved; the biases are left out of the share
    assert share_at_prior(posterior, prior) == {"hidden.0.weight": 0.5}
    # unit 0: mean KL 8/5; unit 1: ≈ 3.6/5; unit 2: 0 — two units in use
    assert units_in_use(posterior, prior) == {"hidden.0.weight": 2}
    # a threshold above unit 1's mean KL leaves one
    assert units_in_use(posterior, prior, threshold=1.0) == {"hidden.0.weight": 1}
    assert share_at_prior(prior, prior) == {"hidden.0.weight": 1.0}
    just_above = Normal(torch.full((3, 4), (2 * PRUNED_KL) ** 0.5 * 1.01), 1.0).to_event(2)
    assert share_at_prior({"hidden.0.weight": just_above}, prior) == {"hidden.0.weight": 0.0}


def test_the_pruning_summary_covers_the_shared_hidden_layers_only():
    """Averaged share and summed units over the trunk; a net of heads alone has none to
    summarise (``None``, not the mean of nothing)."""
    from pyro_cl.app.result import RunResult

    run = RunResult(method="vcl", stream="toy", step_names=["1"], seed=0, wall_time_s=1.0)
    run.details["share_at_prior"] = [{"hidden.0": 0.2, "hidden.1": 0.4, "heads.0": 0.9}]
    run.details["units_in_use"] = [{"hidden.0": 10, "hidden.1": 5, "heads.0": 2}]
    summary = run.pruning_after_last_step()
    assert summary == {"share_at_prior": pytest.approx(0.3), "units_in_use": 15}
    run.details["share_at_prior"] = [{"heads.0": 0.9}]
    run.details["units_in_use"] = [{"heads.0": 2}]
    assert run.pruning_after_last_step() is None


def test_the_validation_split_holds_out_training_data_and_never_reads_the_test_set():
    x = torch.arange(100.0).unsqueeze(1)
    y = torch.arange(100) % 2
    task = Task(3, "t", x, y, torch.full((10, 1), -1.0), torch.zeros(10, dtype=torch.long), 2)
    stream = TaskStream("s", [task], 1, 2, multi_head=True)
    held = stream.validation(0.2, seed=4)
    train, test = held[0].train, held[0].test
    assert len(train[0]) == 80 and len(test[0]) == 20
    assert not (test[0] < 0).any()  # nothing of the real test set
    values = torch.cat([train[0], test[0]]).squeeze(1)
    assert torch.equal(values.sort().values, x.squeeze(1))  # a partition of the training data
    assert torch.equal(held[0].test[0], stream.validation(0.2, seed=4)[0].test[0])
    assert not torch.equal(held[0].test[0], stream.validation(0.2, seed=5)[0].test[0])
    assert held[0].id == 3 and held.multi_head
    with pytest.raises(ValueError, match="validation fraction"):
        stream.validation(1.0)
