"""The rotating-digits chain through the results protocol (issue 68): does a learner keep
learning along a long chain of domains? Every strength chosen on validation, the run kept as a
record (``benchmarks/records/rotating-digits-chain.json``).

    OMP_NUM_THREADS=1 python benchmarks/chain_protocol.py --folder benchmarks/runs/rotating-digits-chain
    python benchmarks/chain_protocol.py --tiny --seeds 0        # a check, a minute

One single-head learner fits the sources rotated 0°, 10°, ..., 60° in order (benchmarks/
domain_chain.py's chain: the domain benchmark's net and settings). Right after each source it is
scored on that source's test set (its *just-fitted* accuracy), set against a fresh fit of the
same source alone: the **gap to fresh** is the fresh fit's accuracy minus the chain's, averaged
over the sources (positive: the chain learns less than a fresh start, VCL's over-pruning).
After the last source the learner is scored on the unseen 70°, 80° and 90° targets. Rows:
a fresh fit of each source (the reference; on the targets, the 60° source's fit), fine-tuning (a
point estimate, no prior), VCL, tempered VCL (KL weight β), VCL with a Wiener transition between
sources (one time unit a source), online EWC (λ) and function-space VI at 40 random context
points a source.

The grids (β, the Wiener strength, λ) are scored on **validation**: a tenth of each source's
training digits held out (drawn from the seed) as that source's test set, the chain fitted on
the rest, the score the mean just-fitted accuracy over the sources (what this benchmark asks of
a chain); no target is seen. The best mean over the seeds is chosen and each seed runs it once
on the test sets. Runs are kept under ``--folder`` (the command resumes where it stopped).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping
from typing import Any

from domain_chain import VARIANTS, _online_ewc, fresh_fits, run_variant

from pyro_cl import ELBOFitter, Wiener
from pyro_cl.app.domain_benchmark import SETTINGS, Domains, rotating_digits
from pyro_cl.app.records import make_record, write_record
from pyro_cl.app.selection import choose_and_test, kept_bytes_by_row, kept_numbers
from pyro_cl.baselines import FineTuning

#: Tempered VCL's KL weights β (0.01 added after the record's first reading had chosen 0.03,
#: the grid's end; still chosen on validation).
KL_WEIGHTS = (0.3, 0.1, 0.03, 0.01)
#: The Wiener transition's strengths (variance added a source).
WIENER_STRENGTHS = (0.1, 0.3, 1.0)
#: Online EWC's λ (the VCL paper's split MNIST and permuted MNIST values, and between; 1000
#: added after the first reading had chosen 100, the grid's end).
EWC_STRENGTHS = (1.0, 10.0, 100.0, 1000.0)
#: Of each source's training digits, the share held out as its validation test set.
FRACTION = 0.1
FRESH = "fresh fit of each source"


def rows() -> dict[str, dict[str, dict[str, Any]]]:
    """Each row's grid: ``{row: {setting: the variant's fields}}`` (plain data, kept with runs)."""
    return {
        FRESH: {"as given": {"variant": "fresh"}},
        "fine-tuning": {"as given": {"variant": "fine-tuning"}},
        "VCL": {"as given": {"variant": "vcl"}},
        "tempered VCL": {f"β {b:g}": {"variant": "vcl", "kl_weight": b} for b in KL_WEIGHTS},
        "VCL + Wiener between sources": {
            f"strength {s:g}": {"variant": "vcl", "wiener": s} for s in WIENER_STRENGTHS
        },
        "online EWC": {f"λ {s:g}": {"variant": "online-ewc", "strength": s} for s in EWC_STRENGTHS},
        "function-space VI, 40 context points a source": {"as given": {"variant": "fsvi"}},
    }


def variant(fields: Mapping[str, Any]) -> dict[str, Any]:
    """domain_chain.py's variant (the learner's parts) for a setting's ``fields``."""
    kind = fields["variant"]
    if kind == "fine-tuning":
        return VARIANTS["fine-tuning"]
    if kind == "online-ewc":
        return {"learner": FineTuning, "fitter": lambda: _online_ewc(fields["strength"])}
    if kind == "fsvi":
        return VARIANTS["fsvi (40 context points a source)"]
    parts: dict[str, Any] = {}
    if "kl_weight" in fields:
        parts["fitter"] = lambda: ELBOFitter(kl_weight=fields["kl_weight"])
    if "wiener" in fields:
        parts["transition"] = lambda: Wiener(fields["wiener"], time_constant=1.0)
    return parts


