"""Median time of one VCL epoch (784-100-100-10, 10,000 random inputs, batch 256, fast route)
and of one small-net step (8-16-16-2, 125 points, 100 samples, full batch), one thread.

Compare two checkouts by running it in each in turn, alternating (issue 69's check that the KL
through the registry costs what the parallel route did)::

    git worktree add /tmp/old OLD && git worktree add /tmp/new NEW
    for i in 1 2 3; do for v in old new; do
        (cd /tmp/$v && PYTHONPATH=/tmp/$v python benchmarks/epoch_time.py [REPEATS]); done; done

``REPEATS`` (default 6) steps are timed after a warm-up step; above 6 only the small net runs.
"""

import statistics
import sys
import time

import torch

import pyro_cl
from pyro_cl.nn import BayesianMLP

torch.set_num_threads(1)
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 6


def run(net, x, y, **kw):
    learner = pyro_cl.VCL(net, epochs=1, progress=False, seed=0, ml_init_epochs=0, **kw)
    learner.observe((x, y), task_id=0)  # warm-up: the first step
    times = []
    for _ in range(1, REPEATS):
        start = time.perf_counter()
        learner.observe((x, y), task_id=0)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


torch.manual_seed(0)
x = torch.rand(10_000, 784)
y = torch.randint(10, (10_000,))
mnist = 0.0 if REPEATS > 6 else run(BayesianMLP(784, [100, 100], 10), x, y, batch_size=256)
xs = torch.randn(125, 8)
ys = torch.randint(2, (125,))
small = run(
    BayesianMLP(8, [16, 16], 2, activation="tanh"), xs, ys, batch_size=None, num_particles=100
)
print(f"mnist_epoch {mnist:.4f} small_epoch {small:.4f}")
