"""Laplace propagation with a Kronecker-factored guide (Ritter et al. 2018): KFAC's factors
against the dense Gauss-Newton block, the factored sum of a prior and a curvature against the
exact sum and its split against a search, and the propagation against exact Bayes on a
multi-output linear regression, whose posterior is a matrix normal."""

import pytest
import torch
from torch.distributions import kl_divergence

from pyro_cl import ContinualLearner
from pyro_cl.baselines import LaplacePropagation
from pyro_cl.baselines.kronecker_curvature import kronecker_curvature, kronecker_sum
from pyro_cl.guides import KroneckerFactored, MeanFieldGuide
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianLinear, BayesianMLP
from tests.helpers import exact_map_settings
from tests.test_kronecker_guide import (
    INPUTS,
    NOISE,
    OUTPUTS,
    MultiOutputGaussian,
    as_multivariate_normal,
    exact_online_posteriors,
    tasks,
)

DOUBLE = {"dtype": torch.float64}


def random_spd(size: int, generator: torch.Generator) -> torch.Tensor:
    root = torch.randn(size, size + 2, generator=generator, **DOUBLE)
    return root @ root.T / size


def whitened_excess_trace(prior, curvature, alpha):
    """``tr`` of ``(P_r + αG) ⊗ (P_c + A/α) - (P_r ⊗ P_c + G ⊗ A)`` whitened by the prior."""
    (rows, columns), (g, a) = prior, curvature
    whitening = torch.linalg.inv(torch.linalg.cholesky(torch.kron(rows, columns)))
    excess = torch.kron(rows + alpha * g, columns + a / alpha) - torch.kron(rows, columns)
    excess = excess - torch.kron(g, a)
    return (whitening @ excess @ whitening.T).diagonal().sum()


def test_the_kronecker_sum_is_at_least_the_exact_sum_and_its_split_the_least_excess():
    generator = torch.Generator().manual_seed(0)
    prior = (random_spd(3, generator), random_spd(4, generator))
    curvature = (7.0 * random_spd(3, generator), random_spd(4, generator) / 5)
    rows, columns = kronecker_sum(prior, curvature)
    exact = torch.kron(*prior) + torch.kron(*curvature)
    assert torch.linalg.eigvalsh(torch.kron(rows, columns) - exact).min() > -1e-10
    alpha = ((rows - prior[0]) / curvature[0]).mean()  # the split it chose
    torch.testing.assert_close(rows, prior[0] + alpha * curvature[0])
    torch.testing.assert_close(columns, prior[1] + curvature[1] / alpha)
    least = whitened_excess_trace(prior, curvature, alpha)
    for factor in (0.8, 1.25):
        assert whitened_excess_trace(prior, curvature, factor * alpha) > least
    # the same answer whatever the curvature's split between its factors
    again = kronecker_sum(prior, (3.0 * curvature[0], curvature[1] / 3.0))
    torch.testing.assert_close(torch.kron(*again), torch.kron(rows, columns))
    # no curvature: the prior
    zero = (torch.zeros(3, 3, **DOUBLE), torch.zeros(4, 4, **DOUBLE))
    assert all(torch.equal(x, y) for x, y in zip(kronecker_sum(prior, zero), prior, strict=True))


def classifier(seed=0):
    torch.manual_seed(seed)
    net = BayesianMLP(4, [5], 3)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model)
    x = torch.randn(6, 4)
    sites = model.sites(guide, x, [0])
    values = {n: v.detach() + 0.3 * torch.randn_like(v) for n, v in guide.locs(sites).items()}
    return model, values, x


