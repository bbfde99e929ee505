"""Generative VCL (VCL section 4): the VAE model, its amortised guide, the bound, the metrics."""

import json
import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from pyro.nn import PyroModule, PyroSample

from pyro_cl import VCL, VOGN, DivergenceError, FineTuning, MeanFieldGuide, PointEstimateFitter
from pyro_cl.baselines.ewc import EWC
from pyro_cl.baselines.laplace import LaplacePropagation
from pyro_cl.baselines.synaptic_intelligence import SynapticIntelligence
from pyro_cl.generative import GenerativeModel, generate, importance_log_likelihood
from pyro_cl.likelihoods import Likelihood, PixelBernoulliLikelihood
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianLinear, VAEDecoder
from pyro_cl.posterior import read_priors
from tests.helpers import elbo_on_both_routes


def _images(n=48, pixels=12, seed=0, on=0.8):
    generator = torch.Generator().manual_seed(seed)
    pattern = torch.rand(pixels, generator=generator) < 0.5
    flips = torch.rand(n, pixels, generator=generator) < (1 - on)
    return (pattern ^ flips).float()


def _decoder(pixels=12, heads=3, **options):
    sizes = {"latent_dim": 2, "hidden_size": 6, "representation_size": 5, **options}
    return VAEDecoder(pixels, heads=heads, **sizes)


def _learner(cls=VCL, net=None, **settings):
    defaults = {"epochs": 3, "batch_size": 16, "progress": False, "seed": 0}
    return cls(net or _decoder(), **{**defaults, **settings})


# ----------------------------------------------------------------- the guide and the bound


