"""VOGN and IVON: one step against a hand computation of eq. 52/53, the exact posterior of
Bayesian linear regression as the Gauss-Newton fixed point, the handoff, divergence."""

import math

import pyro.distributions as dist
import pytest
import torch

from pyro_cl import VCL, DivergenceError, GaussianLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.natural_gradient import GradientSums
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.data_parallel import sharded_step
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.packed_gaussians import site_views
from pyro_cl.infer.per_example import gradient_statistics
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianLinear, BayesianMLP
from pyro_cl.points import Points
from pyro_cl.posterior import install_prior, read_priors
from tests.test_linear_regression_vcl import NOISE, exact_diagonal_update


def _tiny_problem(seed=0):
    torch.manual_seed(seed)
    net = BayesianMLP(3, [4], 2).double()
    model = SupervisedModel(net, CategoricalLikelihood())
    # A per-parameter prior, as after an earlier task.
    install_prior(
        net,
        {
            name: dist.Normal(
                0.3 * torch.randn(module.prior(attr).event_shape, dtype=torch.float64),
                0.5 + torch.rand(module.prior(attr).event_shape, dtype=torch.float64),
            ).to_event(module.prior(attr).event_dim)
            for name, (module, attr) in model.site_index.items()
        },
    )
    guide = MeanFieldGuide(model, init_log_variance=math.log(1e-2))
    x = torch.randn(8, 3, dtype=torch.float64)
    y = torch.randint(0, 2, (8,))
    names = guide.sites_for(x, None, task_id=0)
    return net, model, guide, x, y, names


def _context(model):
    return FitContext(
        model, TrainingConfig(), torch.device("cpu"), CallbackList(), read_priors(model.net)
    )


def _hand_statistics(net, theta, x, y):
    """ĝ and F̂ sums by autograd on one example and one sample at a time."""
    names = list(theta)
    grads = {n: torch.zeros_like(theta[n][0]) for n in names}
    fisher = {n: torch.zeros_like(theta[n][0]) for n in names}
    samples = next(iter(theta.values())).shape[0]
    for s in range(samples):
        for i in range(x.shape[0]):
            v = {n: theta[n][s].clone().requires_grad_() for n in names}
            hidden = torch.relu(x[i] @ v["hidden.0.weight"].T + v["hidden.0.bias"])
            logits = hidden @ v["heads.0.weight"].T + v["heads.0.bias"]
            loss = -torch.log_softmax(logits, -1)[y[i]]
            for n, g in zip(names, torch.autograd.grad(loss, list(v.values())), strict=True):
                grads[n] += g
                fisher[n] += g * g
    return grads, fisher


@pytest.mark.parametrize(
    "momentum,batch_size,rho", [(0.0, None, 1.0), (0.9, None, 1.0), (0.0, 4, 3.0)]
)
def test_vogn_steps_equal_hand_computation_of_eq_52_53(momentum, batch_size, rho):
    net, model, guide, x, y, names = _tiny_problem()
    alpha, beta, samples, epochs = 0.1, 0.2, 3, 2
    mu = {n: guide.locs([n])[n].detach().clone() for n in names}
    s = guide.precisions(names)
    prior = {n: model.site_index[n][0].prior_parameters(model.site_index[n][1]) for n in names}
    update = VOGN(alpha, beta=beta, num_samples=samples, momentum=momentum, data_scale=rho)
    torch.manual_seed(5)
    update.fit(
        _context(model), guide, FitProblem(Points.of_task(x, y, 0), names, epochs, batch_size)
    )

    torch.manual_seed(5)
    momentum_buffer = {n: torch.zeros_like(mu[n]) for n in names}
    n_data = x.shape[0]
    m = batch_size or n_data
    for _ in range(epochs):
        order = torch.randperm(n_data)
        for start in range(0, n_data, m):
            batch = order[start : start + m]
            # one draw over all parameters, sites in order (the fitter packs them)
            sizes = [mu[n].numel() for n in names]
            noise = torch.randn((samples, sum(sizes)), dtype=torch.float64).split(sizes, dim=1)
            theta = {
                n: mu[n] + eps.reshape(samples, *mu[n].shape) * s[n].rsqrt()
                for n, eps in zip(names, noise, strict=True)
            }
            grads, fisher = _hand_statistics(net, theta, x[batch], y[batch])
            for n in names:
                prior_loc, prior_scale = prior[n]
                prior_precision = prior_scale**-2
                g_hat = rho * n_data / m * grads[n] / samples
                f_hat = rho * n_data / m * fisher[n] / samples
                s[n] = (1 - beta) * s[n] + beta * (f_hat + prior_precision)
                momentum_buffer[n] = momentum * momentum_buffer[n] + (1 - momentum) * g_hat
                direction = momentum_buffer[n] + prior_precision * (mu[n] - prior_loc)
                mu[n] = mu[n] - alpha * direction / s[n]
    for n in names:
        torch.testing.assert_close(guide.locs([n])[n].detach(), mu[n])
        torch.testing.assert_close(guide.precisions([n])[n], s[n])


