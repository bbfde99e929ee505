"""Time one training epoch of VCL, VOGN and IVON against the same deterministic net trained with
Adam, and of the EWC and SI baselines against plain fine-tuning of the same point-estimate net.

Net 784-100-100-10, batch 256, one Monte Carlo sample, 10,000 random MNIST-shaped inputs. VCL
uses local reparameterisation and Adam on the ELBO; VOGN (empirical Fisher and Gauss-Newton) and
IVON run their natural-gradient step (:mod:`pyro_cl.infer.vogn`, :mod:`pyro_cl.infer.ivon`). All
run in the same process, alternating, and the median of several epochs is reported, so the
ratios are robust to the machine's load; an epoch's time divided by its 40 steps is a step's.

    python benchmarks/speed.py [--inputs 10000] [--repeats 5] [--device cpu] [--elbo fast|pyro]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from pyro_cl import VCL
from pyro_cl.baselines import EWC, SynapticIntelligence
from pyro_cl.coresets import Coreset
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.fitter import FitContext
from pyro_cl.infer.ivon import IVON
from pyro_cl.infer.objectives import negative_elbo
from pyro_cl.infer.point_estimate import fit_point_estimate
from pyro_cl.infer.training import make_adam
from pyro_cl.infer.vogn import VOGN
from pyro_cl.nn import BayesianMLP


def deterministic_epoch(net, optimizer, x, y, batch_size):
    for index in torch.randperm(x.shape[0], device=x.device).split(batch_size):
        loss = torch.nn.functional.cross_entropy(net(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def vcl_epoch(learner, optimizer, x, y, batch_size, fast):
    n = x.shape[0]
    for index in torch.randperm(n, device=x.device).split(batch_size):
        loss = negative_elbo(learner.model, learner.guide, x[index], y[index], 0, n, 1, fast)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


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
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.rand(args.inputs, 784, device=device)
    y = torch.randint(0, 10, (args.inputs,), device=device)

    net = torch.nn.Sequential(
        torch.nn.Linear(784, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 10),
    ).to(device)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)  # plain torch defaults
    fused_adam = make_adam(list(net.parameters()), 1e-3)

    learner = VCL(BayesianMLP(784, [100, 100], 10), device=device, num_particles=1, progress=False)
    learner.guide.sites_for(x[:1], None, task_id=0, dataset_size=args.inputs)
    vcl_adam = make_adam(list(learner.guide.parameters()), 1e-3)  # what VCL.observe uses
    fast = args.elbo == "fast"

    names = learner.guide.sites_for(x[:1], None, task_id=0)
    updates = {
        "VOGN (Fisher)": VOGN(num_samples=1),
        "VOGN (GGN)": VOGN(num_samples=1, curvature="ggn"),
        "IVON": IVON(num_samples=1),
    }

    context = FitContext(learner.model, learner.config, device, CallbackList())
    data = Coreset.of_task(x, y, 0)

    def natural_gradient_epoch(update):
        update.fit(context, learner.guide, data, names, 1, args.batch_size, "timing")

    # The baselines fit the guide's means as point values; each penalty has one earlier task.
    values = {n: v.detach() for n, v in learner.guide.locs(names).items()}
    penalties = {"fine-tuning": None, "EWC": EWC(100.0), "SI": SynapticIntelligence(1.0)}
    penalties["EWC"].after_fit(context, values, data, 0)
    penalties["SI"].before_fit(values, len(data))
    penalties["SI"].after_fit(context, values, data, 0)

    def point_epoch(penalty):
        fit_point_estimate(
            context, learner.guide, data, names, 1, args.batch_size, "timing", penalty
        )

    observer = VCL(
        BayesianMLP(784, [100, 100], 10),
        device=device,
        num_particles=1,
        epochs=1,
        ml_init_epochs=0,
        batch_size=args.batch_size,
        progress=False,
    )

    natural = {name: [] for name in updates}
    points = {name: [] for name in penalties}
    deterministic, deterministic_fused, variational, observed = [], [], [], []
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, update in updates.items():
            natural[name].append(timed(lambda u=update: natural_gradient_epoch(u), device))
        for name, penalty in penalties.items():
            points[name].append(timed(lambda p=penalty: point_epoch(p), device))
        deterministic.append(
            timed(lambda: deterministic_epoch(net, adam, x, y, args.batch_size), device)
        )
        deterministic_fused.append(
            timed(lambda: deterministic_epoch(net, fused_adam, x, y, args.batch_size), device)
        )
        variational.append(
            timed(lambda: vcl_epoch(learner, vcl_adam, x, y, args.batch_size, fast), device)
        )
        observed.append(timed(lambda: observer.observe((x, y)), device))
    det = statistics.median(deterministic[1:])
    det_fused = statistics.median(deterministic_fused[1:])
    var = statistics.median(variational[1:])
    print(
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"device {device}, torch {torch.__version__}"
    )
    print(f"deterministic epoch, torch.optim.Adam defaults: {1e3 * det:8.1f} ms")
    print(f"deterministic epoch, fused Adam:                {1e3 * det_fused:8.1f} ms")
    print(f"VCL epoch ({args.elbo} ELBO, 1 sample, LRT, fused Adam): {1e3 * var:8.1f} ms")
    print(f"ratio VCL / deterministic (default Adam): {var / det:6.2f}x")
    print(f"ratio VCL / deterministic (fused Adam):   {var / det_fused:6.2f}x")
    obs = statistics.median(observed[1:])
    print(f"VCL.observe, one epoch end to end:           {1e3 * obs:8.1f} ms")
    print(f"ratio observe / deterministic (default Adam): {obs / det:6.2f}x")
    steps = -(-args.inputs // args.batch_size)
    print(f"Adam step (torch defaults): {1e3 * det / steps:6.2f} ms")
    for name, times in natural.items():
        epoch = statistics.median(times[1:])
        print(
            f"{name} step (1 sample): {1e3 * epoch / steps:6.2f} ms, "
            f"{epoch / det:5.2f}x Adam (defaults), {epoch / det_fused:5.2f}x fused Adam"
        )
    plain = statistics.median(points["fine-tuning"][1:])
    print(f"fine-tuning epoch (point estimate, same net):  {1e3 * plain:8.1f} ms")
    for name in ("EWC", "SI"):
        epoch = statistics.median(points[name][1:])
        print(
            f"{name} epoch: {1e3 * epoch:8.1f} ms, ratio {name} / fine-tuning: {epoch / plain:6.2f}x"
        )


if __name__ == "__main__":
    main()
