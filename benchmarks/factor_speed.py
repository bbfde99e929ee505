"""GRS's Gaussian factors: every candidate point's factor under the fitted ``q̃`` (Kurle
et al. 2020, eq. 5a/5b), with a linear layer's weighted per-example sums ``Σ_s g_{s,n,o} x_{s,n,i}
A_{s,o,i}`` as matrix products where the inputs are shared and one output unit at a time where
they are not (the library's, :func:`~pyro_cl.nn.linear.outer_product_sums`) against an einsum
(the library's before, kept here as the reference) at the library's old samples per pass, and the
library's route at its new samples per pass, side by side in one process.

The nets and point counts are table 2's streams (a UCI regression stream: 8 inputs, tanh [16, 16],
10 new points and a memory of 15; wine and spam: [32, 32], 25 and 25; MNIST: [64, 64], 250 and
150), ``--term-samples`` Monte Carlo samples (K_term; the paper's 50k, our short schedule's 2000),
the posterior a random mean-field Gaussian (the cost does not depend on its values). Both routes
alternate ``--repeats`` times; the medians are reported with the largest difference between
the precisions of the two contractions from the same draws, relative to a site's largest (float32
rounding; other passes draw other samples).

    OMP_NUM_THREADS=1 python benchmarks/factor_speed.py [--term-samples 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from pyro.distributions import Normal

import pyro_cl.nn.linear as linear
from pyro_cl import CategoricalLikelihood, HeteroscedasticGaussianLikelihood, SupervisedModel
from pyro_cl.memory.gaussian_factors import estimate_gaussian_factors
from pyro_cl.nn import BayesianMLP
from pyro_cl.posterior import read_priors

#: stream: (inputs, hidden, outputs, candidate points per step)
NETS = {
    "uci": (8, [16, 16], 2, 10 + 15),
    "wine": (11, [32, 32], 6, 25 + 25),
    "spam": (57, [32, 32], 2, 25 + 25),
    "mnist": (784, [64, 64], 10, 250 + 150),
}


def einsum_outer_product_sums(
    output_gradient: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """The reference: one einsum over the samples' inputs (expanded where they are shared)."""
    inputs = x.expand(output_gradient.shape[0], *x.shape[1:])
    if weight is None:
        return torch.einsum("sno,sni->noi", output_gradient, inputs)
    return torch.einsum("sno,sni,soi->noi", output_gradient, inputs, weight)


def old_chunk(stream: str) -> int:
    """The library's samples per pass before: ``2**24`` floats of samples × points × largest site."""
    inputs, hidden, outputs, points = NETS[stream]
    sizes = [a * b for a, b in zip([inputs, *hidden], [*hidden, outputs], strict=True)]
    return max(1, 2**24 // (points * max(sizes)))


def timed_factors(
    stream: str, term_samples: int, contraction, chunk: int | None
) -> tuple[float, dict]:
    """Seconds for every candidate's factor on ``stream``'s net, with ``contraction`` as the
    linear layers' per-example sums and ``chunk`` samples per pass (``None``: the library's
    default), and the precisions."""
    inputs, hidden, outputs, points = NETS[stream]
    torch.manual_seed(0)
    regression = stream == "uci"  # the one regression stream (a mean and a noise output)
    likelihood = HeteroscedasticGaussianLikelihood() if regression else CategoricalLikelihood()
    model = SupervisedModel(BayesianMLP(inputs, hidden, outputs), likelihood)
    x = torch.randn(points, inputs)
    y = torch.randn(points) if regression else torch.randint(0, outputs, (points,))
    posterior = {
        name: Normal(0.1 * torch.randn(prior.mean.shape), 0.05).to_event(prior.mean.dim())
        for name, prior in read_priors(model.net).items()
    }
    library = linear.outer_product_sums
    linear.outer_product_sums = contraction
    try:
        torch.manual_seed(1)
        start = time.perf_counter()
        factors = estimate_gaussian_factors(
            model, posterior, x, y, num_samples=term_samples, samples_per_chunk=chunk
        )
        return time.perf_counter() - start, factors.precision
    finally:
        linear.outer_product_sums = library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--term-samples", type=int, default=2000, help="K_term")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--streams", nargs="+", default=list(NETS), choices=list(NETS))
    args = parser.parse_args()
    print(
        f"{platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"K_term {args.term_samples}, median of {args.repeats}"
    )
    print(
        "| stream net (candidates) | before: einsum | one unit at a time, same passes "
        "| and the new passes | speed-up | largest difference, same draws |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for stream in args.streams:
        chunk = min(old_chunk(stream), args.term_samples)
        times = {"before": [], "same": [], "after": []}
        for _ in range(args.repeats):
            seconds, reference = timed_factors(
                stream, args.term_samples, einsum_outer_product_sums, chunk
            )
            times["before"].append(seconds)
            seconds, ours = timed_factors(
                stream, args.term_samples, linear.outer_product_sums, chunk
            )
            times["same"].append(seconds)
            seconds, _ = timed_factors(stream, args.term_samples, linear.outer_product_sums, None)
            times["after"].append(seconds)
        difference = max(  # per site, relative to its largest precision
            float((ours[n] - reference[n]).abs().max() / reference[n].abs().max()) for n in ours
        )
        before, same, after = (statistics.median(times[k]) for k in ("before", "same", "after"))
        inputs, hidden, outputs, points = NETS[stream]
        net = "-".join(map(str, [inputs, *hidden, outputs]))
        print(
            f"| {stream} {net} ({points}) | {before:.3f} s ({chunk} a pass) | {same:.3f} s | "
            f"{after:.3f} s | {before / after:.1f}x | {difference:.1e} |"
        )


if __name__ == "__main__":
    main()
