"""Predictive domain adaptation on rotating digits: ``pyro-cl domains`` as a script
(:mod:`pyro_cl.app.domain_benchmark` says what runs).

    python benchmarks/domain_adaptation.py --seeds 0 1 2 --output results/domain-adaptation
"""

from __future__ import annotations

import sys

from pyro_cl.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["domains", *sys.argv[1:]]))
