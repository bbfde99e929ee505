"""Function-space VI at context points (S-FSVI's objective, Monte Carlo and linearised function
moments): the moments and the KL against closed forms and autograd's Jacobians, the first task is
VCL's, context points grow with each task's fit only, and the learner saves and resumes."""

import pytest
import torch
from pyro.distributions import Normal

from pyro_cl import VCL, ELBOFitter, FunctionSpaceFitter, GaussianLikelihood
from pyro_cl.fitters import function_space
from pyro_cl.fitters.context_points import (
    CurrentInputs,
    FromMemory,
    GaussianInputs,
    UniformInputs,
    probabilistic_pca,
)
from pyro_cl.fitters.function_space import (
    function_draws,
    function_moments,
    gaussian_function_kl,
    linearised_moments,
)
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.memory import KCenterCoreset, RandomCoreset
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianCNN, BayesianConv2d, BayesianLinear, BayesianMLP
from pyro_cl.points import Points
from tests.test_linear_regression_vcl import CONVERGED, NOISE, exact_diagonal_update


def test_function_moments_of_a_linear_model_are_its_closed_form():
    """``f(x) = xᵀw + b`` with ``w ~ N(μ, diag s²)``, ``b ~ N(m, t²)`` is ``N(xᵀμ + m,
    Σ x_d² s_d² + t²)``: the Monte Carlo moments converge to it."""
    torch.manual_seed(0)
    net = BayesianLinear(3, 1)
    model = SupervisedModel(net, GaussianLikelihood(1.0))
    loc, scale = torch.tensor([[1.0, -2.0, 0.5]]), torch.tensor([[0.3, 0.1, 0.8]])
    sites = {
        "weight": Normal(loc, scale).to_event(2),
        "bias": Normal(torch.tensor([0.2]), torch.tensor([0.4])).to_event(1),
    }
    x = torch.randn(5, 3)
    mean, variance = function_moments(function_draws(model, sites, x, 0, 200_000))
    exact_mean = x @ loc.T + 0.2
    exact_variance = x.square() @ scale.square().T + 0.4**2
    torch.testing.assert_close(mean, exact_mean, atol=0.02, rtol=0)
    torch.testing.assert_close(variance, exact_variance, rtol=0.02, atol=0)


def test_the_function_kl_is_the_gaussian_kl_summed():
    torch.manual_seed(1)
    m_q, m_p = torch.randn(4, 3), torch.randn(4, 3)
    v_q, v_p = torch.rand(4, 3) + 0.1, torch.rand(4, 3) + 0.1
    expected = torch.distributions.kl_divergence(
        Normal(m_q, (v_q + 0.01).sqrt()), Normal(m_p, (v_p + 0.01).sqrt())
    ).sum()
    torch.testing.assert_close(gaussian_function_kl(m_q, v_q, m_p, v_p, jitter=0.01), expected)
    assert gaussian_function_kl(m_q, v_q, m_q, v_q) == pytest.approx(0.0, abs=1e-6)


def tasks():
    generator = torch.Generator().manual_seed(0)
    out = []
    for task in range(3):
        x = torch.randn(80, 4, generator=generator)
        out.append((x, (x[:, task] > 0).long()))
    return out


def learner(fitter, seed=0):
    return VCL(
        BayesianMLP(4, [16], 2, heads=3), fitter=fitter, epochs=20, seed=seed, progress=False
    )


def test_the_first_task_is_vcl_and_context_points_come_from_each_task_fit():
    data = tasks()
    vcl, functional = learner(ELBOFitter()), learner(FunctionSpaceFitter(RandomCoreset(5)))
    vcl.observe(data[0], task_id=0)
    functional.observe(data[0], task_id=0)
    for name, q in vcl.current_prior().items():
        torch.testing.assert_close(functional.current_prior()[name].mean, q.mean, rtol=0, atol=0)
    context = functional.fitter.context.points
    assert len(context) == 5 and context.tasks() == [0]
    functional.observe(data[1], task_id=1)
    assert functional.fitter.context.points.tasks() == [0, 1]
    assert len(functional.fitter.context.points) == 10


