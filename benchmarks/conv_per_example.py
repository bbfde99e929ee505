"""Split CIFAR's VOGN step: the per-example squared kernel gradients of the conv layers,
as one convolution grouped by example (the library's) against a product with unfolded patches (the
library's before, kept here as the reference), side by side in one process.

The step is :func:`~pyro_cl.infer.per_example.layer_statistics` with the empirical Fisher on the
split CIFAR conv net (Zenke et al.'s: two blocks of two 3x3 convolutions, 32 and 64 channels, a
512-unit dense layer, a head per task), ``S`` sampled weight sets (the thesis's 10) and a
minibatch of 256 images: VOGN's forward, backward and squared per-example gradients, everything
but the update. Both routes alternate ``--repeats`` times and the medians are reported, with the
largest relative difference between their sums (float32 rounding).

    OMP_NUM_THREADS=1 python benchmarks/conv_per_example.py [--samples 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from pyro_cl import CategoricalLikelihood, SupervisedModel
from pyro_cl.infer.per_example import layer_statistics
from pyro_cl.nn import BayesianCNN, BayesianConv2d


def unfolded_squared_gradient_sums(
    layer: BayesianConv2d, x: torch.Tensor, output_gradient: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The reference: ``∂ℓ_n/∂W = G_n U_nᵀ`` with ``U_n`` example ``n``'s unfolded patches
    ``(C·k², L)``, one particle at a time."""
    particles, num = output_gradient.shape[:2]
    k, out = layer.kernel_size, layer.out_channels
    grads = output_gradient.reshape(particles, num, out, -1)
    weight = x.new_zeros(out, layer.in_channels * k * k)
    for s in range(particles):
        patches = F.unfold(
            x[0 if x.shape[0] == 1 else s], k, padding=layer.padding, stride=layer.stride
        )
        weight += torch.bmm(grads[s], patches.transpose(1, 2)).square().sum(0)
    sums = {"weight": weight.reshape(out, layer.in_channels, k, k)}
    if layer.has_bias:
        sums["bias"] = grads.sum(-1).square().sum((0, 1))
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="weight samples S (thesis: 10)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    net = BayesianCNN((3, 32, 32), hidden_sizes=[512], out_features=2, heads=5)
    model = SupervisedModel(net, CategoricalLikelihood())
    theta = {
        name: 0.05 * torch.randn(args.samples, *module.prior(attribute).event_shape)
        for name, (module, attribute) in model.site_index.items()
        if not name.startswith("heads.") or name.startswith("heads.0.")
    }
    x = torch.rand(args.batch_size, 3, 32, 32)
    y = torch.randint(0, 2, (args.batch_size,))
    grouped = BayesianConv2d.squared_gradient_sums

    def step(method) -> tuple[float, dict[str, torch.Tensor]]:
        BayesianConv2d.squared_gradient_sums = method
        try:
            start = time.perf_counter()
            squared = layer_statistics(model, theta, x, y, 0, "fisher").squared
            return time.perf_counter() - start, squared
        finally:
            BayesianConv2d.squared_gradient_sums = grouped

    times = {"unfolded patches": [], "grouped convolution": []}
    for _ in range(args.repeats + 1):  # the first round warms up
        unfolded_time, reference = step(unfolded_squared_gradient_sums)
        grouped_time, squared = step(grouped)
        times["unfolded patches"].append(unfolded_time)
        times["grouped convolution"].append(grouped_time)
    difference = max(
        float((squared[n] - reference[n]).abs().max() / reference[n].abs().max().clamp_min(1e-30))
        for n in squared
    )
    median = {name: statistics.median(values[1:]) for name, values in times.items()}
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; {args.samples} samples, batch {args.batch_size}, "
        f"median of {args.repeats}; largest relative difference {difference:.1e}"
    )
    print("| per-example squared kernel gradients | VOGN step without the update | speed-up |")
    print("| --- | ---: | ---: |")
    base = median["unfolded patches"]
    for name, seconds in median.items():
        print(f"| {name} | {seconds:.2f} s | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
