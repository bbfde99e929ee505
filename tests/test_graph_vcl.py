"""VCL over a graph of domains: a path of single parents is sequential VCL exactly; several
parents give the combined prior; a target is predicted from its parents alone."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.data.domain_graph import metadata_graph, spanning_order
from pyro_cl.infer.graph_vcl import GraphVCL
from pyro_cl.infer.posterior_combination import combine_posteriors
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianMLP

SMALL = {"epochs": 3, "ml_init_epochs": 0, "num_particles": 1, "num_predictive_samples": 4}


def rotated_domains(angles, n: int = 60):
    """2-D points labelled by the side of a line that turns with the domain's angle."""
    generator = torch.Generator().manual_seed(0)
    domains = []
    for angle in angles:
        x = torch.randn(n, 2, generator=generator)
        radians = torch.tensor(angle) * torch.pi / 180
        y = (x @ torch.stack([torch.cos(radians), torch.sin(radians)]) > 0).long()
        domains.append((x, y))
    return domains


def learner() -> VCL:
    return VCL(BayesianMLP(2, [8], 2), seed=0, **SMALL)


def test_a_path_of_single_parents_is_sequential_vcl_exactly():
    domains = rotated_domains([0, 20, 40])
    plain = learner()
    for data in domains:
        plain.observe(data)
    graph = GraphVCL(learner(), metadata_graph(torch.tensor([0.0, 20.0, 40.0]), 20.0))
    for domain, data in enumerate(domains):
        graph.observe(domain, data, parents=[domain - 1] if domain else [])
    for name, q in plain.current_prior().items():
        other = graph.posteriors[2][name]
        assert torch.equal(q.base_dist.loc, other.base_dist.loc), name
        assert torch.equal(q.base_dist.scale, other.base_dist.scale), name


def test_several_parents_give_the_combined_prior_and_a_target_is_predicted_from_them():
    angles = torch.tensor([0.0, 30.0, 60.0, 45.0])  # the last one is the target
    domains = rotated_domains(angles.tolist())
    graph = GraphVCL(learner(), metadata_graph(angles, 20.0))
    order = spanning_order(graph.weights[:3, :3], roots=[0])
    for domain, parent in order:
        graph.observe(domain, domains[domain], parents=[] if parent is None else [parent])
    prior = graph.prior_for(3, [1, 2])
    weights = [float(graph.weights[3, 1]), float(graph.weights[3, 2])]
    expected = combine_posteriors([graph.posteriors[1], graph.posteriors[2]], weights)
    for name, q in expected.items():
        torch.testing.assert_close(prior[name].base_dist.loc, q.base_dist.loc)
    from_parents = graph.evaluate(domains[3], domain=3, parents=[1, 2])
    assert 0 <= from_parents["accuracy"] <= 1 and 3 not in graph.posteriors
    with pytest.raises(KeyError, match="have not been fitted"):
        graph.prior_for(3, [3])
    with pytest.raises(ValueError, match="without a memory"):
        GraphVCL(VCL(BayesianMLP(2, [8], 2), memory=RandomCoreset(5)), graph.weights)