def dense_ggn_block(model, values, x, name):
    """``Σ_n J_nᵀ (diag p_n - p_n p_nᵀ) J_n`` of ``vec W`` (by rows) with autograd's Jacobian."""
    shape = values[name].shape
    total = 0.0
    for i in range(len(x)):

        def logits(flat, i=i):
            theta = {k: v.unsqueeze(0) for k, v in values.items()}
            theta[name] = flat.reshape(1, *shape)
            with substitute_sites(model.net, theta, 1):
                return model.net_outputs(x[i : i + 1].unsqueeze(0), 0).reshape(-1)

        flat = values[name].reshape(-1)
        jacobian = torch.autograd.functional.jacobian(logits, flat)
        p = logits(flat).softmax(-1)
        total = total + jacobian.T @ (torch.diag(p) - torch.outer(p, p)) @ jacobian
    return total


@pytest.mark.parametrize("name", ["hidden.0.weight", "heads.0.weight"])
def test_kfac_on_one_point_is_the_gauss_newton_block_and_averages_over_several(name):
    model, values, x = classifier()
    rows, columns = kronecker_curvature(model, values, x[:1], 0, [name])[name]
    torch.testing.assert_close(
        torch.kron(rows, columns), dense_ggn_block(model, values, x[:1], name), rtol=1e-4, atol=1e-6
    )
    # two points: N Ḡ ⊗ Ā = (G_1 + G_2) ⊗ (A_1 + A_2) / 2
    parts = [kronecker_curvature(model, values, x[i : i + 1], 0, [name])[name] for i in (0, 1)]
    rows, columns = kronecker_curvature(model, values, x[:2], 0, [name])[name]
    expected = torch.kron(parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]) / 2
    torch.testing.assert_close(torch.kron(rows, columns), expected, rtol=1e-4, atol=1e-6)


class GaussianOutputs(MultiOutputGaussian):
    """The multi-output Gaussian with its Gauss-Newton factor ``L = I/σ``."""

    name = "test_multi_output_gaussian_ggn"

    def hessian_factor(self, outputs: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(outputs.shape[-1], dtype=outputs.dtype, device=outputs.device)
        return (eye / self.noise_scale).expand(*outputs.shape, outputs.shape[-1])


def test_kronecker_laplace_propagation_on_multi_output_regression_is_exact_and_then_surer():
    """The first task's MAP under a matrix-normal prior is the exact posterior mean, its KFAC
    block the exact Hessian ``I ⊗ XᵀX/σ²``; the kept precision is the factored sum, at least the
    exact ``I ⊗ (I + XᵀX/σ²)`` and close to it (the excess the least over the split)."""
    learner = ContinualLearner(
        BayesianLinear(INPUTS, OUTPUTS, bias=False),
        likelihood=GaussianOutputs(NOISE),
        guide=KroneckerFactored(),
        fitter=LaplacePropagation(),
        **exact_map_settings(),
    )
    data = tasks(1)
    (exact,) = exact_online_posteriors(data)
    learner.observe(data[0])
    fitted = as_multivariate_normal(learner.guide.joint_prior("block0"))
    torch.testing.assert_close(fitted.loc, exact.loc, atol=2e-3, rtol=0)
    excess = fitted.precision_matrix - exact.precision_matrix
    assert torch.linalg.eigvalsh(excess).min() > -1e-3
    assert kl_divergence(exact, fitted) < 0.1


def test_a_kronecker_laplace_classifier_learns_and_asks_for_the_gauss_newton_curvature():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()

    def learner(curvature):
        return ContinualLearner(
            BayesianMLP(4, [8], 2), guide=KroneckerFactored(),
            fitter=LaplacePropagation(curvature), epochs=60, batch_size=None,
            learning_rate=0.05, seed=0, progress=False,
        )  # fmt: skip

    fitted = learner("ggn")
    fitted.observe((x, y))
    assert fitted.evaluate((x, y))["accuracy"] > 0.9
    prior = fitted.guide.joint_prior("block0")
    assert prior.shape == (8, 4) and bool((prior.variance < 1).all())  # below the first prior's
    with pytest.raises(ValueError, match="curvature='ggn'"):  # when the learner is built
        learner("fisher")