def test_the_functional_kl_keeps_the_old_tasks_outputs():
    """A single head and a second task that contradicts the first on the same inputs: with the
    parameter KL off (S-FSVI), the functional KL at task 0's context points is all that keeps
    task 0's outputs there; without it (weight 0) they are overwritten."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(100, 4, generator=generator)
    first, second = (x, (x[:, 0] > 0).long()), (x, (x[:, 0] < 0).long())
    kept = {}
    for weight in (0.0, 1.0):
        fs = VCL(
            BayesianMLP(4, [16], 2),
            fitter=FunctionSpaceFitter(RandomCoreset(30), function_kl_weight=weight),
            epochs=150,
            learning_rate=0.01,
            seed=0,
            progress=False,
        )
        fs.observe(first, task_id=0)
        context = fs.fitter.context.points
        fs.observe(second, task_id=1)
        kept[weight] = fs.evaluate((context.x, context.y), task_id=0)["accuracy"]
    assert kept[0.0] < 0.3 and kept[1.0] > kept[0.0] + 0.3, kept


def test_a_failed_fit_leaves_the_context_points_as_they_were(monkeypatch):
    data = tasks()
    fs = learner(FunctionSpaceFitter(RandomCoreset(5)))
    fs.observe(data[0], task_id=0)
    before = fs.fitter.context.points
    monkeypatch.setattr(
        ELBOFitter, "fit", lambda self, *a: (_ for _ in ()).throw(DivergenceError("boom"))
    )
    with pytest.raises(DivergenceError):
        fs.observe(data[1], task_id=1)
    assert fs.fitter.context.points.tasks() == [0]
    assert torch.equal(fs.fitter.context.points.x, before.x)


def test_a_function_space_learner_saves_and_resumes_identically(tmp_path):
    data = tasks()
    runs = []
    for stop in (False, True):
        fs = learner(FunctionSpaceFitter(KCenterCoreset(4)), seed=3)
        fs.observe(data[0], task_id=0)
        fs.observe(data[1], task_id=1)
        if stop:
            fs.save(tmp_path / "fs.pt")
            fs = VCL.load(tmp_path / "fs.pt")
            assert isinstance(fs.fitter.context.memory, KCenterCoreset)
            assert len(fs.fitter.context.points) == 8
        fs.observe(data[2], task_id=2)
        runs.append({k: v.mean for k, v in fs.current_prior().items()})
    for name in runs[0]:
        torch.testing.assert_close(runs[0][name], runs[1][name], rtol=0, atol=0)


def test_the_context_must_be_a_source_or_a_memory():
    with pytest.raises(TypeError, match="ContextPoints source or a Memory"):
        FunctionSpaceFitter(context=40)
    with pytest.raises(TypeError, match="Memory part"):
        FromMemory(UniformInputs(3))


def _second_step_regulariser_value(monkeypatch, fitter):
    """The functional term ``R`` at task 1's second step (the loss adds ``R / N``): at the first
    the posterior is still the old one (``R = 0`` and no gradient), so the second step's
    parameters are the same under any weighing of ``R``."""
    data, values = tasks(), []
    fs = learner(fitter, seed=3)
    fs.observe(data[0], task_id=0)
    original = FunctionSpaceFitter._regulariser

    def recording(self, *args):
        regulariser = original(self, *args)
        return lambda: values.append(regulariser()) or values[-1]

    with monkeypatch.context() as patch:
        patch.setattr(FunctionSpaceFitter, "_regulariser", recording)
        fs.observe(data[1], task_id=1)
    return values[1].item()


def test_per_point_weighs_each_context_point_as_one_training_point(monkeypatch):
    """S-FSVI's ``kl_scale="equal"``: the same KL times ``N / |X_C|`` (80 points, 5 context
    points of the one earlier task), so ``R / N`` is the KL per context point."""
    by_scale = {
        scale: _second_step_regulariser_value(
            monkeypatch,
            FunctionSpaceFitter(
                RandomCoreset(5),
                moments="linearised",
                function_kl_scale=scale,
                function_kl_weight=2,
            ),
        )
        for scale in ("sum", "per_point")
    }
    assert by_scale["sum"] > 0
    assert by_scale["per_point"] == pytest.approx(by_scale["sum"] * 80 / 5, rel=1e-6)


def test_kept_labels_join_the_likelihood_weighed_as_label_weight_training_points():
    """S-FSVI with ``label_weight=λ`` and the functional KL off, VCL's KL on: on a conjugate
    linear regression the fit of task 1 is the exact (mean-field) update of ``q_0`` by task 1's
    data and ``λ`` copies of the kept points of task 0 (a sign or a dropped ``λ`` would miss)."""
    torch.manual_seed(1)
    dim, per_task, kept, weight = 3, 40, 10, 2.0
    true_weight = torch.tensor([1.0, -2.0, 0.5])
    fitter = FunctionSpaceFitter(
        RandomCoreset(kept), function_kl_weight=0.0, kl_weight=1.0, label_weight=weight
    )
    fs = VCL(
        BayesianLinear(dim, 1, bias=False, prior_scale=1.0),
        likelihood=GaussianLikelihood(NOISE),
        fitter=fitter,
        **CONVERGED,
    )
    data = []
    for task in range(2):
        x = torch.randn(per_task, dim) + 0.3 * task
        data.append((x, x @ true_weight + NOISE * torch.randn(per_task)))
    fs.observe(data[0], task_id=0)
    q0 = fs.current_prior()["weight"].base_dist
    context = fitter.context.points
    fs.observe(data[1], task_id=1)
    x = torch.cat([data[1][0], *[context.x] * int(weight)])
    y = torch.cat([data[1][1], *[context.y] * int(weight)])
    mean, variance = exact_diagonal_update(q0.loc.squeeze(0), q0.scale.squeeze(0) ** 2, x, y)
    q1 = fs.current_prior()["weight"].base_dist
    torch.testing.assert_close(q1.loc.squeeze(0), mean, atol=0.03, rtol=0)
    torch.testing.assert_close(q1.scale.squeeze(0) ** -2, variance**-1, rtol=0.1, atol=0)


def test_kept_labels_need_kept_points():
    with pytest.raises(ValueError, match="needs a memory as context"):
        FunctionSpaceFitter(UniformInputs(4), label_weight=1.0)
    with pytest.raises(ValueError, match="label_weight"):
        FunctionSpaceFitter(RandomCoreset(4), label_weight=-1.0)
    assert FunctionSpaceFitter(RandomCoreset(4), label_weight=0.5).hyperparameters()[
        "label_weight"
    ] == pytest.approx(0.5)


def test_context_draws_take_that_many_of_each_tasks_kept_points_per_step():
    fitter = FunctionSpaceFitter(RandomCoreset(10), context_draws=3)
    assert isinstance(fitter.context, FromMemory) and fitter.context.per_task == 3
    assert fitter.context.per_step
    assert FunctionSpaceFitter(RandomCoreset(10)).context.per_task is None
    with pytest.raises(ValueError, match="need a memory"):
        FunctionSpaceFitter(UniformInputs(4), context_draws=3)
    with pytest.raises(ValueError, match="function_kl_scale"):
        FunctionSpaceFitter(RandomCoreset(10), function_kl_scale="mean")


def test_a_context_of_fixed_size_draws_that_many_of_all_the_kept_points_per_step():
    fitter = FunctionSpaceFitter(RandomCoreset(10), context_total=7)
    context = fitter.context
    assert context.total == 7 and context.per_task is None and context.per_step
    assert fitter.hyperparameters()["context_total"] == 7
    generator = torch.Generator().manual_seed(0)
    for task in range(3):  # 10 kept of each of three tasks
        x = torch.randn(20, 2, generator=generator)
        labels = torch.zeros(20, dtype=torch.long)
        context.after_task(Points(x, labels, torch.full((20,), task, dtype=torch.long)))
    torch.manual_seed(0)
    seen = set()
    for _ in range(20):
        rows = context.draw_rows(None)
        assert len(rows) == 7 and len(set(rows.tolist())) == 7  # without replacement
        seen |= set(rows.tolist())
    assert seen == set(range(30))  # from all the kept points, not one task's
    assert len(context.draw(None)) == 7
    with pytest.raises(ValueError, match="not both"):
        FunctionSpaceFitter(RandomCoreset(10), context_draws=3, context_total=7)
    with pytest.raises(ValueError, match="need a memory"):
        FunctionSpaceFitter(UniformInputs(4), context_total=7)


# ---------------------------------------------------------------- S-FSVI's linearised moments
def test_linearised_moments_of_a_linear_model_are_its_closed_form_exactly():
    """A linear model is its own linearisation: ``N(x μᵀ + m, x² s²ᵀ + t²)`` to rounding."""
    torch.manual_seed(0)
    net = BayesianLinear(3, 2)
    model = SupervisedModel(net, GaussianLikelihood(1.0))
    loc, scale = torch.randn(2, 3), torch.rand(2, 3) + 0.1
    bias_loc, bias_scale = torch.randn(2), torch.rand(2) + 0.1
    sites = {
        "weight": Normal(loc, scale).to_event(2),
        "bias": Normal(bias_loc, bias_scale).to_event(1),
    }
    x = torch.randn(5, 3)
    mean, variance = linearised_moments(model, sites, x, 0)
    torch.testing.assert_close(mean, x @ loc.T + bias_loc)
    torch.testing.assert_close(variance, x.square() @ scale.square().T + bias_scale.square())


def linearised_nets():
    """``(net, inputs)``: tanh MLPs with and without FiLM, a small CNN with per-channel FiLM
    (padded and unpadded convolutions, a max pool, a dense layer) and a strided, padded
    convolution on its own."""
    yield BayesianMLP(3, [4, 5], 2, heads=2, activation="tanh"), torch.randn(4, 3)
    yield BayesianMLP(3, [4, 5], 2, heads=2, activation="tanh", film_tasks=2), torch.randn(4, 3)
    cnn = BayesianCNN((2, 6, 6), ((3, 4),), (5,), 2, heads=2, film_tasks=2)
    yield cnn, torch.randn(3, 2, 6, 6)
    yield FlatConv2d(2, 3, 3, stride=2, padding=1), torch.randn(3, 2, 5, 5)


class FlatConv2d(BayesianConv2d):
    """A convolution as a one-head net whose outputs are its flattened feature maps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).flatten(-3)


