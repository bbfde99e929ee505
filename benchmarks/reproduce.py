"""Every paper table at the papers' schedules and seeds, one command, resumable.

    python benchmarks/reproduce.py --dry-run                       # the plan, with time estimates
    python benchmarks/reproduce.py --device cuda --jobs 4 --data-root data
    python benchmarks/reproduce.py --tables vcl generative --seeds 0 --schedule short

The set is a list of *rows* (one method on one benchmark at one setting: a line of a paper's
table), grouped into *tables* (``vcl``: VCL paper section 6.1 and figure 3; ``vogn``: VOGN thesis
4.3-4.5 with the split CIFAR-10 stand-in; ``ibp``: the H-IBP supplement's table 1 and figures
5/8 with an H-IBP row; ``baselines``: EWC/SI/LP of VCL section 6.1; ``generative``: VCL section
6.2). Each row runs once per seed as its own command (a benchmark script or ``pyro-cl run``,
with ``--seeds s --output <folder>``), so the set runs in pieces: a piece whose folder holds
``piece.json`` is finished and skipped, and ``--jobs N`` keeps N pieces in flight at once (small
nets leave a GPU idle otherwise). After the pieces it writes ``table.md`` beside them (every row:
the paper's number, ours as mean ± std over the finished seeds, and wall time), which
``--update-results`` also writes into docs/lab/reproduce.md between the ``reproduce`` markers.

``--schedule paper`` is the papers' (what a GPU runs); ``short`` the shortened CPU schedules of
the scripts (labelled so in the table); ``tiny`` is for tests (seconds; numbers meaningless).
``--dry-run`` prints the plan: for every piece its command and an estimate of its time on
``--device`` (the row's training steps times the measured time of one reference step there).
``--table-only`` runs nothing and writes the table of what has finished (rows with no finished
seed read "not run": the list of what remains).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LEDGER = HERE / "reproduce_ledger.json"
MARKERS = ("<!-- reproduce:begin -->", "<!-- reproduce:end -->")
TABLES = ("vcl", "vogn", "ibp", "baselines", "generative")
SCHEDULES = ("paper", "short", "tiny")

#: What the ``tiny`` schedule adds to every command of a kind (seconds per piece, for tests).
TINY = {
    "classification": ["--epochs", "1", "--hidden", "8", "--particles", "1",
                       "--predictive-samples", "2", "--refit-epochs", "1",
                       "--batch-size", "64", "--ml-init-epochs", "0"],
    "generative": ["--epochs", "1", "--hidden", "8", "--particles", "1", "--test-samples", "2",
                   "--test-points", "3", "--generated", "3", "--classifier-epochs", "1"],
}  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One line of a paper's table.

    :ivar command: the script under benchmarks/ (without ``.py``) or ``"run"`` (``pyro-cl
        run``), and its arguments; the schedule, seed, device, data and output are added.
    :ivar method: the method label whose runs the row reports.
    :ivar metric: ``"ACC"`` (average accuracy after the last task, %), ``"scratch"`` (the
        mean over tasks of each task's test accuracy when trained alone from scratch, %: the
        thesis's "From Scratch" row, from a run with ``--forward-transfer``) or ``"test_ll"``
        (mean test log-likelihood after the last task, nats).
    :ivar paper: the paper's number (text, as printed there).
    :ivar steps: optimiser steps of one seed at the paper's schedule (for the time estimate).
    :ivar cost: the cost of one step relative to the reference step (784-100-100-10 VCL,
        batch 256, 10 Monte Carlo samples).
    :ivar evaluation: the piece's evaluations at the paper's settings (every seen task's test
        set after every step; the generative rows' importance sampling), in reference steps,
        measured where they are more than a few percent of the training (else 0).
    :ivar seeds: the paper's seeds.
    :ivar schedules: the schedules the row's command takes (``--schedule``), if any.
    """

    table: str
    name: str
    command: tuple[str, ...]
    method: str
    metric: str
    paper: str
    steps: int
    cost: float = 1.0
    evaluation: float = 0.0
    seeds: tuple[int, ...] = (0, 1, 2)
    schedules: tuple[str, ...] = ("paper", "short")
    kind: str = "classification"
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.table}/{self.name}"


#: Seconds of one reference step on one CPU thread (the unit the rows' evaluations are measured
#: in; ``--dry-run`` measures the step on the machine at hand).
REFERENCE_STEP_SECONDS = 0.0151
#: Permuted MNIST's evaluations in reference steps: 55 test sets of 10,000 images with
#: 100 samples after the 10 tasks, 2.0 s each on one CPU thread (2026-11-25 probes, two-task
#: pieces of one or two epochs: VCL 14.4 ms a training step, VOGN with 10 samples 25 ms, the
#: IBNN 11.5 ms and 1.6 s an evaluation).
PERMUTED_EVALUATION = 55 * 2.0 / REFERENCE_STEP_SECONDS


