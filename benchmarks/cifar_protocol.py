"""The split CIFAR-10 stand-in through the results protocol (issue 68): GVCL's β, λ and variance
step and online EWC's λ chosen on validation in one harness, the run kept as a record
(``benchmarks/records/split-cifar10-protocol.json``).

    OMP_NUM_THREADS=1 python benchmarks/cifar_protocol.py --data-root ../shared/data --folder RUNS
    python benchmarks/cifar_protocol.py --tiny --data-root ../shared/data   # minutes, a check

Five two-class tasks of CIFAR-10, Zenke et al.'s conv net with a head a task, at keeps_learning.py's
``short`` schedule (5 of the preset's 60 epochs, 1 Monte Carlo sample to train, 10 to predict:
what fits a 2-core CPU; ``--schedule long`` is the 20-epoch schedule at which the lab notes'
online EWC reached 86.9%, about four times longer; ``--schedule paper`` the preset's 60 epochs
with 10 draws to train, twelve times the epochs, for a GPU). Rows, all in this one harness:

* fine-tuning (how much the schedule forgets), at the preset's settings;
* online EWC, λ chosen on validation from {10², 10³, 10⁴} (the VCL paper's appendix D grid);
* GVCL (tempered VCL with λ's mean precision, GVCL's start: every log σ² at -7 and capped there
  before each later task), chosen on validation from GVCL's authors' CIFAR setting (β = 0.2,
  λ = 1000) and a quarter and a tenth of its β, each with a variance step of its own (0.05)
  and the authors' setting without one.

Each setting is scored on a held-out tenth of each task's training data at ``--selection-seeds``
(default: every seed, so the choice is the best mean over them), then each seed runs the chosen
setting once on the test sets. Every run keeps its numbers (and a checkpoint after every task)
under ``--folder``, so the command resumes where it stopped; ``--rows`` runs some rows (two
processes on two cores, one folder), and ``--rows 2 --validation-only --selection-seeds 2``
beside ``--rows 2`` takes some of GVCL's validation runs on the other core. The project keeps
its runs in ``--folder benchmarks/runs/split-cifar10-protocol`` (committed). At the short
schedule a GVCL run is about half an hour here, an online EWC run a quarter of one.
"""

from __future__ import annotations

from keeps_learning import GVCL_START, SCHEDULES, VARIANCE_STEP

from pyro_cl.app.selection import parse_protocol, protocol_parser, record_at_schedule

#: Online EWC's λ grid (the VCL paper's appendix D values on its streams).
EWC_STRENGTHS = (100.0, 1000.0, 10000.0)
#: GVCL's β grid at its authors' λ, each with a variance step: their β and a quarter and a tenth.
GVCL_BETAS = (0.2, 0.05, 0.02)
GVCL_STRENGTH = 1000.0


def gvcl(beta: float, strength: float, training: dict, variance_step: bool) -> dict:
    return {
        "methods": ["vcl"],
        "fitter_options": {"kl_weight": beta, "mean_precision_weight": strength},
        "training": {**training, **GVCL_START, **(VARIANCE_STEP if variance_step else {})},
    }


def rows(training: dict) -> dict[str, dict[str, dict]]:
    """Each row's grid: ``{row: {setting: BenchmarkRun fields}}``."""
    gvcl_grid = {
        f"β {beta:g}, λ {GVCL_STRENGTH:g}, variance step": gvcl(
            beta, GVCL_STRENGTH, training, variance_step=True
        )
        for beta in GVCL_BETAS
    }
    gvcl_grid[f"β 0.2, λ {GVCL_STRENGTH:g}"] = gvcl(0.2, GVCL_STRENGTH, training, False)
    return {
        "fine-tuning": {"as given": {"methods": ["finetune"], "training": training}},
        "online EWC": {
            f"λ {strength:g}": {
                "methods": ["online-ewc"],
                "training": training,
                "penalty_options": {"strength": strength},
            }
            for strength in EWC_STRENGTHS
        },
        "GVCL": gvcl_grid,
    }


def main(argv: list[str] | None = None) -> None:
    parser = protocol_parser(
        __doc__.split("\n\n")[0], "results/cifar_protocol", "split-cifar10-protocol"
    )
    parser.add_argument("--selection-seeds", type=int, nargs="+", help="default: --seeds")
    parser.add_argument(
        "--schedule",
        choices=("short", "long", "paper"),
        default="short",
        help="short: 5 epochs a task, 1 draw to train (default); long: 20 epochs; paper: the "
        "preset's 60 epochs and 10 draws (a GPU's run)",
    )
    args = parse_protocol(parser, argv)
    training = dict(SCHEDULES[args.schedule]["split-cifar10"])
    if args.tiny:
        training.update(epochs=1, num_predictive_samples=2)
    record_at_schedule(
        parser,
        args,
        "cifar_protocol.py",
        argv,
        "split-cifar10",
        rows(training),
        training,
        args.schedule,
    )


if __name__ == "__main__":
    main()