@pytest.mark.parametrize(
    "update,tasks,tolerance",
    [
        (VOGN(0.3, beta=0.5, num_samples=64, curvature="ggn"), 3, 0.0),
        (IVON(0.05, beta1=0.0, beta2=0.99, num_samples=64, hessian_init=1.0), 1, 0.1),
    ],
    ids=["vogn-ggn", "ivon"],
)
def test_fixed_point_is_the_exact_linear_regression_posterior(update, tasks, tolerance):
    """With the Gauss-Newton option VOGN's fixed point is the exact posterior's mean and diagonal
    precision (the GGN of a linear model does not depend on θ, so the precision is exact)."""
    torch.manual_seed(1)
    dim, per_task = 3, 40
    true_weight = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    net = BayesianLinear(dim, 1, bias=False).double()
    learner = VCL(
        net,
        likelihood=GaussianLikelihood(NOISE),
        fitter=update,
        epochs=600,
        batch_size=None,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    mean, variance = torch.zeros(dim, dtype=torch.float64), torch.ones(dim, dtype=torch.float64)
    for task in range(tasks):
        x = torch.randn(per_task, dim, dtype=torch.float64) + 0.3 * task
        y = x @ true_weight + NOISE * torch.randn(per_task, dtype=torch.float64)
        learner.observe((x, y), task_id=task)
        mean, variance = exact_diagonal_update(mean, variance, x, y)
        prior = learner.current_prior()["weight"].base_dist
        posterior_scale = variance.sqrt()
        error = (prior.loc.squeeze(0) - mean).abs() / posterior_scale
        # the last iterate carries Monte Carlo noise (64 samples, α = 0.3): over learner seeds
        # 0-5 its largest error on the three tasks measured 0.04-0.15 posterior std
        assert (error < 0.2).all(), error
        precision = prior.scale.squeeze(0) ** -2
        if tolerance == 0.0:
            torch.testing.assert_close(precision, 1 / variance)
        else:
            torch.testing.assert_close(precision, 1 / variance, rtol=tolerance, atol=0)


def test_posterior_of_task_k_is_prior_of_task_k_plus_1_and_new_heads_start_at_the_prior():
    torch.manual_seed(0)
    net = BayesianMLP(5, [6], 2, heads=3)
    learner = VCL(
        net,
        fitter=VOGN(1e-2, beta=0.1, num_samples=2),
        epochs=3,
        batch_size=16,
        ml_init_epochs=0,
        between_tasks="fresh",
        init_log_variance=-math.log(1e3),
        seed=0,
        progress=False,
    )
    initial = (
        {
            n: (d.base_dist.loc.clone(), d.base_dist.scale.clone())
            for n, d in learner.current_prior().items()
        }
        if learner.trained_sites
        else None
    )
    assert initial is None
    for task in range(2):
        x, y = torch.randn(40, 5), torch.randint(0, 2, (40,))
        learner.observe((x, y), task_id=task)
        posterior = learner.guide.posterior(learner.trained_sites)
        prior = learner.current_prior()
        for name in learner.trained_sites:
            if name.startswith("heads.") and not name.startswith(f"heads.{task}."):
                continue
            torch.testing.assert_close(
                prior[name].base_dist.loc, posterior[name].base_dist.loc, rtol=0, atol=0
            )
            torch.testing.assert_close(
                prior[name].base_dist.scale, posterior[name].base_dist.scale, rtol=1e-6, atol=0
            )
    # head 2 was never trained: it keeps the initial N(0, 1) prior
    head = net.heads[2]
    assert torch.equal(head.weight_prior_loc, torch.zeros_like(head.weight_prior_loc))
    assert torch.equal(head.weight_prior_scale, torch.ones_like(head.weight_prior_scale))


def test_divergence_raises_and_keeps_the_previous_posterior():
    torch.manual_seed(0)
    net = BayesianMLP(4, [5], 2)
    learner = VCL(
        net,
        fitter=VOGN(1e-2, beta=0.1, num_samples=2),
        epochs=2,
        batch_size=None,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    x, y = torch.randn(30, 4), torch.randint(0, 2, (30,))
    learner.observe((x, y))
    prior = {
        n: (d.base_dist.loc.clone(), d.base_dist.scale.clone())
        for n, d in learner.current_prior().items()
    }
    guide_state = {
        k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)
    }
    learner.fitter = VOGN(1e30, beta=0.1, num_samples=2)  # a step this large overflows
    with pytest.raises(DivergenceError):
        learner.observe((x * 1e10, y), task_id=0)
    for name, (loc, scale) in prior.items():
        now = learner.current_prior()[name].base_dist
        assert torch.equal(now.loc, loc) and torch.equal(now.scale, scale)
    for key, value in learner.guide.state_dict().items():
        if torch.is_tensor(value):
            assert torch.equal(value, guide_state[key])


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e8])
def test_precision_stays_positive_and_finite_or_the_task_is_refused(scale):
    torch.manual_seed(0)
    learner = VCL(
        BayesianMLP(4, [5], 3),
        fitter=VOGN(1e-3, beta=0.5, num_samples=2),
        epochs=3,
        batch_size=8,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    x, y = scale * torch.randn(24, 4), torch.randint(0, 3, (24,))
    try:
        learner.observe((x, y))
    except DivergenceError:
        assert learner.trained_sites == []
        return
    for name, precision in learner.guide.precisions(learner.trained_sites).items():
        assert torch.isfinite(precision).all() and (precision > 0).all(), name


def test_vogn_with_a_coreset_and_save_load_resume_identically(tmp_path):
    torch.manual_seed(0)

    def make():
        return VCL(
            BayesianMLP(4, [5], 2, heads=2),
            fitter=VOGN(1e-2, beta=0.1, num_samples=2, momentum=0.5, curvature="ggn"),
            memory=RandomCoreset(6),
            epochs=2,
            batch_size=8,
            ml_init_epochs=0,
            seed=3,
            progress=False,
        )

    learner = make()
    tasks = [(torch.randn(20, 4), torch.randint(0, 2, (20,))) for _ in range(2)]
    learner.observe(tasks[0], task_id=0)
    learner.save(tmp_path / "state.pt")
    learner.observe(tasks[1], task_id=1)
    loaded = VCL.load(tmp_path / "state.pt", device="cpu")
    assert isinstance(loaded.fitter, VOGN) and loaded.fitter.spec() == learner.fitter.spec()
    loaded.observe(tasks[1], task_id=1)
    for name, q in learner.current_prior().items():
        torch.testing.assert_close(loaded.current_prior()[name].base_dist.loc, q.base_dist.loc)
    assert set(loaded.prediction_posteriors) == {0, 1}


def test_statistics_of_a_batch_mixing_tasks_are_the_sums_of_each_tasks_own():
    """A coreset minibatch of three heads' points: the summed gradients (every head's sites,
    zero where a task does not reach) and squared gradients are the per-task statistics added
    up, each task's points run through its own head; twice in a row (the buffers are reused)."""
    torch.manual_seed(0)
    model = SupervisedModel(BayesianMLP(3, [4], 2, heads=3), CategoricalLikelihood())
    theta = {
        name: torch.randn(2, *module.prior_parameters(attribute)[0].shape)
        for name, (module, attribute) in model.site_index.items()
    }
    x, y = torch.randn(9, 3), torch.randint(0, 2, (9,))
    task_ids = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 0])
    data = Points(x, y, task_ids)
    shapes = {name: value.shape[1:] for name, value in theta.items()}
    sums = GradientSums(shapes, 2, curvature=True, like=x)
    sites_by_task = {task: [n for n in theta if "heads" not in n or f"heads.{task}." in n]
                     for task in range(3)}  # fmt: skip
    expected_gradients = {name: torch.zeros_like(value) for name, value in theta.items()}
    expected_squared = {name: torch.zeros_like(value[0]) for name, value in theta.items()}
    expected_loss = 0.0
    for task in range(3):
        rows = task_ids == task
        task_theta = {name: theta[name] for name in sites_by_task[task]}
        stats = gradient_statistics(model, task_theta, x[rows], y[rows], task, "fisher")
        expected_loss += stats.loss
        for name in task_theta:
            expected_gradients[name] += stats.gradients[name]
            expected_squared[name] += stats.squared[name]
    for _ in range(2):
        with sharded_step(torch.arange(9)) as shard:
            loss, gradients, squared = VOGN()._statistics(
                model, theta, sites_by_task, data, task_ids, shard, sums, RowGather(x)
            )
        torch.testing.assert_close(loss, expected_loss)
        for name, value in site_views(gradients, shapes).items():
            torch.testing.assert_close(value, expected_gradients[name])
        for name, value in site_views(squared, shapes).items():
            torch.testing.assert_close(value, expected_squared[name])
    assert expected_gradients["heads.1.weight"].abs().sum() > 0  # every head was reached


