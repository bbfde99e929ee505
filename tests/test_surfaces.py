"""The newest surfaces, as a careful user hits them: each mistake a clear error of the call, each
supported use correct."""

import pytest
import torch
from torch import nn

from pyro_cl import VCL
from pyro_cl.data.domain_graph import metadata_graph
from pyro_cl.learner.graph_vcl import GraphVCL
from pyro_cl.nn import BayesianMLP, make_bayesian
from tests.helpers import two_class_data

SMALL = {"epochs": 2, "ml_init_epochs": 0, "num_particles": 1, "num_predictive_samples": 4}


def graph(learner_class=VCL):
    return GraphVCL(
        learner_class(BayesianMLP(4, [6], 2), seed=0, **SMALL),
        metadata_graph(torch.tensor([0.0, 10.0, 20.0]), 10.0),
    )


def test_a_checkpoint_key_given_as_text_is_a_type_error_of_the_call(tmp_path):
    learner = VCL(BayesianMLP(4, [6], 2), seed=0, **SMALL)
    learner.observe(two_class_data(20))
    with pytest.raises(TypeError, match=r"must be bytes, got str \(encode it"):
        learner.save(tmp_path / "a.pt", key="secret")
    assert not (tmp_path / "a.pt").exists()
    learner.save(tmp_path / "a.pt", key=b"secret")
    with pytest.raises(TypeError, match="must be bytes"):
        VCL.load(tmp_path / "a.pt", key="secret")
    assert VCL.load(tmp_path / "a.pt", key=b"secret").tasks_seen == [0]


def test_graph_vcl_refuses_domains_outside_the_graph_self_loops_and_second_fits():
    g = graph()
    data = two_class_data(20)
    g.observe(0, data)
    with pytest.raises(ValueError, match=r"domain 3 is not a domain of the graph \(0..2\)"):
        g.observe(3, data, parents=[0])
    with pytest.raises(ValueError, match="parent 7 is not a domain"):
        g.observe(1, data, parents=[7])
    with pytest.raises(ValueError, match="domain 1 cannot be its own parent"):
        g.observe(1, data, parents=[1])
    with pytest.raises(ValueError, match="domain 0 has a posterior already"):
        g.observe(0, data)
    with pytest.raises(ValueError, match="domain 0 has a posterior already"):
        g.adapt_unlabelled(0, data[0], parents=[])
    # none of the refusals changed the graph or the learner
    assert list(g.posteriors) == [0] and g.learner.tasks_seen == [0]
    g.observe(1, data, parents=[0])  # a cycle 0 -> 1 -> 0 would need domain 0 fitted again
    assert list(g.posteriors) == [0, 1]


def test_a_graph_saved_with_a_key_loads_as_the_learner_class_it_was(tmp_path):
    g = graph(VCL)
    g.observe(0, two_class_data(20))
    g.save(tmp_path / "graph", key=b"k")
    loaded = GraphVCL.load(tmp_path / "graph", key=b"k")
    assert type(loaded.learner) is VCL and list(loaded.posteriors) == [0]
    with pytest.raises(ValueError, match="signed"):
        GraphVCL.load(tmp_path / "graph")


class Scaled(nn.Linear):
    """A linear layer with a learnt gain: its own parameter and forward."""

    def __init__(self, *args):
        super().__init__(*args)
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return super().forward(x) * self.gain


class Renamed(nn.Linear):
    """A subclass that adds nothing: made Bayesian like nn.Linear."""


def test_make_bayesian_refuses_a_linear_subclass_with_its_own_forward_or_parameters():
    with pytest.raises(
        ValueError, match="a subclass of Linear with its own forward and parameters gain"
    ):
        make_bayesian(nn.Sequential(Scaled(3, 2)))
    net = make_bayesian(nn.Sequential(Renamed(3, 2)))
    assert net(torch.randn(5, 3)).shape == (5, 2)
