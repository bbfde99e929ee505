"""The posterior→prior handoff on a user's own PyroModule, with our guide and with AutoNormal."""

from functools import partial

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample
from torch import nn

from pyro_cl import VCL, MeanFieldGuide, extract_posterior, install_prior, read_priors
from pyro_cl.infer.prediction import (
    MAX_CHUNK,
    PREDICTION_ELEMENTS,
    prediction_chunk,
    widest_activation,
)
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.nn import BayesianCNN, BayesianMLP
from pyro_cl.posterior import posterior_from_state, posterior_to_state
from tests.helpers import two_class_data


class UserNet(PyroModule):
    """A Pyro user's own Bayesian logistic regression, nothing from pyro_cl inside."""

    def __init__(self):
        super().__init__()
        self.linear = PyroModule[nn.Linear](4, 2)
        self.linear.weight = PyroSample(dist.Normal(0.0, 1.0).expand([2, 4]).to_event(2))
        self.linear.bias = PyroSample(dist.Normal(0.0, 1.0).expand([2]).to_event(1))

    def forward(self, x):
        return self.linear(x)


def user_model(net):
    def model(x, y=None):
        logits = net(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Categorical(logits=logits), obs=y)

    return model


@pytest.mark.parametrize("guide_class", [MeanFieldGuide, AutoNormal])
def test_svi_fit_then_handoff_installs_the_posterior_as_prior(guide_class):
    net = UserNet()
    model = user_model(net)
    guide = guide_class(model)
    x, y = two_class_data(100, 4)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), TraceMeanField_ELBO())
    for _ in range(100):
        svi.step(x, y)
    posterior = extract_posterior(guide)
    assert set(posterior) == {"linear.weight", "linear.bias"}
    assert all(not d.base_dist.loc.requires_grad for d in posterior.values())
    install_prior(net, posterior)
    priors = read_priors(net)
    for name, q in posterior.items():
        assert torch.equal(priors[name].base_dist.loc, q.base_dist.loc)
        assert torch.equal(priors[name].base_dist.scale, q.base_dist.scale)
    # the fitted weights separate the classes along feature 0
    w = posterior["linear.weight"].base_dist.loc
    assert (w[1, 0] - w[0, 0]) > 1.0


def test_install_prior_rejects_unknown_sites_and_wrong_shapes():
    net = UserNet()
    with pytest.raises(KeyError, match="no sample sites"):
        install_prior(net, {"nope": dist.Normal(0.0, 1.0)})
    with pytest.raises(ValueError, match="shape"):
        install_prior(net, {"linear.bias": dist.Normal(torch.zeros(3), 1.0).to_event(1)})


def test_vcl_learner_on_a_user_pyro_module_uses_the_pyro_path():
    learner = VCL(
        UserNet(),
        epochs=30,
        batch_size=50,
        learning_rate=0.05,
        num_particles=2,
        progress=False,
        seed=0,
    )
    assert not learner.model.fast
    data = two_class_data(200, 4)
    learner.observe(data, task_id=0)
    assert learner.evaluate(data)["accuracy"] > 0.9
    assert set(learner.current_prior()) == {"linear.weight", "linear.bias"}


def test_posterior_state_round_trip_is_plain_tensors():
    posterior = {
        "w": dist.Normal(torch.randn(2, 3), torch.rand(2, 3) + 0.1).to_event(2),
        "v": dist.Beta(torch.rand(4) + 1, torch.rand(4) + 1).to_event(1),
        "s": dist.Normal(torch.tensor(0.5), torch.tensor(2.0)),
    }
    state = posterior_to_state(posterior)
    restored = posterior_from_state(state)
    for name, d in posterior.items():
        assert type(restored[name]) is type(d)
        torch.testing.assert_close(restored[name].mean, d.mean)
        torch.testing.assert_close(restored[name].variance, d.variance)
    with pytest.raises(ValueError, match="unknown distribution"):
        posterior_from_state({"w": {"distribution": "os.system", "event_dim": 0, "params": {}}})


def test_predictive_samples_use_the_same_weights_across_chunks():
    """Without local reparameterisation, sample s is one function of x, however x is chunked."""
    learner = VCL(BayesianMLP(2, [4], 2, local_reparameterization=False), seed=0)
    x = torch.randn(10, 2)
    whole = learner.predictive_samples(torch.cat([x, x]), num_samples=3, chunk=20)
    chunked = learner.predictive_samples(torch.cat([x, x]), num_samples=3, chunk=10)
    torch.testing.assert_close(chunked[:, :10], chunked[:, 10:])
    torch.testing.assert_close(whole[:, :10], whole[:, 10:])


def test_prediction_passes_are_sized_by_the_nets_widest_activation():
    """The default pass holds ~PREDICTION_ELEMENTS activation elements: the widest module output
    (a conv net's first feature maps, an MLP's widest hidden layer) times the samples."""
    mlp = VCL(BayesianMLP(3, [7, 5], 2), seed=0)
    x = torch.randn(1, 3)
    assert (
        widest_activation(mlp.net, partial(sample_outputs, mlp.model, {}, x, 0, 1), x.device) == 7
    )
    cnn = VCL(BayesianCNN((1, 8, 8), ((4, 4),), (6,), 2, heads=1), seed=0)
    image = torch.randn(1, 1, 8, 8)
    before = torch.get_rng_state()  # the probe's draws are rolled back
    assert (
        widest_activation(
            cnn.net, partial(sample_outputs, cnn.model, {}, image, 0, 1), image.device
        )
        == 256
    )
    assert torch.equal(torch.get_rng_state(), before)
    assert prediction_chunk(7, 10) == MAX_CHUNK
    assert prediction_chunk(2**15, 100) == 1
    assert prediction_chunk(2**15, 10) == PREDICTION_ELEMENTS // (2**15 * 10)


def test_the_probe_that_sizes_the_passes_draws_nothing_the_prediction_sees():
    """Default passes give what the same passes given explicitly give, and leave the random
    stream where they leave it: the probe pass's draws are rolled back."""
    learner = VCL(BayesianMLP(2, [4], 2, local_reparameterization=False))  # torch's generator
    x = torch.randn(300, 2)
    chunk = prediction_chunk(4, 3)
    torch.manual_seed(1)
    default = learner.predictive_samples(x, num_samples=3)
    after_default = torch.rand(3)
    torch.manual_seed(1)
    explicit = learner.predictive_samples(x, num_samples=3, chunk=chunk)
    torch.testing.assert_close(default, explicit)
    torch.testing.assert_close(after_default, torch.rand(3))
