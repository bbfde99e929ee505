"""Online VB with a running memory (Kurle et al. 2020): Gaussian factors against closed forms,
the bias correction, eq. 9a/9b, the residual score, GRS memory bookkeeping, resuming mid-stream,
the moment-matched initialisation and the online streams."""

import math

import numpy as np
import pytest
import torch
from pyro.distributions import Normal

from pyro_cl import ContinualLearner
from pyro_cl.app.online_metrics import run_online
from pyro_cl.app.stream_presets import STREAM_PRESETS, make_online_learner
from pyro_cl.data import online_stream
from pyro_cl.data.uci import load_spambase, load_uci
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.likelihoods import GaussianLikelihood, HeteroscedasticGaussianLikelihood
from pyro_cl.memory import GaussianResidualMemory, KCenterCoreset, RandomCoreset, RecentPoints
from pyro_cl.memory.gaussian_factors import (
    GaussianFactors,
    estimate_gaussian_factors,
    natural_parameters,
    remove_memory_factors,
)
from pyro_cl.model import SupervisedModel
from pyro_cl.nn import BayesianMLP
from pyro_cl.nn import linear as linear_module
from pyro_cl.nn.moment_matching import activation_variance, moment_matched_prior_scales
from pyro_cl.points import Points
from pyro_cl.posterior import read_priors

NOISE = 0.5
SITES = ("heads.0.weight", "heads.0.bias")


def linear_gaussian(seed=0, n=6, features=3):
    """``y = w·x + b + N(0, NOISE²)`` as a pyro_cl model, data and a mean-field ``q``."""
    generator = torch.Generator().manual_seed(seed)
    model = SupervisedModel(BayesianMLP(features, [], 1), GaussianLikelihood(NOISE))
    x = torch.randn(n, features, generator=generator)
    y = torch.randn(n, generator=generator)
    loc = torch.randn(1, features, generator=generator)
    scale = torch.rand(1, features, generator=generator) + 0.2
    posterior = {
        SITES[0]: Normal(loc, scale).to_event(2),
        SITES[1]: Normal(torch.tensor([0.3]), torch.tensor([0.4])).to_event(1),
    }
    return model, posterior, x, y


@pytest.mark.parametrize("route", ["fast", "pyro"])
def test_monte_carlo_factors_converge_to_the_linear_gaussian_closed_form(route):
    """For ``log p = -(y - w·x - b)²/(2s²)``: ``Λ⁽ⁿ⁾ = x_n²/s²`` (the diagonal of ``x xᵀ/s²``) and
    ``η⁽ⁿ⁾ = (y_n - μ·x_n - μ_b) x_n / s² + Λ⁽ⁿ⁾ μ``, whatever ``q``."""
    torch.manual_seed(0)
    model, posterior, x, y = linear_gaussian()
    model.fast = route == "fast"
    factors = estimate_gaussian_factors(model, posterior, x, y, num_samples=40_000)
    loc = posterior[SITES[0]].mean
    bias = posterior[SITES[1]].mean
    exact_precision = x.square() / NOISE**2
    residual = (y - x @ loc[0] - bias) / NOISE**2
    exact_shift = residual[:, None] * x + exact_precision * loc[0]
    # Standard errors at 40k samples are ~2% of these magnitudes; 8% + 0.05 leaves 4σ.
    torch.testing.assert_close(
        factors.precision[SITES[0]][:, 0], exact_precision, rtol=0.08, atol=0.05
    )
    torch.testing.assert_close(factors.shift[SITES[0]][:, 0], exact_shift, rtol=0.08, atol=0.1)
    bias_precision = torch.full((len(x),), 1 / NOISE**2)
    torch.testing.assert_close(
        factors.precision[SITES[1]][:, 0], bias_precision, rtol=0.08, atol=0.05
    )
    # the expected log-likelihood in closed form: -(r² + Σ x²σ² + σ_b²)/(2s²) - log(s√(2π))
    variance = (x.square() * posterior[SITES[0]].variance[0]).sum(1) + 0.4**2
    expected = -((y - x @ loc[0] - bias).square() + variance) / (2 * NOISE**2) - math.log(
        NOISE * math.sqrt(2 * math.pi)
    )
    torch.testing.assert_close(factors.expected_log_likelihood, expected, rtol=0.02, atol=0.02)


