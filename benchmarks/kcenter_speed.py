"""Time greedy K-center selection (farthest-first) on all 60,000 MNIST training images.

    python benchmarks/kcenter_speed.py --data-root /path/to/data --k 200

Goal (issue 3): under 5 seconds for K = 200 on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from pyro_cl.data import load_mnist
from pyro_cl.memory import farthest_first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    (x, _), _ = load_mnist(args.data_root)
    x = torch.as_tensor(x)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        chosen = farthest_first(x, args.k)
        times.append(time.perf_counter() - start)
    print(
        f"K-center, N={x.shape[0]}, D={x.shape[1]}, K={args.k}, threads {torch.get_num_threads()}"
    )
    print(
        f"seconds per selection: {', '.join(f'{t:.2f}' for t in times)} (first points {chosen[:5].tolist()})"
    )


if __name__ == "__main__":
    main()
