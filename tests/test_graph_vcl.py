"""VCL over a graph of domains: a path of single parents is sequential VCL exactly; several
parents give the combined prior; a target is predicted from its parents alone."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.data.domain_graph import metadata_graph, spanning_order
from pyro_cl.learner.graph_vcl import _DOMAIN_STREAMS, GraphVCL
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianMLP
from pyro_cl.transitions.combination import combine_posteriors

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
    """Given the same draws: each domain's fit draws from its domain's own stream."""
    domains = rotated_domains([0, 20, 40])
    plain = learner()
    for domain, data in enumerate(domains):
        plain.random.load_state(plain.random.spawn(_DOMAIN_STREAMS + domain).state())
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
    trained = VCL(BayesianMLP(2, [8], 2), seed=0, **{**SMALL, "epochs": 30, "learning_rate": 0.02})
    graph = GraphVCL(trained, metadata_graph(angles, 20.0))
    order = spanning_order(graph.weights[:3, :3], roots=[0])
    for domain, parent in order:
        graph.observe(domain, domains[domain], parents=[] if parent is None else [parent])
    prior = graph.prior_for(3, [1, 2])
    weights = [float(graph.weights[3, 1]), float(graph.weights[3, 2])]
    expected = combine_posteriors([graph.posteriors[1], graph.posteriors[2]], weights)
    for name, q in expected.items():
        torch.testing.assert_close(prior[name].base_dist.loc, q.base_dist.loc)
    from_parents = graph.evaluate(domains[3], domain=3, parents=[1, 2])
    # the 45° target between the 30° and 60° parents (0.80-0.82 over seeds 0-3; chance 0.5)
    assert from_parents["accuracy"] > 0.6 and 3 not in graph.posteriors
    with pytest.raises(KeyError, match="have not been fitted"):
        graph.prior_for(0, [3])
    with pytest.raises(ValueError, match="without a memory"):
        GraphVCL(VCL(BayesianMLP(2, [8], 2), memory=RandomCoreset(5)), graph.weights)


class _Unreadable(torch.Tensor):
    """A label tensor that raises on any use: what a step that reads no label may be handed."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise AssertionError("a label was read")


def test_the_unsupervised_step_reads_no_label_and_sharpens_the_targets_predictions():
    from pyro_cl.infer.prediction import predictive_samples
    from pyro_cl.learner.graph_vcl import PredictiveEntropy

    outputs = torch.randn(3, 5, 2)
    labels = torch.zeros(5, dtype=torch.long).as_subclass(_Unreadable)
    negative_entropy = PredictiveEntropy().log_prob(outputs, labels)
    p = outputs.softmax(-1)
    mean = p.mean(-2, keepdim=True)
    expected = (p * p.log()).sum(-1) - (mean * mean.log()).sum(-1)
    torch.testing.assert_close(negative_entropy, expected)

    angles = torch.tensor([0.0, 30.0, 45.0])
    domains = rotated_domains(angles.tolist(), n=120)
    graph = GraphVCL(
        VCL(BayesianMLP(2, [8], 2), seed=0, **{**SMALL, "epochs": 30, "learning_rate": 0.02}),
        metadata_graph(angles, 20.0),
    )
    graph.observe(0, domains[0])
    graph.observe(1, domains[1], parents=[0])
    target_x = domains[2][0]

    def mean_entropy(posterior) -> float:
        learner = graph.learner
        samples = predictive_samples(learner.model, posterior, target_x, 0, 50, 1024)
        probabilities = learner.model.likelihood.predictive_probabilities(samples)
        return float(-(probabilities * probabilities.clamp_min(1e-12).log()).sum(-1).mean())

    before = mean_entropy(graph.prior_for(2, [1]))
    seen = list(graph.learner.tasks_seen)
    graph.adapt_unlabelled(2, target_x, parents=[1], epochs=60)
    assert mean_entropy(graph.posteriors[2]) < before
    assert graph.learner.tasks_seen == seen  # not a learner step


