"""Time one training epoch of VCL, VOGN and IVON against the same deterministic net trained with
Adam, and of the EWC and SI baselines against plain fine-tuning of the same point-estimate net.

Net 784-100-100-10, batch 256, one Monte Carlo sample, 10,000 random MNIST-shaped inputs. VCL
uses local reparameterisation and Adam on the ELBO; VOGN (empirical Fisher and Gauss-Newton) and
IVON run their natural-gradient step (:mod:`pyro_cl.fitters.vogn`, :mod:`pyro_cl.fitters.ivon`). All
run in the same process, alternating, and the median of several epochs is reported, so the
ratios are robust to the machine's load; an epoch's time divided by its 40 steps is a step's.

Rows: the deterministic net with torch's default and fused Adam; a hand-written Bayes-by-Backprop
loop with local reparameterisation (the reference the library must beat, issue 18); VCL's
``observe`` for one epoch, end to end (and with one weight draw per particle shared by the
minibatch instead of local reparameterisation); VOGN and IVON, eager and with the update fused by
``torch.compile`` (compiled in the warm-up round); fine-tuning, EWC and SI. Every ratio is to the
deterministic epoch with torch's default Adam (``--elbo pyro``: ``observe`` on Pyro's
``TraceMeanField_ELBO`` route; ``--particles P``: ``observe`` with ``P`` Monte Carlo samples).

    python benchmarks/speed.py [--inputs 10000] [--repeats 5] [--device cpu] [--elbo fast|pyro]
                               [--particles 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from pyro_cl import VCL
from pyro_cl.baselines import EWC, SynapticIntelligence
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.point_fit import fit_point_estimate
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.training import make_adam
from pyro_cl.nn import BayesianMLP
from pyro_cl.points import Points


def deterministic_epoch(net, optimizer, x, y, batch_size):
    for index in torch.randperm(x.shape[0], device=x.device).split(batch_size):
        loss = torch.nn.functional.cross_entropy(net(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


class HandWrittenBayesByBackprop:
    """The reference a user could write by hand: a mean-field 784-100-100-10 net, one
    ``(μ, log σ²)`` pair of tensors per weight and bias, local reparameterisation, the closed-form
    KL to a N(0, 1) prior per tensor, torch's fused Adam."""

    def __init__(self, sizes: list[int], device: torch.device) -> None:
        self.shapes = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            self.shapes += [(fan_out, fan_in), (fan_out,)]
        self.locs = [
            torch.nn.Parameter(0.1 * torch.randn(shape, device=device)) for shape in self.shapes
        ]
        self.log_variances = [
            torch.nn.Parameter(torch.full(shape, -6.0, device=device)) for shape in self.shapes
        ]
        self.optimizer = make_adam(self.locs + self.log_variances, 1e-3)

    def loss(self, x: torch.Tensor, y: torch.Tensor, dataset_size: int) -> torch.Tensor:
        hidden = x
        variances = [log_variance.exp() for log_variance in self.log_variances]
        layers = len(self.shapes) // 2
        for layer in range(layers):
            w, b = self.locs[2 * layer : 2 * layer + 2]
            w_var, b_var = variances[2 * layer : 2 * layer + 2]
            mean = torch.nn.functional.linear(hidden, w, b)
            variance = torch.nn.functional.linear(hidden * hidden, w_var, b_var)
            hidden = mean + variance.sqrt() * torch.randn_like(mean)
            if layer < layers - 1:
                hidden = torch.relu(hidden)
        kl = sum(
            0.5 * (variance + loc * loc - 1 - log_variance).sum()
            for loc, log_variance, variance in zip(
                self.locs, self.log_variances, variances, strict=True
            )
        )
        return torch.nn.functional.cross_entropy(hidden, y) + kl / dataset_size

    def epoch(self, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> None:
        for index in torch.randperm(x.shape[0], device=x.device).split(batch_size):
            loss = self.loss(x[index], y[index], x.shape[0])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--elbo", choices=["fast", "pyro"], default="fast")
    parser.add_argument("--particles", type=int, default=1, help="MC samples of observe's ELBO")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.rand(args.inputs, 784, device=device)
    y = torch.randint(0, 10, (args.inputs,), device=device)
    batch = args.batch_size

    net = torch.nn.Sequential(
        torch.nn.Linear(784, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 10),
    ).to(device)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)  # plain torch defaults
    fused_adam = make_adam(list(net.parameters()), 1e-3)
    hand_written = HandWrittenBayesByBackprop([784, 100, 100, 10], device)

    def vcl(local_reparameterization: bool = True, **settings):
        return VCL(
            BayesianMLP(784, [100, 100], 10, local_reparameterization=local_reparameterization),
            device=device,
            num_particles=args.particles,
            epochs=1,
            ml_init_epochs=0,
            batch_size=batch,
            progress=False,
            **settings,
        )

    observer = vcl(elbo=args.elbo)
    # the paper's estimator is local reparameterisation; a weight draw per particle, shared by
    # the minibatch, needs one matrix product per layer instead of two (a noisier gradient)
    shared_draws = vcl(local_reparameterization=False, elbo=args.elbo)
    learner = vcl()  # the natural-gradient and baseline rows: one sample (num_samples=1)
    names = learner.guide.sites_for(x[:1], None, task_id=0)
    context = FitContext(
        learner.model, learner.config, device, CallbackList(), learner.initial_prior
    )
    data = Points.of_task(x, y, 0)
    one_epoch = FitProblem(data, names, 1, batch, "timing")
    updates = {
        "VOGN (Fisher)": VOGN(num_samples=1),
        "VOGN (GGN)": VOGN(num_samples=1, curvature="ggn"),
        "IVON": IVON(num_samples=1),
        "VOGN (Fisher), compiled update": VOGN(num_samples=1, compiled=True),
        "IVON, compiled update": IVON(num_samples=1, compiled=True),
    }
    # The baselines fit the guide's means as point values; each penalty has one earlier task.
    values = {n: v.detach() for n, v in learner.guide.locs(names).items()}
    penalties = {"fine-tuning": None, "EWC": EWC(100.0), "SI": SynapticIntelligence(1.0)}
    penalties["EWC"].after_fit(context, values, data, 0)
    penalties["SI"].before_fit(values, len(data))
    penalties["SI"].after_fit(context, values, data, 0)

    epochs = {
        "deterministic, Adam (torch defaults)": lambda: deterministic_epoch(net, adam, x, y, batch),
        "deterministic, fused Adam": lambda: deterministic_epoch(net, fused_adam, x, y, batch),
        "hand-written Bayes by Backprop (LRT)": lambda: hand_written.epoch(x, y, batch),
        f"VCL.observe ({args.elbo} route, {args.particles} MC), end to end": lambda: (
            observer.observe((x, y))
        ),
        "VCL.observe, weights shared by the minibatch": lambda: shared_draws.observe((x, y)),
    }
    for name, update in updates.items():
        epochs[name] = lambda u=update: u.fit(context, learner.guide, one_epoch)
    for name, penalty in penalties.items():
        epochs[f"{name} (point estimate)"] = lambda p=penalty: fit_point_estimate(
            context, learner.guide, one_epoch, p
        )

    times = {name: [] for name in epochs}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, epoch in epochs.items():
            times[name].append(timed(epoch, device))
    median = {name: statistics.median(values[1:]) for name, values in times.items()}
    steps = -(-args.inputs // batch)
    adam_default = median["deterministic, Adam (torch defaults)"]
    fine_tuning = median["fine-tuning (point estimate)"]
    print(
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"device {device}, torch {torch.__version__}; {args.inputs} inputs, batch {batch}, "
        f"{steps} steps per epoch, median of {args.repeats} epochs"
    )
    print(f"{'epoch':46s} {'ms':>8s} {'step ms':>8s} {'vs Adam':>8s} {'vs fine-tuning':>15s}")
    for name, seconds in median.items():
        versus_points = f"{seconds / fine_tuning:14.2f}x" if "point" in name else ""
        print(
            f"{name:46s} {1e3 * seconds:8.1f} {1e3 * seconds / steps:8.2f} "
            f"{seconds / adam_default:7.2f}x {versus_points}"
        )


if __name__ == "__main__":
    main()
