"""The seeds' baselines: EWC, online EWC, Synaptic Intelligence and diagonal Laplace propagation,
against closed forms (exact Bayesian linear regression, autograd Fisher, the SI path integral)."""

import pytest
import torch

from pyro_cl import ContinualLearner, GaussianLikelihood
from pyro_cl.app.cli import main
from pyro_cl.app.methods import make_method
from pyro_cl.baselines import (
    EWC,
    FineTuning,
    LaplacePropagation,
    OnlineEWC,
    SynapticIntelligence,
    diagonal_curvature,
)
from pyro_cl.data import split_digits
from pyro_cl.fitters.point_estimate import PointEstimateFitter
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.objectives import negative_log_likelihood
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianLinear, BayesianMLP
from tests.helpers import exact_map_settings, load_benchmark_script

NOISE = 0.5


def regression_tasks(seed=0, tasks=2, n=30, dim=3):
    generator = torch.Generator().manual_seed(seed)
    out = []
    for t in range(tasks):
        x = torch.randn(n, dim, generator=generator) + 0.5 * t
        y = x @ torch.tensor([1.0, -2.0, 0.5]) + NOISE * torch.randn(n, generator=generator)
        out.append((x, y))
    return out


def test_laplace_propagation_is_exact_for_bayesian_linear_regression():
    """MAP under a diagonal Gaussian prior is the exact posterior mean; the Gauss-Newton diagonal
    of a linear-Gaussian model is the exact Hessian diagonal."""
    net = BayesianLinear(3, 1, bias=False, prior_scale=1.0)
    learner = ContinualLearner(
        net,
        GaussianLikelihood(NOISE),
        fitter=LaplacePropagation(),
        **exact_map_settings(),
    )
    precision = torch.ones(3)
    mean = torch.zeros(3)
    for task, (x, y) in enumerate(regression_tasks()):
        learner.observe((x, y), task_id=0)
        full = torch.diag(precision) + x.T @ x / NOISE**2
        mean = torch.linalg.solve(full, precision * mean + x.T @ y / NOISE**2)
        precision = precision + (x * x).sum(0) / NOISE**2
        q = learner.current_prior()["weight"].base_dist
        torch.testing.assert_close(q.loc.squeeze(0), mean, atol=2e-3, rtol=0)
        torch.testing.assert_close(q.scale.squeeze(0).pow(-2), precision, rtol=1e-4, atol=0)
        assert learner.num_predictive_samples == 1, task  # predicts with the MAP


def small_classifier(seed=0):
    torch.manual_seed(seed)
    net = BayesianMLP(4, [5], 3)
    model = SupervisedModel(net, CategoricalLikelihood())
    guide = MeanFieldGuide(model)
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    sites = model.sites(guide, x, [0])
    values = {n: v.detach() + 0.3 * torch.randn_like(v) for n, v in guide.locs(sites).items()}
    return model, values, x, y


def test_the_diagonal_fisher_is_the_mean_squared_example_gradient_times_n():
    model, values, x, y = small_classifier()
    fisher = diagonal_curvature(model, values, x, y, 0, "fisher")
    expected = {n: torch.zeros_like(v) for n, v in values.items()}
    for i in range(len(x)):
        theta = {n: v.clone().requires_grad_(True) for n, v in values.items()}
        loss = negative_log_likelihood(model, theta, x[i : i + 1], y[i : i + 1], 0)
        for name, g in zip(theta, torch.autograd.grad(loss, list(theta.values())), strict=True):
            expected[name] += g.square()
    for name in values:
        torch.testing.assert_close(fisher[name], expected[name], rtol=1e-4, atol=1e-6)
    torch.manual_seed(0)
    subset = diagonal_curvature(model, values, x, y, 0, "fisher", num_samples=6)
    assert all(v.shape == values[n].shape for n, v in subset.items())


def ewc_learner(penalty, seed=0, multi_head=False):
    net = BayesianMLP(4, [6], 2, heads=2 if multi_head else 1)
    return FineTuning(
        net,
        fitter=PointEstimateFitter(penalty),
        epochs=5,
        batch_size=None,
        seed=seed,
        progress=False,
    )


def two_tasks():
    generator = torch.Generator().manual_seed(3)
    x1, x2 = torch.randn(20, 4, generator=generator), torch.randn(20, 4, generator=generator)
    return (x1, (x1[:, 0] > 0).long()), (x2, (x2[:, 1] > 0).long())


