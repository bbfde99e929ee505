"""Bayesian neural network layers as Pyro modules."""

from pyro_cl.nn.bayesian_module import make_bayesian
from pyro_cl.nn.cnn import BayesianCNN
from pyro_cl.nn.concrete import LogitBinaryConcrete
from pyro_cl.nn.conv import BayesianConv2d
from pyro_cl.nn.film import BayesianFiLM
from pyro_cl.nn.ibp_mask import IBPMask
from pyro_cl.nn.ibp_mlp import IndianBuffetMLP
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.linear_regression import BayesianLinearRegression
from pyro_cl.nn.local_reparam import (
    LocalReparameterizationMessenger,
    local_reparameterization,
)
from pyro_cl.nn.mlp import BayesianMLP
from pyro_cl.nn.priors import GaussianPrior, LaplacePrior, LayerwisePrior, Prior
from pyro_cl.nn.scale_mixture_prior import ScaleMixturePrior
from pyro_cl.nn.sticks import BetaSticks
from pyro_cl.nn.student_t_prior import StudentTPrior
from pyro_cl.nn.vae_decoder import VAEDecoder

__all__ = [
    "BayesianLinearRegression",
    "BayesianCNN",
    "BayesianConv2d",
    "BayesianFiLM",
    "BayesianLinear",
    "BayesianMLP",
    "BetaSticks",
    "GaussianPrior",
    "LaplacePrior",
    "LayerwisePrior",
    "Prior",
    "ScaleMixturePrior",
    "StudentTPrior",
    "IBPMask",
    "IndianBuffetMLP",
    "LogitBinaryConcrete",
    "VAEDecoder",
    "LocalReparameterizationMessenger",
    "local_reparameterization",
    "make_bayesian",
]
