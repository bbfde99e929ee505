"""Prediction's passes: the default size (from the net's widest activation) against fixed sizes.

    OMP_NUM_THREADS=1 python benchmarks/prediction_passes.py --repeats 3

Times ``predictive_samples`` of two nets alternately in one process: the 784-100-100-10 MLP with
100 samples on 10,000 inputs (VCL's evaluation of a permuted-MNIST task) and the split CIFAR conv
net with 10 samples on 1,000 inputs; then the importance-sampled log-likelihood of generative
VCL's MNIST decoder (1,000 samples for 100 images) with the default passes against 500 samples a
pass. Random weights and inputs (the time does not depend on them). Prints the median seconds
per call for each pass size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial

import torch

from pyro_cl import VCL
from pyro_cl.generative import importance_log_likelihood
from pyro_cl.infer.prediction import prediction_chunk, widest_activation
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.nn import BayesianCNN, BayesianMLP, VAEDecoder


def cases() -> list[tuple[str, torch.nn.Module, torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (
            "MLP 784-100-100-10, 100 samples, 10,000 inputs",
            BayesianMLP(784, [100, 100], 10),
            torch.randn(10_000, 784, generator=generator),
            100,
        ),
        (
            "split CIFAR conv net, 10 samples, 1,000 inputs",
            BayesianCNN(out_features=2, heads=5),
            torch.randn(1_000, 3, 32, 32, generator=generator),
            10,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per pass size")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1024, 16], help="fixed pass sizes to compare"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or any(size < 1 for size in args.sizes):
        parser.error("--repeats and --sizes must be positive")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    for name, net, x, samples in cases():
        learner = VCL(net, epochs=0, ml_init_epochs=0, progress=False, seed=0)
        learner.observe((x[:8], torch.zeros(8, dtype=torch.long)), task_id=0)
        widest = widest_activation(
            learner.net, partial(sample_outputs, learner.model, {}, x[:1], 0, 1), x.device
        )
        sizes = [None, *args.sizes]
        times: dict = {size: [] for size in sizes}
        for _ in range(args.repeats):
            for size in sizes:
                start = time.perf_counter()
                learner.predictive_samples(x, 0, samples, chunk=size)
                times[size].append(time.perf_counter() - start)
        default = statistics.median(times[None])
        print(f"\n{name} (widest activation {widest}):")
        for size in sizes:
            label = f"default ({prediction_chunk(widest, samples)})" if size is None else size
            median = statistics.median(times[size])
            print(f"  {label!s:>14} inputs a pass: {median:7.2f} s  ({median / default:.2f}x)")
    time_importance_sampling(args.repeats)
    return 0


def time_importance_sampling(repeats: int) -> None:
    """Generative VCL's MNIST decoder (z 50 -> 500 -> 500 -> 784): 1,000 importance samples for
    100 images, the default samples a pass against 500."""
    net = VAEDecoder(784, hidden_size=500, heads=1, latent_dim=50, representation_size=500)
    learner = VCL(net, epochs=0, ml_init_epochs=0, progress=False, seed=0)
    images = (torch.rand(100, 784, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    learner.observe(images[:8], task_id=0)
    times: dict = {None: [], 500: []}
    for _ in range(repeats):
        for chunk in times:
            start = time.perf_counter()
            importance_log_likelihood(learner, images, 0, num_samples=1000, chunk=chunk)
            times[chunk].append(time.perf_counter() - start)
    default = statistics.median(times[None])
    print("\nimportance-sampled log-likelihood, MNIST decoder, 1,000 samples, 100 images:")
    for chunk, label in ((None, "default"), (500, "500")):
        median = statistics.median(times[chunk])
        print(f"  {label:>14} samples a pass: {median:7.2f} s  ({median / default:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
