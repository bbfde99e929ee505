"""Kumar et al.'s gradual rotating MNIST through the results protocol (issue 68): the Wiener
transition's strength chosen without a target label, every row kept as a record
(``benchmarks/records/gradual-rotating-mnist.json``).

    OMP_NUM_THREADS=1 python benchmarks/gradual_protocol.py --seeds 0 1 2 --data-root DATA \\
        --folder RUNS
    python benchmarks/gradual_protocol.py --seeds 0 --tiny --data-root DATA   # a check

The stream and the learner are :mod:`gradual_rotating_mnist`'s (Kumar et al.'s own conv net made
Bayesian, 20 source epochs, 10 a window, the 90% most confident pseudo-labels fitted). Which
transition to put between the windows — none (plain gradual self-training) or a Wiener diffusion
of strength 0.1, 1 or 10 prior scales a window — is chosen on a **validation stream made of the
labelled source alone** (:func:`validation_protocol`): of the 6,000 labelled source images (the
protocol's source and its source validation), 2,000 at their own 0-5° are the validation source,
1,000 rotated to 55-60° the validation target (its labels score the choice), and the other 3,000
the pool the 21 unlabelled windows draw from, each window's images at the angles the real
windows have (5° to 60°). No intermediate image, target image or test image is read by the
choice. The windows hold 1,000 images (the real ones 2,000: the pool would otherwise repeat each
image fourteen times), so the strength per window is chosen where each window pulls half as hard.

The choice is scored at ``--selection-seeds`` (default seed 0: a validation run costs what a
test run does, about 10 minutes here) and then each seed runs every row once on the real
stream's test images. ``--rows`` runs some rows (two processes on two cores, one folder); the
record is written when every row has run (``--record`` writes what the named rows have).
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gradual_rotating_mnist import WINDOW, kumar_conv_net, protocol, rotated

from pyro_cl import VCL, Wiener
from pyro_cl.app.records import make_record, write_record
from pyro_cl.app.selection import (
    choose_and_test,
    kept_numbers,
    parse_protocol,
    protocol_parser,
    rows_named,
)
from pyro_cl.learner.self_training import self_train
from pyro_cl.nn import make_bayesian

#: The validation stream's parts from the 6,000 labelled source images: the images fitted,
#: those scored, a window's.
VALIDATION_SIZES = (2000, 1000, 1000)
#: Windows of the real stream (42,000 intermediate images in windows of 2,000).
WINDOWS = 21
#: The transitions between windows a user could pick: none, or Wiener of these strengths.
STRENGTHS = (0.0, 0.1, 1.0, 10.0)
CHOSEN = "gradual self-training + the transition chosen on validation"
SETTINGS = {
    "epochs": 10,
    "source_epochs": 20,
    "keep": 0.9,
    "batch_size": 256,
    "num_particles": 1,
    "num_predictive_samples": 20,
}


def validation_protocol(
    images: np.ndarray,
    labels: np.ndarray,
    angles: np.ndarray,
    seed: int,
    sizes: tuple[int, int, int] = VALIDATION_SIZES,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The validation stream from the labelled source alone (module docstring).

    :param images: the labelled source's upright 28x28 images (the protocol's source and
        source validation, before rotation), ``labels`` theirs and ``angles`` the angles the
        protocol gave them (0-5°).
    :param sizes: the images fitted, the images scored and a window's images.
    :returns: ``{"source": (x, y), "windows": [x, ...], "target": (x, y)}``: the validation
        source at its own angles, 21 windows of unlabelled images at the real windows' angles, and
        the labelled validation target at 55-60°.
    """
    fitted, scored, window = sizes
    if fitted + scored >= len(images):
        raise ValueError(f"{len(images)} labelled images leave no pool for sizes {sizes}")
    rng = np.random.default_rng([seed, 68])
    order = rng.permutation(len(images))
    fit, target, pool = order[:fitted], order[fitted : fitted + scored], order[fitted + scored :]
    count = WINDOWS * window
    drawn = np.concatenate([rng.permutation(pool) for _ in range(-(-count // len(pool)))])[:count]
    window_angles = 5 + 55 * np.arange(count) / count  # the real windows' angles, 5° to 60°
    windows = rotated(images[drawn], window_angles).split(window)
    return {
        "source": (rotated(images[fit], angles[fit]), torch.as_tensor(labels[fit])),
        "windows": list(windows),
        "target": (
            rotated(images[target], rng.uniform(55, 60, len(target))),
            torch.as_tensor(labels[target]),
        ),
    }


def learner(seed: int, strength: float, settings: dict) -> VCL:
    """Kumar et al.'s conv net made Bayesian, as VCL, a Wiener transition of ``strength`` prior
    scales a window between the windows (none at 0)."""
    torch.manual_seed(seed)  # the deterministic net's initial values, which become the means
    return VCL(
        make_bayesian(kumar_conv_net()),
        transition=Wiener(strength, 1.0) if strength > 0 else None,
        epochs=settings["epochs"],
        first_epochs=settings["source_epochs"],
        batch_size=settings["batch_size"],
        num_particles=settings["num_particles"],
        num_predictive_samples=settings["num_predictive_samples"],
        seed=seed,
        progress=False,
    )


def images(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, 1, 28, 28)


def run_method(method: str, strength: float, seed: int, parts: dict, settings: dict) -> VCL:
    """One row's learner after its data: ``parts`` holds ``"source"`` (labelled), ``"windows"``
    (unlabelled, in order), ``"target"`` (the one-step row's images, the oracle's labels)."""
    fit = learner(seed, strength, settings)
    if method == "oracle":
        fit.observe((images(parts["target"][0]), parts["target"][1]))
        return fit
    fit.observe((images(parts["source"][0]), parts["source"][1]))
    if method == "target":
        self_train(fit, images(parts["target"][0]), keep=settings["keep"])
    elif method == "gradual":
        for window in parts["windows"]:
            self_train(fit, images(window), keep=settings["keep"])
    return fit


def rows() -> dict[str, dict[str, dict]]:
    """Each row's grid: ``{row: {setting: {"method", "strength"}}}``."""

    def one(method: str) -> dict[str, dict]:
        return {"as given": {"method": method, "strength": 0.0}}

    strengths = {
        ("no transition" if s == 0 else f"Wiener {s:g}"): {"method": "gradual", "strength": s}
        for s in STRENGTHS
    }
    return {
        "source only": one("source"),
        "target self-training (one step)": one("target"),
        "gradual self-training": one("gradual"),
        CHOSEN: strengths,
        "oracle (the target's labels)": one("oracle"),
    }


def main(argv: list[str] | None = None) -> None:
    # its kept runs hold the schedule beside each setting, which its record does not: no
    # --resume-from (it resumes from its --folder)
    parser = protocol_parser(
        __doc__.split("\n\n")[0], "results/gradual_protocol", from_record=False
    )
    parser.add_argument("--selection-seeds", type=int, nargs="+", default=[0])
    args = parse_protocol(parser, argv)
    settings, sizes = dict(SETTINGS), VALIDATION_SIZES
    if args.tiny:
        settings.update(epochs=1, source_epochs=1, num_predictive_samples=2)
        sizes = (200, 100, 20)
    table = rows_named(rows(), args.rows, parser)
    cache: dict[int, dict] = {}

    def streams(seed: int) -> dict:
        if seed not in cache:
            data = protocol(args.data_root, seed, upright=True)
            if args.tiny:  # a tenth of every real part
                data = {
                    k: v
                    if k == "labelled upright"
                    else (v[0][: len(v[0]) // 10], v[1][: len(v[1]) // 10])
                    for k, v in data.items()
                }
            cache[seed] = data
        return cache[seed]

    def run_one(row: str, setting: str, fields: dict, seed: int, share: float | None) -> dict:
        def run(place: Path | None) -> dict:
            data = streams(seed)
            if share is None:  # the real stream, its test images read once
                parts = {
                    "source": data["source"],
                    "windows": list(data["intermediate"][0].split(WINDOW)),
                    "target": data["target"],
                }
                scored = data["test"]
            else:  # the labelled source alone
                upright, labels_, angles = data["labelled upright"]
                parts = validation_protocol(upright, labels_, angles, seed, sizes)
                scored = parts["target"]
            started = time.perf_counter()
            fit = run_method(fields["method"], fields["strength"], seed, parts, settings)
            result = fit.evaluate((images(scored[0]), scored[1]))
            return {
                "ACC": 100 * result["accuracy"],
                "log-lik.": result["log_likelihood"],
                "ECE": 100 * result["calibration_error"],
                "seconds": time.perf_counter() - started,
            }

        numbers = kept_numbers(
            args.folder, row, setting, {**fields, "settings": settings}, seed, share, run
        )
        split = "validation" if share is not None else "test"
        print(f"seed {seed}, {row}, {setting} ({split}): {numbers['ACC']:.1f}%", flush=True)
        return numbers

    # the share marks a validation run: the validation stream is the labelled source's own
    measured, selection = choose_and_test(
        table, args.seeds, run_one, fraction=1.0, selection_seeds=args.selection_seeds,
        test=not args.validation_only,
    )  # fmt: skip
    if args.validation_only or (args.rows is not None and not args.record):
        return
    record = make_record(
        "gradual-rotating-mnist" + ("-tiny" if args.tiny else ""),
        command="python benchmarks/gradual_protocol.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        seeds=args.seeds,
        schedule=settings,
        data="MNIST rotated as Kumar et al.'s rotated_mnist_60_conv_experiment (0-5° source, "
        "5-60° intermediate, 55-60° target and test)",
        rows=measured,
        metrics=["ACC", "log-lik.", "ECE", "seconds"],
        selection=selection,
        digits=2,
        notes="Accuracy and ECE in % on the 10,000 MNIST test images at 55-60°, log-likelihood "
        "the mean per image; seconds a run. The transition was chosen on a validation stream made "
        "of the labelled source alone (2,000 images fitted, 21 windows of 1,000 drawn from "
        "3,000 others at the real windows' angles, 1,000 labelled images at 55-60° scored), at "
        f"seeds {args.selection_seeds}.",
    )
    print(f"wrote {write_record(record)}")


if __name__ == "__main__":
    main()
