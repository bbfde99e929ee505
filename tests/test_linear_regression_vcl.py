"""Online VCL on Bayesian linear regression against the exact diagonal-Gaussian recursion.

For a Gaussian likelihood with known noise σ² and a diagonal Gaussian prior N(m, diag(v)), the
optimal mean-field Gaussian q (VCL appendix F) has the *exact* posterior mean
    μ = Λ^{-1} (diag(v)^{-1} m + Xᵀy / σ²),   Λ = diag(v)^{-1} + XᵀX / σ²
and diagonal precisions Λ_dd = 1/v_d + Σ_n x_nd² / σ² (eq. 6-7 for a batch of points). Online VCL
applies this task after task with q_{t-1} as the prior.
"""

import pytest
import torch

from pyro_cl import VCL, GaussianLikelihood
from pyro_cl.nn import BayesianLinear

NOISE = 0.5
#: An SVI schedule whose end is within its noise of the exact optimum on these regressions.
CONVERGED = {
    "epochs": 1500,
    "batch_size": None,
    "learning_rate": 0.01,
    "num_particles": 16,
    "ml_init_epochs": 0,
    "seed": 0,
    "progress": False,
}


def exact_diagonal_update(mean, variance, x, y):
    precision = torch.diag(1 / variance) + x.T @ x / NOISE**2
    new_mean = torch.linalg.solve(precision, mean / variance + x.T @ y / NOISE**2)
    return new_mean, 1 / torch.diagonal(precision)


# The Pyro path is ~10x slower per step, so it runs one task with fewer particles.
@pytest.mark.parametrize("elbo,num_tasks,particles", [("fast", 3, 16), ("pyro", 1, 8)])
def test_vcl_matches_exact_online_recursion(elbo, num_tasks, particles):
    torch.manual_seed(1)
    dim, per_task = 3, 40
    true_weight = torch.tensor([1.0, -2.0, 0.5])
    net = BayesianLinear(dim, 1, bias=False, prior_scale=1.0)
    schedule = {**CONVERGED, "epochs": 1500 if elbo == "fast" else 800, "num_particles": particles}
    learner = VCL(net, likelihood=GaussianLikelihood(NOISE), elbo=elbo, **schedule)
    mean, variance = torch.zeros(dim), torch.ones(dim)
    for task in range(num_tasks):
        x = torch.randn(per_task, dim) + 0.3 * task
        y = x @ true_weight + NOISE * torch.randn(per_task)
        learner.observe((x, y), task_id=task)
        mean, variance = exact_diagonal_update(mean, variance, x, y)
        prior = learner.current_prior()["weight"].base_dist
        # Tolerances: the SVI optimum is exact, the stochastic optimiser ends within its noise.
        torch.testing.assert_close(prior.loc.squeeze(0), mean, atol=0.03, rtol=0)
        torch.testing.assert_close(prior.scale.squeeze(0) ** -2, variance**-1, rtol=0.1, atol=0)