#: A split step of VCL is a whole task (~12,000 MNIST points) with 10 samples: a split-MNIST VCL
#: piece took 2289 s on one CPU thread (beside another piece), 250 reference steps (15.1 ms,
#: 2 threads, idle) per step; split notMNIST's ~1,600 points a task scale that to ~33.
VCL_SPLIT_STEP_COST = {"split-mnist": 250.0, "split-notmnist": 33.0}


def _vcl_rows() -> list[Row]:
    rows = []
    # The VCL paper's text (section 6.1) prints VCL, the random coreset and (permuted MNIST) both
    # coresets; the rest can only be read off its figures 2, 4 and 5, to the figures' precision.
    paper = {
        "permuted-mnist": {"vcl": "90", "vcl-random": "93", "vcl-kcenter": "93",
                           "coreset-only": "≈82 (read off fig. 2)"},
        "split-mnist": {"vcl": "97.0", "vcl-random": "≈98.4 (text: 'adding the coreset')",
                        "vcl-kcenter": "≈98.4 (text: 'adding the coreset')",
                        "coreset-only": "≈95 (read off fig. 4)"},
        "split-notmnist": {"vcl": "92.0", "vcl-random": "96",
                           "vcl-kcenter": "≈96 (read off fig. 5)",
                           "coreset-only": "≈94 (read off fig. 5)"},
    }  # fmt: skip
    steps = {"permuted-mnist": 10 * 100 * 235, "split-mnist": 5 * 120, "split-notmnist": 5 * 120}
    cost = {"permuted-mnist": 1.0, **VCL_SPLIT_STEP_COST}
    # coreset-only trains on the coresets alone: split pieces took 58-118 s (MNIST) and 32-37 s
    # (notMNIST) on one thread; permuted MNIST's growing coreset (200 a task, batch 256) makes
    # Σ_t ⌈200t/256⌉ = 48 steps an epoch over the tasks, 100 epochs
    coreset_only = {"permuted-mnist": (4800, 1.0), "split-mnist": (600, 10.0),
                    "split-notmnist": (600, 4.0)}  # fmt: skip
    for benchmark, methods in paper.items():
        for method, value in methods.items():
            size = (steps[benchmark], cost[benchmark])
            if method == "coreset-only":
                size = coreset_only[benchmark]
            rows.append(
                Row("vcl", f"{benchmark} {method}",
                    ("vcl_paper", "--benchmark", benchmark, "--methods", method),
                    method, "ACC", value, size[0], cost=size[1],
                    evaluation=PERMUTED_EVALUATION if benchmark == "permuted-mnist" else 0.0)
            )  # fmt: skip
    # fine-tuning (Adam, no prior) at the same schedule: how much the stream makes a net forget
    # (the split streams' are the baselines table's); a point net's step, evaluated once rather
    # than with 100 samples, took 4.3 ms on one thread beside two other runs, ~0.3 reference steps
    rows.append(
        Row("vcl", "permuted-mnist finetune",
            ("vcl_paper", "--benchmark", "permuted-mnist", "--methods", "finetune"),
            "finetune", "ACC", "– (not in the paper)", steps["permuted-mnist"], cost=0.3)
    )  # fmt: skip
    for size in (200, 400, 1000, 2500, 5000):
        rows.append(
            Row("vcl", f"figure 3 coreset {size}",
                ("coreset_sweep", "--sizes", str(size), "--methods", "vcl-random"),
                "vcl-random", "ACC", "fig. 3", 10 * 100 * 235, schedules=())
        )  # fmt: skip
    return rows


def _vogn_rows() -> list[Row]:
    return [
        Row("vogn", "permuted-mnist vogn", ("vogn_paper", "--benchmark", "permuted-mnist"),
            "vogn", "ACC", "94.0 ± 0.8", 10 * 100 * 235, cost=1.7,
            evaluation=PERMUTED_EVALUATION),
        Row("vogn", "split-mnist vogn", ("vogn_paper", "--benchmark", "split-mnist"),
            "vogn", "ACC", "98.8 ± 0.1", 5 * 100 * 47, cost=1.5),
        Row("vogn", "split-mnist vogn, each task from the last posterior",
            ("vogn_paper", "--benchmark", "split-mnist", "--between-tasks", "prior"),
            "vogn", "ACC", "98.8 ± 0.1", 5 * 100 * 47, cost=1.5),
        # fine-tuning at the thesis's schedule (no samples to shorten: paper and short agree);
        # measured 2026-11-26 beside two other runs: 3.7 ms a step on split, 4.3 ms on permuted
        *(Row("vogn", f"{benchmark} finetune",
              ("vogn_paper", "--benchmark", benchmark, "--methods", "finetune"),
              "finetune", "ACC", "– (not in the thesis)", steps, cost=0.3)
          for benchmark, steps in (("permuted-mnist", 10 * 100 * 235),
                                   ("split-mnist", 5 * 100 * 47))),
        *_split_cifar_rows(),
    ]  # fmt: skip


