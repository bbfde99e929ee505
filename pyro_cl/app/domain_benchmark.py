"""Predictive domain adaptation: sources with labels, targets known by their metadata,
every method predicting each target without its labels (the oracle aside).

Two streams of domains with metadata:

* **rotating digits** — scikit-learn's 8x8 digits rotated by an angle (the metadata): sources
  0°-60° in steps of 10°, targets 70°, 80°, 90°; each source gets its own random 400 training
  images, every domain is tested on the same held-out images at its angle; a 64-100-10 net;
* **rotating MNIST** — the same angles on MNIST (28x28): 1,000 training images a domain, the
  first 2,000 test images at every angle, a 784-100-10 net (``--data-root`` holding ``MNIST/``);
* **weather by year** — the NOAA weather stream (rain or not, 8 daily features) cut into years of
  365 consecutive days (the files carry no dates: year ``k`` is rows ``365k`` to ``365k + 364``,
  labelled ``1949 + k``; the last 274 rows are left out), the year the metadata; sources
  1949-1992, targets 1993-1997; each year split 70/30 into training and test days; features
  clipped to the sources' 0.1% and 99.9% quantiles (the file holds two sea-level pressures of
  5503 hPa) and standardised by the sources' statistics; an 8-16-16-2 net as Kurle et al. use
  on this stream.

A target's training inputs are seen only unlabelled (the transport path, the unsupervised step);
its labels only by the oracle. VCL at a short CPU schedule (:data:`SETTINGS`). Methods:

* **majority class** — the sources' most frequent label, with their label frequencies as the
  predictive (no model: the floor every method should clear);
* **source only** — one VI fit on all sources pooled (one shared head);
* **sequential VCL** — the sources in metadata order, the target predicted with the last posterior;
  **random order** — the same in a random order of the sources (drawn from the seed);
* **VCL along the OT path** — the cheapest path of squared 2-Wasserstein costs between the
  domains' inputs from the first source to the target (through sources only), VCL along it;
* **graph VCL** — the sources along a maximum spanning tree of the metadata kernel from the first
  source, the target predicted from the product of its two nearest sources' posteriors,
  kernel-weighted; **moment-matched**: the same two posteriors' mixture, moment-matched;
* **graph VCL + unsupervised step** — then :meth:`~pyro_cl.learner.graph_vcl.GraphVCL.adapt_unlabelled`
  on the target's training inputs (no labels: information maximisation in place of the likelihood);
  **+ unsupervised step, sources' class prior** — the same step holding the predicted class
  proportions to the sources' label frequencies instead of uniform ones;
* **graph VCL + Wiener along edges** — graph VCL whose posteriors move along each edge by a
  Wiener transition with ``Δt`` the edge's metadata length over the kernel's bandwidth, so a far
  target's prior is wider than a near one's; the diffusion ``c`` of :data:`DIFFUSIONS` chosen by
  the sources themselves: the one whose graph over all sources but the last predicts the last
  source's training data best (log-likelihood; data that graph never saw, and no test image);
* **nearest domain** — the posterior of the nearest source (from graph VCL, so a chain's);
* **fresh fit, nearest source** — a new learner fitted on the nearest source alone: the baseline
  a chain must beat to show it carried anything useful;
* **uniform average** — the equal-weight product of all source posteriors;
* **oracle** — VCL fitted on the target's own labels;
* **self-training, target only** — the source-only fit, then one self-training step
  (:func:`~pyro_cl.learner.self_training.self_train`: its confident predictions of the target's
  unlabelled inputs fitted as labels) on the target; **gradual self-training** — the same steps
  along every target in metadata order up to this one (Kumar et al. 2020), the posterior so far
  the prior of each;
* **self-training from the nearest source** — the fresh fit of the nearest source, then one
  self-training step on the target; **GOAT from the nearest source** — the same fit, then
  self-training along :data:`GEODESIC_STEPS` domains generated on the Wasserstein geodesic from
  that source's inputs to the target's (:func:`~pyro_cl.data.geodesic.geodesic_domains`, He et
  al. 2023, in input space) and then on the target; **GOAT from the pooled fit** — the same path
  from the source-only fit, its geodesic running from a uniform sample of every source's inputs
  (as many as the target's: an exact plan stays cheap) to the target's; **GOAT in feature
  space, nearest source** — GOAT as its paper runs it: the nearest source's fresh fit's trunk (at
  its posterior means) a fixed encoder, a Bayesian linear head fitted on the source's features
  and self-trained along geodesic domains between the source's and the target's features;
  **GOAT along the targets, nearest source** — gradual GOAT: the first target's nearest
  source's fresh fit, self-trained along the geodesic to the first target, then from each
  target's inputs to the next's (the targets each other's intermediate domains, as in Kumar et
  al.'s gradual self-training), each target scored after its own leg.

"One model or several" (``--heads shared per_domain``): with one shared head every domain runs
the same net; with per-domain heads domain ``d`` has head ``d``, sequential VCL and the OT path
predict a target with the last domain's head, graph VCL carries its parents' heads onto the
target's (:class:`~pyro_cl.learner.graph_vcl.GraphVCL`).

    pyro-cl domains --stream rotating_digits --heads shared per_domain --seeds 0 1 2 \\
        --output results/domain-adaptation/rotating-digits
    pyro-cl domains --stream weather_years --heads shared per_domain --seeds 0 1 2 \\
        --data-root ../shared/data --output results/domain-adaptation/weather-years

write ``results.json``, ``table.md`` and ``accuracy_by_domain.png`` (accuracy against the
target's metadata per method and heads, and the transport-cost matrix with a path).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from pyro_cl import VCL
from pyro_cl.app.benchmark_run import check_seeds
from pyro_cl.app.plotting import _pyplot, _save
from pyro_cl.data.digits import load_digits
from pyro_cl.data.domain_graph import (
    metadata_graph,
    spanning_order,
    transfer_path,
    transport_costs,
)
from pyro_cl.data.drift_data import load_weather
from pyro_cl.data.geodesic import geodesic_domains
from pyro_cl.data.mnist import load_mnist
from pyro_cl.extras import require
from pyro_cl.inspection import penultimate_features
from pyro_cl.learner.graph_vcl import HEADS, GraphVCL
from pyro_cl.learner.self_training import self_train
from pyro_cl.learner.state import LearnerState
from pyro_cl.metrics import expected_calibration_error
from pyro_cl.nn import BayesianMLP
from pyro_cl.transitions import Wiener

METHODS = ("majority class", "source only", "sequential VCL", "random order", "OT path", "graph VCL",
           "graph VCL + unsupervised step", "+ unsupervised step, sources' class prior",
           "nearest domain", "fresh fit, nearest source",
           "uniform average", "oracle", "graph VCL, moment-matched", "self-training, target only",
           "gradual self-training", "self-training from the nearest source",
           "GOAT from the nearest source", "graph VCL + Wiener along edges",
           "GOAT from the pooled fit", "GOAT in feature space, nearest source",
           "GOAT along the targets, nearest source")  # fmt: skip
#: The methods whose net has one head whatever ``--heads`` says (or no net at all).
SHARED_BY_HEADS = ("majority class", "source only", "self-training, target only",
                   "gradual self-training", "self-training from the nearest source",
                   "GOAT from the nearest source", "GOAT from the pooled fit",
                   "GOAT in feature space, nearest source",
                   "GOAT along the targets, nearest source")  # fmt: skip
#: Intermediate domains GOAT generates between the nearest source and a target.
GEODESIC_STEPS = 3
#: The Wiener diffusions (per bandwidth of metadata) the sources choose from.
DIFFUSIONS = (0.03, 0.1, 0.3, 1.0)
SETTINGS = {"epochs": 300, "batch_size": None, "learning_rate": 1e-2, "num_particles": 2,
            "ml_init_epochs": 20, "num_predictive_samples": 20, "progress": False}  # fmt: skip


@dataclass(frozen=True)
class Domains:
    """Domains in metadata order, sources first: ``data[d] = (train x, train y, test x, test y)``."""

    name: str
    metadata: tuple[float, ...]
    num_sources: int
    data: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    bandwidth: float  #: of the metadata kernel
    unit: str  #: the metadata's axis label
    hidden: tuple[int, ...]
    classes: int

    @property
    def sources(self) -> list[int]:
        return list(range(self.num_sources))

    @property
    def targets(self) -> list[int]:
        return list(range(self.num_sources, len(self.metadata)))

    def held_out(self, count: int, seed: int, share: float = 0.25) -> Domains:
        """Validation domains: the last ``count`` sources as targets, the real targets dropped,
        and no domain's test set at all: each domain's training data split, a ``share`` of it
        (drawn from ``seed``) its test set. A method chosen by its accuracy here has read no
        target's label and no test image."""
        generator = torch.Generator().manual_seed(seed)
        data = {}
        for domain in self.sources:
            x, y = self.data[domain][:2]
            order = torch.randperm(len(y), generator=generator)
            test, train = order[: int(share * len(y))], order[int(share * len(y)) :]
            data[domain] = (x[train], y[train], x[test], y[test])
        return replace(
            self,
            name=f"{self.name}, the last {count} sources held out",
            metadata=self.metadata[: self.num_sources],
            num_sources=self.num_sources - count,
            data=data,
        )


