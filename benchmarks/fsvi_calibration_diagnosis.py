"""Function-space VI's calibration on validation (issue 71): accuracy, mean confidence and ECE of
the peers benchmark's 40-draw row on the demo's stream (permuted 8x8 digits), each task's held-out
tenth of its training data, with the first task's VCL ELBO tempered by ``--beta`` (a diagnosis:
the fitter has no such option, so the script replaces the first task's KL weight in place; 1 is
the fitter as it is), or with the functional KL weighed by ``--function-kl-weight``.

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
    args = parser.parse_args(argv)
    first_task_tempered(args.beta)
    base = BenchmarkRun(
        "permuted-digits", methods=["fsvi"], progress=False,
        fitter_options={"function_kl_scale": "sum", "context_draws": 40,
                        "function_kl_weight": args.function_kl_weight},
    )  # fmt: skip
    stream = base.task_stream(args.seed).validation(0.1, args.seed)
    torch.manual_seed(args.seed)
    learner = base.make_learner("fsvi", stream, args.seed, "cpu")
    for i, task in enumerate(stream.tasks):
        learner.observe((task.x_train, task.y_train), task_id=i)
    accuracy, confidence, calibration = [], [], []
    for i, task in enumerate(stream.tasks):
        probabilities = learner.predict(task.x_test, task_id=i)
        top, predicted = probabilities.max(-1)
        accuracy.append((predicted == task.y_test).double().mean().item())
        confidence.append(top.mean().item())
        calibration.append(expected_calibration_error(probabilities, task.y_test))
    n = len(accuracy)
    print(
        f"beta {args.beta}, function KL weight {args.function_kl_weight:g}, seed {args.seed}: accuracy {sum(accuracy) / n:.4f}, mean confidence "
        f"{sum(confidence) / n:.4f}, ECE {sum(calibration) / n:.4f} (means over the tasks)"
    )


if __name__ == "__main__":
    main()