def _split_cifar_rows() -> list[Row]:
    # The thesis's table 2 is on CIFAR-10/100 (CIFAR-100 is not in ../shared/data): its numbers
    # stand beside the split CIFAR-10 stand-in's rows for orientation, not as a target. Its
    # baselines' λ are not printed (EWC and VCL came from S. Swaroop, SI from Zenke et al.):
    # ours run at their defaults. "joint" is Adam on every task so far, the thesis's "Joint".
    thesis = {"vogn": "74.4 ± 0.4", "ewc": "71.6 ± 0.9", "si": "73.5 ± 0.5",
              "vcl-random": "67.4 ± 1.4", "finetune": "–", "joint": "78.1 ± 0.3"}  # fmt: skip
    # per step at the thesis's settings on one CPU thread beside one other run (2026-11-25,
    # four steps of 256 images): VOGN with 10 samples 15.2 s (11.0 s on an idle machine), VCL
    # with 10 samples 14.7 s, EWC 0.41 s (fine-tuning and SI taken as EWC); joint training's
    # epochs cover every task so far, 3x the steps over the 5 tasks
    cost = {"vogn": 1000.0, "vcl-random": 970.0, "ewc": 27.0, "si": 27.0, "finetune": 27.0,
            "joint": 81.0}  # fmt: skip
    # the Bayesian rows predict with 100 samples: 15 test sets of 2,000 images after the 5
    # tasks, 210 s each on one thread (10.5 s for 1,000 images with 10 samples)
    sampled = 15 * 210 / REFERENCE_STEP_SECONDS
    return [
        Row("vogn", f"split-cifar10 {method} (stand-in for CIFAR-10/100)",
            ("vogn_cifar", "--benchmark", "split-cifar10", "--methods", method),
            method, "ACC", f"n/a (thesis on CIFAR-10/100: {value})", 5 * 60 * 40,
            cost=cost[method], evaluation=sampled if method in ("vogn", "vcl-random") else 0.0,
            seeds=(0, 1, 2, 3, 4), schedules=())
        for method, value in thesis.items()
    ] + [
        # the thesis's "From Scratch" (table 2: 73.6 ± 0.4): Adam on each task alone, the mean of
        # the tasks' test accuracies, read from a fine-tuning run with --forward-transfer
        Row("vogn", "split-cifar10 from scratch (Adam on each task alone)",
            ("vogn_cifar", "--benchmark", "split-cifar10", "--methods", "finetune",
             "--forward-transfer"),
            "finetune", "scratch", "n/a (thesis on CIFAR-10/100: 73.6 ± 0.4)", 2 * 5 * 60 * 40,
            cost=cost["finetune"], seeds=(0, 1, 2, 3, 4), schedules=()),
        # the thesis's prior pull per unit of step, λ_p/N, on the stand-in's 10,000-image tasks
        # (λ_p = 120 · 10,000/50,000 = 24, prior scale 1/√24) with a 100x step: ours, measured
        # to learn where the thesis's settings do not at a short schedule (docs/lab/natural_gradient.md)
        Row("vogn", "split-cifar10 vogn at the thesis's λ_p/N (ours: α = 0.1, λ_p = 24)",
            ("vogn_cifar", "--benchmark", "split-cifar10", "--methods", "vogn",
             "--fitter-learning-rate", "0.1", "--prior-scale", "0.2041"),
            "vogn", "ACC", "n/a (ours; thesis VOGN on CIFAR-10/100: 74.4 ± 0.4)", 5 * 60 * 40,
            cost=cost["vogn"], evaluation=sampled, seeds=(0, 1, 2, 3, 4), schedules=()),
        # the penalties at strengths measured to protect on the stand-in (docs/lab/baselines.md: EWC at
        # its default λ = 1 forgets as much as fine-tuning does, and at 20 epochs a task λ = 100
        # as much too): ours, beside the defaults
        *(Row("vogn", f"split-cifar10 {method} at {knob} = {shown} (ours)",
              ("vogn_cifar", "--benchmark", "split-cifar10", "--methods", method,
               "--penalty-strength", strength),
              method, "ACC", f"n/a (ours; thesis on CIFAR-10/100: {thesis[method]})",
              5 * 60 * 40, cost=cost[method], seeds=(0, 1, 2, 3, 4), schedules=())
          for method, knob, strength, shown in (("ewc", "λ", "100", "100"),
                                                ("ewc", "λ", "10000", "10⁴"),
                                                ("si", "c", "100", "100"))),
    ]  # fmt: skip


