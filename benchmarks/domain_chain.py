"""The rotating-digits domain chain: does sequential VCL keep learning, and what restores it?

    OMP_NUM_THREADS=1 python benchmarks/domain_chain.py --seeds 0 1 2

Sources rotated 0°, 10°, ..., 60° are fitted in order by one single-head learner (the domain
benchmark's net and settings, ``pyro_cl.app.domain_benchmark``); after each source the learner's
accuracy on that source's test set is its *just-fitted* accuracy, set against a fresh fit of the
same source alone (the plasticity the chain keeps), and after the last one its accuracy on the
unseen 70°, 80° and 90° targets. Variants, each a part of the same learner: fine-tuning (a point
estimate, no prior: the forgetting the chain induces); VCL; tempered VCL
(``kl_weight`` β); a Wiener transition between sources (one time unit a source, so a posterior
widens as the chain moves on); task-specific FiLM layers (a set per source; the targets read
the last source's), alone and with tempering (GVCL's pair); online EWC (a point estimate held
by the running Fisher, at split MNIST's λ = 1 and permuted MNIST's λ = 100 of the VCL paper);
function-space VI at 40 random context points a source, and at 40 inputs a source drawn at
every step from each source's kept input mean and covariance (no image kept). Writes
``results.json`` and prints a table (mean ± std over seeds) to ``--output``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from pyro_cl import VCL, ELBOFitter, FunctionSpaceFitter, Wiener
from pyro_cl.app.domain_benchmark import SETTINGS, rotating_digits
from pyro_cl.app.task_benchmark import kept_bytes
from pyro_cl.baselines import FineTuning, OnlineEWC
from pyro_cl.fitters import GaussianInputs, PointEstimateFitter
from pyro_cl.memory import RandomCoreset
from pyro_cl.metrics import sample_sd
from pyro_cl.nn import BayesianMLP


def _online_ewc(strength: float) -> PointEstimateFitter:
    return PointEstimateFitter(OnlineEWC(strength))


VARIANTS = {
    "fine-tuning": {"learner": FineTuning},
    "vcl": {},
    "vcl β=0.1": {"fitter": lambda: ELBOFitter(kl_weight=0.1)},
    "vcl + wiener(0.3)": {"transition": lambda: Wiener(0.3, time_constant=1.0)},
    "vcl + film": {"film": True},
    "vcl β=0.1 + film": {"fitter": lambda: ELBOFitter(kl_weight=0.1), "film": True},
    "online ewc λ=1": {"learner": FineTuning, "fitter": lambda: _online_ewc(1.0)},
    "online ewc λ=100": {"learner": FineTuning, "fitter": lambda: _online_ewc(100.0)},
    "fsvi (40 context points a source)": {"fitter": lambda: FunctionSpaceFitter(RandomCoreset(40))},
    "fsvi (40 gaussian inputs a source)": {
        "fitter": lambda: FunctionSpaceFitter(GaussianInputs(40), moments="linearised")
    },
}


def learner(domains, seed: int, variant: dict, film_tasks: int = 0) -> VCL:
    inputs = domains.data[0][0].shape[1]
    net = BayesianMLP(inputs, list(domains.hidden), domains.classes, film_tasks=film_tasks)
    parts = {name: make() for name, make in variant.items() if name in ("fitter", "transition")}
    return variant.get("learner", VCL)(net, seed=seed, **parts, **SETTINGS)


def run_variant(domains, seed: int, variant: dict) -> dict:
    """Just-fitted accuracies of the sources, the targets' accuracies at the chain's end and the
    bytes the learner keeps beside its posterior."""
    film = len(domains.sources) if variant.get("film") else 0
    chain = learner(domains, seed, variant, film)
    just_fitted = []
    for step, source in enumerate(domains.sources):
        task = step if film else 0
        chain.observe(domains.data[source][:2], task_id=task)
        just_fitted.append(chain.evaluate(domains.data[source][2:], task_id=task)["accuracy"])
    last = len(domains.sources) - 1 if film else 0
    targets = [
        chain.evaluate(domains.data[t][2:], task_id=last)["accuracy"] for t in domains.targets
    ]
    return {"just_fitted": just_fitted, "targets": targets, "kept bytes": kept_bytes(chain)}


def fresh_fits(domains, seed: int) -> dict:
    """Each source fitted alone (the plasticity reference), and the last source's fresh fit on
    the targets (the 'nearest source' baseline the chain should beat)."""
    accuracies, last = [], None
    for source in domains.sources:
        alone = learner(domains, seed, {})
        alone.observe(domains.data[source][:2])
        accuracies.append(alone.evaluate(domains.data[source][2:])["accuracy"])
        last = alone
    targets = [last.evaluate(domains.data[t][2:])["accuracy"] for t in domains.targets]
    return {"just_fitted": accuracies, "targets": targets}


def table(results: dict, domains) -> str:
    angles = [f"{domains.metadata[s]:g}°" for s in domains.sources]
    targets = [f"{domains.metadata[t]:g}°" for t in domains.targets]
    header = ["row", *[f"just fitted {a}" for a in angles], "gap to fresh", *targets]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    fresh = np.array([r["just_fitted"] for r in results["fresh fit of each source"]])
    for row, runs in results.items():
        just = np.array([r["just_fitted"] for r in runs]) * 100
        aims = np.array([r["targets"] for r in runs]) * 100
        gap = (fresh * 100 - just).mean(1)
        cells = [f"{m:.1f}" for m in just.mean(0)]
        cells.append(f"{gap.mean():+.1f} ± {sample_sd(gap):.1f}")
        cells += [f"{m:.1f} ± {s:.1f}" for m, s in zip(aims.mean(0), aims.std(0), strict=True)]
        lines.append("| " + " | ".join([row, *cells]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", default="results/domain_chain")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="default: all")
    args = parser.parse_args(argv)
    variants = {name: VARIANTS[name] for name in args.variants or VARIANTS}
    results: dict[str, list] = {"fresh fit of each source": []}
    for seed in args.seeds:
        domains = rotating_digits(seed)
        results["fresh fit of each source"].append(fresh_fits(domains, seed))
        for name, variant in variants.items():
            results.setdefault(name, []).append(run_variant(domains, seed, variant))
            print(f"seed {seed}: {name} done", flush=True)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps({"seeds": args.seeds, **results}, indent=1))
    text = table(results, rotating_digits(args.seeds[0]))
    (output / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