def rotating_digits(seed: int, data_root: Path | None = None, per_domain: int = 400) -> Domains:
    """Rotated 8x8 digits (module docstring); needs no files."""
    (x, y), (x_test, y_test) = load_digits(seed=0)
    return _rotated_domains("rotating digits", (x, y), (x_test, y_test), 8, seed, per_domain)


def rotating_mnist(
    seed: int, data_root: Path | None = None, per_domain: int = 1000, test_size: int = 2000
) -> Domains:
    """MNIST rotated as the digits are (sources 0°-60°, targets 70°/80°/90°): each domain its own
    random ``per_domain`` training images, every domain tested on the same first ``test_size``
    test images at its angle; a 784-100-10 net. Reads ``data_root/MNIST``."""
    root = Path(data_root) if data_root is not None else Path("data")
    (x, y), (x_test, y_test) = load_mnist(root)
    test = (x_test[:test_size], y_test[:test_size])
    return _rotated_domains("rotating MNIST", (x, y), test, 28, seed, per_domain)


def _rotated_domains(
    name: str, train: tuple, test: tuple, side: int, seed: int, per_domain: int
) -> Domains:
    """Sources at 0°-60° in steps of 10°, targets at 70°/80°/90°: each domain ``per_domain`` of
    the ``train`` images (``side`` × ``side``, flattened) drawn for it alone, every domain
    tested on all of ``test`` at its angle; a net of 100 hidden units."""
    (x, y), (x_test, y_test) = train, test
    x, x_test = np.asarray(x, dtype=np.float32), np.asarray(x_test, dtype=np.float32)
    y, y_test = np.asarray(y, dtype=np.int64), np.asarray(y_test, dtype=np.int64)
    sources = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0)
    angles = (*sources, 70.0, 80.0, 90.0)
    rng = np.random.default_rng(seed)
    data = {}
    for domain, angle in enumerate(angles):
        chosen = rng.choice(len(y), per_domain, replace=False)
        data[domain] = (
            _rotate(x[chosen], angle, side),
            torch.from_numpy(y[chosen]),
            _rotate(x_test, angle, side),
            torch.from_numpy(y_test),
        )
    return Domains(name, angles, len(sources), data, 15.0, "angle (°)", (100,), 10)


