"""Median time of one VCL epoch (784-100-100-10, 10,000 random inputs, batch 256, fast route),
of its ``evaluate`` on those inputs (20 draws), of one small-net step (8-16-16-2, 125 points,
100 samples, full batch) and of the same step with a full-covariance guide over the head, one
thread.

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


def run(net, x, y, evaluate=False, **kw):
    learner = pyro_cl.VCL(net, epochs=1, progress=False, seed=0, ml_init_epochs=0, **kw)
    learner.observe((x, y), task_id=0)  # warm-up: the first step
    times = []
    for _ in range(1, REPEATS):
        start = time.perf_counter()
        if evaluate:
            learner.evaluate((x, y), task_id=0, num_samples=20)
        else:
            learner.observe((x, y), task_id=0)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


torch.manual_seed(0)
x = torch.rand(10_000, 784)
y = torch.randint(10, (10_000,))
big = REPEATS <= 6
mnist = run(BayesianMLP(784, [100, 100], 10), x, y, batch_size=256) if big else 0.0
evaluate = run(BayesianMLP(784, [100, 100], 10), x, y, True, batch_size=256) if big else 0.0
xs = torch.randn(125, 8)
ys = torch.randint(2, (125,))
small_net = {"hidden_sizes": [16, 16], "activation": "tanh"}
small = run(BayesianMLP(8, out_features=2, **small_net), xs, ys, batch_size=None,
            num_particles=100)  # fmt: skip
full = run(BayesianMLP(8, out_features=2, **small_net), xs, ys, batch_size=None,
           num_particles=100, guide=pyro_cl.FullCovariance(sites=["heads"]))  # fmt: skip
print(f"mnist_epoch {mnist:.4f} evaluate {evaluate:.4f} small_epoch {small:.4f} "
      f"full_covariance_step {full:.4f}")  # fmt: skip
