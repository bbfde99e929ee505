"""Prediction time of a user's CNN made Bayesian (it runs one Monte Carlo draw at a time), against
its fit's time per point: split MNIST's first task, 1,000 training images, 1 epoch at 1 sample;
``evaluate`` on the task's 2,115 test images with the default 100 samples.

    OMP_NUM_THREADS=1 python benchmarks/cnn_prediction.py --data-root ../shared/data
"""

from __future__ import annotations

import argparse
import sys
import time

import torch.nn.functional as F
from torch import nn

import pyro_cl
from pyro_cl.data import split_mnist
from pyro_cl.nn import make_bayesian


class UserCNN(nn.Module):
    """A user's net: one convolution, pooling, a linear head; written for one batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, padding=2)
        self.fc = nn.Linear(8 * 14 * 14, 2)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x.view(-1, 1, 28, 28))), 2)
        return self.fc(x.flatten(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="data")
    args = parser.parse_args(argv)
    task = split_mnist(args.data_root)[0]
    x, y = (t[:1000] for t in task.train)
    learner = pyro_cl.VCL(
        make_bayesian(UserCNN()),
        epochs=1,
        num_particles=1,
        ml_init_epochs=0,
        seed=0,
        progress=False,
    )
    start = time.perf_counter()
    learner.observe((x, y))
    fit = time.perf_counter() - start
    x_test, y_test = task.test
    start = time.perf_counter()
    learner.evaluate((x_test, y_test))
    predict = time.perf_counter() - start
    draws = learner.num_predictive_samples
    print(
        f"fit {fit:.1f} s for {len(x)} points ({1e3 * fit / len(x):.2f} ms a point and draw); "
        f"evaluate {predict:.1f} s for {len(x_test)} points x {draws} draws "
        f"({1e3 * predict / len(x_test) / draws:.3f} ms a point and draw)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