def factors_on_both_routes(model, posterior, x, y, num_samples):
    """The factors on the fast route and on the Pyro route, from the same draws."""
    results = []
    for fast in (True, False):
        model.fast = fast
        torch.manual_seed(5)
        results.append(estimate_gaussian_factors(model, posterior, x, y, num_samples=num_samples))
    return results


def test_the_two_routes_give_the_same_factors_from_the_same_draws():
    model, posterior, x, y = linear_gaussian(seed=3)
    results = factors_on_both_routes(model, posterior, x, y, num_samples=50)
    for name in SITES:
        torch.testing.assert_close(results[0].precision[name], results[1].precision[name])
        torch.testing.assert_close(results[0].shift[name], results[1].shift[name])


@pytest.mark.parametrize("shared_inputs", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
def test_outer_product_sums_equal_the_contraction_written_out(shared_inputs, weighted, monkeypatch):
    """``Σ_s g_{s,n,o} x_{s,n,i} A_{s,o,i}`` by each of the layer's routes against the einsum
    (the per-unit route in blocks of two samples: three blocks)."""
    generator = torch.Generator().manual_seed(0)
    samples, points, outputs, inputs = 6, 5, 4, 3
    monkeypatch.setattr(linear_module, "_BLOCK_FLOATS", 2 * points * inputs)
    g = torch.randn(samples, points, outputs, generator=generator)
    x = torch.randn(1 if shared_inputs else samples, points, inputs, generator=generator)
    weight = torch.randn(samples, outputs, inputs, generator=generator)
    expected = torch.einsum(
        "sno,sni,soi->noi",
        g,
        x.expand(samples, -1, -1),
        weight if weighted else torch.ones_like(weight),
    )
    sums = linear_module.outer_product_sums(g, x, weight if weighted else None)
    torch.testing.assert_close(sums, expected)


def test_the_two_routes_agree_on_a_net_with_hidden_units():
    """Layers of several inputs and outputs (the fast route's per-unit contraction against
    ``torch.func``'s per-example gradients), with the input layer's samples shared and the
    hidden layer's per sample."""
    generator = torch.Generator().manual_seed(2)
    model = SupervisedModel(BayesianMLP(3, [5], 2), HeteroscedasticGaussianLikelihood())
    x, y = torch.randn(7, 3, generator=generator), torch.randn(7, generator=generator)
    shapes = {name: prior.mean.shape for name, prior in read_priors(model.net).items()}
    posterior = {
        name: Normal(
            torch.randn(shape, generator=generator), torch.rand(shape, generator=generator) + 0.1
        ).to_event(len(shape))
        for name, shape in shapes.items()
    }
    results = factors_on_both_routes(model, posterior, x, y, num_samples=30)
    for name in posterior:  # summation orders differ: float32 rounding of large precisions
        torch.testing.assert_close(
            results[0].precision[name], results[1].precision[name], rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(
            results[0].shift[name], results[1].shift[name], rtol=1e-5, atol=1e-5
        )


def corrected_factors(seed=0):
    torch.manual_seed(seed)
    model, posterior, x, y = linear_gaussian(seed=seed, n=8)
    prior = {
        name: Normal(torch.zeros_like(q.mean), 1.0).to_event(q.event_dim)
        for name, q in posterior.items()
    }
    raw = estimate_gaussian_factors(model, posterior, x, y, num_samples=200)
    prior_natural, fitted_natural = natural_parameters(prior), natural_parameters(posterior)
    return (
        raw.bias_corrected(prior_natural, fitted_natural),
        prior_natural,
        fitted_natural,
        posterior,
    )


def test_after_bias_correction_prior_times_all_factors_is_the_posterior_exactly():
    factors, prior, fitted, _ = corrected_factors()
    total = factors.total()
    for name in SITES:
        torch.testing.assert_close(
            prior.precision[name] + total.precision[name], fitted.precision[name]
        )
        torch.testing.assert_close(prior.shift[name] + total.shift[name], fitted.shift[name])


def test_eq_9a_and_9b_give_the_same_gaussian_on_bias_corrected_factors():
    factors, prior, fitted, _ = corrected_factors()
    in_memory = torch.tensor([True, False, True, False, False, True, False, False])
    tiny = 1e-30  # no clipping: compare the two equations themselves
    a = remove_memory_factors(prior, fitted, factors, in_memory, tiny, equation="9a")
    b = remove_memory_factors(prior, fitted, factors, in_memory, tiny, equation="9b")
    for name in SITES:
        torch.testing.assert_close(a.posterior.precision[name], b.posterior.precision[name])
        torch.testing.assert_close(a.posterior.shift[name], b.posterior.shift[name])
    # the paper's rule sums the smaller set: 5 points outside the memory, 3 in it -> 9b
    assert remove_memory_factors(prior, fitted, factors, in_memory, tiny).equation == "9b"
    assert remove_memory_factors(prior, fitted, factors, ~in_memory, tiny).equation == "9a"


def test_closed_form_expected_log_factor_equals_a_monte_carlo_estimate():
    factors, _, _, posterior = corrected_factors(seed=1)
    closed = factors.expected_log_factor(posterior)
    torch.manual_seed(2)
    estimate = torch.zeros(len(factors))
    draws = 200_000
    for name, q in posterior.items():
        w = q.sample((draws,))  # (S, *shape)
        eta, lam = factors.shift[name], factors.precision[name]  # (N, *shape)
        linear = torch.einsum("n...,s...->sn", eta, w)
        quadratic = torch.einsum("n...,s...->sn", lam, w.square())
        estimate += (linear - 0.5 * quadratic).mean(0)
    torch.testing.assert_close(closed, estimate, rtol=0.01, atol=0.05)


def test_a_precision_that_would_turn_non_positive_is_clipped_to_the_floor_and_counted():
    factors, prior, fitted, _ = corrected_factors()
    huge = GaussianFactors(
        {n: p.clone() for n, p in factors.precision.items()},
        dict(factors.shift),
        factors.expected_log_likelihood,
        factors.num_samples,
    )
    huge.precision[SITES[1]][0] += 1e4  # point 0's factor claims far more than q̃ holds
    in_memory = torch.zeros(8, dtype=torch.bool)
    in_memory[0] = True
    update = remove_memory_factors(prior, fitted, huge, in_memory, precision_floor=0.5)
    removed = huge.select(in_memory).total().precision
    unclipped = {n: fitted.precision[n] - removed[n] for n in SITES}  # eq. 9b as it stands
    assert unclipped[SITES[1]].item() < 0  # would be non-positive
    low = sum(int((unclipped[n] < 0.5 * prior.precision[n]).sum()) for n in SITES)
    assert update.equation == "9b"
    assert update.clipped == low >= 1 and update.coordinates == 4
    bias_precision = update.posterior.precision[SITES[1]]
    torch.testing.assert_close(bias_precision, 0.5 * prior.precision[SITES[1]])
    fitted_mean = fitted.shift[SITES[1]] / fitted.precision[SITES[1]]
    torch.testing.assert_close(update.posterior.shift[SITES[1]] / bias_precision, fitted_mean)
    assert (update.posterior.precision[SITES[0]] > 0).all()
    with pytest.raises(ValueError, match="precision_floor"):
        remove_memory_factors(prior, fitted, huge, in_memory, precision_floor=0.0)


# ---------------------------------------------------------------- the GRS memory in a learner
def small_stream(seed=0, steps=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 3))
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=200)
    return online_stream(x, y, 30, 10, seed=seed, regression=True, num_steps=steps, name="toy")


