"""Reference methods that continual learners are compared against: fine-tuning, the coreset-only
refit, MAP with the last fit as prior mean, EWC and online EWC, Synaptic Intelligence and
diagonal Laplace propagation."""

from pyro_cl.baselines.coreset_only import CoresetOnly
from pyro_cl.baselines.curvature import diagonal_curvature
from pyro_cl.baselines.ewc import EWC, OnlineEWC
from pyro_cl.baselines.fine_tuning import FineTuning
from pyro_cl.baselines.laplace import LaplacePropagation
from pyro_cl.baselines.map_estimate import GaussianMAP
from pyro_cl.baselines.synaptic_intelligence import SynapticIntelligence

__all__ = [
    "EWC",
    "CoresetOnly",
    "FineTuning",
    "GaussianMAP",
    "LaplacePropagation",
    "OnlineEWC",
    "SynapticIntelligence",
    "diagonal_curvature",
]