def _ibp_rows() -> list[Row]:
    # paper numbers: the supplement's table 1 (S CL1 and P CL1, IBNN, 5 runs)
    # a split-MNIST IBNN piece (whole-task steps, 10 samples, masks for every point) took 3013 s
    # on one CPU thread beside another piece: ~66 reference steps (15.1 ms) per step
    return [
        Row("ibp", "split-mnist ibnn", ("ibp_paper", "--benchmark", "split-mnist-ibp",
            "--widths"), "vcl-ibnn", "ACC", "95.3 ± 2.0", 5 * 600, cost=66.0),
        Row("ibp", "split-mnist hibnn", ("ibp_paper", "--benchmark", "split-mnist-ibp",
            "--net", "hibnn", "--widths"), "vcl-hibnn", "ACC", "(H-IBP row)", 5 * 600, cost=66.0),
        Row("ibp", "permuted-mnist ibnn", ("ibp_paper", "--benchmark", "permuted-mnist-ibp",
            "--widths"), "vcl-ibnn", "ACC", "95.6 ± 0.2", 10 * 200 * 235, cost=0.8,
            evaluation=0.8 * PERMUTED_EVALUATION),
        # fine-tuning a point net of one hidden layer of K = 100 units with the presets'
        # schedule: how much each stream makes a net forget. The short-schedule runs (one thread
        # beside two other runs, 2026-11-26) took 50 s for ~724 whole-task steps on split MNIST
        # (ML start included), 69 ms each, and 180 s for ~70,500 batch steps on permuted MNIST,
        # 2.6 ms each: 4.6 and 0.17 reference steps
        Row("ibp", "split-mnist finetune (one hidden layer of 100)",
            ("run", "--benchmark", "split-mnist-ibp", "--net", "mlp", "--hidden", "100",
             "--methods", "finetune"), "finetune", "ACC", "– (not in the supplement)", 5 * 600,
            cost=4.6, schedules=()),
        Row("ibp", "permuted-mnist finetune (one hidden layer of 100)",
            ("run", "--benchmark", "permuted-mnist-ibp", "--net", "mlp", "--hidden", "100",
             "--methods", "finetune"), "finetune", "ACC", "– (not in the supplement)",
            10 * 200 * 235, cost=0.17, schedules=()),
    ]  # fmt: skip


def _baseline_rows() -> list[Row]:
    rows = []
    # the λ the VCL paper's appendix chose (baselines_paper.py's PAPER_LAMBDA), LP with its
    # 200-point Fisher; "ours" is the λ our single-seed sweep picked, beside it, labelled so
    strengths = {"split-mnist": {"ewc": "1", "si": "1", "lp": "1"},
                 "split-notmnist": {"ewc": "10000", "si": "0.1", "lp": "1"}}  # fmt: skip
    ours = {"split-mnist": {"ewc": "10000", "si": "0.01", "lp": "10"},
            "split-notmnist": {"ewc": "100", "si": "2", "lp": "0.01"}}  # fmt: skip
    paper = {"split-mnist": {"ewc": "63.1", "si": "98.9", "lp": "61.2"},
             "split-notmnist": {"ewc": "71", "si": "94", "lp": "63"}}  # fmt: skip
    # whole-task steps: a split-MNIST piece took ~127 s on one CPU thread (beside other work),
    # 600 steps of ~14 reference steps (15.1 ms) each; split notMNIST's took ~20 s
    cost = {"split-mnist": 14.0, "split-notmnist": 2.2}
    schedule = ("--epochs", "120", "--batch-size", "0", "--ml-init-epochs", "0")
    for benchmark, methods in paper.items():

        def row(name: str, method: str, value: str, *options: str, step_cost=None, at=benchmark):
            return Row("baselines", f"{at} {name}",
                       ("run", "--benchmark", at, "--methods", method, *options),
                       method, "ACC", value, 5 * 120, cost=step_cost or cost[at],
                       schedules=())  # fmt: skip

        # how much the schedule makes a net forget, and the MAP strawman of section 5
        rows.append(row("finetune", "finetune", "– (not in the paper)", *schedule))
        for method, value in methods.items():
            strength = _strength_options(method, strengths[benchmark][method])
            rows.append(row(method, method, value, *strength, *schedule))
        for method in methods:
            strength = ours[benchmark][method]
            rows.append(row(f"{method}, ours (λ = {strength})", method, "– (our λ)",
                            *_strength_options(method, strength), *schedule))  # fmt: skip
        rows.append(row("map", "map", "– (section 5, no number printed)", *schedule))
        rows.append(row("single-head finetune", "finetune", "– (not in the paper)",
                        "--single-head", *schedule))  # fmt: skip
        rows.append(row("single-head ewc", "ewc", "figs. 12 / 14 (no number printed)",
                        "--single-head", *_strength_options("ewc", strengths[benchmark]["ewc"]),
                        *schedule))  # fmt: skip
        # batch VI refits every task so far from the initial prior (the VCL preset's schedule):
        # 1 + 2 + ... + 5 = 15 tasks' steps, 3x VCL's, at VCL's whole-task step cost
        rows.append(row("batch-vi (upper bound)", "batch-vi", "fig. 4's upper bound (no number)",
                        step_cost=3 * VCL_SPLIT_STEP_COST[benchmark]))  # fmt: skip
    return rows