def grs_learner(stream, seed=0, **memory_options):
    net = BayesianMLP(stream.in_features, [8], 2, activation="tanh", prior_scale="moment_matched")
    return ContinualLearner(
        net,
        HeteroscedasticGaussianLikelihood(),
        memory=GaussianResidualMemory(6, num_term_samples=64, **memory_options),
        seed=seed,
        epochs=30,
        batch_size=None,
        num_particles=4,
        num_predictive_samples=8,
        ml_init_epochs=0,
        init_means="moment_matched",
        learning_rate=0.02,
        progress=False,
    )


def test_grs_keeps_the_top_scoring_points_within_its_budget_with_their_times_and_tasks():
    stream = small_stream()
    learner = grs_learner(stream)
    times = [0.0, 0.5, 3.0, 3.25]  # not equidistant
    for step, time in zip(stream, times, strict=True):
        learner.observe(step.data, task_id=0, time=time)
        memory = learner.memory
        assert len(learner.memory_points) == 6
        top = torch.topk(memory.candidate_scores, 6).values
        torch.testing.assert_close(torch.sort(memory.scores).values, torch.sort(top).values)
        assert set(learner.memory_points.times.tolist()) <= set(times[: len(learner.times)])
        assert (learner.memory_points.task_ids == 0).all()
        assert memory.statistics["equation"] in ("9a", "9b")
    # the memory's points are points of the stream, stamped with the step that brought them
    for x, t in zip(learner.memory_points.x, learner.memory_points.times, strict=True):
        step = stream[times.index(float(t))]
        assert (step.x == x).all(dim=1).any()


