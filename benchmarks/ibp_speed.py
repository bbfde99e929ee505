"""Time a training step of an IBNN against a VCL net of the same width (supplement figure 10).

Net 784-100-10 (K = 100 for the IBNN), batch 256, 10 Monte Carlo samples per step as in the
supplement, random MNIST-shaped inputs; both fit with Adam on the ELBO by the fast route. They
run in the same process, alternating, and the median of several repeats is reported.

    python benchmarks/ibp_speed.py [--steps 50] [--repeats 5] [--particles 10] [--device cpu]
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch
from speed import timed  # benchmarks/speed.py, beside this script

from pyro_cl import VCL
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.infer.training import make_adam
from pyro_cl.nn import BayesianMLP, IndianBuffetMLP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--particles", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    x = torch.rand(args.batch_size, 784, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    nets = {
        "VCL 784-100-10": BayesianMLP(784, [100], 10),
        "IBNN 784-100-10, K = 100": IndianBuffetMLP(784, [100], 10),
    }
    runs = {}
    for name, net in nets.items():
        learner = VCL(net, device=device, progress=False, seed=0)
        learner.guide.sites_for(x, y, task_id=0, dataset_size=60_000)
        learner.guide.to(device)
        optimizer = make_adam(list(learner.guide.parameters()), 1e-3)

        def steps(learner=learner, optimizer=optimizer):
            for _ in range(args.steps):
                loss = negative_elbo(
                    learner.model, learner.guide, Minibatch(x, y, 0), 60_000, args.particles, True
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        steps()  # warm-up
        runs[name] = (steps, [])
    for _ in range(args.repeats):
        for steps, times in runs.values():
            times.append(timed(steps, device) / args.steps)
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), device {device}, batch {args.batch_size}, "
        f"{args.particles} MC samples"
    )
    baseline = None
    for name, (_, times) in runs.items():
        median = statistics.median(times)
        baseline = baseline or median
        print(f"{name:28s} {1000 * median:7.2f} ms/step  ({median / baseline:.2f}x VCL)")


if __name__ == "__main__":
    main()
