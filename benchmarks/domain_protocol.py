"""Predictive domain adaptation through the results protocol (issue 68): the method a user would
pick, chosen without a target's label, and every method's numbers kept as a record
(``benchmarks/records/domains-<stream>.json``).

    OMP_NUM_THREADS=1 python benchmarks/domain_protocol.py --seeds 0 1 2 --folder RUNS
    python benchmarks/domain_protocol.py --seeds 0 --tiny        # a check, a minute

Each seed runs every method of ``pyro-cl domains`` (:mod:`pyro_cl.app.domain_benchmark`, one
shared head) twice:

* on **validation domains** (:meth:`~pyro_cl.app.domain_benchmark.Domains.held_out`): the last
  three sources held out as targets — on rotating digits 40°, 50° and 60° from sources 0°-30°,
  the same 10°, 20° and 30° hops as the real targets' from 60° — each domain's test set a
  quarter of its own training data, so the choice reads no target's label and no test image;
* on the **real targets**, once (the test sets read once).

The row "ours, chosen on validation" is the label-free method (every method but the oracle)
with the best accuracy over the held-out sources, averaged over the seeds; the table gives every
method's test numbers beside it (accuracy % at each target and on their mean, the mean test
log-likelihood and calibration error over the targets), the oracle (the target's own labels) as
the ceiling and source-only and the nearest source's fresh fit as the baselines GOAT's goal
names.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np

from pyro_cl.app import domain_benchmark
from pyro_cl.app.domain_benchmark import METHODS, STREAMS, Domains, run_seed
from pyro_cl.app.records import make_record, write_record
from pyro_cl.app.selection import kept_numbers

#: Sources held out as the validation targets.
HELD_OUT = 3
#: Of each domain's training data, the share the validation domains test on.
SHARE = 0.25
#: The methods a user without the target's labels can pick from.
CANDIDATES = tuple(m for m in METHODS if m != "oracle")
CHOSEN = "ours, chosen on validation"


def target_label(domains: Domains, domain: int) -> str:
    """A target's column: its metadata, in degrees where the metadata is an angle."""
    return f"{domains.metadata[domain]:g}" + ("°" if "°" in domains.unit else "")


def method_numbers(run: dict, domains: Domains) -> dict[str, dict[str, float]]:
    """``{method: {"<angle>": accuracy %, ..., "mean": ..., "log-lik.": ..., "ECE": ...}}`` of a
    :func:`~pyro_cl.app.domain_benchmark.run_seed` run over ``domains``' targets."""
    scores = run["scores"]["shared"]
    numbers = {}
    for method in METHODS:
        per_target = [scores[method][domains.metadata[t]] for t in domains.targets]
        accuracy = {
            target_label(domains, t): 100 * m["accuracy"]
            for t, m in zip(domains.targets, per_target, strict=True)
        }
        numbers[method] = {
            **accuracy,
            "mean": float(np.mean(list(accuracy.values()))),
            "log-lik.": float(np.mean([m["log_likelihood"] for m in per_target])),
            "ECE": 100 * float(np.mean([m["calibration_error"] for m in per_target])),
        }
    return numbers


def seed_numbers(
    stream: str, seed: int, data_root: Path | None, folder: str | None, validation: bool
) -> dict:
    """Every method's numbers on one seed's validation domains or real targets (kept in
    ``folder`` to resume)."""
    domains = STREAMS[stream](seed, data_root)
    if validation:
        domains = domains.held_out(HELD_OUT, seed, SHARE)
    fields = {"stream": stream, "held_out": HELD_OUT, "settings": domain_benchmark.SETTINGS}

    def run(place):
        return method_numbers(run_seed(domains, seed, ["shared"]), domains)

    share = SHARE if validation else None
    numbers = kept_numbers(folder, "every method", stream, fields, seed, share, run)
    print(f"seed {seed}, {'validation' if validation else 'test'}: done", flush=True)
    return numbers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", choices=sorted(STREAMS), default="rotating_digits")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-root", type=Path, default=Path("data"))
    parser.add_argument("--folder", help="keep every run's numbers here, to resume")
    parser.add_argument("--tiny", action="store_true", help="2 epochs a fit: a check")
    args = parser.parse_args(argv)
    if args.tiny:
        domain_benchmark.SETTINGS.update(epochs=2, ml_init_epochs=1, num_predictive_samples=4)
    validation = {
        s: seed_numbers(args.stream, s, args.data_root, args.folder, True) for s in args.seeds
    }
    test = {s: seed_numbers(args.stream, s, args.data_root, args.folder, False) for s in args.seeds}
    scores = {m: {s: validation[s][m]["mean"] for s in args.seeds} for m in CANDIDATES}
    chosen = max(CANDIDATES, key=lambda m: statistics.mean(scores[m].values()))
    rows = {CHOSEN: {s: {**test[s][chosen], "commit": test[s]["commit"]} for s in args.seeds}}
    for method in METHODS:
        rows[method] = {s: {**test[s][method], "commit": test[s]["commit"]} for s in args.seeds}
    domains = STREAMS[args.stream](args.seeds[0], args.data_root)
    targets = [target_label(domains, t) for t in domains.targets]
    record = make_record(
        f"domains-{args.stream}" + ("-tiny" if args.tiny else ""),
        command="python benchmarks/domain_protocol.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        seeds=args.seeds,
        schedule={k: v for k, v in domain_benchmark.SETTINGS.items() if k != "progress"},
        data=domains.name,
        rows=rows,
        metrics=[*targets, "mean", "log-lik.", "ECE"],
        selection={CHOSEN: {"grid": list(CANDIDATES), "validation": scores, "chosen": chosen}},
        notes=f"Accuracy % at each target ({domains.unit}) and on their mean; log-likelihood and "
        f"ECE (%) averaged over the targets. The choice: the best mean accuracy over the last "
        f"{HELD_OUT} sources held out as targets, each domain tested on {SHARE:.0%} of its own "
        "training data (no target label, no test image), averaged over the seeds.",
    )
    print(f"wrote {write_record(record)}; chosen on validation: {chosen}")


if __name__ == "__main__":
    main()