def test_grs_hands_on_the_factor_update_and_predicts_with_the_fit():
    stream = small_stream(steps=2)
    learner = grs_learner(stream)
    learner.observe(stream[0].data, time=0.0)
    (fitted,) = learner.prediction_posteriors.values()
    handed_on = learner.current_prior()
    # q_t = q̃_t / ∏_{memory} r: less precise than the fit in most coordinates, never below the
    # step's prior precision (the floor)
    for name, q in handed_on.items():
        assert (q.base_dist.scale >= fitted[name].base_dist.scale - 1e-6).float().mean() > 0.5
        assert (q.base_dist.scale <= learner.initial_prior[name].base_dist.scale + 1e-6).all()
    assert learner.posterior(0).keys() == fitted.keys()


def test_grs_resumes_mid_stream_to_the_same_memory_and_posterior(tmp_path):
    stream = small_stream(steps=3)
    straight = grs_learner(stream, seed=4)
    for step in stream:
        straight.observe(step.data, time=step.time)
    first = grs_learner(stream, seed=4)
    first.observe(stream[0].data, time=stream[0].time)
    first.save(tmp_path / "grs.pt")
    torch.rand(50)
    resumed = ContinualLearner.load(tmp_path / "grs.pt")
    assert torch.equal(resumed.memory_points.times, first.memory_points.times)
    assert torch.equal(resumed.memory.scores, first.memory.scores)
    for step in stream.steps[1:]:
        resumed.observe(step.data, time=step.time)
    assert torch.equal(resumed.memory_points.x, straight.memory_points.x)
    assert torch.equal(resumed.memory_points.times, straight.memory_points.times)
    for name, q in straight.current_prior().items():
        assert torch.equal(q.mean, resumed.current_prior()[name].mean), name
    for key, posterior in straight.prediction_posteriors.items():
        for name, q in posterior.items():
            assert torch.equal(q.mean, resumed.prediction_posteriors[key][name].mean)


def test_a_failed_grs_step_leaves_memory_and_posterior_as_they_were(monkeypatch):
    stream = small_stream(steps=2)
    learner = grs_learner(stream)
    learner.observe(stream[0].data, time=0.0)
    before = (learner.memory_points, dict(learner.memory.statistics), learner.current_prior())

    def broken(*args, **kwargs):
        raise RuntimeError("factor estimation failed")

    monkeypatch.setattr("pyro_cl.memory.model_view.estimate_gaussian_factors", broken)
    with pytest.raises(RuntimeError, match="factor estimation failed"):
        learner.observe(stream[1].data, time=1.0)
    assert learner.memory_points is before[0] and learner.memory.statistics == before[1]
    for name, q in before[2].items():
        assert torch.equal(q.mean, learner.current_prior()[name].mean)
    assert learner.times == [0.0]


@pytest.mark.parametrize(
    "method", ["grs-refit", "kcenter-grs", "kcenter", "random", "recent", "none"]
)
def test_every_online_method_runs_a_stream_and_reports_per_step_metrics(method):
    stream = small_stream(steps=3)
    learner = make_online_learner(
        method, stream, (8,), 6, 32, seed=0, epochs=10, num_particles=2, num_predictive_samples=8
    )
    result = run_online(learner, stream, method, progress=False)
    series = result.series
    assert len(series["test_lml"]) == 3 and len(series["one_step_ahead"]) == 2
    assert all(math.isfinite(v) for v in series["test_lml"] + series["one_step_ahead"])
    assert series["memory_sizes"][-1] == (0 if method == "none" else 6)
    assert math.isfinite(result.summary()["test_lml"])


