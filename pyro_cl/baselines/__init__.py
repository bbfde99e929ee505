"""Non-Bayesian reference methods that continual learners are compared against."""

from pyro_cl.baselines.fine_tuning import FineTuning

__all__ = ["FineTuning"]