def _rotate(x: np.ndarray, angle: float, side: int = 8) -> torch.Tensor:
    images = torch.from_numpy(x).reshape(-1, 1, side, side)
    functional = require("torchvision.transforms.functional", "rotating the digits")
    bilinear = functional.InterpolationMode.BILINEAR
    return functional.rotate(images, angle, interpolation=bilinear).reshape(-1, side * side)


def weather_years(seed: int, data_root: Path | None = None, targets: int = 5) -> Domains:
    """NOAA weather cut into years of 365 days (module docstring), the last ``targets`` years
    the targets; ``data_root`` holds ``weather/NEweather_*.csv``.

    :raises ValueError: for a file with fewer than ``targets + 2`` whole years."""
    table = load_weather(data_root if data_root is not None else "data")
    years = len(table.x) // 365
    if years < targets + 2:
        raise ValueError(f"the weather file has {years} whole years; need at least {targets + 2}")
    x = torch.from_numpy(table.x[: 365 * years]).float()
    y = torch.from_numpy(table.y[: 365 * years])
    source_rows = x[: 365 * (years - targets)]
    low, high = source_rows.quantile(0.001, dim=0), source_rows.quantile(0.999, dim=0)
    x = torch.maximum(torch.minimum(x, high), low)  # the file's 5503 hPa pressures (SOURCE.md)
    source_rows = x[: 365 * (years - targets)]
    x = (x - source_rows.mean(0)) / source_rows.std(0)
    generator = torch.Generator().manual_seed(seed)
    data = {}
    for year in range(years):
        rows = 365 * year + torch.randperm(365, generator=generator)
        train, test = rows[:255], rows[255:]
        data[year] = (x[train], y[train], x[test], y[test])
    metadata = tuple(float(1949 + year) for year in range(years))
    return Domains("weather by year", metadata, years - targets, data, 3.0, "year", (16, 16), 2)