@pytest.mark.parametrize("index", range(4))
def test_linearised_variances_are_the_jacobians_squared_against_the_variances(index):
    """``Σ_θ J_{nk,θ}² σ_θ²`` with ``J`` from autograd, point by point and output by output,
    and the mean at the means, for every layer with linearised variances (linear, FiLM on units
    and on channels, convolutions with and without stride and padding)."""
    torch.manual_seed(1)
    net, x = list(linearised_nets())[index]
    model = SupervisedModel(net, GaussianLikelihood(1.0))
    task = 1 if index < 3 else 0
    names = [n for n in model.site_index if not n.startswith("heads.0")]
    names = [n for n in names if not n.startswith("film.0")]
    locs = {n: torch.randn_like(net.get_buffer(f"{n}_prior_loc")) for n in names}
    variances = {n: torch.rand_like(loc) * 0.2 for n, loc in locs.items()}
    sites = {n: Normal(locs[n], variances[n].sqrt()).to_event(locs[n].dim()) for n in names}
    mean, variance = linearised_moments(model, sites, x, task)

    leaves = {n: loc.clone().requires_grad_() for n, loc in locs.items()}
    with substitute_sites(net, {n: v.unsqueeze(0) for n, v in leaves.items()}, 1):
        outputs = model.net_outputs(x.unsqueeze(0), task)[0]
    torch.testing.assert_close(mean, outputs.detach())
    for n in range(len(x)):
        for k in range(outputs.shape[-1]):
            grads = torch.autograd.grad(outputs[n, k], list(leaves.values()), retain_graph=True)
            expected = sum(
                (g.square() * variances[name]).sum() for g, name in zip(grads, leaves, strict=True)
            )
            torch.testing.assert_close(variance[n, k], expected, rtol=1e-5, atol=1e-7)