def test_a_graph_learner_saves_loads_and_resumes_identically(tmp_path):
    angles = torch.tensor([0.0, 30.0, 60.0])
    domains = rotated_domains(angles.tolist())
    weights = metadata_graph(angles, 20.0)

    straight = GraphVCL(learner(), weights)
    straight.observe(0, domains[0])
    straight.observe(1, domains[1], parents=[0])
    straight.observe(2, domains[2], parents=[0, 1])

    first = GraphVCL(learner(), weights)
    first.observe(0, domains[0])
    first.observe(1, domains[1], parents=[0])
    first.save(tmp_path / "graph")
    torch.rand(10)  # other random work between stopping and resuming
    resumed = GraphVCL.load(tmp_path / "graph", VCL)
    assert set(resumed.posteriors) == {0, 1} and resumed.how == "product"
    resumed.observe(2, domains[2], parents=[0, 1])
    for name, q in straight.posteriors[2].items():
        assert torch.equal(q.base_dist.loc, resumed.posteriors[2][name].base_dist.loc), name
        assert torch.equal(q.base_dist.scale, resumed.posteriors[2][name].base_dist.scale), name


def test_per_domain_heads_carry_the_parents_head_onto_the_childs(tmp_path):
    angles = torch.tensor([0.0, 30.0, 60.0])
    domains = rotated_domains(angles.tolist())
    weights = metadata_graph(angles, 20.0)
    net = BayesianMLP(2, [8], 2, heads=3)
    graph = GraphVCL(VCL(net, seed=0, **SMALL), weights, heads="per_domain")
    graph.observe(0, domains[0])
    graph.observe(1, domains[1], parents=[0])
    first, second = graph.posteriors[0], graph.posteriors[1]
    assert {"heads.0.weight", "heads.1.weight"} <= set(second)
    # domain 1's fit trained head 1 only: head 0 is still domain 0's posterior
    assert torch.equal(
        second["heads.0.weight"].base_dist.loc, first["heads.0.weight"].base_dist.loc
    )
    assert not torch.equal(
        second["heads.1.weight"].base_dist.loc, first["heads.0.weight"].base_dist.loc
    )
    # a target (domain 2) from one parent: that parent's body, and its head moved onto head 2
    prior = graph.prior_for(2, [1])
    for name, q in second.items():
        moved = name.replace("heads.1.", "heads.2.")
        if name.startswith("heads.1."):
            assert torch.equal(prior[moved].base_dist.loc, q.base_dist.loc), name
        elif not name.startswith("heads."):
            assert torch.equal(prior[name].base_dist.scale, q.base_dist.scale), name
    # an unfitted domain of a per-domain-heads graph predicts through its own head (2)
    seen = []
    evaluate = graph.learner.evaluate
    graph.learner.evaluate = lambda *a, **k: seen.append(k["task_id"]) or evaluate(*a, **k)
    graph.evaluate(domains[2], domain=2, parents=[0, 1])
    assert seen == [2]
    del graph.learner.evaluate
    graph.save(tmp_path / "graph")
    assert GraphVCL.load(tmp_path / "graph", VCL).heads == "per_domain"
    with pytest.raises(ValueError, match="a head per domain"):
        GraphVCL(VCL(BayesianMLP(2, [8], 2, heads=2)), weights, heads="per_domain")
    with pytest.raises(ValueError, match="heads must be one of"):
        GraphVCL(VCL(BayesianMLP(2, [8], 2)), weights, heads="several")


def test_per_domain_heads_are_reproducible_whatever_ran_before():
    angles = torch.tensor([0.0, 30.0, 60.0])
    domains = rotated_domains(angles.tolist())

    def run():
        graph = GraphVCL(
            VCL(BayesianMLP(2, [8], 2, heads=3), seed=0, **SMALL),
            metadata_graph(angles, 20.0),
            heads="per_domain",
        )
        graph.observe(0, domains[0])
        graph.observe(1, domains[1], parents=[0])
        return graph.prior_for(2, [0, 1])

    first = run()
    torch.rand(100)  # other work moves torch's global generator
    second = run()
    for name, q in first.items():
        assert torch.equal(q.base_dist.loc, second[name].base_dist.loc), name


