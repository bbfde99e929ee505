"""Data-parallel scaling: one VCL (or VOGN, IVON) task on 1, 2, ... processes (torch.distributed).

Each run spawns ``P`` processes (gloo on the CPU, NCCL with ``--device cuda``, one GPU per rank)
with ``--threads`` threads each; every rank fits the same 784-100-100-10 net on its shard of
each global minibatch of ``--batch-size`` random MNIST-shaped inputs. Rank 0 reports the wall
time of ``observe`` on a second task (after a short first one) per epoch, and the speed-up over one
process; the posteriors of all runs are the same up to float summation order (tested in
``tests/test_data_parallel.py``).

    python benchmarks/scaling.py [--processes 1 2] [--threads 1] [--fitters svi vogn ivon]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pyro_cl import VCL
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.nn import BayesianMLP

FITTERS = {"svi": lambda: None, "vogn": lambda: VOGN(1e-3, num_samples=1), "ivon": IVON}


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, folder: str) -> None:
    torch.set_num_threads(args.threads)
    backend = "nccl" if args.device == "cuda" else "gloo"
    device = f"cuda:{rank}" if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(args.inputs, 784, generator=generator).to(device)
    y = torch.randint(0, 10, (args.inputs,), generator=generator).to(device)
    lines = []
    for name in args.fitters:
        learner = VCL(
            BayesianMLP(784, [100, 100], 10),
            device=device,
            seed=0,
            epochs=args.epochs,
            ml_init_epochs=0,
            batch_size=args.batch_size,
            num_particles=1,
            progress=False,
            fitter=FITTERS[name](),
        )
        warm_up = 2 * args.batch_size
        learner.observe((x[:warm_up], y[:warm_up]))  # a short first task
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        learner.observe((x, y))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        lines.append(f"{name} {(time.perf_counter() - start) / args.epochs}")
    if rank == 0:
        (Path(folder) / f"{world}.txt").write_text("\n".join(lines))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=256, help="the global minibatch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fitters", nargs="+", choices=sorted(FITTERS), default=["svi"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.device == "cuda" and max(args.processes) > torch.cuda.device_count():
        raise SystemExit(f"scaling.py: {max(args.processes)} processes need as many GPUs")
    times = {}
    with tempfile.TemporaryDirectory() as folder:
        for world in args.processes:
            mp.spawn(_worker, args=(world, _free_port(), args, folder), nprocs=world, join=True)
            for line in (Path(folder) / f"{world}.txt").read_text().splitlines():
                name, seconds = line.split()
                times[name, world] = float(seconds)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, device {args.device}, "
        f"{args.threads} thread(s) per process, torch {torch.__version__}; {args.inputs} "
        f"inputs, global batch {args.batch_size}, {args.epochs} epochs timed"
    )
    print("| fitter | processes | epoch | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name in args.fitters:
        base = times[name, args.processes[0]]
        for world in args.processes:
            seconds = times[name, world]
            print(f"| {name} | {world} | {1e3 * seconds:.0f} ms | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