def test_a_linearised_function_space_learner_fits_and_resumes_identically(tmp_path):
    """The fit differentiates the linearised KL (the variances reach log σ²); save and load
    keep the choice of moments."""
    data = tasks()
    runs = []
    for stop in (False, True):
        fs = learner(FunctionSpaceFitter(RandomCoreset(4), moments="linearised"), seed=3)
        fs.observe(data[0], task_id=0)
        fs.observe(data[1], task_id=1)
        if stop:
            fs.save(tmp_path / "fs.pt")
            fs = VCL.load(tmp_path / "fs.pt")
            assert fs.fitter.moments == "linearised"
        fs.observe(data[2], task_id=2)
        runs.append({k: v.mean for k, v in fs.current_prior().items()})
    for name in runs[0]:
        torch.testing.assert_close(runs[0][name], runs[1][name], rtol=0, atol=0)
    with pytest.raises(ValueError, match="moments must be one of"):
        FunctionSpaceFitter(RandomCoreset(4), moments="laplace")


def test_drawn_context_points_come_from_the_kept_points_and_change_every_draw():
    kept = FromMemory(RandomCoreset(6), per_task=2)
    data = tasks()
    for task in (0, 1):
        kept.after_task(_points(*data[task], task))
    torch.manual_seed(0)
    draws = [kept.draw(None) for _ in range(5)]
    rows = {tuple(row.tolist()) for row in kept.points.x}
    for draw in draws:
        assert sorted(draw.task_ids.tolist()) == [0, 0, 1, 1]
        assert all(tuple(row.tolist()) in rows for row in draw.x)
        for task in (0, 1):  # no point twice within a task's draw
            assert len({tuple(r.tolist()) for r in draw.x[draw.task_ids == task]}) == 2
    assert len({tuple(d.x.flatten().tolist()) for d in draws}) > 1
    assert kept.per_step and not FromMemory(RandomCoreset(6)).per_step


def test_uniform_inputs_cover_the_inputs_range_for_every_task_seen():
    source = UniformInputs(500)
    assert source.draw(None) is None
    x = torch.tensor([[0.0, 1.0], [0.5, 0.25]])
    source.after_task(_points(x, torch.zeros(2, dtype=torch.long), 0))
    source.after_task(_points(x + 1.0, torch.zeros(2, dtype=torch.long), 3))
    draw = source.draw(None)
    assert draw.x.shape == (1000, 2) and draw.tasks() == [0, 3]
    assert (draw.task_ids == 0).sum() == 500
    assert draw.x.min() >= 0.0 and draw.x.max() <= 2.0  # the range of both tasks' inputs
    assert draw.x.min() < 0.05 and draw.x.max() > 1.95  # and all of it, not one task's
    fixed = UniformInputs(4, low=-1.0, high=-0.5)
    fixed.after_task(_points(x, torch.zeros(2, dtype=torch.long), 0))
    assert fixed.draw(None).x.max() <= -0.5
    with pytest.raises(ValueError, match="shape"):
        source.after_task(_points(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), 4))
    with pytest.raises(ValueError, match="below"):
        UniformInputs(4, low=1.0, high=1.0)


def _correlated(n: int, shift: float, seed: int) -> torch.Tensor:
    """``n`` draws of a correlated 3-d Gaussian: mean ``shift``, covariance ``A Aᵀ``."""
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, -0.5, 0.2]])
    return torch.randn(n, 3, generator=generator, dtype=torch.float64) @ mixing.double().T + shift


def _moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    centred = x - x.mean(0)
    return x.mean(0), centred.T @ centred / len(x)


