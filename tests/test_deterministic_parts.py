"""Deterministic parts of a Bayesian net: modules kept as point values, trained with each step's
fit, carried over as values (not priors), saved, and rolled back with a failed step."""

import pytest
import torch
from torch import nn

import pyro_cl
from pyro_cl import ContinualLearner
from pyro_cl.fitters import IVON
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianCNN, BayesianMLP, make_bayesian


class Net(nn.Module):
    """A feature extractor with batch normalisation, and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.classifier = nn.Linear(8, 2)

    def forward(self, x):
        return self.classifier(self.features(x))


def tasks(num_tasks=2, size=64):
    generator = torch.Generator().manual_seed(0)
    out = []
    for task in range(num_tasks):
        x = torch.randn(size, 4, generator=generator)
        out.append((x, (x[:, task] > 0).long()))
    return out


def learner_of(net, **settings):
    options = dict(epochs=5, batch_size=32, seed=0, progress=False, num_predictive_samples=4)
    return ContinualLearner(net, **{**options, **settings})


def test_deterministic_modules_stay_modules_and_the_rest_becomes_bayesian():
    net = make_bayesian(Net(), deterministic=["features"])
    assert isinstance(net.features[1], nn.BatchNorm1d)
    assert {name for name, _ in net.named_parameters()} == {
        "features.0.weight",
        "features.0.bias",
        "features.1.weight",
        "features.1.bias",
    }
    learner = learner_of(net)
    assert set(learner.guide.sites_for(tasks()[0][0][:2])) == {
        "classifier.weight",
        "classifier.bias",
    }


def test_without_deterministic_the_batch_norm_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match="deterministic="):
        make_bayesian(Net())
    with pytest.raises(ValueError, match="no module 'feature'"):
        make_bayesian(Net(), deterministic=["feature"])


def test_each_step_trains_the_values_and_the_next_starts_from_them():
    net = make_bayesian(Net(), deterministic=["features"])
    learner = learner_of(net, epochs=30, learning_rate=0.01)
    before = learner.net.features[0].weight.detach().clone()
    stats = learner.net.features[1].running_mean.clone()
    first, second = tasks()
    learner.observe(first)
    after_first = learner.net.features[0].weight.detach().clone()
    assert not torch.equal(before, after_first)  # trained with the posterior
    assert not torch.equal(stats, learner.net.features[1].running_mean)  # batch statistics kept
    learner.observe(second)
    assert not torch.equal(after_first, learner.net.features[0].weight)
    assert learner.evaluate(second)["accuracy"] > 0.7


def test_a_failed_step_rolls_the_values_back():
    learner = learner_of(make_bayesian(Net(), deterministic=["features"]))
    first, second = tasks()
    learner.observe(first)
    values = {name: p.detach().clone() for name, p in learner.net.named_parameters()}
    buffers = {name: b.clone() for name, b in learner.net.named_buffers()}

    class FailAtTheEnd(pyro_cl.Callback):
        def on_fit_end(self) -> None:
            raise RuntimeError("after the fit")

    with pytest.raises(RuntimeError, match="after the fit"):
        learner.observe(second, callbacks=[FailAtTheEnd()])
    for name, parameter in learner.net.named_parameters():
        torch.testing.assert_close(parameter.detach(), values[name], rtol=0, atol=0)
    for name, buffer in learner.net.named_buffers():
        torch.testing.assert_close(buffer, buffers[name], rtol=0, atol=0)


def test_the_values_save_load_and_resume_identically(tmp_path):
    first, second = tasks()
    learner = learner_of(make_bayesian(Net(), deterministic=["features"]))
    learner.observe(first)
    learner.save(tmp_path / "learner.pt")
    loaded = ContinualLearner.load(
        tmp_path / "learner.pt", net=make_bayesian(Net(), deterministic=["features"])
    )
    for each in (learner, loaded):
        each.observe(second)
    for (name, mine), (_, theirs) in zip(
        learner.net.named_parameters(), loaded.net.named_parameters(), strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, msg=name)
    torch.testing.assert_close(learner.predict(second[0]), loaded.predict(second[0]))


def test_a_coreset_refit_leaves_the_propagated_values_alone():
    """The refit is for prediction only (VCL eq. 3): the values the next step starts from are
    the propagation fit's."""
    learner = learner_of(make_bayesian(Net(), deterministic=["features"]), memory=RandomCoreset(8))
    ends = []

    class RecordEachFit(pyro_cl.Callback):
        def on_fit_start(self, description: str, epochs: int) -> None:
            self.description = description

        def on_fit_end(self) -> None:
            ends.append((self.description, learner.net.features[0].weight.detach().clone()))

    learner.observe(tasks()[0], callbacks=[RecordEachFit()])
    refits = [values for description, values in ends if description.startswith("coreset refit")]
    propagated = [values for description, values in ends if "(task" in description][-1]
    assert refits and not torch.equal(refits[-1], propagated)  # the refit trained them
    torch.testing.assert_close(learner.net.features[0].weight.detach(), propagated, rtol=0, atol=0)