def test_ewc_keeps_one_fisher_quadratic_per_task_and_online_ewc_one_running_fisher():
    first, second = two_tasks()
    ewc = EWC(strength=3.0, fisher_samples=None)
    learner = ewc_learner(ewc)
    learner.observe(first)
    anchor1 = {n: v.clone() for n, v in ewc.anchors[0].items()}
    fisher1 = diagonal_curvature(learner.model, anchor1, *first, 0, "fisher")
    for name in fisher1:
        torch.testing.assert_close(ewc.fishers[0][name], fisher1[name])
    learner.observe(second)
    assert len(ewc.anchors) == 2
    values = {n: v + 0.1 for n, v in anchor1.items()}
    expected = sum(
        (f[n] * (values[n] - a[n]).square()).sum()
        for a, f in zip(ewc.anchors, ewc.fishers, strict=True)
        for n in values
    )
    torch.testing.assert_close(ewc(values), 1.5 * expected)

    online = OnlineEWC(strength=1.0, fisher_samples=None, decay=0.5)
    learner = ewc_learner(online)
    learner.observe(first)
    f1 = {n: v.clone() for n, v in online.fishers[0].items()}
    learner.observe(second)
    anchor2 = online.anchors[0]
    f2 = diagonal_curvature(learner.model, anchor2, *second, 0, "fisher")
    assert len(online.anchors) == 1
    for name in f1:
        torch.testing.assert_close(online.fishers[0][name], 0.5 * f1[name] + f2[name])
        torch.testing.assert_close(anchor2[name], learner.guide.locs([name])[name].detach())


def test_synaptic_intelligence_accumulates_the_loss_decrease_along_the_path():
    """With small steps, Σ_i ω_i = -Σ_k g_k·Δθ_k is the first task's loss decrease."""
    first, _ = two_tasks()
    si = SynapticIntelligence(strength=1.0, damping=0.1)
    learner = FineTuning(
        BayesianMLP(4, [6], 2),
        fitter=PointEstimateFitter(si),
        epochs=400,
        batch_size=None,
        learning_rate=1e-3,
        seed=0,
        progress=False,
    )
    model, x, y = learner.model, *first
    sites = model.sites(learner.guide, x, [0])
    start = {n: v.detach().clone() for n, v in learner.guide.locs(sites).items()}
    before = negative_log_likelihood(model, start, x, y, 0).item()
    learner.observe(first)
    end = {n: v.detach().clone() for n, v in learner.guide.locs(sites).items()}
    after = negative_log_likelihood(model, end, x, y, 0).item()
    omega_total = sum(
        (si.importance[n] * ((end[n] - start[n]).square() + 0.1)).sum().item() for n in end
    )
    assert before - after > 0.05
    assert omega_total == pytest.approx(before - after, rel=0.05)
    for name in end:
        torch.testing.assert_close(si.anchor[name], end[name])
    # the penalty is c Σ Ω (θ - θ_t)² on the mean loss, i.e. N times that in total units
    shifted = {n: v + 0.2 for n, v in end.items()}
    si.num_data = 20
    expected = sum((si.importance[n] * 0.04).sum() for n in end)
    torch.testing.assert_close(si(shifted) / 20, expected)


@pytest.mark.parametrize("method", ["ewc", "online-ewc", "si", "lp", "joint"])
def test_each_baseline_saves_and_resumes_identically_multi_head(method, tmp_path):
    stream = split_digits(seed=0)
    tasks = [stream[t] for t in range(3)]

    def build():
        net = BayesianMLP(64, [16], 2, heads=3)
        return make_method(method, net, 0, seed=0, epochs=2, batch_size=64, progress=False)

    straight = build()
    for t, task in enumerate(tasks):
        straight.observe(task.train, task_id=t)
    halfway = build()
    halfway.observe(tasks[0].train, task_id=0)
    halfway.save(tmp_path / "learner.pt")
    resumed = type(halfway).load(tmp_path / "learner.pt")
    for t, task in enumerate(tasks[1:], start=1):
        resumed.observe(task.train, task_id=t)
    for t, task in enumerate(tasks):
        a = straight.evaluate(task.test, task_id=t)
        b = resumed.evaluate(task.test, task_id=t)
        assert a == b, (method, t)