def test_gaussian_inputs_draw_from_each_tasks_own_mean_and_covariance():
    """Many draws for a task have its inputs' mean and (full) covariance, the other task's
    not; the diagonal choice keeps the variances and drops the correlations; draws stay inside
    the task's range; a task seen again pools its inputs exactly."""
    labels = torch.zeros(4000, dtype=torch.long)
    first, second = _correlated(4000, 0.0, 0), _correlated(4000, 5.0, 1)
    source = GaussianInputs(20000)
    assert source.draw(None) is None
    source.after_task(_points(first, labels, 0))
    source.after_task(_points(second, labels, 2))
    torch.manual_seed(0)
    draw = source.draw(None)
    assert draw.tasks() == [0, 2] and draw.x.shape == (40000, 3)
    for task, x in ((0, first), (2, second)):
        drawn = draw.x[draw.task_ids == task]
        mean, covariance = _moments(x)
        drawn_mean, drawn_covariance = _moments(drawn)
        torch.testing.assert_close(drawn_mean, mean, atol=0.03, rtol=0)
        torch.testing.assert_close(drawn_covariance, covariance, atol=0.04, rtol=0)
        assert drawn.min() >= x.min() and drawn.max() <= x.max()
    diagonal = GaussianInputs(20000, covariance="diagonal")
    diagonal.after_task(_points(first, labels, 0))
    drawn_covariance = _moments(diagonal.draw(None).x)[1]
    torch.testing.assert_close(drawn_covariance.diagonal(), _moments(first)[1].diagonal(),
                               atol=0.04, rtol=0)  # fmt: skip
    assert drawn_covariance[1, 0].abs() < 0.03 < _moments(first)[1][1, 0]
    halves = GaussianInputs(3)
    halves.after_task(_points(first[:1000], labels[:1000], 0))
    halves.after_task(_points(first[1000:] + 1.0, labels[1000:], 0))
    whole = torch.cat([first[:1000], first[1000:] + 1.0])
    mean, covariance = _moments(whole)
    pooled = halves.moments[0]
    torch.testing.assert_close(pooled["mean"], mean)
    torch.testing.assert_close(pooled["scatter"] / pooled["count"], covariance)
    torch.testing.assert_close(pooled["range"], torch.stack([whole.min(), whole.max()]))
    restored = GaussianInputs(3)
    restored.load_state_dict(halves.state_dict())
    torch.manual_seed(1)
    expected = halves.draw(None).x
    torch.manual_seed(1)
    torch.testing.assert_close(restored.draw(None).x, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="shape"):
        source.after_task(_points(torch.zeros(2, 4), labels[:2], 4))
    with pytest.raises(ValueError, match="covariance"):
        GaussianInputs(3, covariance="low rank")
    with pytest.raises(ValueError, match="rank is given with covariance='low_rank' only"):
        GaussianInputs(3, rank=2)