def test_a_fitter_that_cannot_train_values_refuses_them_by_name():
    with pytest.raises(ValueError, match="IVON .* features.0.weight"):
        learner_of(make_bayesian(Net(), deterministic=["features"]), fitter=IVON())


# ------------------------------------------------------------------- the library's own nets
def test_a_library_mlps_named_layers_are_point_values_trained_with_each_step(tmp_path):
    """``BayesianMLP(..., deterministic=["hidden.0"])``: the first layer is an ordinary layer
    (no sites) that each fit trains on the fast route; save/load/resume is identical."""
    first, second = tasks()
    net = BayesianMLP(4, [8, 6], 2, heads=2, deterministic=["hidden.0"])
    learner = learner_of(net)
    assert learner.model.fast
    assert set(learner.model.point_parameters()) == {"hidden.0.weight", "hidden.0.bias"}
    assert not any(name.startswith("hidden.0") for name in learner.model.site_index)
    before = net.hidden[0].weight.detach().clone()
    learner.observe(first, task_id=0)
    assert not torch.equal(before, net.hidden[0].weight)
    learner.save(tmp_path / "mlp.pt")
    loaded = ContinualLearner.load(tmp_path / "mlp.pt")  # rebuilt from its spec
    assert isinstance(loaded.net.hidden[0], nn.Linear)
    for each in (learner, loaded):
        each.observe(second, task_id=1)
    torch.testing.assert_close(loaded.net.hidden[0].weight, learner.net.hidden[0].weight)
    torch.testing.assert_close(learner.predict(second[0], 1), loaded.predict(second[0], 1))


def test_a_library_cnns_feature_extractor_kept_as_values_runs_with_particles():
    x = torch.randn(24, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = (x.mean((1, 2, 3)) > 0).long()
    convs = ["convs.0", "convs.1"]
    net = BayesianCNN((1, 8, 8), ((3, 3),), (6,), 2, heads=1, deterministic=convs)
    learner = learner_of(net, num_particles=3)
    assert set(learner.model.point_parameters()) == {
        f"{c}.{p}" for c in convs for p in ("weight", "bias")
    }
    before = net.convs[0].weight.detach().clone()
    learner.observe((x, y))
    assert not torch.equal(before, net.convs[0].weight)
    assert learner.predict(x).shape == (24, 2)


def test_a_library_nets_unknown_deterministic_layer_is_refused_by_name():
    with pytest.raises(ValueError, match=r"names \['hidden.3'\].*its layers: hidden.0, heads.0"):
        BayesianMLP(4, [8], 2, deterministic=["hidden.3"])
    with pytest.raises(TypeError, match="a list of layer paths"):
        BayesianCNN((1, 8, 8), ((3, 3),), (6,), 2, deterministic="convs.0")
    with pytest.raises(ValueError, match="fits the guide only"):
        learner_of(BayesianMLP(4, [8], 2, deterministic=["hidden.0"]), fitter=IVON())
