"""pyro_cl: Bayesian continual learning on Pyro — yesterday's posterior is today's prior."""

from pyro_cl import generative, memory, metrics, nn  # generative registers its model class
from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.guides import MeanFieldGuide
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.coordinate_ascent import CoordinateAscent
from pyro_cl.infer.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.elbo_fitter import ELBOFitter
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.fitter import Fitter
from pyro_cl.infer.forgetting import BayesianForgetting
from pyro_cl.infer.ivon import IVON
from pyro_cl.infer.learner import ContinualLearner
from pyro_cl.infer.penalty import Penalty
from pyro_cl.infer.point_estimate import PointEstimateFitter
from pyro_cl.infer.transitions import (
    Chain,
    ChildConcentrationGrowth,
    Identity,
    NoPropagation,
    Transition,
    TransitionContext,
    check_prior_families,
    map_gaussian_sites,
)
from pyro_cl.infer.vcl import VCL
from pyro_cl.infer.vogn import VOGN
from pyro_cl.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    HeteroscedasticGaussianLikelihood,
    PrecisionGaussianLikelihood,
)
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import extract_posterior, install_prior, read_priors

__version__ = "0.1.0"

__all__ = [
    "BayesianForgetting",
    "BernoulliLikelihood",
    "Callback",
    "CategoricalLikelihood",
    "Chain",
    "ChildConcentrationGrowth",
    "ContinualLearner",
    "CoordinateAscent",
    "CoresetOnly",
    "DivergenceError",
    "ELBOFitter",
    "FineTuning",
    "FitProblem",
    "Fitter",
    "GaussianLikelihood",
    "HeteroscedasticGaussianLikelihood",
    "IVON",
    "Identity",
    "MeanFieldGuide",
    "NoPropagation",
    "OrnsteinUhlenbeck",
    "Penalty",
    "PointEstimateFitter",
    "PrecisionGaussianLikelihood",
    "Transition",
    "TransitionContext",
    "check_prior_families",
    "map_gaussian_sites",
    "VOGN",
    "SupervisedModel",
    "TrainingConfig",
    "VCL",
    "Wiener",
    "generative",
    "memory",
    "extract_posterior",
    "install_prior",
    "metrics",
    "nn",
    "read_priors",
]