def _strength_options(method: str, strength: str) -> tuple[str, ...]:
    if method == "lp":
        return ("--fitter-strength", strength, "--fitter-curvature", "fisher",
                "--fitter-hessian-samples", "200")  # fmt: skip
    return ("--penalty-strength", strength)


def _generative_rows() -> list[Row]:
    # Probes on one CPU thread (2026-11-25, one epoch a task, 20 test images a digit): a VCL
    # step (batch 50, 10 samples) 86 ms, a fine-tuning step 12 ms (EWC, SI and LP taken to cost
    # the same: their penalties add a few element-wise terms); the importance-sampled
    # test-LL (5,000 samples) 0.31 s an image for VCL's sampled decoder, 0.16 s for a point
    # estimate's (the same on notMNIST's letters, 94 ms a VCL step). Every seen task's test
    # images are evaluated after each of the 10 tasks (55 test sets): ~1,000 a digit, 200 a
    # letter in our notMNIST subset. The evaluations outweigh a point estimate's training.
    per_image = {"vcl": 0.31}
    test_images = {"generative-mnist": 1000, "generative-notmnist": 200}
    rows = []
    for benchmark, epochs in (("generative-mnist", 200), ("generative-notmnist", 400)):
        for method in ("vcl", "finetune", "ewc", "si", "lp"):
            seconds = 55 * test_images[benchmark] * per_image.get(method, 0.16)
            evaluation = seconds / REFERENCE_STEP_SECONDS
            rows.append(
                Row("generative", f"{benchmark} {method}",
                    ("run", "--benchmark", benchmark, "--methods", method),
                    method if method not in ("ewc", "si", "lp") else f"{method} λ=1",
                    "test_ll", "fig. 7 (no numbers printed)",
                    10 * epochs * (120 if "-mnist" in benchmark else 16),
                    cost=5.7 if method == "vcl" else 0.8, evaluation=evaluation,
                    seeds=(0,), schedules=(), kind="generative")
            )  # fmt: skip
    return rows


ROWS: list[Row] = [
    *_vcl_rows(),
    *_vogn_rows(),
    *_ibp_rows(),
    *_baseline_rows(),
    *_generative_rows(),
]


# ----------------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class Piece:
    """One seed of one row: a command and the folder it writes."""

    row: Row
    seed: int
    folder: Path
    argv: tuple[str, ...]

    @property
    def done(self) -> bool:
        return (self.folder / "piece.json").exists()


def piece_argv(row: Row, seed: int, schedule: str, folder: Path, args) -> list[str]:
    """The command line of ``row`` for ``seed`` (without the interpreter)."""
    script, *options = row.command
    if script == "run":
        argv = ["-m", "pyro_cl.app.cli", "run", *options]
    else:
        argv = [str(HERE / f"{script}.py"), *options]
    if row.schedules and schedule in row.schedules:
        argv += ["--schedule", schedule]
    elif row.schedules and schedule == "tiny":
        argv += ["--schedule", "short"]
    argv += ["--seeds", str(seed), "--output", str(folder), "--data-root", args.data_root]
    argv += ["--no-progress"]
    if args.device:
        argv += ["--device", args.device]
    if schedule == "tiny":
        argv += TINY[row.kind]
        if row.kind == "classification" and _keeps_points(options):
            argv += ["--coreset-size", "4"]
    return argv


def _keeps_points(options: Sequence[str]) -> bool:
    """Whether a command's methods keep points (its script's defaults do, when it names none):
    a coreset size is refused for methods that keep none."""
    from pyro_cl.app.methods import METHODS

    if "--methods" not in options:
        return True
    names = options[options.index("--methods") + 1].split(",")
    return any(METHODS[name].keeps_points for name in names if name in METHODS)


def plan(args) -> list[Piece]:
    """The pieces ``args`` asks for, in table order."""
    rows = [r for r in ROWS if r.table in args.tables]
    if args.rows:
        rows = [r for r in rows if any(_selects(text, r, rows) for text in args.rows)]
        if not rows:
            raise ValueError(f"--rows {args.rows}: no row of tables {args.tables} matches")
    pieces = []
    for row in rows:
        for seed in args.seeds if args.seeds is not None else row.seeds:
            folder = Path(args.output) / args.schedule / row.table / _slug(row.name) / f"seed{seed}"
            argv = piece_argv(row, seed, args.schedule, folder, args)
            pieces.append(Piece(row, seed, folder, tuple(argv)))
    return pieces


def _selects(text: str, row: Row, rows: Sequence[Row]) -> bool:
    """``text`` names ``row`` exactly (its name or ``table/name``), or, naming no row exactly,
    is part of its ``table/name``."""
    if any(text in (r.name, r.key) for r in rows):
        return text in (row.name, row.key)
    return text in row.key