@pytest.mark.parametrize("step", ["observe", "adapt_unlabelled"])
def test_a_failed_graph_step_leaves_the_learner_and_the_graph_as_they_were(step, monkeypatch):
    """The parents' combined prior is installed inside the step's transaction: a diverged fit
    leaves the prior, the guide and the graph's posteriors untouched."""
    from pyro_cl.fitters.elbo_fitter import ELBOFitter
    from pyro_cl.infer.divergence import DivergenceError

    domains = rotated_domains([0, 30, 60])
    graph = GraphVCL(learner(), metadata_graph(torch.tensor([0.0, 30.0, 60.0]), 30.0))
    graph.observe(0, domains[0])
    graph.observe(1, domains[1])
    prior = {
        k: (q.base_dist.loc.clone(), q.base_dist.scale.clone())
        for k, q in graph.learner.current_prior().items()
    }
    guide = {k: v.clone() for k, v in graph.learner.guide.named_parameters()}
    known = dict(graph.posteriors)

    def diverge(self, *args):
        raise DivergenceError("the fit diverged")

    monkeypatch.setattr(ELBOFitter, "fit", diverge)
    with pytest.raises(DivergenceError):
        if step == "observe":
            graph.observe(2, domains[2], parents=[0, 1])
        else:
            graph.adapt_unlabelled(2, domains[2][0], parents=[0, 1])
    for name, q in graph.learner.current_prior().items():
        assert torch.equal(q.base_dist.loc, prior[name][0]), name
        assert torch.equal(q.base_dist.scale, prior[name][1]), name
    for name, value in graph.learner.guide.named_parameters():
        assert torch.equal(value, guide[name]), name
    assert graph.posteriors == known


def same_posterior(a, b) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].base_dist.loc, b[k].base_dist.loc)
        and torch.equal(a[k].base_dist.scale, b[k].base_dist.scale)
        for k in a
    )


def two_fitted_parents(weights):
    domains = rotated_domains([0, 30, 60])
    graph = GraphVCL(learner(), weights)
    graph.observe(0, domains[0])
    graph.observe(1, domains[1])
    return graph, domains


def test_a_domains_prior_weighs_its_parents_by_the_edges_into_it():
    """An asymmetric graph: ``w[d, p]`` is the weight of parent ``p`` in domain ``d``'s prior, not
    ``w[p, d]``."""
    weights = torch.tensor([[1.0, 0.5, 0.1], [0.5, 1.0, 0.9], [0.8, 0.2, 1.0]])
    graph, _ = two_fitted_parents(weights)
    q0, q1 = graph.posteriors[0], graph.posteriors[1]
    expected = combine_posteriors([q0, q1], [0.8, 0.2], "product")
    transposed = combine_posteriors([q0, q1], [0.1, 0.9], "product")
    prior = graph.prior_for(2, [0, 1])
    assert same_posterior(prior, expected)
    assert not same_posterior(prior, transposed)


def test_a_target_is_predicted_from_all_its_parents_and_adapted_against_their_prior(monkeypatch):
    from pyro.distributions import Normal

    from pyro_cl.fitters.elbo_fitter import ELBOFitter
    from pyro_cl.posterior import read_priors

    weights = torch.tensor([[1.0, 0.5, 0.6], [0.5, 1.0, 0.4], [0.6, 0.4, 1.0]])
    graph, domains = two_fitted_parents(weights)
    combined = graph.prior_for(2, [0, 1])
    used = []
    evaluate = graph.learner.evaluate
    monkeypatch.setattr(
        graph.learner, "evaluate", lambda *a, **k: used.append(k["sites"]) or evaluate(*a, **k)
    )
    graph.evaluate(domains[2], domain=2, parents=[0, 1])
    assert same_posterior(used[0], combined)

    seen = []
    fit = ELBOFitter.fit

    def recording_fit(self, context, guide, problem):
        priors = read_priors(context.model.net, problem.sites)  # views of the net's buffers
        seen.append(
            {
                k: Normal(q.base_dist.loc.clone(), q.base_dist.scale.clone())
                for k, q in priors.items()
            }
        )
        return fit(self, context, guide, problem)

    monkeypatch.setattr(ELBOFitter, "fit", recording_fit)
    graph.adapt_unlabelled(2, domains[2][0], parents=[0, 1], epochs=1)
    assert all(
        torch.equal(seen[0][k].loc, combined[k].base_dist.loc)
        and torch.equal(seen[0][k].scale, combined[k].base_dist.scale)
        for k in seen[0]
    )


