"""Bayesian convolutions and the conv net: particles, local reparameterisation, the net's
checks, saving and loading."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyro_cl import VCL, CategoricalLikelihood, MeanFieldGuide, SupervisedModel
from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.data import split_cifar, split_cifar10
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.nn import BayesianCNN, BayesianConv2d
from pyro_cl.nn.local_reparam import DiagonalGaussian
from tests.helpers import fixed_preactivation_noise, load_benchmark_script


def test_per_particle_kernels_equal_a_loop_of_conv2d():
    torch.manual_seed(0)
    layer = BayesianConv2d(3, 4, 3, padding=1)
    x = torch.randn(1, 5, 3, 6, 6)
    weight, bias = torch.randn(2, 4, 3, 3, 3), torch.randn(2, 4)
    with substitute_sites(layer, {"weight": weight, "bias": bias}, num_particles=2):
        out = layer(x)
    for s in range(2):
        torch.testing.assert_close(out[s], F.conv2d(x[0], weight[s], bias[s], padding=1))


@pytest.mark.parametrize("stride, padding, size", [(1, 1, 6), (1, 0, 7), (2, 1, 7), (2, 0, 8)])
@pytest.mark.parametrize("shared", [True, False])
def test_squared_gradient_sums_equal_single_example_autograd(stride, padding, size, shared):
    """Σ_n (∂ℓ_n/∂W)² over examples and particles, against a loop of autograd over examples
    (strides whose output leaves input rows over, too)."""
    torch.manual_seed(0)
    layer = BayesianConv2d(3, 4, 3, stride=stride, padding=padding).double()
    particles, num = 2, 5
    x = torch.randn(1 if shared else particles, num, 3, size, size, dtype=torch.float64)
    kernels = torch.randn(particles, 4, 3, 3, 3, dtype=torch.float64)
    biases = torch.randn(particles, 4, dtype=torch.float64)
    out = torch.stack([F.conv2d(x[0 if shared else s], kernels[s], biases[s], stride, padding)
                       for s in range(particles)])  # fmt: skip
    g = torch.randn_like(out)
    expected_w, expected_b = torch.zeros_like(kernels[0]), torch.zeros_like(biases[0])
    for s in range(particles):
        for n in range(num):
            w, b = kernels[s].clone().requires_grad_(), biases[s].clone().requires_grad_()
            example = F.conv2d(x[0 if shared else s, n : n + 1], w, b, stride, padding)
            dw, db = torch.autograd.grad((example * g[s, n : n + 1]).sum(), [w, b])
            expected_w += dw.square()
            expected_b += db.square()
    sums = layer.squared_gradient_sums(x, g)
    torch.testing.assert_close(sums["weight"], expected_w)
    torch.testing.assert_close(sums["bias"], expected_b)


def test_local_reparameterisation_matches_the_moments_of_sampled_kernels():
    torch.manual_seed(0)
    layer = BayesianConv2d(2, 3, 3).double()
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    loc = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    variance = torch.rand(3, 2, 3, 3, dtype=torch.float64) * 0.1
    sites = {"weight": DiagonalGaussian(loc, variance)}
    layer.bias_prior_scale.fill_(1e-6)
    expected_mean = F.conv2d(x, loc)
    expected_var = F.conv2d(x * x, variance)
    draws = 20000
    kernels = loc + variance.sqrt() * torch.randn(draws, *loc.shape, dtype=torch.float64)
    for weight in (sites["weight"], kernels):  # local reparameterisation, then sampled kernels
        with substitute_sites(layer, {"weight": weight}, num_particles=draws):
            samples = layer(x.unsqueeze(0))  # (S, 1, 3, 3, 3)
        # 5 standard errors of a mean and of a variance estimate
        torch.testing.assert_close(
            samples.mean(0), expected_mean, atol=5 * (expected_var.max() / draws) ** 0.5, rtol=0
        )
        torch.testing.assert_close(
            samples.var(0), expected_var, rtol=5 * (2 / draws) ** 0.5, atol=1e-4
        )


def test_cnn_checks_input_shape_and_task_ids_and_reloads(tmp_path):
    torch.manual_seed(0)
    net = BayesianCNN((1, 12, 12), conv_blocks=[(2, 3)], hidden_sizes=[8], out_features=2, heads=2)
    learner = VCL(
        net,
        epochs=1,
        batch_size=8,
        num_particles=1,
        num_predictive_samples=2,
        progress=False,
        seed=0,
    )
    x, y = torch.rand(16, 1, 12, 12), torch.randint(0, 2, (16,))
    with pytest.raises(ValueError, match="expects"):
        learner.observe((torch.rand(16, 1, 10, 12), y))
    with pytest.raises(ValueError, match="unknown task id"):
        learner.observe((x, y), task_id=2)
    learner.observe((x, y), task_id=1)
    learner.save(tmp_path / "cnn.pt")
    loaded = VCL.load(tmp_path / "cnn.pt")
    assert isinstance(loaded.net, BayesianCNN) and loaded.net.config == net.config
    for name, q in learner.current_prior().items():
        assert torch.equal(loaded.current_prior()[name].base_dist.loc, q.base_dist.loc)


def _write_cifar_binary(folder, name, labels, label_bytes):
    rng = np.random.default_rng(0)
    records = []
    for label in labels:
        header = [label // 5, label] if label_bytes == 2 else [label]
        records.append(
            np.concatenate([np.array(header, np.uint8), rng.integers(0, 256, 3072, dtype=np.uint8)])
        )
    folder.mkdir(parents=True, exist_ok=True)
    np.stack(records).tofile(folder / name)


def test_split_cifar_reads_the_binary_layouts(tmp_path):
    labels10 = list(range(10)) * 2
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        _write_cifar_binary(tmp_path / "cifar-10-batches-bin", name, labels10, 1)
    labels100 = list(range(50)) * 2
    for name in ["train.bin", "test.bin"]:
        _write_cifar_binary(tmp_path / "cifar-100-binary", name, labels100, 2)
    stream = split_cifar(tmp_path)
    assert len(stream) == 6 and stream.input_shape == (3, 32, 32) and stream.multi_head
    assert stream[0].x_train.shape == (100, 3, 32, 32) and stream[0].num_classes == 10
    assert stream[3].name == "CIFAR-100 20-29"
    assert sorted(stream[3].y_train.unique().tolist()) == list(range(10))
    assert 0 <= stream[1].x_train.min() and stream[1].x_train.max() <= 1
    pairs = split_cifar10(tmp_path)
    assert len(pairs) == 5 and pairs[4].x_test.shape == (2 * 2 * 5 // 5, 3, 32, 32)


def test_split_cifar10_reads_the_npz_layout_and_missing_data_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-bin"):
        split_cifar10(tmp_path)
    folder = tmp_path / "CIFAR10"
    folder.mkdir()
    x = np.random.default_rng(0).integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    y = np.arange(20) % 10
    np.savez(folder / "cifar10.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    stream = split_cifar10(tmp_path)
    assert stream[0].x_train.shape == (4, 3, 32, 32)
    torch.testing.assert_close(
        stream[0].x_train[0, :, 1, 2], torch.tensor(x[0, 1, 2] / 255.0, dtype=torch.float32)
    )
    # class-incremental: one head over the ten classes, each task's labels its own classes
    incremental = split_cifar10(tmp_path, class_incremental=True)
    assert not incremental.multi_head and incremental.num_classes == 10
    assert sorted(incremental[3].y_train.unique().tolist()) == [6, 7]
    run = BenchmarkRun(
        "split-cifar10-class-incremental", data_root=tmp_path, progress=False, num_tasks=2
    )
    assert run.task_stream(0).num_classes == 10 and run.build_net(incremental).num_heads == 1


def test_the_pyro_routes_particle_plate_equals_the_fast_route_for_a_cnn(monkeypatch):
    """Three particles in one pass through convolutions, pooling and dense layers on the Pyro
    route (a particle plate) give the fast route's ELBO on the same pre-activation noise."""
    x, y = torch.rand(6, 3, 8, 8), torch.randint(0, 2, (6,))
    model = SupervisedModel(
        BayesianCNN((3, 8, 8), ((4, 4),), (5,), 2, heads=1), CategoricalLikelihood()
    )
    guide = MeanFieldGuide(model, init_log_variance=-2.0)
    guide.sites_for(x, y, task_id=0, dataset_size=60)
    generator = fixed_preactivation_noise(monkeypatch)
    losses = {}
    for fast in (True, False):
        generator.manual_seed(1)
        losses[fast] = negative_elbo(
            model, guide, Minibatch(x, y, 0), 60, num_particles=3, fast=fast
        )
    torch.testing.assert_close(losses[False], losses[True], rtol=1e-5, atol=1e-6)


def test_the_vogn_diagnosis_plain_net_is_the_split_cifar_net():
    """benchmarks/vogn_cifar_diagnosis.py's plain PyTorch reference computes the same function as
    the split CIFAR net (BayesianCNN's defaults, one 2-way head) given the same weights."""
    script = load_benchmark_script("vogn_cifar_diagnosis")
    torch.manual_seed(0)
    plain = script.plain_net()
    model = SupervisedModel(BayesianCNN(out_features=2, heads=1), CategoricalLikelihood())
    parameters = list(plain.parameters())
    assert [p.shape for p in parameters] == [
        module.prior(attribute).event_shape for module, attribute in model.site_index.values()
    ]
    values = {name: p.detach() for name, p in zip(model.site_index, parameters, strict=True)}
    x = torch.rand(4, 3, 32, 32)
    with substitute_sites(model.net, values), torch.no_grad():
        torch.testing.assert_close(model.net_outputs(x, 0), plain(x))
