"""pyro_cl: Bayesian continual learning on Pyro — yesterday's posterior is today's prior."""

from pyro_cl import (  # generative registers its model class
    fitters,
    generative,
    learner,
    memory,
    metrics,
    nn,
    transitions,
)
from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.fitters import (
    IVON,
    VOGN,
    CoordinateAscent,
    ELBOFitter,
    Fitter,
    FunctionSpaceFitter,
    Penalty,
    PointEstimateFitter,
)
from pyro_cl.guides import FullCovariance, GuideFamily, LowRank, MeanField, MeanFieldGuide
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.divergence import DivergenceError
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.learner import (
    VCL,
    ContinualLearner,
    GraphVCL,
    LearnerBank,
    MovingBank,
    OnlineClassifier,
)
from pyro_cl.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    HeteroscedasticGaussianLikelihood,
    PrecisionGaussianLikelihood,
)
from pyro_cl.model import SupervisedModel
from pyro_cl.posterior import extract_posterior, install_prior, read_priors
from pyro_cl.transitions import (
    BayesianForgetting,
    Chain,
    ChildConcentrationGrowth,
    Identity,
    LearnedStrength,
    NoPropagation,
    OrnsteinUhlenbeck,
    Transition,
    TransitionContext,
    Wiener,
    check_prior_families,
    map_gaussian_sites,
)

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
    "GraphVCL",
    "LearnerBank",
    "MovingBank",
    "OnlineClassifier",
    "Fitter",
    "FunctionSpaceFitter",
    "GaussianLikelihood",
    "HeteroscedasticGaussianLikelihood",
    "IVON",
    "Identity",
    "MeanFieldGuide",
    "MeanField",
    "FullCovariance",
    "LowRank",
    "GuideFamily",
    "NoPropagation",
    "OrnsteinUhlenbeck",
    "Penalty",
    "PointEstimateFitter",
    "PrecisionGaussianLikelihood",
    "LearnedStrength",
    "Transition",
    "TransitionContext",
    "check_prior_families",
    "map_gaussian_sites",
    "VOGN",
    "SupervisedModel",
    "TrainingConfig",
    "VCL",
    "Wiener",
    "fitters",
    "generative",
    "learner",
    "transitions",
    "memory",
    "extract_posterior",
    "install_prior",
    "metrics",
    "nn",
    "read_priors",
]