#: The streams ``pyro-cl domains --stream`` knows: ``build(seed, data_root) -> Domains``.
STREAMS: dict[str, Callable[[int, Path | None], Domains]] = {
    "rotating_digits": rotating_digits,
    "rotating_mnist": rotating_mnist,
    "weather_years": weather_years,
}


def learner(domains: Domains, seed: int, heads: str) -> VCL:
    inputs = domains.data[0][0].shape[1]
    count = len(domains.metadata) if heads == "per_domain" else 1
    net = BayesianMLP(inputs, list(domains.hidden), domains.classes, heads=count)
    return VCL(net, seed=seed, **SETTINGS)


def run_heads(
    domains: Domains, seed: int, heads: str, costs: torch.Tensor, frequencies: torch.Tensor
) -> dict:
    """``{method: {target: metrics}}`` of every method but those without heads
    (:data:`SHARED_BY_HEADS`) for one ``heads`` setting; ``costs`` are the domains' transport
    costs, ``frequencies`` the sources' label frequencies."""
    data, sources, metadata = domains.data, domains.sources, domains.metadata
    weights = metadata_graph(torch.tensor(metadata), bandwidth=domains.bandwidth)
    where = torch.tensor(metadata)
    distances = (where[:, None] - where[None, :]).abs() / domains.bandwidth

    def fitted(order: list[int]) -> VCL:  # VCL along ``order``, each on its head
        vcl = learner(domains, seed, heads)
        for domain in order:
            vcl.observe(data[domain][:2], task_id=task(domain))
        return vcl

    def graph_over(domains_fitted: list[int], transition=None) -> GraphVCL:
        """Graph VCL over ``domains_fitted`` along their maximum spanning tree."""
        over = GraphVCL(
            learner(domains, seed, heads),
            weights,
            heads=heads,
            transition=transition,
            distances=None if transition is None else distances,
        )
        for domain, parent in spanning_order(weights[domains_fitted][:, domains_fitted], [0]):
            domain = domains_fitted[domain]
            parent = None if parent is None else domains_fitted[parent]
            over.observe(domain, data[domain][:2], [] if parent is None else [parent])
        return over

    graph = graph_over(sources)
    task = graph.task_of
    held_out, rest = sources[-1], sources[:-1]
    fits = {
        c: graph_over(rest, Wiener(c)).evaluate(  # the held-out source's data, never its test
            data[held_out][:2], domain=held_out, parents=nearest_sources(domains, held_out, rest, 2)
        )["log_likelihood"]
        for c in DIFFUSIONS
    }
    diffusion = max(fits, key=fits.get)
    along_edges = graph_over(sources, Wiener(diffusion))
    sequential = fitted(sources)
    shuffled = [sources[i] for i in np.random.default_rng(seed).permutation(len(sources))]
    random_order = fitted(shuffled)
    scores: dict[str, dict[float, dict]] = {m: {} for m in METHODS if m not in SHARED_BY_HEADS}
    for t in domains.targets:
        test, target = data[t][2:], metadata[t]
        path = transport_path(costs, t, domains)
        along = fitted(path[:-1])
        nearest = nearest_sources(domains, t, sources, 2)
        oracle = fitted([t])
        scores["sequential VCL"][target] = sequential.evaluate(test, task_id=task(sources[-1]))
        scores["random order"][target] = random_order.evaluate(test, task_id=task(shuffled[-1]))
        scores["OT path"][target] = along.evaluate(test, task_id=task(path[-2]))
        scores["graph VCL"][target] = graph.evaluate(test, domain=t, parents=nearest)
        scores["graph VCL + Wiener along edges"][target] = {
            **along_edges.evaluate(test, domain=t, parents=nearest),
            "diffusion": diffusion,
        }
        scores["nearest domain"][target] = graph.evaluate(test, domain=nearest[0])
        alone = fitted([nearest[0]])
        scores["fresh fit, nearest source"][target] = alone.evaluate(test, task_id=task(nearest[0]))
        graph.adapt_unlabelled(t, data[t][0], parents=nearest)
        scores["graph VCL + unsupervised step"][target] = graph.evaluate(test, domain=t)
        graph.posteriors.pop(t)  # the same step again, holding the sources' class proportions
        graph.adapt_unlabelled(t, data[t][0], parents=nearest, class_prior=frequencies)
        scores["+ unsupervised step, sources' class prior"][target] = graph.evaluate(test, domain=t)
        uniform = graph.prior_for(t, sources, weights=[1.0] * len(sources))
        scores["uniform average"][target] = graph.learner.evaluate(test, task(t), sites=uniform)
        scores["oracle"][target] = oracle.evaluate(test, task_id=task(t))
        matched = graph.prior_for(t, nearest, how="moment_match")
        scores["graph VCL, moment-matched"][target] = graph.learner.evaluate(
            test, task(t), sites=matched
        )
    return scores