def test_bad_hyperparameters_are_refused():
    with pytest.raises(ValueError, match="beta"):
        VOGN(beta=0.0)
    with pytest.raises(ValueError, match="curvature"):
        VOGN(curvature="hessian")
    with pytest.raises(ValueError, match="learning_rate"):
        IVON(learning_rate=-1)
    with pytest.raises(TypeError, match="fitter"):
        VCL(BayesianMLP(2, [2], 2), fitter="vogn")


def test_fresh_initialisation_and_first_task_epochs():
    torch.manual_seed(0)
    learner = VCL(
        BayesianMLP(50, [20], 2),
        fitter=VOGN(1e-3, num_samples=1),
        epochs=1,
        first_epochs=3,
        batch_size=None,
        ml_init_epochs=0,
        between_tasks="fresh",
        init_log_variance=-math.log(1e6),
        seed=0,
        progress=False,
    )
    x, y = torch.randn(10, 50), torch.randint(0, 2, (10,))
    assert len(learner.observe((x, y))) == 3
    assert len(learner.observe((x, y))) == 1
    # tiny steps from a fresh start: means stay within PyTorch's U(-1/√fan_in, 1/√fan_in)
    locs = learner.guide.locs(["hidden.0.weight", "hidden.0.bias", "heads.0.weight"])
    assert locs["hidden.0.weight"].abs().max() <= 50**-0.5 + 1e-3
    assert locs["hidden.0.bias"].abs().max() <= 50**-0.5 + 1e-3
    assert locs["heads.0.weight"].abs().max() <= 20**-0.5 + 1e-3
    assert locs["hidden.0.weight"].abs().max() > 0.5 * 50**-0.5
