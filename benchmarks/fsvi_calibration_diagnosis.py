"""Function-space VI's calibration on validation (issue 71): accuracy, mean confidence and ECE of
the peers benchmark's 40-draw row on the demo's stream (permuted 8x8 digits), each task's held-out
tenth of its training data, with the first task's VCL ELBO tempered by ``--beta`` (a diagnosis:
the fitter has no such option, so the script replaces the first task's KL weight in place; 1 is
the fitter as it is), with the functional KL weighed by ``--function-kl-weight``, or at
``--epochs`` a task. Each line is printed twice: for the library's predictive (the average of the
softmax over 100 draws) and for the softmax of the draws' mean logits (what the posterior's mean
function alone says), so a spread of the draws and a soft mean function can be told apart.

    OMP_NUM_THREADS=1 python benchmarks/fsvi_calibration_diagnosis.py --beta 1.0 --seed 0
"""

from __future__ import annotations

import argparse

import torch

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.fitters.function_space import FunctionSpaceFitter
from pyro_cl.metrics import expected_calibration_error


def first_task_tempered(beta: float) -> None:
    """The first task's parameter-space KL weighed by ``beta`` (the later tasks' as given)."""

    def weight(self) -> float:
        if self._first_task and self.function_prior_variance is None:
            return beta
        return self.kl_weight

    FunctionSpaceFitter._parameter_kl_weight = weight


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--function-kl-weight", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, help="epochs a task (default: the preset's)")
    args = parser.parse_args(argv)
    first_task_tempered(args.beta)
    base = BenchmarkRun(
        "permuted-digits", methods=["fsvi"], progress=False,
        fitter_options={"function_kl_scale": "sum", "context_draws": 40,
                        "function_kl_weight": args.function_kl_weight},
        training={} if args.epochs is None else {"epochs": args.epochs},
    )  # fmt: skip
    stream = base.task_stream(args.seed).validation(0.1, args.seed)
    torch.manual_seed(args.seed)
    learner = base.make_learner("fsvi", stream, args.seed, "cpu")
    for i, task in enumerate(stream.tasks):
        learner.observe((task.x_train, task.y_train), task_id=i)
    scores = {"the predictive": [], "the mean logits": []}
    spread = []  # the logits' sd over the draws, averaged over points and classes
    for i, task in enumerate(stream.tasks):
        draws = learner.predictive_samples(task.x_test, task_id=i, num_samples=100)
        spread.append(draws.std(0).mean().item())
        for name, probabilities in (
            ("the predictive", learner.model.likelihood.predictive_probabilities(draws)),
            ("the mean logits", torch.softmax(draws.mean(0), -1)),
        ):
            top, predicted = probabilities.max(-1)
            scores[name].append(
                (
                    (predicted == task.y_test).double().mean().item(),
                    top.mean().item(),
                    expected_calibration_error(probabilities, task.y_test),
                )
            )
    for name, rows in scores.items():
        accuracy, confidence, calibration = (sum(r[k] for r in rows) / len(rows) for k in range(3))
        print(
            f"beta {args.beta}, function KL weight {args.function_kl_weight:g}, seed {args.seed}, "
            f"{name}: accuracy {accuracy:.4f}, mean confidence {confidence:.4f}, "
            f"ECE {calibration:.4f} (means over the tasks)"
        )
    print(f"the logits' sd over the draws: {sum(spread) / len(spread):.2f}")


if __name__ == "__main__":
    main()