def transport_path(costs: torch.Tensor, target: int, domains: Domains) -> list[int]:
    """The cheapest path of transport costs from the first source to ``target`` through sources
    only."""
    allowed = costs.clone()
    for other in domains.targets:
        if other != target:
            allowed[:, other] = float("inf")
    return transfer_path(allowed, sources=[0], target=target)


def run_seed(domains: Domains, seed: int, heads: list[str]) -> dict:
    """Every method for every ``heads`` setting on one seed: ``{"scores": {heads: {method:
    {target: metrics}}}, "costs", "paths"}`` (source only, one shared head, in every setting)."""
    data, sources = domains.data, domains.sources
    source_data = (
        torch.cat([data[s][0] for s in sources]),
        torch.cat([data[s][1] for s in sources]),
    )

    def source_fit() -> VCL:  # one VI fit on all sources pooled
        fit = learner(domains, seed, "shared")
        fit.observe(source_data)
        return fit

    pooled = source_fit()
    fitted = LearnerState.of(pooled)
    labels = source_data[1]
    frequencies = torch.bincount(labels, minlength=domains.classes).double() / len(labels)
    shared = {
        "majority class": {
            domains.metadata[t]: _majority(frequencies, data[t][3]) for t in domains.targets
        },
        "source only": {domains.metadata[t]: pooled.evaluate(data[t][2:]) for t in domains.targets},
        **self_training(domains, source_fit, pooled),
        **self_training_from_nearest(domains, seed),
    }
    shared["GOAT from the pooled fit"] = goat_from_pooled(domains, pooled, fitted, seed)
    shared["GOAT along the targets, nearest source"] = goat_along_targets(domains, seed)
    costs = transport_costs([data[d][0] for d in data], max_points=200)
    scores = {}
    for setting in heads:
        scores[setting] = {**shared, **run_heads(domains, seed, setting, costs, frequencies)}
    paths = {
        domains.metadata[t]: [domains.metadata[i] for i in transport_path(costs, t, domains)]
        for t in domains.targets
    }
    return {"scores": scores, "costs": costs.tolist(), "paths": paths}


def self_training(domains: Domains, source_fit: Callable[[], VCL], pooled: VCL) -> dict:
    """Kumar et al.'s rows: from the pooled source fit, self-training on each target's unlabelled
    inputs directly, and gradually along the targets in metadata order (each an intermediate
    domain of the next); each target scored after its own step. ``pooled`` is changed."""
    data, metadata = domains.data, domains.metadata
    direct, gradual = {}, {}
    for t in domains.targets:
        fit = source_fit()
        self_train(fit, data[t][0])
        direct[metadata[t]] = fit.evaluate(data[t][2:])
        self_train(pooled, data[t][0])
        gradual[metadata[t]] = pooled.evaluate(data[t][2:])
    return {"self-training, target only": direct, "gradual self-training": gradual}


def self_training_from_nearest(domains: Domains, seed: int) -> dict:
    """From a fresh fit of each target's nearest source: one self-training step on the target,
    GOAT's path in input space (self-training along the geodesic domains from the source's
    inputs to the target's, then on the target) and GOAT's path in feature space
    (:func:`goat_in_feature_space`), all from the same fit (its state restored in between)."""
    data, metadata = domains.data, domains.metadata
    direct, goat, features = {}, {}, {}
    for t in domains.targets:
        nearest = nearest_sources(domains, t, domains.sources)[0]
        fit = learner(domains, seed, "shared")
        fit.observe(data[nearest][:2])
        fitted = LearnerState.of(fit)
        self_train(fit, data[t][0])
        direct[metadata[t]] = fit.evaluate(data[t][2:])
        fitted.restore_into(fit)
        goat_path(fit, data[nearest][0], data[t][0])
        goat[metadata[t]] = fit.evaluate(data[t][2:])
        fitted.restore_into(fit)
        features[metadata[t]] = goat_in_feature_space(domains, fit, nearest, t, seed)
    return {
        "self-training from the nearest source": direct,
        "GOAT from the nearest source": goat,
        "GOAT in feature space, nearest source": features,
    }


