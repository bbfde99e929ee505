"""VCL that keeps learning: tempered VCL (GVCL's β-ELBO), task-specific FiLM layers and their
combination beside VCL, online EWC and fine-tuning, with the plasticity columns.

    OMP_NUM_THREADS=1 python benchmarks/keeps_learning.py --benchmark permuted-mnist \\
        --schedule short --seeds 0 1 2 --data-root ../shared/data

Two stages, each run in a folder of its own under ``--output`` (default
``results/keeps_learning/<benchmark>-<schedule>``) and skipped when its ``results.json``
exists, so the command resumes where it stopped (a run stopped half-way resumes at its next
task, from the checkpoint it saves after every task):

1. **choosing β** without the test sets: VCL and VCL + FiLM at every β of ``--betas`` on a
   held-out 10% of each task's training data (``--validation``), seed 0;
2. **the table**: every row at every seed on the test sets, each task also learnt alone by the
   same method (``--forward-transfer``: FWT and intransigence), the best β of stage 1 for the
   tempered rows.

``--on-validation`` runs the rows of ``--rows`` on the held-out share instead of the test sets
(folders ``validation-<row>-seed<n>``, no fresh fits), to choose among rows that stage 1 does
not sweep (GVCL's λ and β) without the test sets.

It then writes ``table.md`` (ACC, BWT, ECE, accuracy on each task right after learning it,
intransigence against a fresh fit, share of hidden weights still at the prior and hidden units in
use after the last task; mean ± std over seeds) and prints it, with ``accuracy.png`` (each
task's accuracy along the stream) and ``pruning.png`` (each shared layer's units in use and share
of weights at the prior after every task, for the rows with a posterior). Schedules are those of
``vcl_paper.py`` (``short``: permuted MNIST 5 of 100 epochs, split MNIST 1 of 10 MC samples) and,
for the split CIFAR-10 stand-in, of ``vogn_cifar.py``'s 5-epoch table (5 of the preset's 60
epochs, 1 of 10 MC samples to train and 10 to predict); ``long`` is that table's 20-epoch
schedule (split CIFAR only); ``sfsvi`` is S-FSVI's own schedule (split and permuted MNIST:
minibatches of 128, 20 and 10 epochs).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.methods import METHODS
from pyro_cl.app.plotting import plot_accuracy, plot_pruning
from pyro_cl.app.result import RunResult
from pyro_cl.app.runner import run_benchmark
from pyro_cl.metrics import sample_sd

#: The KL weights of the sweep (1 is VCL).
BETAS = (1.0, 0.3, 0.1, 0.03)

#: Changes to the presets' (the papers') settings that fit a 2-core CPU (as vcl_paper.py).
SCHEDULES = {
    "paper": {
        name: {} for name in ("permuted-mnist", "split-mnist", "split-notmnist", "split-cifar10")
    }
    | {"split-digits": {"epochs": 5}},
    "short": {
        "permuted-mnist": {"epochs": 5, "refit_epochs": 100},
        "split-mnist": {"num_particles": 1},
        "split-notmnist": {"num_particles": 1},
        # the 5-epoch split CIFAR table's schedule (vogn_cifar.py; docs/lab/keeps_learning.md, split CIFAR)
        "split-cifar10": {"epochs": 5, "num_particles": 1, "num_predictive_samples": 10},
        "split-digits": {"epochs": 5},
    },
    # the split CIFAR table's 20-epoch schedule, where EWC reaches the 86.9% the goal names
    # (vogn_cifar.py at --epochs 20; 1/3 of the preset's 60): hours a Bayesian row, so run in
    # pieces (each run resumes at its next task)
    "long": {
        "split-cifar10": {"epochs": 20, "num_particles": 1, "num_predictive_samples": 10},
    },
    # S-FSVI's own schedules (timrudner/S-FSVI, notebooks/configs: split MNIST from
    # fsvi_no_coreset.pkl, the no-coreset row's; permuted MNIST from fsvi_match.pkl): Adam 5e-4,
    # batch 128, 5 samples a step
    "sfsvi": {
        "split-mnist": {"epochs": 20, "batch_size": 128, "learning_rate": 5e-4, "num_particles": 5},
        "permuted-mnist": {
            "epochs": 10,
            "batch_size": 128,
            "learning_rate": 5e-4,
            "num_particles": 5,
        },
    },
}

#: Online EWC's λ: the VCL paper's appendix D choice for EWC on each stream.
EWC_STRENGTH = {
    "permuted-mnist": 100.0,
    "split-mnist": 1.0,
    "split-notmnist": 10000.0,
    "split-cifar10": 10000.0,  # the 20-epoch table's best λ (docs/lab/keeps_learning.md, split CIFAR)
    "split-digits": 1.0,  # the embedded digits: a quick check of the script
}


#: S-FSVI's weighing of the functional KL (each context point as one training point) and its
#: draws: 40 of each task's kept points (the coreset size of them) afresh at every step.
PER_POINT = {"function_kl_scale": "per_point", "context_draws": 40}
#: ... with S-FSVI's first task: N(0, 10⁻³) on the outputs at 40 uniform inputs, no weight KL.
FUNCTION_PRIOR = {**PER_POINT, "function_prior_variance": 1e-3}


#: GVCL's variances at the start of every task: log σ² = -7, later tasks' capped there (the means
#: kept, as first run here).
GVCL_START = {
    "init_log_variance": -7.0,
    "between_tasks": "cap_variance",
    "later_init_log_variance": -7.0,
}
#: GVCL's variance step of its own: 200-800 Adam steps move log σ² to what the data say (the
#: start's log σ² = -7 moves by about 0.2 without it, so the data's precision λ weighs would be
#: the start's on every weight).
VARIANCE_STEP = {"variance_learning_rate": 0.05}


def gvcl(beta: float, strength: float, **training) -> dict:
    """A GVCL row: β (``kl_weight``) and λ (``mean_precision_weight``), GVCL's start, and
    ``training`` settings over it."""
    return {
        "methods": ["vcl"],
        "fitter_options": {"kl_weight": beta, "mean_precision_weight": strength},
        "training": {**GVCL_START, **training},
    }


def rows(best_beta: dict[bool, float]) -> dict[str, dict]:
    """``{label: BenchmarkRun fields}`` of the table's rows (a tempered row only where the
    validation chose a β other than 1, which is VCL itself)."""
    table = {
        "finetune": {"methods": ["finetune"]},
        "online-ewc": {"methods": ["online-ewc"]},
        "vcl": {"methods": ["vcl"]},
        "vcl + film": {"methods": ["vcl"], "film": True},
        # the weights' initial noise below the conv net's means (σ = e⁻⁶ ≈ 0.0025 against the
        # dense layer's |μ| ≈ 0.01; VCL's default σ = e⁻³ ≈ 0.05 drowns them, as the VOGN
        # diagnosis found for VOGN's σ₀ on split CIFAR): the VCL reference code's value for its
        # generative nets (presets._GENERATIVE_TRAINING)
        "vcl small variances": {"methods": ["vcl"], "training": {"init_log_variance": -12.0}},
        # and a variance step of its own, so that 200 steps can take log σ² from -12 to the
        # prior's -4.8 (Adam moves a parameter by about its learning rate a step)
        "vcl small variances, variance step": {
            "methods": ["vcl"],
            "training": {"init_log_variance": -12.0, "variance_learning_rate": 0.05},
        },
        # GVCL's CIFAR settings (yolky/gvcl, src/best_hyperparams.py and gvcl_model_classes.py):
        # β = 0.2 and λ = 1000 (λ = 100 with FiLM layers), every weight's log σ² started at -7 and
        # capped there before each later task; the means kept (their code redraws them: the
        # "fresh means" row)
        "gvcl β=0.2 λ=1000": gvcl(0.2, 1000.0),
        "gvcl β=0.2 λ=1000, variance step": gvcl(0.2, 1000.0, **VARIANCE_STEP),
        # one change each from the row above: λ matched to online EWC's strength on the stream
        # (the β → 0 limit holds the means at λ times the data's precision, EWC's penalty), and
        # a quarter of β against the dense layer's over-pruning at 20 epochs (10 of 512 units in
        # use after the first task at β = 0.2: docs/lab/keeps_learning.md, split CIFAR)
        "gvcl β=0.2 λ=10000, variance step": gvcl(0.2, 1e4, **VARIANCE_STEP),
        # (and β's sweep below it, to be chosen on validation: `--on-validation`)
        **{
            f"gvcl β={beta:g} λ=1000, variance step": gvcl(beta, 1000.0, **VARIANCE_STEP)
            for beta in (0.05, 0.02, 0.01)
        },
        # ... and λ at the β validation chose: online EWC's strength, as for β = 0.2 above, and a
        # tenth of GVCL's, for tasks learnt closer to a fresh fit (the goal's other half)
        **{
            f"gvcl β=0.02 λ={strength:g}, variance step": gvcl(0.02, strength, **VARIANCE_STEP)
            for strength in (10000.0, 100.0)
        },
        # ... and, the one change from the validated row, each task's own FiLM layers: capacity
        # of its own for the tasks the penalty holds back (the fourth, docs/lab/keeps_learning.md: split CIFAR)
        "gvcl β=0.02 λ=1000 + film, variance step": {
            **gvcl(0.02, 1000.0, **VARIANCE_STEP),
            "film": True,
        },
        # ... and the means drawn afresh before each later task, as GVCL's code does
        "gvcl β=0.2 λ=1000, fresh means, variance step": gvcl(
            0.2, 1000.0, between_tasks="fresh_cap_variance", **VARIANCE_STEP
        ),
        "gvcl β=0.2 λ=100 + film": {**gvcl(0.2, 100.0), "film": True},
        "fsvi": {"methods": ["fsvi"]},
        "fsvi linearised": {"methods": ["fsvi"], "fitter_options": {"moments": "linearised"}},
        # no data kept: the coreset size of uniform inputs per earlier task, drawn every step
        "fsvi uniform": {"methods": ["fsvi-uniform"], "fitter_options": {"moments": "linearised"}},
        # no data kept: the task's own inputs through the earlier heads (multi-head streams)
        "fsvi current": {"methods": ["fsvi-current"], "fitter_options": {"moments": "linearised"}},
        "fsvi current per point": {
            "methods": ["fsvi-current"],
            "fitter_options": {"moments": "linearised", "function_kl_scale": "per_point"},
        },
        # no data point kept: each task's input mean and covariance, inputs drawn every step
        "fsvi gaussian": {
            "methods": ["fsvi-gaussian"],
            "fitter_options": {"moments": "linearised"},
        },
        "fsvi gaussian per point": {
            "methods": ["fsvi-gaussian"],
            "fitter_options": {"moments": "linearised", "function_kl_scale": "per_point"},
        },
        "fsvi per point": {"methods": ["fsvi"], "fitter_options": dict(PER_POINT)},
        # S-FSVI's initial posterior variances (log-variance uniform in [-10, -8]: the middle)
        "fsvi per point small variances": {
            "methods": ["fsvi"],
            "fitter_options": dict(PER_POINT),
            "training": {"init_log_variance": -9.0},
        },
        "fsvi per point linearised": {
            "methods": ["fsvi"],
            "fitter_options": {**PER_POINT, "moments": "linearised"},
        },
        "fsvi per point function prior": {
            "methods": ["fsvi"],
            "fitter_options": dict(FUNCTION_PRIOR),
        },
        # all of S-FSVI's choices at once: that prior, linearised moments, small variances
        "fsvi as s-fsvi": {
            "methods": ["fsvi"],
            "fitter_options": {**FUNCTION_PRIOR, "moments": "linearised"},
            "training": {"init_log_variance": -9.0},
        },
    }
    for film in (False, True):
        beta = best_beta[film]
        if beta != 1.0:
            label = f"vcl β={beta:g}" + (" + film" if film else "")
            table[label] = {"methods": ["vcl"], "film": film, "fitter_options": {"kl_weight": beta}}
    if best_beta[False] != 1.0:
        # tempering against the over-pruning that converged variances bring (docs/lab/keeps_learning.md, split CIFAR)
        table[f"vcl β={best_beta[False]:g} small variances, variance step"] = {
            **table["vcl small variances, variance step"],
            "fitter_options": {"kl_weight": best_beta[False]},
        }
    return table


def run_once(folder: Path, fields: dict) -> list[RunResult]:
    """The run of ``fields`` written to ``folder``, or what it wrote before."""
    results = folder / "results.json"
    if not results.exists():
        # saved after every task: a run stopped with its session resumes at its next task
        run_benchmark(BenchmarkRun(output=folder, progress=False, resumable=True, **fields))
    payload = json.loads(results.read_text())
    return [RunResult.from_json(run) for run in payload["runs"]]


def choose_betas(args, base: dict, output: Path) -> dict[bool, float]:
    """Stage 1: the β of the best validation ACC among ``--betas`` for VCL and among
    ``--film-betas`` (default: the same) for VCL + FiLM; a single β is taken without a run."""
    best = {}
    for film, betas in ((False, args.betas), (True, args.film_betas or args.betas)):
        if len(set(betas)) == 1:
            best[film] = betas[0]
            continue
        scores = {}
        for beta in betas:
            folder = output / f"validation-{'film-' if film else ''}beta{beta:g}"
            fields = dict(base, methods=["vcl"], seeds=[0], film=film, validation=args.validation)
            fields["fitter_options"] = {"kl_weight": beta}
            scores[beta] = run_once(folder, fields)[0].acc
        best[film] = max(scores, key=scores.get)
        print(f"validation ACC {'with' if film else 'without'} FiLM: {scores} → β = {best[film]:g}")
    return best


def summary_table(results: dict[str, list[RunResult]]) -> str:
    """The markdown table of every row's mean ± std over its seeds."""
    columns = [
        ("ACC", "acc", 100),
        ("BWT", "bwt", 100),
        ("ECE", "calibration_error", 100),
        ("just learnt", "just_learnt", 100),
        ("intransigence", "intransigence", 100),
    ]
    header = ["row", "seeds"] + [name for name, _, _ in columns] + ["at prior", "units"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for label, runs in results.items():
        cells = [label, ",".join(str(r.seed) for r in runs)]
        for _, attribute, scale in columns:
            values = [getattr(r, attribute) for r in runs]
            cells.append(_mean_std([v for v in values if v is not None], scale))
        pruning = [r.pruning_after_last_step() for r in runs]
        pruning = [p for p in pruning if p is not None]
        cells.append(_mean_std([p["share_at_prior"] for p in pruning], 100))
        cells.append(_mean_std([p["units_in_use"] for p in pruning], 1))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_std(values: list[float], scale: float) -> str:
    if not values:
        return "–"
    values = np.asarray(values, dtype=float) * scale
    return (
        f"{values.mean():.2f} ± {sample_sd(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="permuted-mnist", choices=sorted(EWC_STRENGTH))
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--betas", type=float, nargs="+", default=list(BETAS))
    parser.add_argument("--film-betas", type=float, nargs="+", help="VCL + FiLM's (--betas)")
    parser.add_argument(
        "--context-points",
        type=int,
        help="points a task for the rows that keep or draw them (default: the stream's coreset "
        "size); their folders and labels say so",
    )
    parser.add_argument(
        "--no-fresh-fits",
        action="store_true",
        help="skip fitting each task alone (no FWT or intransigence: half the time)",
    )
    parser.add_argument("--validation", type=float, default=0.1)
    parser.add_argument("--rows", nargs="+", help="only these rows of the table (by label)")
    parser.add_argument(
        "--on-validation",
        action="store_true",
        help="score the rows on the held-out share of --validation, not the test sets",
    )
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    output = Path(args.output or f"results/keeps_learning/{args.benchmark}-{args.schedule}")
    if args.benchmark not in SCHEDULES[args.schedule]:
        parser.error(
            f"the {args.schedule} schedule has no {args.benchmark}; it has "
            + ", ".join(sorted(SCHEDULES[args.schedule]))
        )
    base = {
        "benchmark": args.benchmark,
        "data_root": args.data_root,
        "training": SCHEDULES[args.schedule][args.benchmark],
        "penalty_options": {"strength": EWC_STRENGTH[args.benchmark]},
    }
    best_beta = choose_betas(args, base, output)
    if args.on_validation and not args.rows:
        parser.error("--on-validation scores the rows named by --rows")
    held_out = "validation-" if args.on_validation else ""
    scored_on = {"validation": args.validation} if args.on_validation else {}
    results: dict[str, list[RunResult]] = {}
    for label, fields in rows(best_beta).items():
        if args.rows and label not in args.rows:
            continue
        if args.context_points and any(METHODS[m].keeps_points for m in fields["methods"]):
            fields = dict(fields, coreset_size=args.context_points)
            label = f"{label} ({args.context_points} a task)"
        for seed in args.seeds:
            name = label.replace(" (", "-").replace(" a task)", "").replace(" ", "_")
            folder = output / f"{held_out}{name.replace('=', '')}-seed{seed}"
            fresh = not (args.no_fresh_fits or args.on_validation)
            # a row's training settings go over the schedule's
            training = base["training"] | fields.get("training", {})
            run = run_once(
                folder,
                base
                | fields
                | {"seeds": [seed], "forward_transfer": fresh, "training": training}
                | scored_on,
            )
            results.setdefault(label, []).extend(run)
        table = summary_table(results)
        (output / f"{held_out}table.md").write_text(table + "\n")
    if results:  # each row's first seed, as the VCL paper's figures 4-5 draw them
        first = [replace(runs[0], method=label) for label, runs in results.items()]
        print(f"wrote {plot_accuracy(first, output / f'{held_out}accuracy.png')}")
        if any(run.details.get("units_in_use") for run in first):
            print(f"wrote {plot_pruning(first, output / f'{held_out}pruning.png')}")
    print(summary_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
