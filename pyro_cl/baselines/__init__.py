"""Reference methods that continual learners are compared against."""

from pyro_cl.baselines.coreset_only import CoresetOnly
from pyro_cl.baselines.fine_tuning import FineTuning

__all__ = ["CoresetOnly", "FineTuning"]
