"""A Kronecker-factored (matrix-normal) guide family, added in one file
(pyro_cl/guides/kronecker.py): its KL against torch's multivariate normal one, its draws, and VCL
with it against exact online Bayes on multi-output linear regression, whose posterior is a
matrix normal ``MN(M, I, (I/σ_0² + XᵀX/σ²)⁻¹)``."""

import pytest
import torch
from pyro.distributions import Normal
from torch.distributions import MultivariateNormal, kl_divergence

import pyro_cl
from pyro_cl import ContinualLearner
from pyro_cl.guides import KroneckerFactored
from pyro_cl.guides.joint_gaussian import BlockSite
from pyro_cl.guides.kronecker import MatrixNormal
from pyro_cl.kl import site_kl
from pyro_cl.likelihoods import Likelihood
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.transitions import Wiener
from tests.helpers import exact_regression_settings

NOISE, INPUTS, OUTPUTS = 0.5, 3, 2
DOUBLE = {"dtype": torch.float64}


def random_tril(size: int, generator: torch.Generator) -> torch.Tensor:
    raw = torch.randn(size, size, generator=generator, **DOUBLE).tril(-1)
    return raw + torch.diag(torch.rand(size, generator=generator, **DOUBLE) + 0.5)


def random_matrix_normal(n: int, p: int, seed: int) -> MatrixNormal:
    generator = torch.Generator().manual_seed(seed)
    loc = torch.randn(n * p, generator=generator, **DOUBLE)
    return MatrixNormal(loc, random_tril(n, generator), random_tril(p, generator))


def as_multivariate_normal(q: MatrixNormal) -> MultivariateNormal:
    """``N(vec M, U ⊗ V)`` with the ``np × np`` matrix written out."""
    return MultivariateNormal(q.loc, scale_tril=torch.kron(q.row_tril, q.column_tril))


@pytest.mark.parametrize(("n", "p"), [(2, 3), (4, 1), (3, 3)])
def test_the_matrix_normal_kl_is_the_multivariate_normals_over_vec_w(n, p):
    """The registered closed form (eq. 1), through ``site_kl`` as the ELBO takes it."""
    q, prior = random_matrix_normal(n, p, 0), random_matrix_normal(n, p, 1)
    expected = kl_divergence(as_multivariate_normal(q), as_multivariate_normal(prior))
    torch.testing.assert_close(site_kl(q.distribution(), prior.distribution()), expected)
    assert float(site_kl(q.distribution(), q.distribution())) == pytest.approx(0.0, abs=1e-10)


def test_the_matrix_normal_density_is_the_multivariate_normals_over_vec_w():
    q = random_matrix_normal(3, 2, 4)
    values = torch.randn(5, 6, generator=torch.Generator().manual_seed(5), **DOUBLE)
    torch.testing.assert_close(
        q.distribution().log_prob(values), as_multivariate_normal(q).log_prob(values)
    )


def test_draws_have_the_kronecker_covariance_by_rows_and_its_variances():
    q = random_matrix_normal(2, 3, 2)
    torch.manual_seed(0)
    draws = q.rsample((200_000,))
    covariance = torch.kron(q.row_tril @ q.row_tril.T, q.column_tril @ q.column_tril.T)
    torch.testing.assert_close(torch.cov(draws.T), covariance, atol=0.05, rtol=0.02)
    torch.testing.assert_close(q.variance, covariance.diagonal())
    torch.testing.assert_close(draws.mean(0), q.loc, atol=0.03, rtol=0)


def tasks(num_tasks, per_task=40):
    generator = torch.Generator().manual_seed(3)
    weight = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.8, -1.0]])
    mixing = torch.tensor([[1.0, 0.6, 0.0], [0.0, 1.0, 0.4], [0.0, 0.0, 1.0]])
    out = []
    for task in range(num_tasks):
        x = torch.randn(per_task, INPUTS, generator=generator) @ mixing + 0.5 * task
        y = x @ (weight + task).T + NOISE * torch.randn(per_task, OUTPUTS, generator=generator)
        out.append((x, y))
    return out


def exact_online_posteriors(data):
    """Each output's weights share the precision ``Λ``: ``Cov(vec W) = I ⊗ Λ⁻¹`` by rows."""
    precision, mean, out = torch.eye(INPUTS), torch.zeros(OUTPUTS, INPUTS), []
    for x, y in data:
        new_precision = precision + x.T @ x / NOISE**2
        mean = torch.linalg.solve(new_precision, precision @ mean.T + x.T @ y / NOISE**2).T
        precision = new_precision
        covariance = torch.kron(torch.eye(OUTPUTS), torch.linalg.inv(precision).contiguous())
        out.append(MultivariateNormal(mean.reshape(-1), covariance))
    return out


