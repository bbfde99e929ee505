"""The fast ELBO equals Pyro's TraceMeanField_ELBO on the same random draws (value and gradients)."""

import pyro.distributions as dist
import pytest
import torch
from pyro.nn import PyroModule, PyroSample

from pyro_cl import CategoricalLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.infer.objectives import Minibatch, negative_elbo, task_groups
from pyro_cl.infer.site_values import sample_outputs, substitute_sites
from pyro_cl.kl import kl_to_prior
from pyro_cl.nn import BayesianMLP
from pyro_cl.posterior import read_priors
from tests.helpers import (
    elbo_on_both_routes,
    fixed_preactivation_noise,
    loss_and_gradients,
    two_class_data,
)


@pytest.mark.parametrize("particles", [1, 3])
@pytest.mark.parametrize("use_lrt", [False, True])
def test_fast_elbo_equals_trace_mean_field_elbo(use_lrt, particles, monkeypatch):
    """One particle: Pyro's own ``TraceMeanField_ELBO``. Several: the Pyro route's particle plate
    (all particles in one pass, weights and pre-activation noise drawn in the fast route's
    order), against the fast route."""
    x, y = two_class_data(32, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2, local_reparameterization=use_lrt)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    task, n = 1, 500
    guide.sites_for(x, y, task_id=task, dataset_size=n)

    (loss_pyro, grads_pyro), (loss_fast, grads_fast) = elbo_on_both_routes(
        model, guide, x, y, task, n, particles, monkeypatch
    )
    torch.testing.assert_close(loss_fast, loss_pyro, rtol=1e-5, atol=1e-6)
    assert grads_pyro.keys() == grads_fast.keys()
    assert not any("heads/0" in k for k in grads_fast)  # the other head is not touched
    for key in grads_pyro:
        torch.testing.assert_close(grads_fast[key], grads_pyro[key], rtol=1e-4, atol=1e-6)


def test_mixed_task_batches_count_each_site_once_on_both_routes():
    """Per-point task ids (a coreset of several tasks): the KL covers the union of the tasks'
    sites once and each point is scored by its own head, on both routes. With negligible
    variances every draw equals the means, so both routes must equal a hand computation."""
    x, y = two_class_data(12, 4)
    task_ids = torch.tensor([0, 1, 2] * 4)
    net = BayesianMLP(4, [5], 2, heads=3, local_reparameterization=False)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-40.0)
    n = 40
    names = list(
        dict.fromkeys(s for t in range(3) for s in guide.sites_for(x, y, task_id=t, dataset_size=n))
    )
    assert len(names) == 2 + 3 * 2  # trunk + three heads
    with torch.no_grad():
        kl = kl_to_prior(guide.posterior(names), read_priors(net, names))
        log_likelihood = 0.0
        for task in range(3):
            rows = task_ids == task
            with substitute_sites(net, {k: v.detach() for k, v in guide.locs(names).items()}):
                outputs = net(x[rows], task_id=task)
            log_likelihood += torch.log_softmax(outputs, -1).gather(1, y[rows, None]).sum()
    expected = kl / n - log_likelihood / 12
    losses = {}
    for fast in (True, False):
        losses[fast] = loss_and_gradients(
            lambda fast=fast: negative_elbo(model, guide, Minibatch(x, y, task_ids), n, 1, fast),
            guide,
        )
        torch.testing.assert_close(losses[fast][0], expected, rtol=1e-5, atol=1e-5)
    assert len(losses[True][1]) == 2 * len(names)
    for key in losses[False][1]:
        torch.testing.assert_close(
            losses[True][1][key], losses[False][1][key], rtol=1e-4, atol=1e-6
        )


def test_task_groups_group_rows_by_task_in_order():
    ids = torch.tensor([3, 0, 3, 1, 0, 3])
    groups = task_groups(ids, 6)
    assert [task for task, _ in groups] == [0, 1, 3]
    for task, rows in groups:
        assert torch.equal(rows, (ids == task).nonzero().squeeze(1))
    assert task_groups(torch.tensor([2, 2]), 2) == [(2, slice(None))]
    assert task_groups(4, 9) == [(4, slice(None))]
    with pytest.raises(ValueError, match="expected 3 task ids"):
        task_groups(ids, 3)


class _PlainPyroLinear(PyroModule[torch.nn.Linear]):
    """An ordinary PyroModule (not a pyro_cl layer): its forward need not broadcast over
    particles."""

    def __init__(self, fan_in: int, fan_out: int) -> None:
        super().__init__(fan_in, fan_out)
        self.weight = PyroSample(dist.Normal(0.0, 1.0).expand([fan_out, fan_in]).to_event(2))
        self.bias = PyroSample(dist.Normal(0.0, 1.0).expand([fan_out]).to_event(1))


@pytest.mark.parametrize("library_layers", [True, False])
def test_the_pyro_route_runs_all_particles_in_one_pass_where_the_net_broadcasts(library_layers):
    """pyro_cl layers: the ELBO and predictions run the net once for all particles (a particle
    plate, no Python loop). A plain PyroModule: once per particle, as Pyro's ELBOs do."""
    x, y = two_class_data(10, 4)
    net = BayesianMLP(4, [5], 2) if library_layers else _PlainPyroLinear(4, 2)
    model = SupervisedModel(net, CategoricalLikelihood(), route="pyro")
    assert model.vectorized_particles == library_layers
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    names = guide.sites_for(x, y, task_id=0, dataset_size=10)
    calls = []
    net.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    loss = negative_elbo(model, guide, Minibatch(x, y, 0), 10, num_particles=4, fast=False)
    loss.backward()
    assert torch.isfinite(loss)
    outputs = sample_outputs(model, guide.posterior(names), x, 0, num_samples=4, fast=False)
    assert outputs.shape == (4, 10, 2)
    expected = [(4, 10, 2)] * 2 if library_layers else [(10, 2)] * 8
    assert calls == expected


def test_pyro_route_predictions_equal_the_fast_route_on_the_same_draws(monkeypatch):
    """``sample_outputs`` on both routes (local reparameterisation, three samples in one pass):
    the same pre-activation noise gives the same outputs."""
    x, _ = two_class_data(6, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    names = guide.sites_for(x, None, task_id=1)
    sites = guide.posterior(names)
    generator = fixed_preactivation_noise(monkeypatch)
    outputs = {}
    for fast in (True, False):
        generator.manual_seed(11)
        outputs[fast] = sample_outputs(model, sites, x, 1, num_samples=3, fast=fast)
    assert outputs[True].shape == (3, 6, 2)
    torch.testing.assert_close(outputs[False], outputs[True])
    assert not torch.allclose(outputs[True][0], outputs[True][1])  # three different draws