def goat_in_feature_space(
    domains: Domains, fit: VCL, source: int, target: int, seed: int
) -> dict[str, float]:
    """GOAT as He et al. (2023) run it, on the trunk of ``fit`` (fitted on domain ``source``)
    used as a fixed encoder (:func:`~pyro_cl.inspection.penultimate_features`, the posterior
    means): a Bayesian head fitted on the source's features and labels, self-trained along
    :data:`GEODESIC_STEPS` geodesic domains between the source's features and the target's and
    then on the target's, and scored on the target's test features."""
    data = domains.data

    def encode(x: torch.Tensor) -> torch.Tensor:
        return penultimate_features(fit, x)

    source_features = encode(data[source][0])
    net = BayesianMLP(source_features.shape[1], [], domains.classes)
    head = VCL(net, seed=seed, **SETTINGS)
    head.observe((source_features, data[source][1]))
    goat_path(head, source_features, encode(data[target][0]))
    return head.evaluate((encode(data[target][2]), data[target][3]))


def goat_from_pooled(domains: Domains, pooled: VCL, fitted: LearnerState, seed: int) -> dict:
    """GOAT from the source-only fit (``fitted``, restored into ``pooled`` for each target): the
    geodesic from a uniform sample of every source's inputs, as many as the target's (so the
    exact plan stays cheap), to the target's. ``pooled`` is changed."""
    data, generator = domains.data, torch.Generator().manual_seed(seed)
    source_x = torch.cat([data[s][0] for s in domains.sources])
    goat = {}
    for t in domains.targets:
        fitted.restore_into(pooled)
        order = torch.randperm(len(source_x), generator=generator)[: len(data[t][0])]
        goat_path(pooled, source_x[order], data[t][0])
        goat[domains.metadata[t]] = pooled.evaluate(data[t][2:])
    return goat


def goat_along_targets(domains: Domains, seed: int) -> dict:
    """Gradual GOAT: a fresh fit of the first target's nearest source, then :func:`goat_path`
    from that source's inputs to the first target's and from each target's inputs to the next's
    (metadata order); each target scored after its own leg."""
    data, targets = domains.data, domains.targets
    nearest = nearest_sources(domains, targets[0], domains.sources)[0]
    fit = learner(domains, seed, "shared")
    fit.observe(data[nearest][:2])
    scores, previous = {}, data[nearest][0]
    for t in targets:
        goat_path(fit, previous, data[t][0])
        scores[domains.metadata[t]] = fit.evaluate(data[t][2:])
        previous = data[t][0]
    return scores


def goat_path(fit: VCL, source_x: torch.Tensor, target_x: torch.Tensor) -> None:
    """GOAT's path (He et al. 2023): self-train ``fit`` along :data:`GEODESIC_STEPS` geodesic
    domains from ``source_x`` to ``target_x``, then on the target's inputs."""
    for domain in geodesic_domains(source_x, target_x, GEODESIC_STEPS):
        self_train(fit, domain)
    self_train(fit, target_x)


def nearest_sources(domains: Domains, target: int, among: list[int], count: int = 1) -> list[int]:
    """The ``count`` domains of ``among`` nearest ``target`` by metadata, nearest first."""
    metadata = domains.metadata
    return sorted(among, key=lambda s: abs(metadata[s] - metadata[target]))[:count]