def reference_step_seconds(device: str) -> float:
    """Seconds of one reference step (784-100-100-10 VCL, batch 256, 10 Monte Carlo samples)
    on ``device``, measured here."""
    import torch

    from pyro_cl import VCL
    from pyro_cl.nn import BayesianMLP

    x = torch.rand(256 * 6, 784)
    y = torch.randint(0, 10, (256 * 6,))
    learner = VCL(BayesianMLP(784, [100, 100], 10), device=device, epochs=1, batch_size=256,
                  ml_init_epochs=0, progress=False)  # fmt: skip
    learner.observe((x, y))  # warm-up
    start = time.perf_counter()
    learner.observe((x, y), task_id=0)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / 6


def _busy_note() -> str:
    """A warning where other work runs beside the measurement (a load average of more than half a
    core), which slows the reference step and so every estimate; empty otherwise."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load <= 0.5:
        return ""
    return (f" (the load average is {load:.1f} on {os.cpu_count()} cores: other work slows "
            "this step, and every estimate with it)")  # fmt: skip


def run_piece(piece: Piece) -> tuple[Piece, int, float, str]:
    """Run ``piece``'s command; on success write ``piece.json`` (command, seconds, date)."""
    piece.folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, *piece.argv], capture_output=True, text=True, cwd=HERE.parent
    )
    seconds = time.perf_counter() - start
    (piece.folder / "log.txt").write_text(completed.stdout + completed.stderr)
    if completed.returncode == 0:
        record = {
            "command": " ".join(["python", *piece.argv]),
            "seconds": seconds,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        (piece.folder / "piece.json").write_text(json.dumps(record, indent=1))
    tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or [""]
    return piece, completed.returncode, seconds, tail[0]


# ----------------------------------------------------------------------------- the table


def run_values(row: Row, folder: Path) -> dict[int, tuple[float, float]]:
    """``{seed: (value, wall seconds)}`` of the row's method in every ``results.json`` under
    ``folder``."""
    found = {}
    for path in sorted(folder.rglob("results.json")):
        for run in json.loads(path.read_text())["runs"]:
            if run["method"] != row.method:
                continue
            if row.metric == "scratch":
                scratch = run.get("details", {}).get("scratch_accuracy")
                if scratch is None:  # run without --forward-transfer
                    continue
                value = float(np.mean(scratch)) * 100
                seconds = run["details"].get("scratch_wall_time_s", 0.0)
            else:
                summary = run.get("summary", run)  # before the one result type: top level
                value = summary["ACC"] * 100 if row.metric == "ACC" else summary["test_ll"]
                seconds = run.get("wall_time_s", 0.0)
            found[int(run["seed"])] = (float(value), float(seconds))
    return found


# ----------------------------------------------------------------------------- the ledger
#
# What has been measured, kept in the repository (``reproduce_ledger.json``), so that the table
# is the same on every clone: one entry per row and schedule, ``{"row": key, "schedule": label,
# "seeds": {seed: value}, "seconds": total wall time or null, "sources": [...]}``. A finished
# piece of the paper or short schedule is recorded in it; runs of the benchmark scripts made
# outside this command (a shorter schedule, say) are added with ``--record``, read from their
# ``results.json``. Where only a mean ± std over seeds was kept, an entry has ``"summary":
# {"mean", "std", "seeds"}`` instead of ``"seeds"``.


def read_ledger(path: Path) -> list[dict]:
    """The ledger's entries (none where there is no ledger)."""
    return json.loads(path.read_text())["entries"] if path.exists() else []


def ledger_entry(entries: list[dict], key: str, schedule: str) -> dict:
    """The entry of row ``key`` at ``schedule`` in ``entries``, added empty if there is none."""
    for entry in entries:
        if (entry["row"], entry["schedule"]) == (key, schedule):
            return entry
    entry = {"row": key, "schedule": schedule, "seeds": {}, "seconds": 0.0, "sources": []}
    entries.append(entry)
    return entry


def record(
    path: Path,
    row: Row,
    schedule: str,
    values: dict[int, tuple[float, float]],
    source: str,
) -> None:
    """Add ``{seed: (value, seconds)}`` to ``row``'s entry for ``schedule``, noting where they
    came from: a seed measured again replaces its value, and its seconds add to the entry's
    wall time (the time every recorded run took)."""
    if not values:
        raise ValueError(f"no finished run of {row.method!r} to record for {row.key!r}")
    entries = read_ledger(path)
    entry = ledger_entry(entries, row.key, schedule)
    if "summary" in entry:
        raise ValueError(f"{row.key!r} at {schedule!r} holds only a summary: record another label")
    for seed, (value, seconds) in sorted(values.items()):
        entry["seeds"][str(seed)] = round(value, 4)
        entry["seconds"] = (entry["seconds"] or 0.0) + round(seconds, 1)
    if source not in entry["sources"]:
        entry["sources"].append(source)
    path.write_text(json.dumps({"entries": entries}, indent=1, ensure_ascii=False) + "\n")


def record_pieces(path: Path, pieces: Sequence[Piece], schedule: str) -> None:
    """Record those of ``pieces`` that finished, once, as they finish (not on the ``tiny``
    schedule: its numbers mean nothing)."""
    if schedule == "tiny":
        return
    for piece in pieces:
        if piece.done:
            command = json.loads((piece.folder / "piece.json").read_text())["command"]
            values = {
                s: v for s, v in run_values(piece.row, piece.folder).items() if s == piece.seed
            }
            record(path, piece.row, schedule, values, command)


def paper_value(text: str) -> tuple[float, float] | None:
    """The paper's number and its spread from the row's text: ``"94.0 ± 0.8"`` → (94.0, 0.8); a
    value read off a figure (``"≈82 (read off fig. 2)"``) gets the figure's precision, 1; a
    printed value without a spread gets 0. ``None`` where the text has no number (a figure's
    number, "n/a", "–", "no number printed")."""
    match = re.search(r"(-?\d+(?:\.\d+)?)(?:\s*±\s*(\d+(?:\.\d+)?))?", text)
    if match is None or text.startswith(("n/a", "fig", "–")) or "no number" in text:
        return None
    spread = float(match.group(2)) if match.group(2) else (1.0 if "≈" in text else 0.0)
    return float(match.group(1)), spread


def verdict(paper: str, values: list[float], schedule: str) -> str:
    """:func:`summary_verdict` of finished seeds' ``values``."""
    if not values:
        return "not run"
    return summary_verdict(paper, float(np.mean(values)), sample_sd(values), len(values), schedule)


def sample_sd(values: Sequence[float]) -> float:
    """The sample standard deviation (ddof 1) of ``values``; 0 for one value."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def summary_verdict(paper: str, ours: float, ours_std: float, seeds: int, schedule: str) -> str:
    """``reproduced within noise`` when ours and the paper's differ by at most twice the noise of
    the difference — the paper's printed spread and our mean's standard error, ``sd / √n`` over
    ``n`` seeds (``sd`` the sample sd, ddof 1; 0 for one seed) — and at least 0.5 (a
    printed number's rounding); ``not reproduced (higher / lower)`` otherwise; a shorter
    schedule says so."""
    reference = paper_value(paper)
    if reference is None:
        return "no paper number"
    value, spread = reference
    standard_error = ours_std / seeds**0.5 if seeds > 1 else 0.0
    tolerance = max(0.5, 2 * (spread**2 + standard_error**2) ** 0.5)
    if abs(ours - value) <= tolerance:
        text = "reproduced within noise"
    else:
        text = f"not reproduced ({'higher' if ours > value else 'lower'})"
    return text if schedule == "paper" else f"{text}, at a shorter schedule"


def with_pieces(ledger: Sequence[dict], pieces: Sequence[Piece], schedule: str) -> list[dict]:
    """The ledger's entries with the finished ``pieces`` of ``schedule`` it does not hold yet
    (a ``tiny`` run's, or pieces finished before the ledger was kept)."""
    entries = [{**entry, "seeds": dict(entry.get("seeds", {}))} for entry in ledger]
    for piece in pieces:
        if not piece.done:
            continue
        values = run_values(piece.row, piece.folder)
        if piece.seed not in values:
            continue
        entry = ledger_entry(entries, piece.row.key, schedule)
        if "summary" in entry or str(piece.seed) in entry["seeds"]:
            continue
        entry["seeds"][str(piece.seed)] = values[piece.seed][0]
        piece_seconds = json.loads((piece.folder / "piece.json").read_text())["seconds"]
        entry["seconds"] = (entry["seconds"] or 0.0) + piece_seconds
    return entries


def table(pieces: Sequence[Piece], schedule: str, ledger: Sequence[dict] = ()) -> str:
    """The Markdown table of every row with at least one piece planned: paper number, ours,
    seeds, schedule and a :func:`verdict`, a line for each schedule the row was measured at (the
    ledger's and this command's finished pieces) and a "not run" line where it has none at
    ``schedule``."""
    lines = [
        "Ours: mean ± sample sd (ddof 1) over the seeds; † a mean ± sd transcribed from a lab "
        "note that kept no seed's value (its ddof as printed there); a schedule other than the "
        "paper's says what it shortens.",
        "",
        "| table | row | metric | paper | ours | seeds | schedule | verdict | wall time (s) |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- | ---: |",
    ]
    entries = with_pieces(ledger, pieces, schedule)
    rows = {piece.row.key: piece.row for piece in pieces}
    for row in rows.values():
        measured = {e["schedule"]: e for e in entries if e["row"] == row.key}
        unit = "test-LL (nats)" if row.metric == "test_ll" else "ACC %"
        if schedule not in measured:  # what remains to run at this schedule
            lines.append(f"| {row.table} | {row.name} | {unit} | {row.paper} | not run | 0 | "
                         f"{schedule} | not run | – |")  # fmt: skip
        for label, entry in measured.items():
            mark = "†" if "summary" in entry else ""
            if "summary" in entry:
                mean, std, count = (entry["summary"][k] for k in ("mean", "std", "seeds"))
            else:
                values = list(entry["seeds"].values())
                mean, std, count = float(np.mean(values)), sample_sd(values), len(values)
            seconds = "–" if not entry.get("seconds") else f"{entry['seconds']:.0f}"
            lines.append(
                f"| {row.table} | {row.name} | {unit} | {row.paper} | {mean:.2f} ± {std:.2f}{mark} | "
                f"{count} | {label} | {summary_verdict(row.paper, mean, std, count, label)} | {seconds} |"
            )
    return "\n".join(lines) + "\n"


def update_results(markdown: str, path: Path) -> None:
    """Replace the text between the reproduce markers of ``path`` (append them if missing)."""
    text = path.read_text() if path.exists() else ""
    begin, end = MARKERS
    block = f"{begin}\n{markdown}{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text).strip("_")


# ----------------------------------------------------------------------------- main


def record_runs(args, pieces: Sequence[Piece]) -> int:
    """``--record``: the runs under ``args.record`` of the one row ``--rows`` names, into the
    ledger at ``--label``'s schedule."""
    rows = {piece.row.key: piece.row for piece in pieces}
    if len(rows) != 1 or not args.label:
        raise SystemExit("reproduce: --record needs --rows naming one row and a --label")
    (row,) = rows.values()
    values = {}
    for folder in args.record:
        values.update(run_values(row, folder))
    try:
        record(args.ledger, row, args.label, values, " ".join(map(str, args.record)))
    except ValueError as error:
        raise SystemExit(f"reproduce: {error}") from None
    print(f"recorded {row.key} at {args.label!r}: seeds {sorted(values)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES))
    parser.add_argument("--rows", nargs="+", help="only rows whose 'table/name' contains one")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: each row's paper seeds")
    parser.add_argument("--schedule", choices=SCHEDULES, default="paper")
    parser.add_argument("--device", help="cpu or cuda (default: the scripts' choice)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output", default="results/reproduce")
    parser.add_argument("--jobs", type=int, default=1, help="pieces in flight at once")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and estimates")
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="write the table of the finished pieces; run nothing",
    )
    parser.add_argument("--update-results", action="store_true",
                        help="write the table into docs/lab/reproduce.md")  # fmt: skip
    parser.add_argument(
        "--ledger",
        type=Path,
        default=LEDGER,
        help="the record of measured pieces (default: the repository's)",
    )
    parser.add_argument(
        "--record",
        nargs="+",
        type=Path,
        metavar="FOLDER",
        help="record the runs under these folders (of the one row --rows "
        "names) in the ledger, at --label's schedule; run nothing",
    )
    parser.add_argument(
        "--label",
        help="with --record: the schedule the runs used, and what "
        "it shortens (e.g. '1/58 of the steps')",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.jobs < 1:
        raise SystemExit("reproduce: --jobs must be at least 1")
    try:
        pieces = plan(args)
    except ValueError as error:
        raise SystemExit(f"reproduce: {error}") from None
    if args.dry_run:
        step = reference_step_seconds(args.device or "cpu")
        total = 0.0
        print(f"reference step on {args.device or 'cpu'}: {1000 * step:.1f} ms{_busy_note()}")
        # the rows' step counts are the papers' schedules: other schedules get no estimate
        paper = args.schedule == "paper"
        for piece in pieces:
            training = piece.row.steps * piece.row.cost * step
            evaluation = piece.row.evaluation * step
            estimate = training + evaluation
            total += 0.0 if piece.done else estimate
            state = "done" if piece.done else "to run"
            if paper and not piece.done:
                state = f"~{estimate / 60:.1f} min"
                if evaluation:
                    state += f" = {training / 60:.1f} training + {evaluation / 60:.1f} evaluation"
            print(f"[{state}] {piece.row.key} seed {piece.seed}: python {' '.join(piece.argv)}")
        todo = sum(not p.done for p in pieces)
        when = f", ~{total / 60:.0f} min at one piece at a time" if paper else ""
        print(f"{todo} of {len(pieces)} pieces to run{when}")
        return 0
    if args.record:
        return record_runs(args, pieces)
    todo = [] if args.table_only else [piece for piece in pieces if not piece.done]
    print(f"{sum(p.done for p in pieces)} of {len(pieces)} pieces done; running {len(todo)}")
    failures = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for piece, code, seconds, tail in pool.map(run_piece, todo):
            status = "ok" if code == 0 else f"failed ({code}): {tail}"
            failures += code != 0
            print(f"{piece.row.key} seed {piece.seed}: {status} [{seconds:.0f} s]", flush=True)
    record_pieces(args.ledger, todo, args.schedule)  # what finished now; earlier pieces are in
    markdown = table(pieces, args.schedule, read_ledger(args.ledger))
    output = Path(args.output) / args.schedule
    output.mkdir(parents=True, exist_ok=True)
    (output / "table.md").write_text(markdown)
    print(markdown)
    if args.update_results:
        update_results(markdown, HERE.parent / "docs" / "lab" / "reproduce.md")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
