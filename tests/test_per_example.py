"""Per-example gradient statistics against autograd run on one example at a time."""

import pyro.distributions as dist
import pytest
import torch
from pyro.nn import PyroModule, PyroSample

from pyro_cl.infer.per_example import functional_statistics, layer_statistics
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.likelihoods import CategoricalLikelihood, GaussianLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianCNN, BayesianMLP

PARTICLES = 3


def _theta(model, generator_seed=0):
    torch.manual_seed(generator_seed)
    return {
        name: torch.randn(PARTICLES, *module.prior(attribute).event_shape, dtype=torch.float64)
        * 0.5
        for name, (module, attribute) in model.site_index.items()
        if _used_by_task_1(model.net, name)
    }


def _used_by_task_1(net, name: str) -> bool:
    """Whether task 1 uses site ``name``: the shared sites, its head (or the one head of a
    single-head net) and its FiLM layers."""
    group, index = (name.split(".") + [""])[:2]
    if group == "heads" and getattr(net, "num_heads", 1) == 1:
        return True
    return group not in ("heads", "film") or index == "1"


def _single_example_reference(model, theta, x, y, task_id, curvature):
    """Loop over samples and examples; autograd on each one alone."""
    gradients = {name: torch.zeros_like(value) for name, value in theta.items()}
    squared = {name: torch.zeros_like(value[0]) for name, value in theta.items()}
    for s in range(PARTICLES):
        for n in range(x.shape[0]):
            values = {name: value[s].clone().requires_grad_() for name, value in theta.items()}
            with substitute_sites(model.net, values):
                outputs = model.net_outputs(x[n : n + 1], task_id)
            loss = -model.likelihood.log_prob(outputs, y[n : n + 1]).sum()
            grads = torch.autograd.grad(loss, list(values.values()), retain_graph=True)
            for name, g in zip(values, grads, strict=True):
                gradients[name][s] += g
                if curvature == "fisher":
                    squared[name] += g.square()
            if curvature == "ggn":
                factor = model.likelihood.hessian_factor(outputs.detach())[0]
                for c in range(factor.shape[-1]):
                    seeds = torch.autograd.grad(
                        (outputs[0] * factor[:, c]).sum(), list(values.values()), retain_graph=True
                    )
                    for name, g in zip(values, seeds, strict=True):
                        squared[name] += g.square()
    return gradients, squared


NETS = {
    "mlp": lambda: (BayesianMLP(4, [5], 3, heads=2), torch.randn(6, 4)),
    "cnn": lambda: (
        BayesianCNN((2, 8, 8), conv_blocks=[(3, 4)], hidden_sizes=[5], out_features=3, heads=2),
        torch.randn(6, 2, 8, 8),
    ),
    "mlp_film": lambda: (BayesianMLP(4, [5, 4], 3, film_tasks=2), torch.randn(6, 4)),
    "cnn_film": lambda: (
        BayesianCNN(
            (2, 8, 8), conv_blocks=[(3, 4)], hidden_sizes=[5], out_features=3, heads=2, film_tasks=2
        ),
        torch.randn(6, 2, 8, 8),
    ),
}


@pytest.mark.parametrize("net_name", list(NETS))
@pytest.mark.parametrize("curvature", ["fisher", "ggn"])
def test_layer_statistics_equal_single_example_autograd(net_name, curvature):
    torch.manual_seed(1)
    net, x = NETS[net_name]()
    model = SupervisedModel(net.double(), CategoricalLikelihood())
    x = x.double()
    y = torch.randint(0, 3, (x.shape[0],))
    theta = _theta(model)
    stats = layer_statistics(model, theta, x, y, 1, curvature)
    gradients, squared = _single_example_reference(model, theta, x, y, 1, curvature)
    assert set(stats.gradients) == set(theta)
    for name in theta:
        torch.testing.assert_close(stats.gradients[name], gradients[name])
        torch.testing.assert_close(stats.squared[name], squared[name])


class PlainNet(PyroModule):
    """A user's own PyroModule: no pyro_cl layers."""

    def __init__(self):
        super().__init__()
        self.w = PyroSample(dist.Normal(torch.zeros(3, 2, dtype=torch.float64), 1.0).to_event(2))
        self.b = PyroSample(dist.Normal(torch.zeros(3, dtype=torch.float64), 1.0).to_event(1))

    def forward(self, x):
        return torch.tanh(x @ self.w.T + self.b)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("curvature", ["fisher", "ggn"])
def test_functional_statistics_equal_layer_statistics_and_a_loop(curvature, chunked, monkeypatch):
    """Vectorised over samples and examples (in chunks of one sample when memory is tight)."""
    if chunked:
        import pyro_cl.infer.per_example as per_example

        monkeypatch.setattr(per_example, "PER_EXAMPLE_FLOATS", 1)
    torch.manual_seed(2)
    model = SupervisedModel(PlainNet(), CategoricalLikelihood())
    x = torch.randn(5, 2, dtype=torch.float64)
    y = torch.randint(0, 3, (5,))
    theta = {
        "w": torch.randn(PARTICLES, 3, 2, dtype=torch.float64),
        "b": torch.randn(PARTICLES, 3, dtype=torch.float64),
    }
    stats = functional_statistics(model, theta, x, y, 0, curvature)
    for name in theta:
        for s in range(PARTICLES):
            total = torch.zeros_like(theta[name][0])
            total_sq = torch.zeros_like(theta[name][0])
            for n in range(5):
                values = {k: v[s].clone().requires_grad_() for k, v in theta.items()}
                out = torch.tanh(x[n] @ values["w"].T + values["b"])
                loss = -torch.log_softmax(out, -1)[y[n]]
                g = torch.autograd.grad(loss, values[name], retain_graph=True)[0]
                total += g
                if curvature == "fisher":
                    total_sq += g.square()
                else:
                    factor = CategoricalLikelihood().hessian_factor(out.detach())
                    for c in range(3):
                        total_sq += torch.autograd.grad(
                            (out * factor[:, c]).sum(), values[name], retain_graph=True
                        )[0].square()
            torch.testing.assert_close(stats.gradients[name][s], total)
            if s == 0:
                expected_sq = total_sq
            else:
                expected_sq = expected_sq + total_sq
        torch.testing.assert_close(stats.squared[name], expected_sq)


def test_hessian_factors_square_to_the_likelihood_hessian():
    torch.manual_seed(3)
    f = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(2)
    hessian = torch.autograd.functional.hessian(
        lambda f: -CategoricalLikelihood().log_prob(f, y), f
    )
    factor = CategoricalLikelihood().hessian_factor(f.detach())
    torch.testing.assert_close(factor @ factor.T, hessian)
    gaussian = GaussianLikelihood(0.5).hessian_factor(torch.zeros(1, dtype=torch.float64))
    torch.testing.assert_close(gaussian @ gaussian.T, torch.full((1, 1), 4.0, dtype=torch.float64))


@pytest.mark.parametrize("curvature", [None, "fisher", "ggn"])
def test_both_routes_agree_on_a_library_net(curvature):
    torch.manual_seed(4)
    net = BayesianMLP(4, [5], 3, heads=2).double()
    model = SupervisedModel(net, CategoricalLikelihood())
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(0, 3, (6,))
    theta = _theta(model)
    fast = layer_statistics(model, theta, x, y, 1, curvature)
    slow = functional_statistics(model, theta, x, y, 1, curvature)
    torch.testing.assert_close(fast.loss, slow.loss)
    for name in theta:
        torch.testing.assert_close(fast.gradients[name], slow.gradients[name])
        if curvature is not None:
            torch.testing.assert_close(fast.squared[name], slow.squared[name])