def test_penalty_options_reach_only_methods_with_a_penalty(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--methods", "vcl", "--penalty-strength", "10", "--epochs", "1"])
    text = str(exit_info.value)
    assert "--penalty-strength" in text and "\n" not in text
    with pytest.raises(ValueError, match=r"must lie in \[0, "):
        EWC(strength=-1.0)
    with pytest.raises(ValueError, match="damping"):
        SynapticIntelligence(damping=0.0)
    with pytest.raises(ValueError, match="curvature"):
        LaplacePropagation(curvature="hessian")


def test_the_sweep_script_routes_lambda_to_the_penalty_or_the_laplace_fitter(tmp_path):
    script = load_benchmark_script("baselines_paper")
    argv = ["--benchmark", "split-mnist", "--schedule", "short", "--output", str(tmp_path)]
    benchmark, root, runs = script.build_runs([*argv, "--sweep", "ewc,lp"])
    assert benchmark == "split-mnist" and root == tmp_path
    assert [(m, s) for m, s, _ in runs] == [("ewc", s) for s in script.STRENGTHS["ewc"]] + [
        ("lp", s) for s in script.STRENGTHS["lp"]
    ]
    ewc_run, lp_run = runs[0][2], runs[-1][2]
    assert ewc_run.penalty_options == {"strength": 1.0} and ewc_run.methods == ["ewc"]
    assert lp_run.fitter_options == {"strength": 100.0} and lp_run.training["epochs"] == 20
    assert str(ewc_run.output).endswith("ewc-1")

    class Result:
        def __init__(self, acc):
            self.acc = acc

    table = script.summarise(
        "split-mnist", tmp_path, [("si", 0.1, [Result(0.9)]), ("si", 1.0, [Result(0.95)])]
    )
    assert "| si | 1 | 95.0 ± 0.0 | best | 98.9 |" in table
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_the_ewc_penalty_gradient_is_lambda_fisher_times_the_displacement():
    anchor = {"w": torch.tensor([1.0, -2.0, 0.5])}
    fisher = {"w": torch.tensor([0.5, 2.0, 4.0])}
    ewc = EWC(strength=3.0)
    ewc.anchors, ewc.fishers = [anchor], [fisher]
    theta = {"w": torch.tensor([0.0, 1.0, 1.5], requires_grad=True)}
    (gradient,) = torch.autograd.grad(ewc(theta), [theta["w"]])
    torch.testing.assert_close(gradient, 3.0 * fisher["w"] * (theta["w"].detach() - anchor["w"]))


def test_si_importance_on_a_quadratic_by_gradient_descent_is_the_closed_form_path_integral():
    """L = ½ Σ a θ², θ_{k+1} = (1 - ηa) θ_k: ω = Σ_k η a² θ_k² = η a² θ_0² Σ_k (1 - ηa)^{2k}."""
    from pyro_cl.infer.callbacks import StepInfo

    a, eta, steps = torch.tensor([0.5, 2.0, 4.0]), 0.1, 30
    theta0 = torch.tensor([1.0, -1.0, 0.5])
    si = SynapticIntelligence(strength=1.0, damping=0.01)
    theta = theta0.clone().requires_grad_(True)
    si.before_fit({"w": theta.detach().clone()}, 1)
    for k in range(steps):
        theta.grad = a * theta.detach()
        with torch.no_grad():
            theta -= eta * theta.grad
        si.on_step(StepInfo(k, torch.tensor(0.0), {"w": theta}))
    si.after_fit(None, {"w": theta.detach()}, None, 0)
    ratio = (1 - eta * a) ** 2
    omega = eta * a**2 * theta0**2 * (1 - ratio**steps) / (1 - ratio)
    change = (theta.detach() - theta0).square()
    torch.testing.assert_close(si.importance["w"], omega / (change + 0.01))


@pytest.mark.parametrize("penalty", [EWC(0.0, fisher_samples=None), SynapticIntelligence(0.0)])
def test_zero_strength_is_fine_tuning_exactly(penalty):
    first, second = two_tasks()
    learners = []
    for part in (penalty, None):  # built and trained one after the other: the same random draws
        learner = ewc_learner(part, multi_head=True)
        learner.observe(first, task_id=0)
        learner.observe(second, task_id=1)
        learners.append(learner)
    with_penalty, plain = learners
    for name, value in plain.guide.locs().items():
        assert torch.equal(value, with_penalty.guide.locs([name])[name]), name


@pytest.mark.parametrize("penalty", [EWC(1e4), SynapticIntelligence(10.0)])
def test_a_penalty_never_changes_the_heads_a_task_does_not_use(penalty):
    first, second = two_tasks()
    learner = ewc_learner(penalty, multi_head=True)
    learner.observe(first, task_id=0)
    head = {n: v.detach().clone() for n, v in learner.guide.locs().items() if "heads.0" in n}
    learner.observe(second, task_id=1)
    for name, value in head.items():
        assert torch.equal(learner.guide.locs([name])[name], value)


def test_the_sweep_script_runs_each_baseline_at_the_papers_lambda_over_seeds(tmp_path):
    script = load_benchmark_script("baselines_paper")
    argv = ["--benchmark", "split-notmnist", "--paper-lambda", "--seeds", "0", "1", "2"]
    _, _, runs = script.build_runs([*argv, "--output", str(tmp_path)])
    # the VCL paper's appendix: EWC 10^4, SI 0.1, LP 1 (Fisher of 200 points) on split notMNIST
    assert [(m, s) for m, s, _ in runs] == [("ewc", 1e4), ("si", 0.1), ("lp", 1.0)]
    assert all(list(run.seeds) == [0, 1, 2] for _, _, run in runs)
    lp = runs[-1][2]
    assert lp.fitter_options == {"strength": 1.0, "curvature": "fisher", "hessian_samples": 200}


def test_ewcs_fisher_is_the_closed_form_on_logistic_regression_scaled_to_the_task():
    """``∂(-log p(y_n | w))/∂w = (σ(wᵀx_n + b) - y_n) x_n``, so the empirical Fisher of the task is
    ``Σ_n (σ_n - y_n)² x_n²`` (and ``Σ_n (σ_n - y_n)²`` for the bias); from a random subset of
    ``S`` of the ``N`` points it is ``N/S`` times the subset's sum (VCL section 5, 200 points)."""
    from pyro_cl import BernoulliLikelihood

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=generator)
    y = (torch.rand(40, generator=generator) < 0.5).float()
    model = SupervisedModel(BayesianLinear(3, 1), BernoulliLikelihood())
    values = {"weight": torch.tensor([[0.5, -1.0, 0.3]]), "bias": torch.tensor([0.2])}
    residual = torch.sigmoid(x @ values["weight"][0] + values["bias"]) - y
    per_point = residual.square()
    full = diagonal_curvature(model, values, x, y, 0, "fisher")
    torch.testing.assert_close(full["weight"][0], per_point @ x.square())
    torch.testing.assert_close(full["bias"], per_point.sum().reshape(1))
    torch.manual_seed(7)
    subset = diagonal_curvature(model, values, x, y, 0, "fisher", num_samples=8)
    torch.manual_seed(7)
    chosen = torch.randperm(40)[:8]
    scale = 40 / 8
    torch.testing.assert_close(subset["weight"][0], scale * per_point[chosen] @ x[chosen].square())
    torch.testing.assert_close(subset["bias"], scale * per_point[chosen].sum().reshape(1))


