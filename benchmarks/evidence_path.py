"""The one-step evidence of a drift transition's strengths along online VB's own path.

A diagnostic of :class:`~pyro_cl.transitions.LearnedStrength` (issue 72): it scores every
strength on the learner's *own* path, so an early step that favours a huge strength changes the
path every later score is read on. This script runs online VB (strength 0 throughout) over a
stream of ``drift_vs_river.py`` and, before each step is learnt, scores the Wiener strengths of
a grid on that step's data (eq. 1 of :mod:`pyro_cl.transitions.learned_strength`, per point),
printing each step's best strength and the best of the sum so far (eq. 2, γ = 1)::

    OMP_NUM_THREADS=1 python benchmarks/evidence_path.py --stream elec2 --steps 120 \\
        --data-root ../shared/data --output evidence_path.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drift_vs_river  # noqa: E402

from pyro_cl.transitions.base import TransitionContext  # noqa: E402
from pyro_cl.transitions.diffusion import Wiener  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stream", default="elec2", choices=["weather", "elec2", "sea", "hyperplane"]
    )
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output", type=Path, help="the per-step evidence as JSON")
    args = parser.parse_args(argv)
    options = drift_vs_river.build_parser().parse_args(["--data-root", args.data_root])
    stream = drift_vs_river.make_stream(args.stream, args.data_root, args.seed, args.steps)
    torch.manual_seed(args.seed)
    learner = drift_vs_river._online_learner(stream, options, args.seed, None)
    grid = np.logspace(-4, 2, 13)
    total, per_step = np.zeros(len(grid)), []
    for k, step in enumerate(stream.steps):
        if k > 0:
            evidence = learner.prediction.evidence(step.x, step.y, 0)
            context = TransitionContext.after(
                learner.times, step.time, learner.initial_prior, learner.net, evidence
            )
            posterior = learner.current_prior()
            scores = [evidence(Wiener(float(s))(posterior, context)) / len(step.y) for s in grid]
            total += scores
            per_step.append(scores)
            print(
                f"step {k}: best strength {grid[int(np.argmax(scores))]:.4g}, best of the sum "
                f"{grid[int(np.argmax(total))]:.4g}; nats a point at 1e-4 {scores[0]:.3f}, "
                f"0.1 {scores[6]:.3f}, 1 {scores[8]:.3f}, 100 {scores[-1]:.3f}",
                flush=True,
            )
        learner.observe((step.x, step.y), time=step.time)
    if args.output is not None:
        args.output.write_text(json.dumps({"grid": grid.tolist(), "per_step": per_step}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