def test_probabilistic_pca_is_exact_for_a_low_rank_plus_noise_covariance_and_keeps_the_top():
    """Tipping & Bishop's eqs. 7-8: ``W Wᵀ + σ² I`` recovers a covariance of that form exactly;
    for any other it keeps the top eigenvalues and averages the rest into σ²."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(6, 2, generator=generator, dtype=torch.float64)
    exact = w @ w.T + 0.3 * torch.eye(6, dtype=torch.float64)
    factor, noise = probabilistic_pca(exact, 2)
    torch.testing.assert_close(noise, torch.tensor(0.3, dtype=torch.float64))
    torch.testing.assert_close(factor @ factor.T + noise * torch.eye(6).double(), exact)
    a = torch.randn(6, 6, generator=generator, dtype=torch.float64)
    general = a @ a.T
    factor, noise = probabilistic_pca(general, 2)
    eigenvalues = torch.linalg.eigvalsh(general)
    approx = torch.linalg.eigvalsh(factor @ factor.T + noise * torch.eye(6).double())
    torch.testing.assert_close(approx[-2:], eigenvalues[-2:])
    torch.testing.assert_close(approx[:-2], eigenvalues[:-2].mean().expand(4))


def test_low_rank_gaussian_inputs_draw_from_w_wt_plus_noise_and_keep_its_numbers_only():
    labels = torch.zeros(4000, dtype=torch.long)
    x = _correlated(4000, 1.0, 0)
    source = GaussianInputs(40000, covariance="low_rank", rank=2)
    source.after_task(_points(x, labels, 0))
    moments = source.moments[0]
    assert set(moments) == {"count", "mean", "range", "factor", "noise"}
    assert moments["factor"].shape == (3, 2)
    factor, noise = probabilistic_pca(_moments(x)[1], 2)
    torch.testing.assert_close(moments["factor"] @ moments["factor"].T, factor @ factor.T)
    torch.manual_seed(0)
    drawn = source.draw(None).x
    expected = factor @ factor.T + (noise + source.jitter) * torch.eye(3).double()
    # clipping to the task's range trims the tails a little: a loose tolerance
    torch.testing.assert_close(_moments(drawn)[1], expected, atol=0.04, rtol=0)
    torch.testing.assert_close(drawn.mean(0), x.mean(0), atol=0.03, rtol=0)
    restored = GaussianInputs(3, covariance="low_rank", rank=2)
    restored.load_state_dict(source.state_dict())
    torch.manual_seed(1)
    expected_draw = source.draw(None).x[:3]
    restored.per_task = source.per_task
    torch.manual_seed(1)
    torch.testing.assert_close(restored.draw(None).x[:3], expected_draw, rtol=0, atol=0)
    with pytest.raises(ValueError, match="rank 3 is not below the 3 input features"):
        GaussianInputs(3, covariance="low_rank", rank=3).after_task(_points(x, labels, 0))


def _recorded(calls: list):
    """``linearised_moments`` that appends ``(x, task_id, whether for the old posterior,
    moments)`` to
    ``calls``: the old posterior's are computed without gradients, each step's with them."""

    def recorded(model, sites, x, task_id):
        moments = linearised_moments(model, sites, x, task_id)
        target = not torch.is_grad_enabled()
        calls.append((x.clone(), task_id, target, [m.detach().clone() for m in moments]))
        return moments

    return recorded


def test_per_step_context_points_are_scored_against_the_old_posterior_at_the_same_points(
    monkeypatch,
):
    """With points drawn at every step, the old posterior's moments are recomputed at each
    step's points: every target the fit used equals ``q_{t-1}``'s linearised moments there."""
    data = tasks()
    fs = learner(FunctionSpaceFitter(UniformInputs(6), moments="linearised"))
    fs.observe(data[0], task_id=0)
    old = dict(fs.current_prior())
    calls = []
    monkeypatch.setattr(function_space, "linearised_moments", _recorded(calls))
    fs.observe(data[1], task_id=1)
    targets = [c for c in calls if c[2]]
    assert len(targets) == 20 and len({c[0].sum().item() for c in targets}) == 20  # per step
    model = fs.model
    for x, task_id, _, (mean, variance) in targets[:3]:
        sites = {n: old[n] for n in model.sites(fs.guide, x, [0])}
        exact_mean, exact_variance = linearised_moments(model, sites, x, task_id)
        torch.testing.assert_close(mean, exact_mean)
        torch.testing.assert_close(variance, exact_variance)


def test_points_drawn_from_kept_points_take_the_old_moments_of_the_kept_points_once_per_fit(
    monkeypatch,
):
    """Each step's context points are rows of the kept points: ``q_{t-1}``'s moments are
    computed once per fit at all of them (not at every step), and every step's regulariser is
    the KL at its drawn rows against those moments, as computed at the drawn points alone."""
    data = tasks()
    fitter = FunctionSpaceFitter(RandomCoreset(8), context_draws=3, moments="linearised")
    fs = learner(fitter)
    fs.observe(data[0], task_id=0)
    old = dict(fs.current_prior())
    kept = fitter.context.points
    calls = []
    drawn = []
    draw_rows = FromMemory.draw_rows

    def recorded_rows(self, data):
        rows = draw_rows(self, data)
        drawn.append(rows.clone())
        return rows

    monkeypatch.setattr(function_space, "linearised_moments", _recorded(calls))
    monkeypatch.setattr(FromMemory, "draw_rows", recorded_rows)
    fs.observe(data[1], task_id=1)
    targets = [c for c in calls if c[2]]
    assert len(targets) == 1  # once for the fit, at every kept point
    torch.testing.assert_close(targets[0][0], kept.x.to(targets[0][0].dtype), rtol=0, atol=0)
    steps = [c for c in calls if not c[2]]
    assert len(steps) == 20 and len(drawn) == 21  # the first draw names the sites
    model = fs.model
    for (x, _, _, _), rows in list(zip(steps, drawn[1:], strict=True))[:3]:
        assert len(rows) == 3
        torch.testing.assert_close(x, kept.x[rows].to(x.dtype), rtol=0, atol=0)
        sites = {n: old[n] for n in model.sites(fs.guide, x, [0])}
        mean, variance = linearised_moments(model, sites, x, 0)
        torch.testing.assert_close(targets[0][3][0][rows], mean)
        torch.testing.assert_close(targets[0][3][1][rows], variance)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FunctionSpaceFitter(UniformInputs(5), context_samples=4),
        lambda: FunctionSpaceFitter(
            RandomCoreset(6), context_samples=4, context_draws=3, function_kl_scale="per_point"
        ),
        lambda: FunctionSpaceFitter(GaussianInputs(5), context_samples=4),
    ],
    ids=["uniform", "memory-draws-per-point", "gaussian"],
)
def test_a_learner_with_drawn_context_points_saves_and_resumes_identically(tmp_path, make):
    data = tasks()
    runs = []
    for stop in (False, True):
        fs = learner(make(), seed=3)
        fs.observe(data[0], task_id=0)
        fs.observe(data[1], task_id=1)
        if stop:
            fs.save(tmp_path / "fs.pt")
            fs = VCL.load(tmp_path / "fs.pt")
            assert type(fs.fitter.context) is type(make().context)
            assert fs.fitter.context.per_step
            assert fs.fitter.function_kl_scale == make().function_kl_scale
        fs.observe(data[2], task_id=2)
        runs.append({k: v.mean for k, v in fs.current_prior().items()})
    for name in runs[0]:
        torch.testing.assert_close(runs[0][name], runs[1][name], rtol=0, atol=0)


def _points(x, y, task):
    return Points.of_task(x, y, task)


def test_current_inputs_are_the_fitted_tasks_own_inputs_for_every_earlier_head():
    source = CurrentInputs(3)
    data = tasks()
    now = _points(*data[2], 2)
    assert source.draw(now) is None
    source.after_task(_points(*data[0], 0))
    source.after_task(_points(*data[1], 1))
    assert source.draw(_points(*data[0], 0)).tasks() == [1]  # a task's own head is the fit's
    torch.manual_seed(0)
    draws = [source.draw(now) for _ in range(4)]
    rows = {tuple(r.tolist()) for r in now.x}
    for draw in draws:
        assert draw.task_ids.tolist() == [0, 0, 0, 1, 1, 1]
        assert all(tuple(r.tolist()) in rows for r in draw.x)
    assert len({tuple(d.x.flatten().tolist()) for d in draws}) > 1
    few = _points(now.x[:2], now.y[:2], 2)
    assert len(source.draw(few)) == 4  # all of a small task's inputs, for each earlier head
    restored = CurrentInputs(3)
    restored.load_state_dict(source.state_dict())
    assert restored.draw(now).tasks() == [0, 1]


def test_the_old_heads_are_held_at_the_new_tasks_inputs():
    """Multi-head, the trunk shared: with the functional KL at task 1's inputs through head 0,
    head 0's predictions on task 0's test inputs move less while task 1 is fitted than with no
    regulariser at all (weight 0, and no parameter KL)."""
    data = tasks()
    moved = {}
    for weight in (0.0, 1.0):
        fs = VCL(
            BayesianMLP(4, [16], 2, heads=3),
            fitter=FunctionSpaceFitter(CurrentInputs(40), function_kl_weight=weight),
            epochs=150,
            learning_rate=0.01,
            seed=1,
            progress=False,
        )
        fs.observe(data[0], task_id=0)
        before = fs.predict(data[0][0], task_id=0)
        fs.observe(data[1], task_id=1)
        moved[weight] = (fs.predict(data[0][0], task_id=0) - before).abs().mean().item()
    assert moved[1.0] < 0.5 * moved[0.0], moved


# ------------------------------------------------------- S-FSVI's first task: a function prior
def _first_task_calls(monkeypatch, fitter, data):
    """The first task's recorded ``(regulariser value, q's moments and inputs)`` per step and the
    parameter-KL weight of each ELBO term."""
    import pyro_cl.fitters.elbo_fitter as elbo_fitter

    values, calls, kl_weights = [], [], []
    original_regulariser = FunctionSpaceFitter._regulariser
    original_elbo = elbo_fitter.negative_elbo

    def regulariser(self, *args):
        term = original_regulariser(self, *args)
        return None if term is None else lambda: values.append(term()) or values[-1]

    def elbo(*args, kl_weight, **kwargs):
        kl_weights.append(kl_weight)
        return original_elbo(*args, kl_weight=kl_weight, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(FunctionSpaceFitter, "_regulariser", regulariser)
        patch.setattr(function_space, "linearised_moments", _recorded(calls))
        patch.setattr(elbo_fitter, "negative_elbo", elbo)
        fs = learner(fitter, seed=2)
        fs.observe(data, task_id=0)
    moments = [(x, task_id, *m) for x, task_id, target, m in calls if not target]
    return fs, values, moments, kl_weights


def test_a_function_prior_is_the_first_tasks_kl_to_n0v_at_fresh_uniform_inputs(monkeypatch):
    """S-FSVI's task 0: ``KL(q(f(X_C)) ‖ N(0, v))`` summed over 7 uniform inputs drawn within
    the task's range at every step, through the task's head, times ``N/|X_C|`` per point; no
    parameter KL (``kl_weight`` 0)."""
    x, y = tasks()[0]
    x = x.clamp(-1.0, 2.0)
    fitter = FunctionSpaceFitter(
        RandomCoreset(5),
        moments="linearised",
        function_kl_scale="per_point",
        function_prior_variance=0.01,
        function_prior_points=7,
        jitter=1e-3,
    )
    _, values, moments, kl_weights = _first_task_calls(monkeypatch, fitter, (x, y))
    assert len(values) == len(moments) == 20 and set(kl_weights) == {0.0}
    for value, (drawn, task_id, mean, variance) in zip(values, moments, strict=True):
        assert drawn.shape == (7, 4) and task_id == 0
        assert drawn.min() >= -1.0 and drawn.max() <= 2.0
        exact = torch.distributions.kl_divergence(
            Normal(mean, (variance + 1e-3).sqrt()), Normal(0.0, (0.01 + 1e-3) ** 0.5)
        ).sum()
        torch.testing.assert_close(value.detach(), exact * 80 / 7)
    assert len({m[0].sum().item() for m in moments}) == 20  # fresh inputs at every step


def test_the_first_task_keeps_vcls_elbo_without_a_function_prior_and_kl_weight_applies(
    monkeypatch,
):
    data = tasks()[0]
    _, values, _, kl_weights = _first_task_calls(
        monkeypatch, FunctionSpaceFitter(RandomCoreset(5)), data
    )
    assert values == [] and set(kl_weights) == {1.0}
    fitter = FunctionSpaceFitter(RandomCoreset(5), function_prior_variance=0.1, kl_weight=0.5)
    _, values, _, kl_weights = _first_task_calls(monkeypatch, fitter, data)
    assert len(values) == 20 and set(kl_weights) == {0.5}
    with pytest.raises(ValueError, match="function_prior_variance"):
        FunctionSpaceFitter(RandomCoreset(5), function_prior_variance=0.0)


def test_a_small_function_prior_holds_the_outputs_near_zero_off_the_data():
    """Fitted on task 0 alone, a prior ``N(0, 10⁻³)`` on the outputs at uniform inputs gives
    smaller outputs there than VCL's ELBO against ``N(0, 1)`` weights, and smaller output
    variances than a prior ``N(0, 10)``."""
    data = tasks()[0]
    torch.manual_seed(5)
    off_data = torch.rand(200, 4) * 6 - 3
    size = {}
    for variance in (None, 1e-3, 10.0):
        fitter = FunctionSpaceFitter(
            RandomCoreset(5),
            moments="linearised",
            function_kl_scale="per_point",
            function_prior_variance=variance,
        )
        fs = VCL(
            BayesianMLP(4, [16], 2), fitter=fitter, epochs=60, learning_rate=0.01, progress=False
        )
        fs.observe(data, task_id=0)
        sites = {n: fs.current_prior()[n] for n in fs.model.sites(fs.guide, off_data, [0])}
        mean, var = linearised_moments(fs.model, sites, off_data, 0)
        size[variance] = (mean.abs().mean().item(), var.mean().item())
    assert size[1e-3][0] < 0.5 * size[None][0], size
    assert size[1e-3][1] < 0.5 * size[10.0][1], size


def test_a_benchmark_runs_a_function_space_method_with_the_context_source_it_is_given():
    """``fitter_options={"context": ...}`` is the learner's source, not the method's default
    (it was silently dropped: every Gaussian-input row ran the full covariance), copied for each
    learner."""
    from pyro_cl.app.benchmark_run import BenchmarkRun

    given = GaussianInputs(5, covariance="low_rank", rank=3)
    run = BenchmarkRun(methods=["fsvi-gaussian"], num_tasks=2, fitter_options={"context": given})
    learner = run.make_learner("fsvi-gaussian", run.task_stream(0), 0, "cpu")
    assert learner.fitter.context.spec() == given.spec()
    # each learner its own copy: one seed's moments never reach the next seed's run
    learner.fitter.context.after_task(Points.of_task(torch.zeros(4, 64), torch.zeros(4), 0))
    again = run.make_learner("fsvi-gaussian", run.task_stream(1), 1, "cpu")
    assert again.fitter.context.moments == {} and given.moments == {}
    default = BenchmarkRun(methods=["fsvi-gaussian"], num_tasks=2)
    built = default.make_learner("fsvi-gaussian", default.task_stream(0), 0, "cpu")
    assert built.fitter.context.covariance == "full"


@pytest.mark.parametrize("net", ["mlp", "cnn"])
def test_the_old_moments_in_chunks_are_those_of_one_pass(net):
    """``rows_at_once``: every point through the net once, in order, each with draws of its
    own: with near-point sites the moments are one pass's to rounding (a chunk that dropped or
    reordered points would not be), and with wide sites they agree within Monte Carlo error."""
    torch.manual_seed(0)
    if net == "mlp":
        layers, x = BayesianMLP(6, [8], 3), torch.randn(13, 6)
    else:
        layers, x = BayesianCNN((1, 8, 8), ((2, 2),), (8,), 3), torch.randn(13, 1, 8, 8)
    model = SupervisedModel(layers, GaussianLikelihood(1.0))
    means = {name: torch.randn(value.shape) * 0.3 for name, value in _site_draws(model).items()}

    def sites(scale: float) -> dict:
        return {n: Normal(m, torch.full_like(m, scale)).to_event(m.dim()) for n, m in means.items()}

    whole = function_moments(function_draws(model, sites(1e-6), x, 0, 16))
    chunked = function_moments(
        function_draws(model, sites(1e-6), x, 0, 16, rows_at_once=40)
    )  # 2 points a chunk
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-4, atol=1e-5)
    whole = function_moments(function_draws(model, sites(0.3), x, 0, 4000))
    chunked = function_moments(function_draws(model, sites(0.3), x, 0, 4000, rows_at_once=10_000))
    torch.testing.assert_close(chunked[0], whole[0], rtol=0.0, atol=0.1)
    torch.testing.assert_close(chunked[1], whole[1], rtol=0.15, atol=1e-3)
    with pytest.raises(ValueError, match="target_rows_at_once"):
        FunctionSpaceFitter(RandomCoreset(4), target_rows_at_once=0)


def _site_draws(model) -> dict:
    """Each latent site of ``model``'s net, a draw of its prior (for its shape)."""
    from pyro_cl.posterior import read_priors

    return {name: prior.sample() for name, prior in read_priors(model.net).items()}