class _VectorGaussian(Likelihood):
    """``x ~ N(f, s² I)`` over a vector (the linear-Gaussian VAE's likelihood)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def distribution(self, outputs):
        return dist.Normal(outputs, self.scale).to_event(1)


class _LinearDecoder(PyroModule):
    """``f(z) = W z + b``: with ``z ~ N(0, I)``, ``x ~ N(b, W Wᵀ + s² I)`` exactly."""

    model_class = GenerativeModel

    def __init__(self, latent_dim: int, out_features: int) -> None:
        super().__init__()
        self.latent_dim, self.out_features = latent_dim, out_features
        self.encoder_hidden_sizes = [16]
        self.layer = BayesianLinear(latent_dim, out_features, local_reparameterization=False)

    def forward(self, z, task_id=0):
        return self.layer(z)


def test_importance_sampled_log_likelihood_converges_to_the_exact_marginal():
    torch.manual_seed(0)
    scale, latent, out = 0.5, 2, 3
    w = torch.tensor([[1.0, 0.5], [-0.7, 0.2], [0.3, -1.2]])
    b = torch.tensor([0.2, -0.1, 0.4])
    x = dist.MultivariateNormal(b, w @ w.T + scale**2 * torch.eye(out)).sample((400,))
    learner = FineTuning(
        _LinearDecoder(latent, out), _VectorGaussian(scale), epochs=1, progress=False, seed=0
    )
    learner.observe(x, task_id=0)  # creates the encoder; now fix θ at W, b and fit q(z | x)
    locs = learner.guide.locs()
    with torch.no_grad():
        locs["layer.weight"].copy_(w)
        locs["layer.bias"].copy_(b)
    encoder = learner.model.local_guide.encoder(0)
    optimiser = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    model = learner.model
    for _ in range(300):
        optimiser.zero_grad()
        from pyro_cl.infer.objectives import negative_log_likelihood

        negative_log_likelihood(model, {k: v.detach() for k, v in locs.items()}, x, x, 0).backward()
        optimiser.step()
    exact = dist.MultivariateNormal(b, w @ w.T + scale**2 * torch.eye(out)).log_prob(x[:20])
    few = importance_log_likelihood(learner, x[:20], 0, num_samples=1)
    many = importance_log_likelihood(learner, x[:20], 0, num_samples=20000, chunk=5000)
    torch.testing.assert_close(many, exact, atol=0.02, rtol=0)
    # one sample is the ELBO's estimate: on average below the marginal
    assert (few - exact).mean() < -0.01


def test_importance_sampled_log_likelihood_with_sampled_weights_converges_to_the_marginal():
    """The path that draws θ: a VCL learner whose decoder ``x = W z + b + ε`` has a Gaussian
    posterior over ``W`` and ``b``. With one latent dimension the marginal is the 1-D integral

        p(x) = ∫ N(z; 0, 1) Π_i N(x_i; M_i z + m_i, S_i² z² + s_i² + σ²) dz

    (``W_i ~ N(M_i, S_i²)``, ``b_i ~ N(m_i, s_i²)``, ``ε ~ N(0, σ²)``), computed here by
    200-point Gauss-Hermite quadrature; the estimator draws its own θ per sample and point."""
    from pyro_cl.infer.objectives import negative_log_likelihood
    from pyro_cl.posterior import install_prior

    torch.manual_seed(0)
    noise, out = 0.4, 3
    weight_mean, weight_scale = (
        torch.tensor([[1.0], [-0.7], [0.5]]),
        torch.tensor([[0.3], [0.2], [0.4]]),
    )
    bias_mean, bias_scale = torch.tensor([0.2, -0.1, 0.4]), torch.tensor([0.1, 0.3, 0.2])
    learner = VCL(_LinearDecoder(1, out), _VectorGaussian(noise), epochs=1, progress=False, seed=0)
    z = torch.randn(300, 1)
    weights = weight_mean + weight_scale * torch.randn(300, out, 1)
    x = (weights @ z.unsqueeze(-1)).squeeze(-1) + bias_mean + bias_scale * torch.randn(300, out)
    x = x + noise * torch.randn(300, out)
    learner.observe(x, task_id=0)  # creates the encoder; now set q(θ) and fit q(z | x) to it
    posterior = {
        "layer.weight": dist.Normal(weight_mean, weight_scale).to_event(2),
        "layer.bias": dist.Normal(bias_mean, bias_scale).to_event(1),
    }
    install_prior(learner.net, posterior)  # VCL predicts with the handed-on posterior
    encoder = learner.model.local_guide.encoder(0)
    optimiser = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    means = {"layer.weight": weight_mean, "layer.bias": bias_mean}
    for _ in range(300):
        optimiser.zero_grad()
        negative_log_likelihood(learner.model, means, x, x, 0).backward()
        optimiser.step()

    nodes, node_weights = np.polynomial.hermite.hermgauss(200)
    codes = math.sqrt(2.0) * nodes  # ∫ N(z; 0, 1) f(z) dz = Σ w_k f(√2 t_k) / √π
    points = x[:20].double().numpy()
    mean = weight_mean.double().numpy()[:, 0][None, :] * codes[:, None] + bias_mean.double().numpy()
    variance = (
        weight_scale.double().numpy()[:, 0][None, :] ** 2 * codes[:, None] ** 2
        + bias_scale.double().numpy() ** 2
        + noise**2
    )
    log_terms = -0.5 * (
        (points[:, None, :] - mean[None]) ** 2 / variance[None] + np.log(2 * np.pi * variance)[None]
    ).sum(-1)
    exact = np.log((np.exp(log_terms) * node_weights[None]).sum(-1) / math.sqrt(math.pi))
    estimate = importance_log_likelihood(learner, x[:20], 0, num_samples=50000, chunk=10000)
    estimate, exact = estimate.double(), torch.from_numpy(exact)
    # the proposal q(z | x) was fitted for the mean θ: at points far in the tail the weights are
    # heavy-tailed and the estimate varies, so those are held to being finite only
    typical = exact > -6.0
    assert typical.sum() >= 15 and torch.isfinite(estimate).all()
    error = (estimate[typical] - exact[typical]).abs()
    assert error.mean() < 0.02 and error.max() < 0.06, error
    # the point-valued θ (the posterior mean) gives a different, Gaussian marginal
    point = dist.MultivariateNormal(
        bias_mean, weight_mean @ weight_mean.T + noise**2 * torch.eye(out)
    ).log_prob(x[:20])
    assert (point.double() - exact)[typical].abs().mean() > 0.3


@pytest.mark.parametrize("particles", [1, 3])
@pytest.mark.parametrize("use_lrt", [False, True])
def test_fast_bound_equals_pyro_elbo_on_the_same_draws(use_lrt, particles, monkeypatch):
    """One particle: Pyro's own ``TraceMeanField_ELBO``; several: the Pyro route's particle
    plate (codes and decoder weights of all particles in one pass)."""
    x = _images(20)
    net = _decoder(heads=2, local_reparameterization=use_lrt)
    model = GenerativeModel(net, PixelBernoulliLikelihood())
    guide = MeanFieldGuide(model, init_log_variance=-2.0, local_guide=model.local_guide)
    task, n = 1, 300
    guide.sites_for(x, x, task_id=task, dataset_size=n)
    (loss_pyro, grads_pyro), (loss_fast, grads_fast) = elbo_on_both_routes(
        model, guide, x, x, task, n, particles, monkeypatch
    )
    torch.testing.assert_close(loss_fast, loss_pyro, rtol=1e-5, atol=1e-5)
    assert grads_pyro.keys() == grads_fast.keys()
    assert any(k.startswith("local_guide.encoders.1.") for k in grads_fast)  # φ trains
    assert not any("encoders.0." in k or "heads/0" in k for k in grads_fast)  # task 0 untouched
    for key in grads_pyro:
        torch.testing.assert_close(grads_fast[key], grads_pyro[key], rtol=1e-4, atol=1e-5)


def test_the_guide_still_refuses_local_sites_without_a_local_guide():
    net = _decoder()
    model = GenerativeModel(net, PixelBernoulliLikelihood())
    guide = MeanFieldGuide(model)  # no local guide: z is an unexplained local latent site
    with pytest.raises(ValueError, match="local latent variable"):
        guide.sites_for(_images(4), None, task_id=0, dataset_size=4)


def test_vae_decoder_architectures_share_the_named_part():
    x = _images(8)
    for private, shared_input in (("head", 5), ("output", 2)):
        learner = _learner(net=_decoder(private=private), ml_init_epochs=0)
        sites = learner.model.sites(learner.guide, x, [0, 1])
        assert learner.net.shared[0].in_features == shared_input
        assert any(s.startswith("heads.0.") for s in sites)
        assert any(s.startswith("heads.1.") for s in sites)
        assert any(s.startswith("shared.") for s in sites)
    with pytest.raises(ValueError, match="private"):
        _decoder(private="encoder")


# ----------------------------------------------------------------- the continual learner


def test_prior_after_a_task_is_its_posterior_and_untrained_heads_keep_their_prior():
    learner = _learner()
    initial = {
        k: (d.base_dist.loc.clone(), d.base_dist.scale.clone())
        for k, d in read_priors(learner.net).items()
    }
    learner.observe(_images(seed=1), task_id=0)
    posterior = learner.guide.posterior(learner.trained_sites)
    priors = read_priors(learner.net)
    for name, q in posterior.items():
        torch.testing.assert_close(priors[name].base_dist.loc, q.base_dist.loc.detach())
        torch.testing.assert_close(priors[name].base_dist.scale, q.base_dist.scale.detach())
    for name, (loc, scale) in initial.items():
        if name.startswith(("heads.1.", "heads.2.")):
            assert torch.equal(priors[name].base_dist.loc, loc)
            assert torch.equal(priors[name].base_dist.scale, scale)
        else:
            assert name in posterior


@pytest.mark.parametrize("method", ["vcl", "finetune", "ewc", "si", "lp"])
def test_a_task_encoder_is_untouched_by_later_tasks(method):
    fitters = {
        "ewc": PointEstimateFitter(EWC(strength=10.0, fisher_samples=16)),
        "si": PointEstimateFitter(SynapticIntelligence(strength=1.0)),
        "lp": LaplacePropagation(curvature="fisher", hessian_samples=16),
    }
    cls = FineTuning if method in ("finetune", "ewc", "si") else VCL
    learner = _learner(cls, fitter=fitters.get(method))
    learner.observe(_images(seed=1), task_id=0)
    before = {k: v.clone() for k, v in learner.model.local_guide.encoder(0).state_dict().items()}
    learner.observe(_images(seed=2), task_id=1)
    after_second = learner.model.local_guide.encoder(1).state_dict()
    for key, value in learner.model.local_guide.encoder(0).state_dict().items():
        assert torch.equal(value, before[key]), key
    assert set(learner.model.local_guide.tasks) == {0, 1}
    assert all(torch.isfinite(v).all() for v in after_second.values())
    # each task's test log-likelihood is finite and the samples are probabilities
    ll = importance_log_likelihood(learner, _images(6, seed=1), 0, num_samples=20)
    assert ll.shape == (6,) and torch.isfinite(ll).all()
    samples = generate(learner, 1, 5)
    assert samples.shape == (5, 12) and ((samples >= 0) & (samples <= 1)).all()


def test_training_raises_the_bound_and_the_test_likelihood():
    x = _images(96, seed=3)
    learner = _learner(epochs=1, ml_init_epochs=0, learning_rate=1e-2)
    learner.observe(x, task_id=0)
    before = importance_log_likelihood(learner, x[:32], 0, num_samples=50).mean()
    history = learner.observe(x, task_id=1)
    torch.manual_seed(0)
    learner2 = _learner(epochs=60, ml_init_epochs=0, learning_rate=1e-2)
    history = learner2.observe(x, task_id=0)
    assert history[-1] < history[0]
    after = importance_log_likelihood(learner2, x[:32], 0, num_samples=50).mean()
    assert after > before + 1.0


def test_save_load_generates_identical_samples(tmp_path):
    learner = _learner()
    learner.observe(_images(seed=1), task_id=0)
    learner.observe(_images(seed=2), task_id=1)
    path = tmp_path / "vae.pt"
    learner.save(path)
    loaded = VCL.load(path)
    assert loaded.model.local_guide.tasks == [0, 1]
    for task in (0, 1):
        torch.manual_seed(5)
        expected = generate(learner, task, 7, mean=False)
        torch.manual_seed(5)
        torch.testing.assert_close(generate(loaded, task, 7, mean=False), expected)
        torch.manual_seed(6)
        expected = importance_log_likelihood(learner, _images(5), task, num_samples=10)
        torch.manual_seed(6)
        got = importance_log_likelihood(loaded, _images(5), task, num_samples=10)
        torch.testing.assert_close(got, expected)
    # and both continue identically (from the same random state: they share torch's generator)
    torch.manual_seed(9)
    a = learner.observe(_images(seed=4), task_id=2)
    torch.manual_seed(9)
    b = loaded.observe(_images(seed=4), task_id=2)
    assert a == b


def test_a_diverged_task_leaves_the_encoders_and_posterior_as_they_were(monkeypatch):
    learner = _learner()
    learner.observe(_images(seed=1), task_id=0)
    state = {k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)}
    likelihood = learner.model.likelihood
    original = likelihood.log_prob
    calls = {"n": 0}

    def poisoned(outputs, y):
        calls["n"] += 1
        value = original(outputs, y)
        return value * float("nan") if calls["n"] > 1 else value

    monkeypatch.setattr(likelihood, "log_prob", poisoned)
    with pytest.raises(DivergenceError):
        learner.observe(_images(seed=2), task_id=1)
    assert learner.model.local_guide.tasks == [0]
    now = learner.guide.state_dict()
    assert {k for k in now if torch.is_tensor(now[k])} == set(state)
    for key, value in state.items():
        assert torch.equal(now[key], value), key
    monkeypatch.setattr(likelihood, "log_prob", original)
    learner.observe(_images(seed=2), task_id=1)  # and the step can be taken again
    assert learner.model.local_guide.tasks == [0, 1]


# ----------------------------------------------------------------- refusals


def test_parts_that_cannot_take_a_generative_model_are_refused():
    with pytest.raises(ValueError, match="encoders"):
        _learner(fitter=VOGN())
    with pytest.raises(ValueError, match="memory"):
        _learner(memory=RandomCoreset(4))


def test_bad_generative_data_is_refused_with_a_clear_error():
    learner = _learner()
    x = _images(8)
    with pytest.raises(ValueError, match="observations x alone"):
        learner.observe((x, torch.zeros(8, dtype=torch.long)), task_id=0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        learner.observe(x * 2, task_id=0)
    with pytest.raises(ValueError, match="shape"):
        learner.observe(x[:, :5], task_id=0)
    with pytest.raises(ValueError, match="has no encoder"):
        importance_log_likelihood(learner, x, 1, num_samples=5)
    with pytest.raises(ValueError, match="num_samples"):
        generate(learner, 0, 0)
    with pytest.raises(ValueError, match="latent_dim"):
        GenerativeModel(torch.nn.Linear(2, 3), PixelBernoulliLikelihood())
    assert math.isfinite(learner.observe(x, task_id=0)[-1])
    assert set(learner.evaluate(x, task_id=0)) == {"reconstruction_log_likelihood"}
    with pytest.raises(TypeError, match="no class probabilities"):
        learner.predict(x, task_id=0)


# ----------------------------------------------------------------- the benchmark and its files


def test_pyro_cl_run_scores_a_generative_benchmark_and_writes_its_figures(tmp_path, capsys):
    from pyro_cl.app.cli import main

    out = tmp_path / "gen"
    argv = [
        "run",
        "--benchmark",
        "generative-digits",
        "--methods",
        "vcl,ewc",
        "--hidden",
        "8",
        "--epochs",
        "1",
        "--particles",
        "2",
        "--test-samples",
        "4",
        "--test-points",
        "5",
        "--generated",
        "6",
        "--classifier-epochs",
        "1",
        "--penalty-strength",
        "10",
        "--no-progress",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "judging classifier test accuracy" in printed
    results = json.loads((out / "results.json").read_text())["runs"]
    assert [r["method"] for r in results] == ["vcl", "ewc λ=10"]
    for run in results:
        test_ll = np.array(run["matrices"]["test_ll"], dtype=float)
        uncertainty = np.array(run["matrices"]["uncertainty"], dtype=float)
        assert test_ll.shape == uncertainty.shape == (10, 10)
        lower = np.tril_indices(10)
        assert np.isfinite(test_ll[lower]).all() and (test_ll[lower] < 0).all()
        assert (uncertainty[lower] >= 0).all()
        assert np.isnan(test_ll[np.triu_indices(10, 1)]).all()
        assert run["settings"]["epochs"] == 1 and run["settings"]["num_particles"] == 2
        assert 0 < run["details"]["classifier_accuracy"] <= 1
    for name in (
        "metrics.png",
        "samples_vcl_0.png",
        "samples_ewc_10_0.png",
        "classifier_seed0.pt",
    ):
        assert (out / name).stat().st_size > 0, name
    # a later run judges with the saved classifier instead of training another
    from pyro_cl.app.generative_benchmark import judge_classifier
    from pyro_cl.data import generative_digits

    before = (out / "classifier_seed0.pt").read_bytes()
    _, accuracy = judge_classifier(generative_digits(), 1, "cpu", out / "classifier_seed0.pt")
    assert accuracy == results[0]["details"]["classifier_accuracy"]
    assert (out / "classifier_seed0.pt").read_bytes() == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--net", "mlp"], "generative benchmarks take the vae net"),
        (["--test-samples", "0"], "test_samples must be a positive integer"),
        (["--classifier-epochs", "0"], "classifier_epochs must be a positive integer"),
    ],
)
def test_generative_option_mistakes_are_one_line_errors(options, message, capsys):
    from pyro_cl.app.cli import main

    with pytest.raises(SystemExit) as error:
        main(["run", "--benchmark", "generative-digits", *options])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_scoring_options_are_refused_for_classification_benchmarks():
    from pyro_cl.app.benchmark_run import BenchmarkRun

    with pytest.raises(ValueError, match="generative benchmarks only"):
        BenchmarkRun("split-digits", evaluation={"test_samples": 5})


def test_the_judging_classifier_saves_loads_and_detects_corruption(tmp_path):
    from pyro_cl.generative.classifier import (
        classifier_accuracy,
        load_classifier,
        save_classifier,
        train_classifier,
    )
    from pyro_cl.serialization import CorruptFileError

    x = _images(60, seed=1)
    y = (x[:, 0] > 0.5).long()
    classifier = train_classifier(
        x, y, 2, hidden_sizes=(8,), epochs=100, batch_size=20, learning_rate=1e-2, progress=False
    )
    accuracy = classifier_accuracy(classifier, x, y)
    assert accuracy > 0.9
    path = tmp_path / "judge.pt"
    save_classifier(classifier, path, accuracy)
    loaded, saved_accuracy = load_classifier(path)
    assert saved_accuracy == accuracy
    torch.testing.assert_close(loaded(x), classifier(x))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        load_classifier(path)


def test_one_class_streams_keep_the_class_labels():
    from pyro_cl.data import generative_digits

    stream = generative_digits()
    assert len(stream) == 10 and stream.num_classes == 10 and stream.input_shape == (8, 8)
    for task in stream:
        assert (task.y_train == task.id).all() and (task.y_test == task.id).all()
        assert len(task.x_train) > 100 and task.x_train.max() <= 1


def test_the_paper_script_sweeps_lambda_resumes_and_summarises(tmp_path, capsys):
    from tests.helpers import load_benchmark_script

    script = load_benchmark_script("generative_paper")
    argv = [
        "--benchmark",
        "generative-digits",
        "--schedule",
        "short",
        "--sweep",
        "ewc",
        "--strengths",
        "1",
        "100",
        "--hidden",
        "8",
        "--epochs",
        "1",
        "--particles",
        "1",
        "--test-samples",
        "3",
        "--test-points",
        "4",
        "--generated",
        "4",
        "--classifier-epochs",
        "1",
        "--no-progress",
        "--output",
        str(tmp_path),
    ]
    assert script.main(argv) == 0
    for folder in ("vcl-finetune", "ewc-1", "ewc-100"):
        assert (tmp_path / folder / "results.json").exists(), folder
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("| ewc |") == 2 and summary.count("best") == 2  # header + one row
    assert "| vcl |" in summary and "| finetune |" in summary
    assert (tmp_path / "metrics.png").exists()
    capsys.readouterr()
    assert script.main(argv) == 0  # everything done: nothing runs again
    assert capsys.readouterr().out.count("skipped") == 3


class _PlainDecoder(PyroModule):
    """A decoder of plain Pyro parts (not pyro_cl layers): the learner takes the Pyro route."""

    model_class = GenerativeModel

    def __init__(self, latent_dim: int, out_features: int) -> None:
        super().__init__()
        self.latent_dim, self.out_features = latent_dim, out_features
        self.encoder_hidden_sizes = [8]
        self.linear = PyroModule[torch.nn.Linear](latent_dim, out_features)
        self.linear.weight = PyroSample(
            dist.Normal(0.0, 1.0).expand([out_features, latent_dim]).to_event(2)
        )
        self.linear.bias = PyroSample(dist.Normal(0.0, 1.0).expand([out_features]).to_event(1))

    def forward(self, z, task_id=0):
        return self.linear(z)


def test_a_decoder_of_plain_pyro_parts_learns_and_is_scored_by_the_pyro_route():
    learner = VCL(_PlainDecoder(2, 12), epochs=3, batch_size=16, progress=False, seed=0)
    assert not learner.model.fast
    learner.observe(_images(seed=1), task_id=0)
    learner.observe(_images(seed=2), task_id=1)
    posterior = learner.current_prior()
    assert set(posterior) == {"linear.weight", "linear.bias"}
    ll = importance_log_likelihood(learner, _images(5, seed=1), 0, num_samples=6, chunk=4)
    assert ll.shape == (5,) and torch.isfinite(ll).all()
    images = generate(learner, 1, 4)
    assert images.shape == (4, 12) and ((images >= 0) & (images <= 1)).all()