@pytest.mark.parametrize("init_means", ["prior", "fresh"])
def test_fine_tuning_starts_its_first_task_where_init_means_says(monkeypatch, init_means):
    """``init_means="fresh"`` starts a point estimate at PyTorch's initialisation of a new layer
    (``U(-1/√fan_in, 1/√fan_in)``), as Avalanche's nets start; it was ignored by point-estimate
    fitters, which always started at the prior mean plus noise of ``init_loc_std`` (0.1)."""
    import pyro_cl.fitters.point_estimate as point_estimate

    starts = []
    fit = point_estimate.fit_point_estimate

    def recorded(context, guide, problem, penalty=None):
        starts.append({name: loc.detach().clone() for name, loc in guide.locs().items()})
        return fit(context, guide, problem, penalty)

    monkeypatch.setattr(point_estimate, "fit_point_estimate", recorded)
    learner = FineTuning(BayesianLinear(400, 2), epochs=1, init_means=init_means, progress=False)
    x = torch.randn(8, 400)
    learner.observe((x, (x[:, 0] > 0).long()))
    after_first = learner.guide.locs()["weight"].detach().clone()
    learner.observe((x, (x[:, 1] > 0).long()))
    weight = starts[0]["weight"]
    if init_means == "fresh":
        assert weight.abs().max() <= 400**-0.5 < 2 * weight.std()
    else:  # the prior mean, 0, plus N(0, 0.1²)
        assert 0.08 < weight.std() < 0.12
    torch.testing.assert_close(starts[1]["weight"], after_first)  # later tasks: where it was
