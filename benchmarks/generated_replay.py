"""Generated replay against replay of kept points on class-incremental split digits, on
validation only (issue 71: "generated replay from our generative VCL"; a probe, no test set read).

    OMP_NUM_THREADS=1 python benchmarks/generated_replay.py --seeds 0 1 2

The preset ``split-digits-class-incremental`` (one head over the ten digits, 2x64, 60 epochs in
minibatches of 64, Adam 10⁻³), each task's held-out tenth of its training data scored after the
last task. Rows: fine-tuning (how much the stream forgets), experience replay of 40 kept points a
task (``finetune-er``'s buffer, balanced), and :class:`~pyro_cl.generative.GeneratedReplay` with a
buffer of the same 200 points drawn from generative VCL (the ``generative-digits`` preset's
decoder and settings: z(8) → 100 → h(100) → 100 → 64, a private head a class, 100 epochs a class,
Adam 10⁻³, log σ² = −6 to start). Prints ACC (%), the bytes kept (replay: its points; generated:
the generator's posterior and encoders, no image) and seconds a run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pyro_cl
from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.task_benchmark import kept_bytes
from pyro_cl.app.task_metrics import run_stream
from pyro_cl.generative import GeneratedReplay
from pyro_cl.memory import ExperienceReplay
from pyro_cl.nn import BayesianMLP, VAEDecoder


def generator(seed: int, epochs: int) -> pyro_cl.VCL:
    decoder = VAEDecoder(64, latent_dim=8, hidden_size=100, representation_size=100, heads=10)
    return pyro_cl.VCL(
        decoder, epochs=epochs, batch_size=50, learning_rate=1e-3, init_log_variance=-6.0,
        ml_init_epochs=0, progress=False, seed=seed,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--generator-epochs", type=int, default=100)
    parser.add_argument(
        "--drawn",
        type=int,
        nargs="+",
        help="generated replay's buffer sizes (default: the "
        "replay buffer's points in all); drawn images are not kept, so any size holds the same bytes",
    )
    parser.add_argument("--rows", nargs="+", help="only the rows whose label starts so")
    args = parser.parse_args(argv)
    base = BenchmarkRun("split-digits-class-incremental", progress=False)
    training = base.resolved_training()  # progress off: the run says so
    kept = base.resolved_coreset_size

    rows = {
        "fine-tuning": lambda seed: None,
        f"experience replay, {kept} points a task": lambda seed: ExperienceReplay(
            kept, budget="task"
        ),
    }
    for drawn in args.drawn or [5 * kept]:
        rows[f"generated replay, {drawn} drawn points"] = lambda seed, drawn=drawn: GeneratedReplay(
            generator(seed, args.generator_epochs), drawn
        )
    if args.rows:
        rows = {row: make for row, make in rows.items() if row.startswith(tuple(args.rows))}
    for row, memory in rows.items():
        accuracies, sizes, seconds = [], [], []
        for seed in args.seeds:
            stream = base.task_stream(seed).validation(0.1, seed=seed)
            torch.manual_seed(seed)
            replay = memory(seed)
            learner = pyro_cl.FineTuning(
                BayesianMLP(64, [64, 64], 10), memory=replay, seed=seed, **training
            )
            start = time.perf_counter()
            result = run_stream(learner, stream, verbose=False, seed=seed)
            seconds.append(time.perf_counter() - start)
            accuracies.append(100 * result.acc)
            sizes.append(kept_bytes(learner))  # a generated replay's: its generator
            print(f"{row}, seed {seed}: ACC {accuracies[-1]:.2f}", flush=True)
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        print(
            f"{row}: ACC {statistics.mean(accuracies):.2f} ± {spread:.2f} (sd over seeds "
            f"{args.seeds}), {statistics.mean(sizes):,.0f} bytes kept, "
            f"{statistics.mean(seconds):.1f} s a run",
            flush=True,
        )


if __name__ == "__main__":
    main()
