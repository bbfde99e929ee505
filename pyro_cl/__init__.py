"""pyro_cl: Bayesian continual learning on Pyro — yesterday's posterior is today's prior."""

from pyro_cl import coresets, metrics, nn
from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.learner import ContinualLearner, TrainingConfig
from pyro_cl.infer.training import DivergenceError
from pyro_cl.infer.vcl import VCL
from pyro_cl.likelihoods import CategoricalLikelihood, GaussianLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import extract_posterior, install_prior, read_priors

__version__ = "0.1.0"

__all__ = [
    "CategoricalLikelihood",
    "ContinualLearner",
    "CoresetOnly",
    "DivergenceError",
    "FineTuning",
    "GaussianLikelihood",
    "MeanFieldGuide",
    "SupervisedModel",
    "TrainingConfig",
    "VCL",
    "coresets",
    "extract_posterior",
    "install_prior",
    "metrics",
    "nn",
    "read_priors",
]
