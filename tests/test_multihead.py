import copy

import pytest
import torch
from pyro import poutine

from pyro_cl import VCL, CoresetOnly
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data


def _learner(**kwargs):
    net = BayesianMLP(4, [8], 2, heads=4, prior_scale=1.0)
    return VCL(net, epochs=3, batch_size=50, num_particles=2, progress=False, seed=0, **kwargs)


def test_untrained_heads_keep_the_initial_prior_and_trained_ones_move():
    learner = _learner()
    learner.observe(two_class_data(100, 4, column=0), task_id=0)
    learner.observe(two_class_data(100, 4, column=1), task_id=2)  # a head first used late
    for head in (1, 3):
        layer = learner.net.heads[head]
        assert torch.equal(layer.weight_prior_loc, torch.zeros(2, 8))
        assert torch.equal(layer.weight_prior_scale, torch.ones(2, 8))
        assert f"heads.{head}.weight" not in learner.guide.site_names
    for head in (0, 2):
        assert not torch.equal(learner.net.heads[head].weight_prior_scale, torch.ones(2, 8))
    assert learner.trained_sites == [
        "hidden.0.weight",
        "hidden.0.bias",
        "heads.0.weight",
        "heads.0.bias",
        "heads.2.weight",
        "heads.2.bias",
    ]


def test_training_a_task_touches_only_the_trunk_and_its_head():
    learner = _learner()
    learner.observe(two_class_data(100, 4, column=0), task_id=0)
    head0 = learner.net.heads[0].weight_prior_loc.clone()
    learner.observe(two_class_data(100, 4, column=1), task_id=1)
    assert torch.equal(learner.net.heads[0].weight_prior_loc, head0)
    x, y = two_class_data(10, 4)
    trace = poutine.trace(learner.guide).get_trace(x, y, task_id=1, dataset_size=10)
    sampled = {name for name, site in trace.nodes.items() if site["type"] == "sample"}
    assert sampled == {"hidden.0.weight", "hidden.0.bias", "heads.1.weight", "heads.1.bias"}


def test_prior_after_a_task_is_exactly_the_posterior():
    learner = _learner()
    learner.observe(two_class_data(100, 4), task_id=0)
    posterior = learner.guide.posterior(learner.trained_sites)
    prior = learner.current_prior()
    for name in learner.trained_sites:
        assert torch.equal(prior[name].base_dist.loc, posterior[name].base_dist.loc.detach())
        assert torch.equal(prior[name].base_dist.scale, posterior[name].base_dist.scale.detach())


def test_a_multi_head_net_must_be_told_the_task():
    learner = VCL(BayesianMLP(4, [8], 2, heads=3), progress=False, epochs=1)
    with pytest.raises(ValueError, match="several heads: pass task_id="):
        learner.observe(two_class_data(16, 4))
    assert learner.tasks_seen == []
    single = VCL(BayesianMLP(4, [8], 2), progress=False, epochs=1)
    single.observe(two_class_data(16, 4))  # one head: task 0
    assert single.tasks_seen == [0]


def test_a_net_owned_by_a_learner_is_refused_by_another_and_a_copy_is_not():
    net = BayesianMLP(4, [8], 2)
    first = VCL(net, progress=False, epochs=1)
    with pytest.raises(ValueError, match="already belongs to a VCL"):
        VCL(net, progress=False, epochs=1)
    second = VCL(copy.deepcopy(net), progress=False, epochs=1)
    assert second.net is not first.net


def test_a_learner_refused_at_construction_leaves_its_net_free():
    """The failed learner lives on in the traceback (as in a notebook); the mended call must
    still get the net."""
    net = BayesianMLP(4, [8], 2)
    with pytest.raises(ValueError, match="needs a memory") as refused:
        CoresetOnly(net, progress=False, epochs=1)
    learner = CoresetOnly(net, memory=RandomCoreset(4), progress=False, epochs=1)
    assert learner.net is net and refused.traceback  # the refused learner is still referenced
