"""No silent wrong result (issue 70): each fault a careful user met is now correct behaviour or a
clear refusal that leaves the learner as it was."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pyro_cl import VCL, DivergenceError
from pyro_cl.app.benchmark_run import check_seeds
from pyro_cl.fitters.context_points import GaussianInputs, _square_root
from pyro_cl.fitters.function_space import gaussian_function_kl
from pyro_cl.guides import FullCovariance, LowRank
from pyro_cl.learner.checkpoint import restore_learner
from pyro_cl.learner.graph_vcl import GraphVCL
from pyro_cl.nn import BayesianMLP, make_bayesian
from pyro_cl.points import Points
from pyro_cl.serialization import CorruptFileError
from tests.helpers import two_class_data
from tests.test_graph_vcl import rotated_domains

SMALL = dict(epochs=2, batch_size=32, num_particles=1, num_predictive_samples=4, progress=False)


def small_learner(**settings) -> VCL:
    return VCL(BayesianMLP(4, [8], 2), seed=0, **{**SMALL, **settings})


def guide_values(learner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)}


def assert_same_values(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name


# ---------------------------------------------------------------- times, counts, names
def test_the_default_time_never_repeats_a_time_a_float_cannot_step_past():
    learner = small_learner()
    x, y = two_class_data(64)
    learner.observe((x, y), time=float(2**53))
    before = guide_values(learner)
    with pytest.raises(ValueError, match="give time= explicitly"):
        learner.observe((x, y))
    assert learner.times == [float(2**53)]
    assert_same_values(before, guide_values(learner))
    learner.observe((x, y), time=float(2**53) + 2)  # an explicit later time is taken


@pytest.mark.parametrize("bad", [0, -1, 2.5, math.nan, True, 10**9])
def test_prediction_counts_are_checked_not_replaced(bad):
    learner = small_learner()
    x, y = two_class_data(32)
    learner.observe((x, y))
    with pytest.raises(ValueError, match="num_samples"):
        learner.evaluate((x, y), num_samples=bad)
    with pytest.raises(ValueError, match="num_samples"):
        learner.predict(x, num_samples=bad)
    with pytest.raises(ValueError, match="chunk"):
        learner.predict(x, chunk=bad if bad != 10**9 else -3)


def test_a_misspelt_site_in_evaluate_is_refused_by_name():
    learner = small_learner()
    x, y = two_class_data(32)
    learner.observe((x, y))
    posterior = learner.current_prior()
    name = next(iter(posterior))
    learner.evaluate((x, y), sites={name: posterior[name]})  # a real site is taken
    with pytest.raises(ValueError, match="layers.0.wieght"):
        learner.evaluate((x, y), sites={"layers.0.wieght": posterior[name]})


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"learning_rate": 0}, "learning_rate"),
        ({"learning_rate": -1e-3}, "learning_rate"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"ml_init_epochs": -1}, "ml_init_epochs"),
        ({"epochs": 2.5}, "epochs"),
        ({"num_particles": 1.5}, "num_particles"),
        ({"num_predictive_samples": 0}, "num_predictive_samples"),
        ({"refit_batch_size": 0.5}, "refit_batch_size"),
        ({"init_loc_std": math.nan}, "init_loc_std"),
        ({"variance_learning_rate": 0}, "variance_learning_rate"),
        ({"progress": "yes"}, "progress"),
    ],
)
def test_settings_are_checked_when_given_not_at_the_first_observe(setting, message):
    with pytest.raises((ValueError, TypeError), match=message):
        small_learner(**setting)


def test_integral_settings_are_kept_as_integers():
    learner = small_learner(epochs=3.0, batch_size=16.0)
    assert learner.config.schedule.epochs == 3 and isinstance(learner.config.schedule.epochs, int)
    assert isinstance(learner.config.schedule.batch_size, int)


@pytest.mark.parametrize("family", [FullCovariance, LowRank])
def test_a_joint_family_of_no_sites_is_refused(family):
    with pytest.raises(ValueError, match="joins no site"):
        family(sites=[])


def test_seeds_given_twice_are_refused():
    check_seeds([0, 1, 2])
    with pytest.raises(ValueError, match=r"distinct: \[0\]"):
        check_seeds([0, 0])


# ---------------------------------------------------------------- resumes and loads
def test_a_resume_with_other_training_settings_is_refused_naming_them():
    saved = small_learner()
    saved.observe(two_class_data(64))
    state = saved.state()
    other = small_learner(epochs=5, learning_rate=1e-2)
    before = guide_values(other)
    with pytest.raises(ValueError, match=r"epochs 2 → 5.*learning_rate 0.001 → 0.01"):
        restore_learner(other, state)
    assert_same_values(before, guide_values(other))
    same = small_learner()
    restore_learner(same, state)  # the same settings resume
    assert same.tasks_seen == [0]


def test_a_file_is_not_loaded_into_a_net_of_another_activation(tmp_path):
    learner = VCL(BayesianMLP(4, [8], 2, activation="relu"), seed=0, **SMALL)
    learner.observe(two_class_data(64))
    learner.save(tmp_path / "l.pt")
    with pytest.raises(ValueError, match="tanh"):
        VCL.load(tmp_path / "l.pt", net=BayesianMLP(4, [8], 2, activation="tanh"))
    VCL.load(tmp_path / "l.pt", net=BayesianMLP(4, [8], 2, activation="relu"))


class Body(nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.first, self.last = nn.Linear(4, width), nn.Linear(width, 2)

    def forward(self, x):
        return self.last(torch.relu(self.first(x)))


class OtherBody(Body):  # the same shapes, another forward
    def forward(self, x):
        return self.last(torch.tanh(self.first(x)))


def test_a_made_bayesian_file_is_refused_by_another_net_or_width(tmp_path):
    learner = VCL(make_bayesian(Body()), seed=0, **SMALL)
    learner.observe(two_class_data(64))
    path = tmp_path / "l.pt"
    learner.save(path)
    with pytest.raises(CorruptFileError, match="OtherBody"):
        VCL.load(path, net=make_bayesian(OtherBody()))
    with pytest.raises(CorruptFileError, match=r"l\.pt.*first"):
        VCL.load(path, net=make_bayesian(Body(width=16)))
    with pytest.raises(CorruptFileError, match="l.pt"):
        VCL.load(path, net=BayesianMLP(4, [8], 2))
    loaded = VCL.load(path, net=make_bayesian(Body()))
    x, _ = two_class_data(16)
    torch.testing.assert_close(loaded.predict(x), learner.predict(x))


class WithTransientBuffer(Body):
    def __init__(self):
        super().__init__()
        self.register_buffer("scratch", torch.zeros(3), persistent=False)


def test_a_net_with_a_non_persistent_buffer_saves_and_loads(tmp_path):
    learner = VCL(make_bayesian(WithTransientBuffer()), seed=0, **SMALL)
    learner.observe(two_class_data(64))
    learner.save(tmp_path / "l.pt")
    loaded = VCL.load(tmp_path / "l.pt", net=make_bayesian(WithTransientBuffer()))
    x, _ = two_class_data(16)
    torch.testing.assert_close(loaded.predict(x), learner.predict(x))


# ---------------------------------------------------------------- make_bayesian
def test_make_bayesian_keeps_forward_hooks_and_pre_hooks():
    seen = []
    body = Body()
    body.first.register_forward_pre_hook(lambda module, args: seen.append("pre"))
    body.first.register_forward_hook(lambda module, args, out: seen.append(tuple(out.shape)))
    net = make_bayesian(body)
    net(torch.zeros(5, 4))
    assert seen == ["pre", (5, 8)]


def test_make_bayesian_refuses_a_path_given_as_a_string():
    with pytest.raises(TypeError, match="list of module paths"):
        make_bayesian(Body(), film_tasks=2, film_after="first")


# ---------------------------------------------------------------- FiLM starts at the identity
@pytest.mark.parametrize(
    "settings",
    [
        {"between_tasks": "fresh"},
        {"between_tasks": "fresh_cap_variance"},
        {"init_means": "moment_matched"},
        {"init_means": "fresh"},
    ],
)
def test_task_film_layers_start_at_the_identity_under_every_fresh_start(settings):
    net = BayesianMLP(4, [8], 2, heads=2, film_tasks=2)
    learner = VCL(net, seed=0, **{**SMALL, "epochs": 0, "ml_init_epochs": 0, **settings})
    x, y = two_class_data(32)
    learner.observe((x, y), task_id=0)
    learner.observe((x, y), task_id=1)  # epochs=0: the guide stays where it started
    film = {n: q for n, q in learner.guide.locs().items() if ".film" in n or "film." in n}
    assert film, "the net has FiLM sites"
    for name, loc in film.items():
        expected = 1.0 if name.endswith("weight") else 0.0
        assert torch.equal(loc, torch.full_like(loc, expected)), name


# ---------------------------------------------------------------- Monte Carlo function moments
def test_the_function_kl_from_sample_moments_is_unbiased_for_gaussian_outputs():
    """Draw outputs of known Gaussian moments, form the sample moments as the fitter does, and
    average the KL over many repetitions: corrected, it is the exact KL (identical moments: 0);
    plugged in as they are, it is biased (the fault: 2.3 where it should be 0)."""
    generator = torch.Generator().manual_seed(0)
    repeats, points, n_q, n_p = 4000, 5, 8, 64
    m_q, v_q = torch.tensor([0.3, -1.0, 0.0, 2.0, 0.5]), torch.tensor([0.5, 2.0, 1.0, 0.1, 1.5])
    m_p, v_p = torch.tensor([0.0, -1.2, 0.4, 2.0, 0.5]), torch.tensor([1.0, 1.0, 0.5, 0.2, 1.5])

    def sample_moments(mean, variance, draws):
        outputs = mean + variance.sqrt() * torch.randn(
            repeats, draws, points, generator=generator, dtype=torch.float64
        )
        return outputs.mean(1), outputs.var(1, unbiased=True)

    def averaged(mq, vq, mp, vp, corrected: bool):
        a, b = (
            sample_moments(mq.double(), vq.double(), n_q),
            sample_moments(mp.double(), vp.double(), n_p),
        )
        draws = (n_q, n_p) if corrected else (None, None)
        total = sum(
            gaussian_function_kl(a[0][r], a[1][r], b[0][r], b[1][r], 0.0, *draws)
            for r in range(repeats)
        )
        return float(total) / repeats

    exact = float(gaussian_function_kl(m_q, v_q, m_p, v_p))
    assert averaged(m_q, v_q, m_p, v_p, corrected=True) == pytest.approx(exact, abs=0.05)
    assert averaged(m_q, v_q, m_q, v_q, corrected=True) == pytest.approx(0.0, abs=0.05)
    assert averaged(m_q, v_q, m_q, v_q, corrected=False) > 0.3  # the bias the correction removes


def test_the_corrected_function_kl_is_minimised_at_the_target_variance():
    """With ``n`` draws the plug-in objective's minimiser over ``v_q`` is ``v_p n/(n+1)``; the
    corrected one's expectation is minimised at ``v_p``. In expectation the squared mean
    difference of sample means carries ``v_q/n``: the correction takes it off."""
    n, v_p = 8, torch.tensor(2.0, dtype=torch.float64)
    grid = torch.linspace(1.0, 3.0, 2001, dtype=torch.float64)

    def expected_kl(v_q, corrected):
        # E over the q draws with m_q = m_p: (m̂_q - m_p)² has mean v_q/n; v̂_q is unbiased
        square = v_q / n - (v_q / n if corrected else 0.0)
        return 0.5 * (v_q / v_p - (v_q / v_p).log() + square / v_p - 1)

    plug_in = grid[torch.argmin(expected_kl(grid, False))]
    corrected = grid[torch.argmin(expected_kl(grid, True))]
    assert float(plug_in) == pytest.approx(float(v_p) * n / (n + 1), abs=2e-3)
    assert float(corrected) == pytest.approx(float(v_p), abs=2e-3)
    # and the function applies exactly that correction to the squared mean term
    one = torch.ones(1, dtype=torch.float64)
    plain = gaussian_function_kl(one, 2 * one, one, 2 * one)
    with_draws = gaussian_function_kl(one, 2 * one, one, 2 * one, 0.0, n, None)
    digamma = torch.special.digamma(torch.tensor((n - 1) / 2, dtype=torch.float64))
    log_bias = float(digamma) - math.log((n - 1) / 2)
    assert float(with_draws - plain) == pytest.approx(0.5 * (-(2 / n) / 2 + log_bias), abs=1e-12)


# ---------------------------------------------------------------- data that never ends
class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            yield torch.zeros(4), torch.tensor(0)


class Finite(torch.utils.data.IterableDataset):
    def __iter__(self):
        x, y = two_class_data(40)
        yield from zip(x, y, strict=True)


def test_an_iterable_dataset_that_never_ends_is_refused_not_read_forever(monkeypatch):
    monkeypatch.setattr("pyro_cl.model.UNSIZED_READ_LIMIT", 64 * 1024)
    learner = small_learner()
    with pytest.raises(ValueError, match="has not ended"):
        learner.observe(torch.utils.data.DataLoader(Endless(), batch_size=8))
    assert learner.tasks_seen == []
    learner.observe(torch.utils.data.DataLoader(Finite(), batch_size=8))  # a finite one is read
    learner.observe(Finite())
    assert learner.tasks_seen == [0, 0]


# ---------------------------------------------------------------- Gaussian inputs
def test_gaussian_inputs_of_constant_and_collinear_features_draw_from_their_covariance():
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(200, 1, generator=generator)
    x = torch.cat([base, 2 * base, torch.full_like(base, 3.0)], 1)  # collinear, constant
    source = GaussianInputs(500, jitter=0.0)
    source.after_task(Points.of_task(x, torch.zeros(200, dtype=torch.long), 0))
    drawn = source.draw(None)
    assert drawn is not None and torch.isfinite(drawn.x).all()
    covariance = torch.cov(x.T, correction=0)
    factor = _square_root(covariance, 0.0)
    torch.testing.assert_close(factor @ factor.T, covariance, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- divergence of joint families
def test_a_covariance_that_breaks_down_is_a_divergence_and_rolls_back(monkeypatch):
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, guide=LowRank(), **SMALL)
    data = two_class_data(64)
    learner.observe(data)
    before = guide_values(learner)

    def broken(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.cholesky: The factorization could not be completed")

    monkeypatch.setattr(learner.fitter, "fit", broken)
    with pytest.raises(DivergenceError, match="positive definite"):
        learner.observe(data)
    assert learner.tasks_seen == [0]
    assert_same_values(before, guide_values(learner))


# ---------------------------------------------------------------- graph VCL
GRAPH_SMALL = {"epochs": 3, "ml_init_epochs": 0, "num_particles": 1, "num_predictive_samples": 4}


def graph(heads: str = "shared") -> GraphVCL:
    angles = torch.tensor([0.0, 20.0, 40.0])
    net = BayesianMLP(2, [8], 2, heads=3 if heads == "per_domain" else 1)
    return GraphVCL(VCL(net, seed=0, progress=False, **GRAPH_SMALL), _weights(angles), heads=heads)


def _weights(angles):
    from pyro_cl.data.domain_graph import metadata_graph

    return metadata_graph(angles, 20.0)


def test_a_domains_fit_does_not_depend_on_a_sibling_fitted_before_it():
    domains = rotated_domains([0, 20, 40])
    with_sibling, alone = graph(), graph()
    with_sibling.observe(0, domains[0])
    with_sibling.observe(1, domains[1], parents=[0])
    with_sibling.observe(2, domains[2], parents=[0])
    alone.observe(0, domains[0])
    alone.observe(2, domains[2], parents=[0])
    for name, q in alone.posteriors[2].items():
        other = with_sibling.posteriors[2][name]
        assert torch.equal(q.base_dist.loc, other.base_dist.loc), name
        assert torch.equal(q.base_dist.scale, other.base_dist.scale), name


def test_a_root_domains_fit_does_not_depend_on_another_root_fitted_before_it():
    domains = rotated_domains([0, 20, 40])
    after_another, alone = graph(), graph()
    after_another.observe(0, domains[0])
    after_another.observe(2, domains[2])
    alone.observe(2, domains[2])
    for name, q in alone.posteriors[2].items():
        other = after_another.posteriors[2][name]
        assert torch.equal(q.base_dist.loc, other.base_dist.loc), name
        assert torch.equal(q.base_dist.scale, other.base_dist.scale), name


def test_the_unsupervised_step_fits_with_the_learners_own_fitter(monkeypatch):
    domains = rotated_domains([0, 20, 40])
    g = graph()
    g.observe(0, domains[0])
    calls = []
    fit = g.learner.fitter.fit
    monkeypatch.setattr(g.learner.fitter, "fit", lambda *a, **k: calls.append(1) or fit(*a, **k))
    g.adapt_unlabelled(2, domains[2][0], parents=[0])
    assert calls and 2 in g.posteriors


def test_a_diverged_graph_step_with_per_domain_heads_rolls_back_whole():
    domains = rotated_domains([0, 20, 40])
    g = graph("per_domain")
    g.observe(0, domains[0])
    learner = g.learner
    before = guide_values(learner)
    random_before = learner.random.state()
    learner.config = learner.config.replace(parameter_bound=1e-9)  # every fit now diverges
    with pytest.raises(DivergenceError):
        g.observe(1, domains[1], parents=[0])
    assert_same_values(before, guide_values(learner))
    random_after = learner.random.state()
    assert all(torch.equal(random_before[k], random_after[k]) for k in random_before)
    assert 1 not in g.posteriors and learner.tasks_seen == [0]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda g, d: g.observe(torch.tensor(1), d[1], parents=[0]), ValueError),
        (lambda g, d: g.observe(1, d[1], parents=0), TypeError),
        (lambda g, d: g.prior_for(1, [0], weights=0.5), (TypeError, ValueError)),
        (lambda g, d: GraphVCL(VCL(BayesianMLP(2, [8], 2), progress=False), [[1.0]]), TypeError),
    ],
)
def test_graph_arguments_are_refused_in_the_users_terms(call, error):
    domains = rotated_domains([0, 20, 40])
    g = graph()
    g.observe(0, domains[0])
    with pytest.raises(error):
        call(g, domains)


@pytest.mark.parametrize(
    "moments, expected", [("monte_carlo", (8, 64)), ("linearised", (None, None))]
)
def test_the_fitter_tells_the_function_kl_how_many_draws_its_moments_took(
    monkeypatch, moments, expected
):
    from pyro_cl.fitters import function_space
    from pyro_cl.fitters.function_space import FunctionSpaceFitter
    from pyro_cl.memory import RandomCoreset

    seen = []
    kl = function_space.gaussian_function_kl

    def recording(*args):
        seen.append(args[5:])
        return kl(*args)

    monkeypatch.setattr(function_space, "gaussian_function_kl", recording)
    fitter = FunctionSpaceFitter(RandomCoreset(5), moments=moments)
    net = BayesianMLP(4, [8], 2, heads=2)
    learner = VCL(net, fitter=fitter, seed=0, **{**SMALL, "epochs": 1})
    x, y = two_class_data(32)
    learner.observe((x, y), task_id=0)
    learner.observe((x, y), task_id=1)
    assert seen and set(seen) == {expected}


def test_a_net_that_is_not_a_module_is_refused_in_the_users_terms():
    """A Pyro model built around the net (or anything but a module) is named, with where the
    likelihood goes, instead of failing inside the learner on ``net.to``."""
    from pyro_cl import SupervisedModel
    from pyro_cl.likelihoods import HeteroscedasticGaussianLikelihood

    model = SupervisedModel(BayesianMLP(2, [4], 2), HeteroscedasticGaussianLikelihood())
    with pytest.raises(TypeError, match="net must be a torch.nn.Module.*got SupervisedModel"):
        VCL(model)
    VCL(BayesianMLP(2, [4], 2), HeteroscedasticGaussianLikelihood())  # the mended call
