"""Predictive domain adaptation on rotating digits (issue 29): sources rotated 0°-60°, targets
rotated farther, every method predicting each target without its labels (the oracle aside).

Domains are scikit-learn's 8x8 digits rotated by an angle (the metadata); each source gets its own
random 400 training images, every domain is tested on the same held-out images at its angle, and
a target's training images are seen only unlabelled (for the transport path). One shared head,
a Bayesian MLP 64-100-10, VCL at a short CPU schedule. Methods:

* **source only** — one VI fit on all sources pooled;
* **sequential VCL** — the sources in metadata order, the target predicted with the last posterior;
* **VCL along the OT path** — the cheapest path of squared 2-Wasserstein costs between the
  domains' inputs from the 0° source to the target (through sources only), VCL along it;
* **graph VCL** — the sources along a maximum spanning tree of the angle kernel from 0°, the
  target predicted from the product of its two nearest sources' posteriors, kernel-weighted;
* **graph VCL + unsupervised step** — then :meth:`~pyro_cl.infer.graph_vcl.GraphVCL.adapt_unlabelled`
  on the target's training inputs (no labels: predictive entropy in place of the likelihood);
* **nearest domain** — the posterior of the nearest source (from graph VCL);
* **uniform average** — the equal-weight product of all source posteriors;
* **oracle** — VCL fitted on the target's own labels.

    pyro-cl domains --seeds 0 1 2 --output results/domain-adaptation
    python benchmarks/domain_adaptation.py --seeds 0 1 2 --output results/domain-adaptation

write ``results.json``, ``table.md`` and ``accuracy_by_angle.png`` (accuracy against the target
angle per method, and the transport-cost matrix with a path).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torchvision.transforms.functional as TF

from pyro_cl import VCL
from pyro_cl.app.plotting import _pyplot, _save
from pyro_cl.data.digits import load_digits
from pyro_cl.data.domain_graph import (
    metadata_graph,
    spanning_order,
    transfer_path,
    transport_costs,
)
from pyro_cl.infer.graph_vcl import GraphVCL
from pyro_cl.infer.posterior_combination import combine_posteriors
from pyro_cl.nn import BayesianMLP

SOURCES = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0)
TARGETS = (70.0, 80.0, 90.0)
METHODS = ("source only", "sequential VCL", "OT path", "graph VCL",
           "graph VCL + unsupervised step", "nearest domain", "uniform average", "oracle")  # fmt: skip
SETTINGS = {"epochs": 300, "batch_size": None, "learning_rate": 1e-2, "num_particles": 2,
            "ml_init_epochs": 20, "num_predictive_samples": 20, "progress": False}  # fmt: skip


def rotate(x: np.ndarray, angle: float) -> torch.Tensor:
    images = torch.from_numpy(x).reshape(-1, 1, 8, 8)
    return TF.rotate(images, angle, interpolation=TF.InterpolationMode.BILINEAR).reshape(-1, 64)


def domains(seed: int, per_domain: int = 400):
    """``{angle: (train x, train y, test x, test y)}`` for every source and target."""
    (x, y), (x_test, y_test) = load_digits(seed=0)
    rng = np.random.default_rng(seed)
    out = {}
    for angle in (*SOURCES, *TARGETS):
        chosen = rng.choice(len(y), per_domain, replace=False)
        out[angle] = (
            rotate(x[chosen], angle),
            torch.from_numpy(y[chosen]),
            rotate(x_test, angle),
            torch.from_numpy(y_test),
        )
    return out


def learner(seed: int) -> VCL:
    return VCL(BayesianMLP(64, [100], 10), seed=seed, **SETTINGS)


def run_seed(seed: int) -> tuple[dict, dict]:
    data = domains(seed)
    angles = [*SOURCES, *TARGETS]
    test = {a: (data[a][2], data[a][3]) for a in TARGETS}
    scores: dict[str, dict[float, dict]] = {m: {} for m in METHODS}

    pooled = learner(seed)
    x = torch.cat([data[a][0] for a in SOURCES])
    y = torch.cat([data[a][1] for a in SOURCES])
    pooled.observe((x, y))
    sequential = learner(seed)
    for a in SOURCES:
        sequential.observe(data[a][:2])
    weights = metadata_graph(torch.tensor(angles), bandwidth=15.0)
    graph = GraphVCL(learner(seed), weights)
    for domain, parent in spanning_order(weights[: len(SOURCES), : len(SOURCES)], roots=[0]):
        graph.observe(domain, data[SOURCES[domain]][:2], [] if parent is None else [parent])
    costs = transport_costs([data[a][0] for a in angles], max_points=200)
    paths = {}
    for t, target in enumerate(TARGETS, start=len(SOURCES)):
        allowed = costs.clone()
        for other in range(len(SOURCES), len(angles)):  # paths run through sources only
            if other != t:
                allowed[:, other] = float("inf")
        path = transfer_path(allowed, sources=[0], target=t)
        paths[target] = [angles[i] for i in path]
        along = learner(seed)
        for i in path[:-1]:
            along.observe(data[angles[i]][:2])
        nearest = sorted(range(len(SOURCES)), key=lambda s: abs(SOURCES[s] - target))[:2]
        oracle = learner(seed)
        oracle.observe(data[target][:2])
        everything = combine_posteriors([graph.posteriors[s] for s in range(len(SOURCES))])
        scores["source only"][target] = pooled.evaluate(test[target])
        scores["sequential VCL"][target] = sequential.evaluate(test[target])
        scores["OT path"][target] = along.evaluate(test[target])
        scores["graph VCL"][target] = graph.evaluate(test[target], domain=t, parents=nearest)
        scores["nearest domain"][target] = graph.evaluate(test[target], domain=nearest[0])
        graph.adapt_unlabelled(t, data[target][0], parents=nearest)
        scores["graph VCL + unsupervised step"][target] = graph.evaluate(test[target], domain=t)
        scores["uniform average"][target] = graph.learner.evaluate(test[target], sites=everything)
        scores["oracle"][target] = oracle.evaluate(test[target])
    return scores, {"costs": costs.tolist(), "paths": paths}


def add_domain_arguments(parser: argparse.ArgumentParser) -> None:
    """``pyro-cl domains`` options."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("results/domain-adaptation"),
        help="folder for results.json, table.md and accuracy_by_angle.png",
    )