def _majority(frequencies: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Always the most frequent label, with the label frequencies as the predictive."""
    probabilities = frequencies.expand(len(y), -1)
    return {
        "accuracy": float((y == frequencies.argmax()).double().mean()),
        "log_likelihood": float(frequencies[y].clamp_min(1e-12).log().mean()),
        "calibration_error": expected_calibration_error(probabilities, y),
    }


def add_domain_arguments(parser: argparse.ArgumentParser) -> None:
    """``pyro-cl domains`` options."""
    parser.add_argument(
        "--stream", choices=sorted(STREAMS), default="rotating_digits", help="the domains"
    )
    parser.add_argument(
        "--heads",
        nargs="+",
        choices=HEADS,
        default=["shared"],
        help="one shared head, a head per domain, or both (one model or several)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed")
    parser.add_argument(
        "--data-root", type=Path, default=Path("data"), help="folder holding weather/"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("results/domain-adaptation"),
        help="folder for results.json, table.md and accuracy_by_domain.png",
    )


def run_domain_benchmark(
    seeds: list[int],
    output: Path,
    stream: str = "rotating_digits",
    heads: list[str] = ("shared",),
    data_root: Path | None = None,
) -> str:
    """Every method on every seed (module docstring); writes the report into ``output`` and
    returns the Markdown table."""
    check_seeds(seeds)
    output.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in seeds:
        domains = STREAMS[stream](seed, data_root)
        run = run_seed(domains, seed, list(heads))
        runs.append({"seed": seed, "stream": stream, **run})
        print(f"seed {seed}: paths {run['paths']}", flush=True)
    (output / "results.json").write_text(json.dumps(runs, indent=1, default=float))
    table = domain_table(runs, domains)
    (output / "table.md").write_text(table)
    domain_figure(runs, domains, output / "accuracy_by_domain.png")
    return table


def _mean_accuracy(runs: list[dict], heads: str, method: str, target: float) -> tuple[float, float]:
    accuracy = [100 * r["scores"][heads][method][target]["accuracy"] for r in runs]
    spread = float(np.std(accuracy, ddof=1)) if len(accuracy) > 1 else float("nan")
    return float(np.mean(accuracy)), spread  # the sample sd over seeds (ddof 1)


def domain_table(runs: list[dict], domains: Domains) -> str:
    """Accuracy % ± sample sd over seeds (mean test log-likelihood, expected calibration error) per
    target, method and heads."""
    targets = [domains.metadata[t] for t in domains.targets]
    lines = [
        "| method | heads | "
        + " | ".join(f"{t:g} acc. (LL, ECE)" for t in targets)
        + " | mean acc. |",
        "| --- | --- | " + " | ".join("---:" for _ in targets) + " | ---: |",
    ]
    for heads in runs[0]["scores"]:
        for method in METHODS:
            cells, means = [], []
            for target in targets:
                mean, std = _mean_accuracy(runs, heads, method, target)
                metrics = [r["scores"][heads][method][target] for r in runs]
                ll = np.mean([m["log_likelihood"] for m in metrics])
                ece = np.mean([m["calibration_error"] for m in metrics])
                cells.append(f"{mean:.1f} ± {std:.1f} ({ll:.2f}, {ece:.2f})")
                means.append(mean)
            lines.append(f"| {method} | {heads} | {' | '.join(cells)} | {np.mean(means):.1f} |")
    return "\n".join(lines) + "\n"


def domain_figure(runs: list[dict], domains: Domains, path: Path) -> None:
    """Accuracy against the target's metadata, a panel per heads setting, and the transport
    costs with the path to the last target."""
    settings = list(runs[0]["scores"])
    targets = [domains.metadata[t] for t in domains.targets]
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(settings) + 1, figsize=(5 * (len(settings) + 1), 3.8))
    for axis, heads in zip(axes, settings, strict=False):
        for method in METHODS:
            means = [_mean_accuracy(runs, heads, method, t)[0] for t in targets]
            axis.plot(targets, means, marker="o", label=method)
        axis.set(xlabel=f"target {domains.unit}", ylabel="test accuracy (%)")
        axis.set_title(f"{domains.name}: targets, no labels ({heads} heads)", fontsize=9)
        axis.set_xticks(targets)
        axis.legend(fontsize=6)
    costs = np.array(runs[0]["costs"])
    image = axes[-1].imshow(costs, cmap="viridis")
    fig.colorbar(image, ax=axes[-1], label="W₂² between inputs")
    ticks = [f"{m:g}" for m in domains.metadata]
    step = max(1, len(ticks) // 12)
    axes[-1].set_xticks(range(0, len(ticks), step), ticks[::step], fontsize=6, rotation=90)
    axes[-1].set_yticks(range(0, len(ticks), step), ticks[::step], fontsize=6)
    route = runs[0]["paths"][targets[-1]]
    index = [domains.metadata.index(m) for m in route]
    axes[-1].plot(index[1:], index[:-1], "w.-")
    axes[-1].set_title(f"transport costs; path to {targets[-1]:g}: {route}", fontsize=7)
    _save(fig, path)
