"""Why VOGN learns nothing on split CIFAR-10 at a short schedule: its step, its weights' noise and
its prior's pull taken apart on the first task.

    OMP_NUM_THREADS=1 python benchmarks/vogn_cifar_diagnosis.py --data-root ../shared/data

At the start of a task VOGN's mean step (VOGN thesis eq. 52/53) is ``μ ← μ − α (m + λ_p μ) / s``
with ``m`` the averaged minibatch gradient of the summed loss (≈ ``N ĝ``, ``ĝ`` the mean loss's
gradient) and ``s`` still near its initial ``s₀`` (β = 1e-4 moves it 2% in 200 steps): SGD on the
mean loss at learning rate ``αN/s₀`` with weight decay ``λ_p/N``, its gradients taken at weights
drawn with ``σ₀ = 1/√s₀``. Each row fits the first task (airplane against automobile, ``N`` =
10,000 images) from the same fresh initialisation and reports the test accuracy (the first 1,000
test images; 4 predictive samples for VOGN) and the dense layer's mean ``|μ|`` (0.0104 fresh):

- VOGN rows run ``vogn_cifar.py``'s set-up (the thesis's settings, 1 training sample) with ``α``,
  ``s₀`` and ``λ_p`` set per row;
- plain PyTorch rows train the same net from the same initialisation with SGD and VOGN's averaged
  momentum (dampening 0.9) at the rate and decay a VOGN row implies, or with Adam (fine-tuning's).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch
from torch import nn

from pyro_cl.data import split_cifar10

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import vogn_cifar  # noqa: E402
from peers import cnn  # noqa: E402


@dataclass(frozen=True)
class VOGNRow:
    name: str
    alpha: float
    initial_precision: float = 4e3
    prior_precision: float = 120.0
    beta: float = 1e-4

    def sgd_equivalent(self, size: int) -> tuple[float, float]:
        """The SGD rate ``αN/s₀`` and weight decay ``λ_p/N`` of this row's early steps."""
        return self.alpha * size / self.initial_precision, self.prior_precision / size


@dataclass(frozen=True)
class PlainRow:
    """Plain PyTorch training: SGD at the rate ``like`` implies and, with ``pull``, its decay (its
    weights without noise), or Adam at ``learning_rate``."""

    name: str
    like: VOGNRow | None = None
    pull: bool = True
    learning_rate: float = 1e-3

    def rate_and_decay(self, size: int) -> tuple[float, float]:
        if self.like is None:
            return self.learning_rate, 0.0
        rate, decay = self.like.sgd_equivalent(size)
        return rate, decay if self.pull else 0.0


THESIS = VOGNRow("VOGN, the thesis's settings", 1e-3)
LARGER_STEP = VOGNRow("VOGN, α = 0.1", 0.1)
ROWS = [
    THESIS,
    LARGER_STEP,
    # α scaled with s₀ keeps αN/s₀ and αλ_p/s₀: the same step and pull without the noise
    VOGNRow("VOGN, α = 0.1 without the noise (s₀ = 1e8)", 0.1 * 1e8 / 4e3, 1e8, beta=1e-8),
    VOGNRow("VOGN, α = 0.1 without the prior's pull (λ_p = 1e-4)", 0.1, prior_precision=1e-4),
    VOGNRow("VOGN, α = 0.1, λ_p = 24 (the thesis's λ_p/N)", 0.1, prior_precision=24.0),
    PlainRow("SGD at the thesis's αN/s₀", THESIS, pull=False),
    PlainRow("SGD at α = 0.1's step and pull", LARGER_STEP),
    PlainRow("Adam 1e-3 (fine-tuning)"),
]


def plain_net() -> nn.Sequential:
    """The split CIFAR conv net (:class:`~pyro_cl.nn.BayesianCNN`'s defaults, one 2-way head),
    initialised as the fresh VOGN means: ``U(±1/√fan_in)``, PyTorch's default."""
    return cnn((3, 32, 32), [512], 2)


def run_plain(row: PlainRow, task, epochs: int, test_points: int, seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    net = plain_net()
    rate, decay = row.rate_and_decay(len(task.y_train))
    if row.like is None:
        optimiser = torch.optim.Adam(net.parameters(), rate)
    else:
        optimiser = torch.optim.SGD(
            net.parameters(), rate, momentum=0.9, dampening=0.9, weight_decay=decay
        )
    for _ in range(epochs):
        for batch in torch.randperm(len(task.y_train)).split(256):
            loss = nn.functional.cross_entropy(net(task.x_train[batch]), task.y_train[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        logits = net(task.x_test[:test_points])
    accuracy = (logits.argmax(-1) == task.y_test[:test_points]).float().mean().item()
    return accuracy, net[11].weight.abs().mean().item()


def run_vogn(row: VOGNRow, stream, epochs: int, test_points: int, seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    options = {
        "--epochs": epochs, "--particles": 1, "--predictive-samples": 4, "--seeds": seed,
        "--fitter-num-samples": 1, "--fitter-learning-rate": row.alpha,
        "--fitter-beta": row.beta, "--init-precision": row.initial_precision,
        "--later-init-precision": row.initial_precision,
        "--prior-scale": row.prior_precision**-0.5,
    }  # fmt: skip
    argv = ["--benchmark", "split-cifar10", "--methods", "vogn"]
    run = vogn_cifar.build_run(argv + [str(v) for item in options.items() for v in item])
    learner = run.make_learner("vogn", stream, seed, "cpu")
    task = stream.tasks[0]
    learner.observe((task.x_train, task.y_train), task_id=0)
    metrics = learner.evaluate((task.x_test[:test_points], task.y_test[:test_points]), task_id=0)
    dense = learner.posterior(0)["dense.0.weight"]
    return metrics["accuracy"], dense.base_dist.loc.abs().mean().item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True, help="folder with cifar-10-batches-bin")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of the first task")
    parser.add_argument("--test-points", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.test_points < 1:
        parser.error("--epochs and --test-points must be positive")
    stream = split_cifar10(args.data_root)
    task = stream.tasks[0]
    size = len(task.y_train)
    print(f"split CIFAR-10 task 1: N = {size}, {args.epochs} epochs of batch 256, seed {args.seed}")
    print("| row | SGD rate αN/s₀ | weight decay λ_p/N | σ₀ | test accuracy | dense mean abs(μ) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in ROWS:
        if isinstance(row, VOGNRow):
            accuracy, dense = run_vogn(row, stream, args.epochs, args.test_points, args.seed)
            (rate, decay), noise = row.sgd_equivalent(size), f"{row.initial_precision**-0.5:.4f}"
        else:
            accuracy, dense = run_plain(row, task, args.epochs, args.test_points, args.seed)
            (rate, decay), noise = row.rate_and_decay(size), "0"
        print(
            f"| {row.name} | {rate:.3g} | {decay:.3g} | {noise} | {100 * accuracy:.1f}% "
            f"| {dense:.4f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
