"""The fast ELBO equals Pyro's TraceMeanField_ELBO on the same random draws (value and gradients)."""

import pyro
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO

import pyro_cl.nn.local_reparam as lrt_module
from pyro_cl import CategoricalLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.infer.objectives import negative_elbo
from pyro_cl.nn import BayesianMLP, local_reparameterization
from tests.helpers import two_class_data


def _loss_and_grads(fn, guide):
    guide.zero_grad(set_to_none=True)
    loss = fn()
    loss.backward()
    return loss.detach(), {
        k: p.grad.clone() for k, p in guide.named_parameters() if p.grad is not None
    }


@pytest.mark.parametrize("use_lrt", [False, True])
def test_fast_elbo_equals_trace_mean_field_elbo(use_lrt, monkeypatch):
    x, y = two_class_data(32, 4)
    net = BayesianMLP(4, [8, 6], 2, heads=2, local_reparameterization=use_lrt)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    task, n = 1, 500
    guide.sites_for(x, y, task_id=task, dataset_size=n)

    if use_lrt:  # the pre-activation noise comes from a generator both runs reset identically
        generator = torch.Generator()
        monkeypatch.setattr(
            lrt_module,
            "standard_normal",
            lambda shape, like: torch.randn(shape, generator=generator, dtype=like.dtype),
        )

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

    loss_pyro, grads_pyro = _loss_and_grads(pyro_loss, guide)
    loss_fast, grads_fast = _loss_and_grads(fast_loss, guide)
    torch.testing.assert_close(loss_fast, loss_pyro, rtol=1e-5, atol=1e-6)
    assert grads_pyro.keys() == grads_fast.keys()
    assert not any("heads/0" in k for k in grads_fast)  # the other head is not touched
    for key in grads_pyro:
        torch.testing.assert_close(grads_fast[key], grads_pyro[key], rtol=1e-4, atol=1e-6)