def run_domain_benchmark(seeds: list[int], output: Path) -> str:
    """Every method on every seed (module docstring); writes the report into ``output`` and
    returns the Markdown table."""
    output.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in seeds:
        scores, transport = run_seed(seed)
        runs.append({"seed": seed, "scores": scores, **transport})
        print(f"seed {seed}: paths {transport['paths']}", flush=True)
    (output / "results.json").write_text(json.dumps(runs, indent=1, default=float))
    lines = [
        "| method | " + " | ".join(f"{t:.0f}° acc. (LL)" for t in TARGETS) + " | mean acc. |",
        "| --- | " + " | ".join("---:" for _ in TARGETS) + " | ---: |",
    ]
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for method in METHODS:
        cells, means = [], []
        for target in TARGETS:
            acc = [100 * r["scores"][method][target]["accuracy"] for r in runs]
            ll = [r["scores"][method][target]["log_likelihood"] for r in runs]
            cells.append(f"{np.mean(acc):.1f} ± {np.std(acc):.1f} ({np.mean(ll):.2f})")
            means.append(np.mean(acc))
        lines.append(f"| {method} | {' | '.join(cells)} | {np.mean(means):.1f} |")
        axes[0].plot(TARGETS, means, marker="o", label=method)
    axes[0].set(xlabel="target angle (°)", ylabel="test accuracy (%)", title="targets, no labels")
    axes[0].set_xticks(TARGETS)
    axes[0].legend(fontsize=7)
    costs = np.array(runs[0]["costs"])
    image = axes[1].imshow(costs, cmap="viridis")
    fig.colorbar(image, ax=axes[1], label="W₂² between inputs")
    ticks = [f"{a:.0f}" for a in (*SOURCES, *TARGETS)]
    axes[1].set_xticks(range(len(ticks)), ticks, fontsize=7)
    axes[1].set_yticks(range(len(ticks)), ticks, fontsize=7)
    path = runs[0]["paths"][TARGETS[-1]]
    index = [list((*SOURCES, *TARGETS)).index(a) for a in path]
    axes[1].plot(index[1:], index[:-1], "w.-")
    axes[1].set_title(f"transport costs; path to {TARGETS[-1]:.0f}°: {path}", fontsize=7)
    _save(fig, output / "accuracy_by_angle.png")
    table = "\n".join(lines) + "\n"
    (output / "table.md").write_text(table)
    return table