def test_a_total_budget_memory_chooses_from_old_and_new_points_and_propagates_the_rest():
    x = torch.randn(10, 2)
    y = torch.zeros(10, dtype=torch.long)
    old = Points.of_task(torch.randn(4, 2), torch.zeros(4, dtype=torch.long), 0, time=1.0)
    for selector in (RandomCoreset(5, budget="total"), KCenterCoreset(5, budget="total")):
        update = selector.update(old, Points.of_task(x, y, 0))
        assert len(update.points) == 5
        assert len(update.remaining) + len(update.dropped) == 14 - 5
    with pytest.raises(ValueError, match="budget"):
        RandomCoreset(5, budget="forever")


def test_the_recent_memory_is_a_window_the_oldest_points_leave_first():
    memory, window = RecentPoints(5), None
    arrived = []
    for t, n in enumerate((3, 4, 2)):
        x = torch.arange(len(arrived), len(arrived) + n, dtype=torch.float32).unsqueeze(1)
        arrived += x.squeeze(1).tolist()
        update = memory.update(window, Points.of_task(x, torch.zeros(n, dtype=torch.long), 0, t))
        window = update.points
        assert window.x.squeeze(1).tolist() == arrived[-5:]  # the last five, in order
        assert window.times.tolist() == sorted(window.times.tolist())
    # the last step: two new points pushed out the two oldest kept (2 and 3), and both new
    # points were kept (none remains to be fitted into the Gaussian)
    assert update.dropped.x.squeeze(1).tolist() == [2.0, 3.0]
    assert len(update.remaining) == 0
    assert memory.budget == "total"


# ---------------------------------------------------------------- initialisation
def test_activation_variances_and_eq_17_prior_scales():
    assert activation_variance("relu") == pytest.approx(0.5 - 1 / (2 * math.pi), abs=1e-8)
    assert activation_variance("linear") == 1.0
    generator = torch.Generator().manual_seed(0)
    tanh = torch.tanh(torch.randn(2_000_000, generator=generator)).var().item()
    assert activation_variance("tanh") == pytest.approx(tanh, abs=2e-3)
    scales = moment_matched_prior_scales(8, [16, 32], "tanh")
    c = activation_variance("tanh")
    assert scales == pytest.approx([8**-0.5, (16 * c) ** -0.5, (32 * c) ** -0.5])


def test_moment_matched_nets_keep_pre_activations_at_unit_variance():
    torch.manual_seed(0)
    net = BayesianMLP(20, [200, 200], 1, activation="tanh", prior_scale="moment_matched")
    model = SupervisedModel(net, GaussianLikelihood())
    x = torch.randn(4000, 20)
    from pyro_cl.infer.site_values import sample_outputs
    from pyro_cl.posterior import read_priors

    outputs = sample_outputs(model, read_priors(net), x, num_samples=20, fast=True)
    assert outputs.var().item() == pytest.approx(1.0, rel=0.15)


def test_the_initial_posterior_splits_the_prior_variance_by_beta():
    net = BayesianMLP(50, [400], 1, prior_scale="moment_matched")
    model = SupervisedModel(net, GaussianLikelihood())
    guide = MeanFieldGuide(model)
    guide(torch.randn(2, 50))
    from pyro_cl.posterior import read_priors

    priors = read_priors(net)
    torch.manual_seed(0)
    guide.match_prior_moments(priors, alpha=0.001, beta=0.9)
    loc = guide.loc["hidden/0/weight"]
    variance = guide.log_variance["hidden/0/weight"].exp()
    prior_variance = 1 / 50
    assert loc.mean().item() == pytest.approx(0.0, abs=2e-3)
    assert loc.var().item() == pytest.approx(0.9 * prior_variance, rel=0.05)
    assert variance.mean().item() == pytest.approx(0.1 * prior_variance, rel=0.01)
    with pytest.raises(ValueError, match="beta"):
        guide.match_prior_moments(priors, beta=1.0)


# ---------------------------------------------------------------- streams and data
def test_an_online_stream_holds_out_20_percent_and_steps_through_the_rest():
    x = np.arange(500, dtype=float)[:, None] * np.ones((1, 2))
    y = np.arange(500) % 3
    stream = online_stream(x, y, 100, 25, seed=1)
    assert len(stream.test[0]) == 100 and len(stream[0].x) == 100 and len(stream[1].x) == 25
    assert len(stream) == 1 + (400 - 100) // 25 and stream.num_outputs == 3
    train = torch.cat([step.x for step in stream])
    assert train.mean().abs() < 1e-5 and (train.std(0) - 1).abs().max() < 0.01
    again = online_stream(x, y, 100, 25, seed=1)
    assert torch.equal(again[3].x, stream[3].x)
    assert not torch.equal(online_stream(x, y, 100, 25, seed=2)[0].x, stream[0].x)
    with pytest.raises(ValueError, match="first step"):
        online_stream(x, y, 450, 25)