class MultiOutputGaussian(Likelihood):
    """``y_k ~ N(f_k(x), σ²)`` independently for each of the net's outputs: a user's likelihood
    for multi-output regression."""

    name = "test_multi_output_gaussian"

    def __init__(self, noise_scale: float) -> None:
        self.noise_scale = noise_scale

    def distribution(self, outputs: torch.Tensor):
        return Normal(outputs, self.noise_scale).to_event(1)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        if y.dim() != 2 or y.shape[1] != num_outputs:
            raise ValueError(f"targets must be (N, {num_outputs}), got {tuple(y.shape)}")


def regression_learner(family, epochs=600, **settings):
    return ContinualLearner(
        BayesianLinear(INPUTS, OUTPUTS, bias=False),
        likelihood=MultiOutputGaussian(NOISE),
        guide=family,
        **exact_regression_settings(epochs),
        **settings,
    )


def test_vcl_with_a_kronecker_factor_is_exact_online_bayes_on_multi_output_regression():
    learner = regression_learner(KroneckerFactored())
    data = tasks(2)
    for (x, y), exact in zip(data, exact_online_posteriors(data), strict=True):
        learner.observe((x, y))
        fitted = as_multivariate_normal(learner.guide.joint_prior("block0"))
        assert kl_divergence(exact, fitted) < 0.1
    mean_field = regression_learner(pyro_cl.guides.MeanField(), epochs=200)
    for step in data:
        mean_field.observe(step)
    q = mean_field.current_prior()["weight"].base_dist
    diagonal = MultivariateNormal(q.loc.reshape(-1), torch.diag(q.scale.reshape(-1) ** 2))
    assert kl_divergence(exact_online_posteriors(data)[-1], diagonal) > 1


def test_a_coreset_refit_of_a_kronecker_factor_is_exact_bayes_on_all_the_data():
    """VCL + coreset (eq. 3) with a matrix normal: the refit adds the coreset's likelihood to
    ``q̃_t``, fitted without it, and lands on the exact ``p(W | all the data)``."""
    data = tasks(2)
    learner = regression_learner(KroneckerFactored(), memory=RandomCoreset(20))
    for step in data:
        learner.observe(step)
    exact = exact_online_posteriors(data)[-1]
    (refit,) = learner.prediction_posteriors.values()
    block = refit["weight"].base_dist.joint
    assert isinstance(block, MatrixNormal)
    assert kl_divergence(exact, as_multivariate_normal(block)) < 0.1
    propagated = as_multivariate_normal(learner.guide.joint_prior("block0"))
    assert kl_divergence(exact, propagated) > 1  # half of each task left out of q̃_t


def test_a_kronecker_guide_saves_loads_and_resumes_identically(tmp_path):
    data = tasks(2)
    learner = regression_learner(KroneckerFactored(), epochs=30)
    learner.observe(data[0])
    learner.save(tmp_path / "learner.pt")
    net = BayesianLinear(INPUTS, OUTPUTS, bias=False)
    loaded = ContinualLearner.load(tmp_path / "learner.pt", net=net)
    assert loaded.guide_family.spec() == KroneckerFactored().spec()
    for each in (learner, loaded):
        each.observe(data[1])
    for a, b in zip(learner.guide.joint_prior("block0"), loaded.guide.joint_prior("block0"),
                    strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_net_factors_its_weight_matrices_and_keeps_its_biases_mean_field():
    x = torch.randn(30, 4)
    y = (x[:, 0] > 0).long()
    learner = pyro_cl.VCL(
        BayesianMLP(4, [5], 2),
        guide=KroneckerFactored(),
        epochs=100,
        learning_rate=0.03,
        seed=0,
        progress=False,
    )
    learner.observe((x, y))
    posterior = learner.posterior(0)
    kinds = {name: type(q.base_dist).__name__ for name, q in posterior.items()}
    assert kinds == {
        "hidden.0.weight": "BlockSite", "hidden.0.bias": "Normal",
        "heads.0.weight": "BlockSite", "heads.0.bias": "Normal",
    }  # fmt: skip
    block = posterior["hidden.0.weight"].base_dist
    assert isinstance(block, BlockSite) and block.joint.shape == (5, 4)
    assert learner.evaluate((x, y))["accuracy"] > 0.9


def test_what_a_kronecker_factor_cannot_take_is_refused_by_name():
    with pytest.raises(ValueError, match="Wiener works with the guide families"):
        regression_learner(KroneckerFactored(), transition=Wiener(0.1))
    with pytest.raises(ValueError, match="VOGN"):
        regression_learner(KroneckerFactored(), fitter=pyro_cl.VOGN())
    layered = BayesianLinear(INPUTS, OUTPUTS, bias=False)
    layered.set_prior(
        "weight",
        Normal(torch.zeros(OUTPUTS, INPUTS), torch.tensor([[1.0], [2.0]]))
        .expand((OUTPUTS, INPUTS))
        .to_event(2),
    )
    learner = ContinualLearner(
        layered, likelihood=MultiOutputGaussian(NOISE), guide=KroneckerFactored(), epochs=1,
        progress=False,
    )  # fmt: skip
    with pytest.raises(TypeError, match="one prior scale a matrix"):
        learner.observe(tasks(1)[0])
