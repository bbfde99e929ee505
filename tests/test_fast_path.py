"""The fast ELBO equals Pyro's TraceMeanField_ELBO on the same random draws (value and gradients)."""

import pyro
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO

from pyro_cl import CategoricalLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.infer.objectives import negative_elbo
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.kl import kl_to_prior
from pyro_cl.nn import BayesianMLP, local_reparameterization
from pyro_cl.posterior import read_priors
from tests.helpers import fixed_preactivation_noise, loss_and_gradients, two_class_data


@pytest.mark.parametrize("use_lrt", [False, True])
def test_fast_elbo_equals_trace_mean_field_elbo(use_lrt, monkeypatch):
    x, y = two_class_data(32, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2, local_reparameterization=use_lrt)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    task, n = 1, 500
    guide.sites_for(x, y, task_id=task, dataset_size=n)

    if use_lrt:  # the pre-activation noise comes from a generator both runs reset identically
        generator = fixed_preactivation_noise(monkeypatch)

    def pyro_loss():
        if use_lrt:
            generator.manual_seed(7)
        pyro.set_rng_seed(3)
        with local_reparameterization():
            loss = TraceMeanField_ELBO().differentiable_loss(
                model, guide, x, y, task_id=task, dataset_size=n
            )
        return loss / n

    def fast_loss():
        if use_lrt:
            generator.manual_seed(7)
        pyro.set_rng_seed(3)
        return negative_elbo(model, guide, x, y, task, n, num_particles=1, fast=True)

    loss_pyro, grads_pyro = loss_and_gradients(pyro_loss, guide)
    loss_fast, grads_fast = loss_and_gradients(fast_loss, guide)
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
            lambda fast=fast: negative_elbo(model, guide, x, y, task_ids, n, 1, fast), guide
        )
        torch.testing.assert_close(losses[fast][0], expected, rtol=1e-5, atol=1e-5)
    assert len(losses[True][1]) == 2 * len(names)
    for key in losses[False][1]:
        torch.testing.assert_close(
            losses[True][1][key], losses[False][1][key], rtol=1e-4, atol=1e-6
        )