def add_gap_to_fresh(measured: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Give each row's seeds their ``"gap to fresh"``: the fresh fit's just-fitted accuracy
    minus the row's, averaged over the sources (positive: the chain learns less); the
    per-source accuracies move to ``"per source"`` and ``"just fitted"`` becomes their mean."""
    fresh = {seed: numbers["just fitted"] for seed, numbers in measured[FRESH].items()}
    for per_seed in measured.values():
        for seed, numbers in per_seed.items():
            pairs = zip(fresh[seed], numbers["just fitted"], strict=True)
            numbers["gap to fresh"] = statistics.fmean(f - c for f, c in pairs)
            numbers["per source"] = numbers["just fitted"]
            numbers["just fitted"] = statistics.fmean(numbers["per source"])


def chain_numbers(domains: Domains, seed: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One chain's numbers: ``"ACC"`` (mean just-fitted accuracy %), the per-source
    accuracies, each target's accuracy % (none on validation domains) and the bytes kept."""
    start = time.perf_counter()
    if fields["variant"] == "fresh":
        run = fresh_fits(domains, seed)
    else:
        run = run_variant(domains, seed, variant(fields))
    just = [100 * a for a in run["just_fitted"]]
    numbers = {"ACC": statistics.fmean(just), "just fitted": just}
    for target, accuracy in zip(domains.targets, run["targets"], strict=True):
        numbers[f"{domains.metadata[target]:g}°"] = 100 * accuracy
    numbers["kept bytes"] = run.get("kept bytes", 0)
    return {**numbers, "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--folder", help="keep every run's numbers here, to resume")
    parser.add_argument("--tiny", action="store_true", help="10 epochs a source: a check")
    parser.add_argument("--name", default="rotating-digits-chain", help="the record's name")
    args = parser.parse_args(argv)
    if args.tiny:  # the chain's learners read the domain benchmark's settings
        SETTINGS.update(epochs=10, ml_init_epochs=2, num_predictive_samples=2)

    def run_one(row: str, setting: str, fields: Mapping, seed: int, validation: float | None):
        def run(place):
            domains = rotating_digits(seed)
            if validation is not None:  # the sources alone, a share of each its test set
                domains = domains.held_out(0, seed, share=validation)
            return chain_numbers(domains, seed, fields)

        return kept_numbers(args.folder, row, setting, fields, seed, validation, run)

    measured, selection = choose_and_test(rows(), args.seeds, run_one, FRACTION)
    add_gap_to_fresh(measured)
    targets = [k for k in measured[FRESH][args.seeds[0]] if k.endswith("°")]
    argv = sys.argv[1:] if argv is None else argv
    record = make_record(
        args.name + ("-tiny" if args.tiny else ""),
        command="python benchmarks/chain_protocol.py " + " ".join(argv),
        seeds=args.seeds,
        schedule={k: v for k, v in SETTINGS.items() if k != "progress"},
        data="rotated 8x8 digits (scikit-learn), 400 a domain: sources 0°-60°, targets 70°-90°",
        rows=measured,
        metrics=["just fitted", "gap to fresh", *targets, "seconds"],
        selection=selection,
        storage_bytes=kept_bytes_by_row(measured),
        notes=(
            "just fitted: the mean over the sources of each one's accuracy right after its fit "
            "(%), the score the grids are chosen by; gap to fresh: the fresh "
            "fit's minus the row's, in points (positive: the chain learns less); the targets "
            "scored after the last source. Grids scored on validation (a tenth of each source's "
            f"training digits) at seeds {args.seeds}."
        ),
    )
    print(f"wrote {write_record(record)}")


if __name__ == "__main__":
    main()
