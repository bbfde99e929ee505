"""Domains as a graph: metadata kernels, a spanning visiting order, optimal-transport costs and
the transfer path they give, on toys whose answer is known."""

from __future__ import annotations

import pytest
import torch

from pyro_cl.data.domain_graph import (
    metadata_graph,
    spanning_order,
    transfer_path,
    transport_costs,
)
from pyro_cl.data.geodesic import geodesic_domains, transport_plan
from tests.helpers import write_fake_mnist


def shifted_domains(shifts, n: int = 200) -> list[torch.Tensor]:
    """One sample of N(0, 1), shifted: the optimal coupling pairs each point with its copy."""
    base = torch.randn(n, 1, generator=torch.Generator().manual_seed(0))
    return [base + s for s in shifts]


def test_transport_costs_of_shifted_gaussians_are_the_squared_shifts():
    samples = shifted_domains([0.0, 1.0, 3.0], n=400)
    costs = transport_costs(samples)
    # W_2² between a sample and its copy shifted by d is d²
    expected = torch.tensor(
        [[0.0, 1.0, 9.0], [1.0, 0.0, 4.0], [9.0, 4.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(costs, expected, atol=1e-6, rtol=1e-6)
    entropic = transport_costs(samples, epsilon=0.5)
    assert (entropic >= costs - 1e-6).all()  # the entropic cost is biased upwards


def test_the_transport_path_recovers_the_true_order_of_1d_domains():
    """Domains shifted by 0, 3, 1, 2 (ids in that order): from the one at 0 to the one at 3 the
    cheapest path of squared distances visits 1 and 2 on the way."""
    samples = shifted_domains([0.0, 3.0, 1.0, 2.0])
    assert transfer_path(transport_costs(samples), sources=[0], target=1) == [0, 2, 3, 1]
    assert transfer_path(transport_costs(samples), sources=[0, 3], target=1) == [3, 1]


def test_the_spanning_order_follows_the_metadata_from_the_roots():
    angles = torch.tensor([0.0, 60.0, 15.0, 45.0, 30.0])
    weights = metadata_graph(angles, bandwidth=20.0)
    assert weights[0, 2] > weights[0, 4] > weights[0, 3] and float(weights[1, 1]) == 0.0
    order = spanning_order(weights, roots=[0])
    assert order == [(0, None), (2, 0), (4, 2), (3, 4), (1, 3)]
    with pytest.raises(ValueError, match="roots"):
        spanning_order(weights, roots=[7])
    with pytest.raises(ValueError, match="bandwidth"):
        metadata_graph(angles, bandwidth=0.0)


def test_the_domain_adaptation_benchmark_scores_every_method_on_every_target(tmp_path, monkeypatch):
    import json

    from pyro_cl.app import domain_benchmark
    from pyro_cl.app.cli import main

    monkeypatch.setitem(domain_benchmark.SETTINGS, "epochs", 2)
    monkeypatch.setitem(domain_benchmark.SETTINGS, "ml_init_epochs", 1)
    assert main(["domains", "--seeds", "0", "--output", str(tmp_path)]) == 0
    (run,) = json.loads((tmp_path / "results.json").read_text())
    assert set(run["scores"]["shared"]) == set(domain_benchmark.METHODS)
    for target, path in run["paths"].items():
        assert path[0] == 0.0 and path[-1] == float(target)
        assert all(angle < 70 for angle in path[:-1])  # through sources only
    assert (tmp_path / "accuracy_by_domain.png").stat().st_size > 0
    assert "| graph VCL | shared |" in (tmp_path / "table.md").read_text()


def test_gradual_goat_runs_from_the_nearest_source_through_each_target_in_turn(monkeypatch):
    """Each leg of the path starts where the last ended (the source's inputs, then each target's
    in metadata order), and its first target's score is GOAT from the nearest source's there:
    the same fit along the same path."""
    from pyro_cl.app import domain_benchmark

    monkeypatch.setitem(domain_benchmark.SETTINGS, "epochs", 2)
    monkeypatch.setitem(domain_benchmark.SETTINGS, "ml_init_epochs", 1)
    domains = domain_benchmark.rotating_digits(0, per_domain=60)
    legs, original = [], domain_benchmark.goat_path

    def recorded(fit, source_x, target_x):
        legs.append((source_x, target_x))
        original(fit, source_x, target_x)

    monkeypatch.setattr(domain_benchmark, "goat_path", recorded)
    gradual = domain_benchmark.goat_along_targets(domains, 0)
    data, targets = domains.data, domains.targets
    nearest = domain_benchmark.nearest_sources(domains, targets[0], domains.sources)[0]
    assert domains.metadata[nearest] == 60.0
    starts = [data[nearest][0]] + [data[t][0] for t in targets[:-1]]
    assert len(legs) == len(targets)
    for (source_x, target_x), start, t in zip(legs, starts, targets, strict=True):
        assert source_x is start and target_x is data[t][0]
    direct = domain_benchmark.self_training_from_nearest(domains, 0)
    first = domains.metadata[targets[0]]
    assert gradual[first] == direct["GOAT from the nearest source"][first]


def test_the_weather_by_year_domains_with_a_head_per_domain(tmp_path, monkeypatch):
    import json

    import numpy as np

    from pyro_cl.app import domain_benchmark
    from pyro_cl.app.cli import main

    monkeypatch.setitem(domain_benchmark.SETTINGS, "epochs", 2)
    monkeypatch.setitem(domain_benchmark.SETTINGS, "ml_init_epochs", 0)
    rng = np.random.default_rng(0)
    days = 365 * 8 + 10  # eight whole years and a few days left over
    x = rng.normal(size=(days, 8))
    (tmp_path / "weather").mkdir()
    np.savetxt(tmp_path / "weather" / "NEweather_data.csv", x, delimiter=",")
    np.savetxt(tmp_path / "weather" / "NEweather_class.csv", (x[:, 0] > 0.5).astype(int), fmt="%d")
    out = tmp_path / "out"
    argv = ["domains", "--stream", "weather_years", "--heads", "shared", "per_domain"]
    assert main([*argv, "--data-root", str(tmp_path), "--output", str(out)]) == 0
    (run,) = json.loads((out / "results.json").read_text())
    assert set(run["scores"]) == {"shared", "per_domain"}
    years = sorted(float(year) for year in run["paths"])
    assert years == [1952.0, 1953.0, 1954.0, 1955.0, 1956.0]  # the last five whole years
    majority = run["scores"]["per_domain"]["majority class"]["1956.0"]
    assert 0.5 < majority["accuracy"] < 0.8 and majority["calibration_error"] >= 0
    with pytest.raises(SystemExit, match="pyro-cl domains: no weather/NEweather_data.csv"):
        main([*argv, "--data-root", str(tmp_path / "missing"), "--output", str(out)])


def test_debiased_costs_remove_the_sampling_floor_and_grow_with_the_shift():
    """Independent samples (not shifted copies of one): two samples of one distribution cost
    clearly more than 0 raw, about 0 debiased; and the debiased cost is the squared shift, up to
    the floor's noise."""
    generator = torch.Generator().manual_seed(0)

    def sample(shift: float) -> torch.Tensor:
        return torch.randn(400, 3, generator=generator, dtype=torch.float64) + shift

    samples = [sample(0.0), sample(0.0), sample(1.0), sample(2.0)]
    raw = transport_costs(samples)
    debiased = transport_costs(samples, debiased=True)
    assert raw[0, 1] > 0.2  # the floor of 400 points in 3-D
    assert debiased[0, 1] < 0.1 * raw[0, 1]
    # a shift of d in each of the 3 coordinates is 3d² apart
    expected = torch.tensor([3.0, 12.0], dtype=torch.float64)
    torch.testing.assert_close(debiased[0, 2:], expected, atol=0.3, rtol=0)


def test_the_transport_plan_pairs_each_point_with_where_a_shift_moves_it():
    """A target that is the source shifted (and shuffled): the optimal plan is the permutation
    back, and the geodesic domain at ``t`` is the source shifted by ``t`` times the shift."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randn(30, 3, generator=generator)
    shift = torch.tensor([0.3, -0.2, 0.1])
    order = torch.randperm(30, generator=generator)
    target = (source + shift)[order]
    plan = transport_plan(source, target)
    assert plan.shape == (30, 30)
    torch.testing.assert_close(plan.sum(1), torch.full((30,), 1 / 30, dtype=plan.dtype))
    assert torch.equal(plan.argmax(1)[order], torch.arange(30))  # z_j = x_order[j] + shift
    domains = geodesic_domains(source, target, steps=3)
    assert len(domains) == 3
    for k, domain in enumerate(domains, start=1):
        expected = source + shift * (k / 4)
        torch.testing.assert_close(
            domain[domain[:, 0].argsort()], expected[expected[:, 0].argsort()]
        )


def test_geodesic_domains_are_evenly_spaced_in_wasserstein_distance():
    """On the geodesic ``W_2²(μ_s, μ_t) = (t - s)² W_2²(μ_0, μ_1)``: a source and a target of
    different shapes, their domains at 1/4, 1/2 and 3/4."""
    generator = torch.Generator().manual_seed(1)
    source = torch.randn(40, 2, generator=generator)
    target = torch.randn(40, 2, generator=generator) * torch.tensor([3.0, 0.5]) + 2.0
    quarter, half, three_quarters = geodesic_domains(source, target, steps=3)
    costs = transport_costs([source, quarter, half, three_quarters, target], max_points=40)
    whole = costs[0, 4]
    for (i, j), fraction in {(0, 1): 0.25, (1, 2): 0.25, (0, 2): 0.5, (1, 4): 0.75}.items():
        assert costs[i, j].item() == pytest.approx(fraction**2 * whole.item(), rel=1e-6)


def test_geodesic_domains_refuse_what_is_not_a_path():
    with pytest.raises(ValueError, match="number of intermediate domains"):
        geodesic_domains(torch.zeros(3, 2), torch.ones(3, 2), steps=0)
    with pytest.raises(ValueError, match="differ in shape"):
        geodesic_domains(torch.zeros(3, 2), torch.ones(3, 4), steps=2)


def test_rotating_mnist_domains_are_mnist_at_each_angle(tmp_path):
    """Every domain is tested on the same images at its angle: the 90° target's test images are
    the 0° source's turned a quarter counter-clockwise, exactly; each domain draws its own
    training images."""
    from pyro_cl.app.domain_benchmark import STREAMS, rotating_mnist

    write_fake_mnist(tmp_path, num_train=60, num_test=20)
    domains = rotating_mnist(0, tmp_path, per_domain=20, test_size=10)
    assert STREAMS["rotating_mnist"] is rotating_mnist
    assert domains.metadata[domains.targets[-1]] == 90.0 and domains.sources == list(range(7))
    upright = domains.data[0][2].reshape(-1, 28, 28)
    turned = domains.data[9][2].reshape(-1, 28, 28)
    torch.testing.assert_close(turned, torch.rot90(upright, 1, (-2, -1)))
    assert domains.data[0][0].shape == (20, 784) and domains.data[3][1].dtype == torch.int64
    assert not torch.equal(domains.data[1][1], domains.data[2][1])


def test_validation_domains_hold_out_the_last_sources_and_read_no_test_set():
    """The domains a method is chosen on: the last sources as targets, every test set carved
    from the domain's own training data, and no real target or test tensor among them (a
    choice made there cannot read a target's label or a test image)."""
    from pyro_cl.app.domain_benchmark import rotating_digits

    domains = rotating_digits(0, per_domain=40)
    held = domains.held_out(3, seed=1, share=0.25)
    assert held.metadata == (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0)
    assert [held.metadata[t] for t in held.targets] == [40.0, 50.0, 60.0]
    assert sorted(held.data) == domains.sources
    for d, (x, y, x_test, y_test) in held.data.items():
        train_x, train_y = domains.data[d][:2]
        assert len(x_test) == 10 and len(x) == 30
        rows = {
            tuple(row.tolist()): int(label) for row, label in zip(train_x, train_y, strict=True)
        }
        split = [tuple(row.tolist()) for row in torch.cat([x, x_test])]
        assert sorted(split) == sorted(rows)  # the training rows, each once, split in two
        assert [rows[tuple(row.tolist())] for row in x_test] == y_test.tolist()
        for tensor in domains.data[d][2:]:
            assert all(not torch.equal(tensor, kept) for kept in (x, y, x_test, y_test))