def test_a_transition_along_a_longer_edge_gives_a_wider_prior(tmp_path):
    """With a Wiener transition over edges of metadata length d (time constant 10°), a parent's
    posterior reaches a domain with variance ``σ² + c² (d/τ) σ₀²``: a 30° target's prior is
    wider than a 10° one's, and the means are the parent's."""
    from pyro_cl.transitions import Wiener

    angles = torch.tensor([0.0, 10.0, 30.0])
    distances = (angles[:, None] - angles[None, :]).abs()
    graph = GraphVCL(
        learner(),
        metadata_graph(angles, 20.0),
        transition=Wiener(0.5, time_constant=10.0),
        distances=distances,
    )
    graph.observe(0, rotated_domains([0.0])[0])
    parent = graph.posteriors[0]
    near, far = graph.prior_for(1, [0]), graph.prior_for(2, [0])
    initial = graph.learner.initial_prior
    for name, q in parent.items():
        for prior, d in ((near, 10.0), (far, 30.0)):
            expected = (
                q.base_dist.scale.square()
                + 0.25 * (d / 10.0) * initial[name].base_dist.scale.square()
            )
            torch.testing.assert_close(prior[name].base_dist.scale.square(), expected)
            assert torch.equal(prior[name].base_dist.loc, q.base_dist.loc)
        assert (far[name].base_dist.scale > near[name].base_dist.scale).all()
    graph.save(tmp_path / "graph")
    loaded = GraphVCL.load(tmp_path / "graph")
    assert isinstance(loaded.transition, Wiener)
    assert torch.equal(loaded.distances, distances)
    with pytest.raises(ValueError, match="needs their lengths"):
        GraphVCL(learner(), metadata_graph(angles, 20.0), transition=Wiener(0.5))


def test_the_unsupervised_step_holds_the_predicted_class_proportions_unless_told_uniform():
    """A target with 20% positives: with the uniform class prior of information maximisation as
    published the step pushes the predicted positive rate toward a half; with the prior's own
    predicted proportions, or the proportions given, it stays near a fifth."""
    from pyro_cl.learner.graph_vcl import PredictiveEntropy

    outputs = torch.randn(3, 5, 2)
    labels = torch.zeros(5, dtype=torch.long)
    prior = torch.tensor([0.8, 0.2])
    p = outputs.softmax(-1)
    mean = p.mean(-2, keepdim=True)
    expected = (p * p.log()).sum(-1) - (mean * (mean.log() - prior.log())).sum(-1)
    torch.testing.assert_close(PredictiveEntropy(prior).log_prob(outputs, labels), expected)

    generator = torch.Generator().manual_seed(1)

    def imbalanced(shift: float, n: int = 400):
        y = (torch.rand(n, generator=generator) < 0.2).long()
        x = torch.randn(n, 2, generator=generator) * 0.8 + torch.stack([2.0 * y - 1, 0 * y], 1)
        return x + shift, y

    angles = torch.tensor([0.0, 10.0, 20.0])
    rates = {}
    for how in ("uniform", "predicted", torch.tensor([4.0, 1.0])):  # the last: 80/20 as given
        graph = GraphVCL(
            VCL(BayesianMLP(2, [8], 2), seed=0, **{**SMALL, "epochs": 40, "learning_rate": 0.05}),
            metadata_graph(angles, 20.0),
        )
        graph.observe(0, imbalanced(0.0))
        graph.observe(1, imbalanced(0.1), parents=[0])
        target_x, _ = imbalanced(0.3)
        graph.adapt_unlabelled(2, target_x, parents=[1], epochs=80, class_prior=how)
        predicted = graph.learner.predict(target_x, sites=graph.posteriors[2])
        rates[how if isinstance(how, str) else "given"] = float(
            (predicted.argmax(-1) == 1).double().mean()
        )
    assert abs(rates["predicted"] - 0.2) < 0.08 and abs(rates["given"] - 0.2) < 0.08
    assert rates["uniform"] > rates["predicted"] + 0.1
    graph.posteriors.pop(2)
    with pytest.raises(ValueError, match="class_prior"):
        graph.adapt_unlabelled(2, target_x, parents=[1], class_prior="balanced")