def test_loaders_name_the_missing_or_damaged_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="concrete"):
        load_uci(tmp_path, "concrete")
    with pytest.raises(ValueError, match="unknown UCI set"):
        load_uci(tmp_path, "iris")
    (tmp_path / "spambase").mkdir()
    (tmp_path / "spambase" / "spambase.data").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(ValueError, match="58 columns"):
        load_spambase(tmp_path)
    folder = tmp_path / "UCI_Datasets" / "yacht" / "data"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("1 2 3\n4 nan 6\n")
    with pytest.raises(ValueError, match="NaN"):
        load_uci(tmp_path, "yacht")


def test_table_2_presets_cover_the_papers_streams():
    assert {"concrete", "boston", "energy", "yacht", "spam", "wine", "mnist"} <= set(STREAM_PRESETS)
    assert STREAM_PRESETS["mnist"].memory_size == 150
    moons = STREAM_PRESETS["two_moons"].stream(seed=0)
    assert len(moons[0].x) == 150 and len(moons[1].x) == 15


def test_the_precision_floor_reaches_grs_memories_and_is_refused_for_the_others():
    from pyro_cl.app.cli import main

    stream = small_stream(steps=2)
    grs = make_online_learner("grs", stream, (8,), 6, 32, memory_options={"precision_floor": 0.1})
    assert grs.memory.precision_floor == 0.1 and grs.memory.num_term_samples == 32
    with pytest.raises(SystemExit, match="--precision-floor is GRS's"):
        main(["stream", "two_moons", "--methods", "random", "--precision-floor", "0.1"])


def test_online_learners_can_draw_weights_instead_of_pre_activations():
    stream = small_stream(steps=2)
    for choice in (True, False):
        learner = make_online_learner("none", stream, (8,), 6, 32, local_reparameterization=choice)
        layers = [m for m in learner.net.modules() if hasattr(m, "local_reparameterization")]
        assert layers and all(m.local_reparameterization is choice for m in layers)


def test_residual_scores_are_the_expected_log_likelihood_minus_the_expected_log_factor():
    """Eq. 8 in closed form on the linear-Gaussian model, where both expectations and the exact
    factors (``Λ⁽ⁿ⁾ = x_n²/s²``, ``η⁽ⁿ⁾`` as above) are known: the score is what the point's
    diagonal Gaussian factor misses of its likelihood, so a point whose features interact more
    (a larger ``Σ_{i≠j} x_i x_j`` cross term) scores lower. A flipped sign keeps the wrong points."""
    torch.manual_seed(0)
    model, posterior, x, y = linear_gaussian(seed=4, n=8)
    factors = estimate_gaussian_factors(model, posterior, x, y, num_samples=60_000)
    loc, variance = posterior[SITES[0]].mean[0], posterior[SITES[0]].variance[0]
    bias, bias_variance = 0.3, 0.4**2
    residual = y - x @ loc - bias
    expected_log_p = -(residual.square() + x.square() @ variance + bias_variance) / (
        2 * NOISE**2
    ) - math.log(NOISE * math.sqrt(2 * math.pi))
    precision = x.square() / NOISE**2
    shift = residual[:, None] * x / NOISE**2 + precision * loc
    bias_shift = residual / NOISE**2 + bias / NOISE**2
    expected_log_r = (shift * loc - 0.5 * precision * (loc.square() + variance)).sum(1) + (
        bias_shift * bias - 0.5 / NOISE**2 * (bias**2 + bias_variance)
    )
    exact = expected_log_p - expected_log_r
    scores = factors.residual_scores(posterior)
    torch.testing.assert_close(scores, exact, rtol=0.05, atol=0.1)
    # the scores spread well beyond that tolerance, so their order is what GRS keeps
    assert exact.max() - exact.min() > 1.0
    assert torch.equal(
        torch.topk(scores, 3).indices.sort().values, torch.topk(exact, 3).indices.sort().values
    )
