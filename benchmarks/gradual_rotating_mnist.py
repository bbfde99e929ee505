"""Rotating MNIST under Kumar, Ma & Liang's gradual domain adaptation protocol (ICML 2020).

The protocol of their code (``rotated_mnist_60_conv_experiment``): the MNIST training images,
shuffled, split into a labelled source of 5,000 images rotated uniformly in 0-5°, 1,000 source
validation images (0-5°), 42,000 unlabelled intermediate images whose angle grows with their
index from 5° to 60°, and 2,000 unlabelled target images (55-60°); accuracy is measured on the
10,000 test images rotated uniformly in 55-60°. Self-training runs over windows of 2,000
intermediate images in order.

Methods (one seed each run, our learner throughout: VCL with a Bayesian MLP, the step's prior
the posterior so far):

* **source only** — VCL fitted on the labelled source;
* **target self-training** — the source fit, then one self-training step
  (:func:`pyro_cl.learner.self_training.self_train`) on the 2,000 target images (Kumar et al.
  repeat theirs 20 times; a Bayesian step counts its data once, so we take one);
* **all unlabelled at once** — one step on all 42,000 intermediate images;
* **gradual self-training** — one step per window of 2,000, in order (21 steps);
* **gradual + Wiener** — the same with a Wiener transition between windows (a prior that
  widens by ``c`` prior scales per window, so far windows pull less);
* **oracle** — VCL fitted on the 2,000 target images with their labels.

``--net cnn`` runs a Bayesian conv net (:class:`~pyro_cl.nn.BayesianCNN`: blocks of two 3x3
convolutions, by default of 32 and 64 channels (``--conv-channels 32 32 64 64``; ``16 16`` is one
block of 16, about five times cheaper), a dense layer of ``--hidden``'s first width) in place of
the MLP; ``--net kumar`` runs Kumar et al.'s own conv net (their ``simple_softmax_conv_model``:
three 5x5 convolutions of 32 channels, stride 2, ReLU, and a dense softmax layer) made Bayesian
with :func:`~pyro_cl.nn.make_bayesian`, without their dropout and batch normalisation (the
posterior is the regulariser). ``--methods`` runs some of the rows (the source fit always).

    OMP_NUM_THREADS=1 python benchmarks/gradual_rotating_mnist.py --seeds 0 1 2 \\
        --data-root ../shared/data --output results/gradual-rotating-mnist
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pyro_cl import VCL, Wiener
from pyro_cl.data import load_mnist
from pyro_cl.learner.self_training import self_train
from pyro_cl.metrics import sample_sd
from pyro_cl.nn import BayesianCNN, BayesianMLP, make_bayesian

SOURCE, SOURCE_VAL, INTERMEDIATE_END, TARGET_END = 5000, 6000, 48000, 50000
WINDOW = 2000
#: The rows besides the source fit, by their ``--methods`` name.
METHODS = ("target", "all", "gradual", "wiener", "oracle")


def rotated(images: np.ndarray, angles: np.ndarray) -> torch.Tensor:
    """28x28 images rotated by their own angle (degrees, counter-clockwise), bilinear, flat."""
    x = torch.as_tensor(images, dtype=torch.float32).reshape(-1, 1, 28, 28)
    theta = torch.as_tensor(np.deg2rad(angles), dtype=torch.float32)
    cos, sin = torch.cos(theta), torch.sin(theta)
    matrices = torch.stack(
        [torch.stack([cos, -sin, torch.zeros_like(cos)], 1),
         torch.stack([sin, cos, torch.zeros_like(cos)], 1)], 1
    )  # fmt: skip
    grid = F.affine_grid(matrices, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, align_corners=False).reshape(len(x), -1)


def protocol(root: str, seed: int, upright: bool = False) -> dict[str, tuple]:
    """The protocol's splits for ``seed`` (its shuffle and angles): ``{name: (x, y)}``; with
    ``upright``, also ``"labelled upright"``: the labelled source's (source and source
    validation) images before rotation, their labels and their angles, as arrays."""
    (x, y), (x_test, y_test) = load_mnist(root)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))[:TARGET_END]
    x, y = x[order], y[order]
    count = INTERMEDIATE_END - SOURCE_VAL
    angles = np.concatenate(
        [
            rng.uniform(0, 5, SOURCE_VAL),
            5 + 55 * np.arange(count) / count,
            rng.uniform(55, 60, TARGET_END - INTERMEDIATE_END),
        ]
    )
    images = rotated(x, angles)
    labels = torch.as_tensor(y)

    def part(start, end):
        return images[start:end], labels[start:end]

    splits = {
        "source": part(0, SOURCE),
        "source validation": part(SOURCE, SOURCE_VAL),
        "intermediate": part(SOURCE_VAL, INTERMEDIATE_END),
        "target": part(INTERMEDIATE_END, TARGET_END),
        "test": (rotated(x_test, rng.uniform(55, 60, len(x_test))), torch.as_tensor(y_test)),
    }
    if upright:
        splits["labelled upright"] = (x[:SOURCE_VAL], y[:SOURCE_VAL], angles[:SOURCE_VAL])
    return splits


def kumar_conv_net(channels: int = 32) -> torch.nn.Module:
    """Kumar et al.'s ``simple_softmax_conv_model`` (``gradual_st/models.py`` in their code): three
    5x5 convolutions of ``channels``, stride 2 ("same" padding: 28 → 14 → 7 → 4), ReLU, then a
    dense layer to the 10 classes; their dropout and batch normalisation left out."""
    layers: list[torch.nn.Module] = []
    for into in (1, channels, channels):
        layers += [torch.nn.Conv2d(into, channels, 5, stride=2, padding=2), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(channels * 16, 10))


def learner(seed: int, args, transition=None) -> VCL:
    if args.net == "kumar":
        torch.manual_seed(seed)  # the deterministic net's initial values, which become the means
        net = make_bayesian(kumar_conv_net())
    elif args.net == "cnn":
        blocks = [args.conv_channels[i : i + 2] for i in range(0, len(args.conv_channels), 2)]
        net = BayesianCNN(
            (1, 28, 28), blocks, hidden_sizes=args.hidden[:1], out_features=10, heads=1
        )
    else:
        net = BayesianMLP(784, list(args.hidden), 10)
    return VCL(
        net,
        transition=transition,
        epochs=args.epochs,
        first_epochs=args.source_epochs,
        batch_size=256,
        num_particles=args.particles,
        num_predictive_samples=20,
        seed=seed,
        progress=False,
    )


def run(args, seed: int) -> dict:
    data = protocol(args.data_root, seed)
    if args.net in ("cnn", "kumar"):  # images, not flat vectors
        data = {name: (x.reshape(-1, 1, 28, 28), y) for name, (x, y) in data.items()}
    test = data["test"]
    scores = {}

    def source_fit(transition=None) -> VCL:
        fit = learner(seed, args, transition)
        fit.observe(data["source"])
        return fit

    def score(name: str, fit: VCL, started: float) -> None:
        result = fit.evaluate(test)
        result["seconds"] = time.perf_counter() - started
        scores[name] = result
        print(f"seed {seed} {name}: {100 * result['accuracy']:.1f}%", flush=True)

    started = time.perf_counter()
    source = source_fit()
    score("source only", source, started)
    scores["source only"]["source validation"] = source.evaluate(data["source validation"])

    for method, name, unlabelled in (
        ("target", "target self-training", data["target"][0]),
        ("all", "all unlabelled at once", data["intermediate"][0]),
    ):
        if method in args.methods:
            started = time.perf_counter()
            fit = source_fit()
            self_train(fit, unlabelled, keep=args.keep)
            score(name, fit, started)

    windows = data["intermediate"][0].split(WINDOW)
    for method, name, transition in (
        ("gradual", "gradual self-training", None),
        ("wiener", f"gradual + Wiener({args.diffusion:g})", Wiener(args.diffusion, 1.0)),
    ):
        if method not in args.methods:
            continue
        started = time.perf_counter()
        fit = source_fit(transition)
        for window in windows:
            self_train(fit, window, keep=args.keep)
        score(name, fit, started)

    if "oracle" in args.methods:
        started = time.perf_counter()
        oracle = learner(seed, args)
        oracle.observe(data["target"])
        score("oracle (target labels)", oracle, started)
    return scores


def table(runs: list[dict]) -> str:
    lines = [
        "| method | accuracy (55-60°) | log-likelihood | ECE | seconds |",
        "| --- |" + " ---: |" * 4,
    ]
    for name in runs[0]:
        values = {
            k: np.array([r[name][k] for r in runs])
            for k in ("accuracy", "log_likelihood", "calibration_error", "seconds")
        }
        accuracy = values["accuracy"] * 100
        spread = f" ± {sample_sd(accuracy):.1f}" if len(runs) > 1 else ""
        lines.append(
            f"| {name} | {accuracy.mean():.1f}{spread} | {values['log_likelihood'].mean():.3f} | "
            f"{100 * values['calibration_error'].mean():.1f}% | {values['seconds'].mean():.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--net", choices=("mlp", "cnn", "kumar"), default="mlp")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument(
        "--conv-channels",
        type=int,
        nargs="+",
        default=[32, 32, 64, 64],
        help="with --net cnn: the two convolutions' channels of each block, block by block",
    )
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--epochs", type=int, default=10, help="per self-training step")
    parser.add_argument("--source-epochs", type=int, default=20)
    parser.add_argument("--particles", type=int, default=1)
    parser.add_argument("--keep", type=float, default=0.9, help="confident share fitted")
    parser.add_argument("--diffusion", type=float, default=0.1)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output", default="results/gradual-rotating-mnist")
    args = parser.parse_args(argv)
    if len(args.conv_channels) % 2:
        parser.error("--conv-channels takes two channels a block (an even count)")
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in args.seeds:
        path = output / f"seed{seed}.json"
        if not path.exists():
            path.write_text(json.dumps({"settings": vars(args), **run(args, seed)}, indent=1))
        payload = json.loads(path.read_text())
        runs.append({k: v for k, v in payload.items() if k != "settings"})
    text = table(runs)
    (output / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
